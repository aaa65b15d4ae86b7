//! Finalizers: whether one is on an object, and the merge patch that adds or
//! removes ours.
//!
//! A merge patch replaces a list whole, so the patch also carries the
//! object's `resourceVersion`: if anyone changed the object (its finalizers
//! included) meanwhile, the server answers `409 Conflict` and the caller
//! rebuilds the patch from the newer body. Others' finalizers are never
//! clobbered, and the finalizer change goes out in the same request as the
//! rest of a processing step.
//!
//! ```
//! use kopf_runtime::finalizers::{is_deletion_blocked, merge_patch};
//! use serde_json::json;
//!
//! let body = json!({"metadata": {"resourceVersion": "7", "finalizers": ["other", "mine"]}});
//! assert!(is_deletion_blocked(&body, "mine"));
//! let mut patch = json!({});
//! merge_patch(&body, &mut patch, "mine", false);
//! assert_eq!(patch, json!({"metadata": {"finalizers": ["other"], "resourceVersion": "7"}}));
//! ```

use serde_json::Value;

use crate::patching::{ensure_field, resolve_field};

/// The finalizer written by Kopf versions before 1.0; removed along with ours.
pub const LEGACY_FINALIZER: &str = "KopfFinalizerMarker";

fn finalizers(body: &Value) -> impl Iterator<Item = &str> {
    resolve_field(body, &["metadata", "finalizers"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// Whether the object is being deleted (`metadata.deletionTimestamp` is set).
pub fn is_deletion_ongoing(body: &Value) -> bool {
    resolve_field(body, &["metadata", "deletionTimestamp"]).is_some_and(|v| !v.is_null())
}

/// Whether `finalizer` is on the object.
pub fn is_deletion_blocked(body: &Value, finalizer: &str) -> bool {
    finalizers(body).any(|f| f == finalizer)
}

/// Adds or removes `finalizer` in a merge patch. Finalizers are a list, which
/// a merge patch replaces whole, so the patch carries the object's
/// `resourceVersion`: if someone else changed the list meanwhile, the server
/// answers 409 and the object is processed again from its newer body.
pub fn merge_patch(body: &Value, patch: &mut Value, finalizer: &str, present: bool) {
    let mut list: Vec<Value> = resolve_field(body, &["metadata", "finalizers"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f.as_str() != Some(finalizer) && f.as_str() != Some(LEGACY_FINALIZER))
        .collect();
    if present {
        list.push(Value::String(finalizer.to_owned()));
    }
    let list = if list.is_empty() {
        Value::Null
    } else {
        Value::Array(list)
    };
    ensure_field(patch, &["metadata", "finalizers"], list);
    if let Some(version) = resolve_field(body, &["metadata", "resourceVersion"]) {
        ensure_field(patch, &["metadata", "resourceVersion"], version.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const F: &str = "kopf.zalando.org/KopfFinalizerMarker";

    #[test]
    fn detection() {
        let body = json!({"metadata": {"finalizers": ["a", F]}});
        assert!(is_deletion_blocked(&body, F));
        assert!(!is_deletion_blocked(&body, "b"));
        assert!(!is_deletion_blocked(&json!({}), F));
        assert!(!is_deletion_ongoing(&body));
        assert!(is_deletion_ongoing(
            &json!({"metadata": {"deletionTimestamp": "2020-01-01T00:00:00Z"}})
        ));
    }

    #[test]
    fn finalizers_are_added_and_removed_with_a_version_precondition() {
        let body = json!({"metadata": {"resourceVersion": "7", "finalizers": ["other/x"]}});
        let mut patch = json!({});
        merge_patch(&body, &mut patch, "ours/f", true);
        assert_eq!(
            patch,
            json!({"metadata": {"finalizers": ["other/x", "ours/f"], "resourceVersion": "7"}})
        );
        let body = json!({"metadata": {"resourceVersion": "8", "finalizers": ["ours/f", "KopfFinalizerMarker"]}});
        let mut patch = json!({});
        merge_patch(&body, &mut patch, "ours/f", false);
        assert_eq!(
            patch,
            json!({"metadata": {"finalizers": null, "resourceVersion": "8"}})
        );
    }
}
