//! [`Patch`]: a shared JSON merge-patch accumulator.

use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Map, Value};
use smallvec::SmallVec;

use crate::fields::{ensure_field, merge_into};

/// A JSON merge-patch (RFC 7386) that handlers fill and the engine applies once per step.
///
/// Clones share the same patch. Field paths are dot-separated as in Kopf
/// (`status.counter`, `metadata.labels.app`); a `null` value removes the field
/// when the patch is applied.
///
/// ```
/// use serde_json::json;
/// let patch = kopf_runtime::Patch::new();
/// patch.set("status.counter", json!(1));
/// patch.remove("metadata.labels.stale");
/// patch.merge(json!({"metadata": {"labels": {"app": "x"}}}));
/// assert_eq!(patch.to_value(), json!({
///     "status": {"counter": 1},
///     "metadata": {"labels": {"stale": null, "app": "x"}},
/// }));
/// ```
#[derive(Debug, Clone)]
pub struct Patch {
    /// Always a JSON object.
    inner: Arc<Mutex<Value>>,
}

impl Default for Patch {
    fn default() -> Self {
        Self {
            inner: Arc::new(Mutex::new(Value::Object(Map::new()))),
        }
    }
}

impl Patch {
    /// An empty patch.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Value> {
        // A panic while holding the lock cannot leave the map half-updated in a way
        // that matters for a JSON patch; keep going with whatever is there.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sets the field at a dot-separated `path` to `value`.
    pub fn set(&self, path: &str, value: Value) {
        let path: SmallVec<[&str; 4]> = path.split('.').collect();
        ensure_field(&mut self.lock(), &path, value);
    }

    /// Marks the field at `path` for removal (`null` in the merge-patch).
    pub fn remove(&self, path: &str) {
        self.set(path, Value::Null);
    }

    /// Deep-merges a JSON object into the patch (non-objects replace, objects merge).
    pub fn merge(&self, value: Value) {
        if value.is_object() {
            merge_into(&mut self.lock(), value);
        }
    }

    /// Whether nothing has been patched.
    pub fn is_empty(&self) -> bool {
        self.lock().as_object().is_none_or(Map::is_empty)
    }

    /// The accumulated patch as a JSON object.
    pub fn to_value(&self) -> Value {
        self.lock().clone()
    }

    /// Takes the accumulated patch, leaving this one empty (for the engine).
    pub fn take(&self) -> Value {
        std::mem::replace(&mut *self.lock(), Value::Object(Map::new()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn clones_share_one_patch_and_take_empties_it() {
        let patch = Patch::new();
        patch.clone().set("spec.a", json!(1));
        assert!(!patch.is_empty());
        assert_eq!(patch.take(), json!({"spec": {"a": 1}}));
        assert!(patch.is_empty());
    }

    #[test]
    fn set_replaces_scalars_on_the_path_with_objects() {
        let patch = Patch::new();
        patch.set("status", json!("x"));
        patch.set("status.y", json!(2));
        assert_eq!(patch.to_value(), json!({"status": {"y": 2}}));
    }
}
