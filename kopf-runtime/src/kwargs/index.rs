//! [`Index`] and [`Indexes`]: in-memory indexes filled by `#[index]` handlers.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde_json::Value;

/// Object key → that object's (index key, value) contributions.
type Contributions = BTreeMap<String, Vec<(Option<String>, Value)>>;

/// One index: what an `#[index]` handler returned for each object, grouped by key.
///
/// As in Kopf, an index handler returns either a JSON object — each of its keys
/// gets the corresponding value — or any other value, stored under the `None` key.
/// Values from all objects for the same key are collected together.
///
/// ```
/// use serde_json::json;
/// let index = kopf_runtime::Index::default();
/// index.replace("ns/a", &json!({"team-x": "a"}));
/// index.replace("ns/b", &json!({"team-x": "b"}));
/// assert_eq!(index.get(Some("team-x")), vec![json!("a"), json!("b")]);
/// index.remove("ns/a");
/// assert_eq!(index.get(Some("team-x")), vec![json!("b")]);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Index {
    // object key → (index key → value)
    objects: Arc<RwLock<Contributions>>,
}

impl Index {
    fn read(&self) -> RwLockReadGuard<'_, Contributions> {
        self.objects
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Contributions> {
        self.objects
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// All values under `key`, ordered by object key.
    pub fn get(&self, key: Option<&str>) -> Vec<Value> {
        self.read()
            .values()
            .flatten()
            .filter(|(k, _)| k.as_deref() == key)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// All keys that have at least one value.
    pub fn keys(&self) -> Vec<Option<String>> {
        let mut keys: Vec<_> = self
            .read()
            .values()
            .flatten()
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// The number of distinct keys.
    pub fn len(&self) -> usize {
        self.keys().len()
    }

    /// Whether the index holds nothing.
    pub fn is_empty(&self) -> bool {
        self.read().values().all(Vec::is_empty)
    }

    /// Sets an object's contribution from its handler's result (for the engine).
    pub fn replace(&self, object: &str, result: &Value) {
        let entries = match result {
            Value::Object(map) => map
                .iter()
                .map(|(k, v)| (Some(k.clone()), v.clone()))
                .collect(),
            Value::Null => Vec::new(),
            other => vec![(None, other.clone())],
        };
        self.write().insert(object.to_owned(), entries);
    }

    /// Forgets an object's contribution (for the engine, when the object is gone).
    pub fn remove(&self, object: &str) {
        self.write().remove(object);
    }
}

/// All indexes of an operator by index (handler) id, as the engine hands them to handlers.
#[derive(Debug, Clone)]
pub struct Indexes {
    indexes: Arc<HashMap<String, Index>>,
}

/// No indexes; shared by every [`Indexes::default`], as kwargs are made per call.
static NO_INDEXES: LazyLock<Arc<HashMap<String, Index>>> = LazyLock::new(Arc::default);

impl Default for Indexes {
    fn default() -> Self {
        Indexes {
            indexes: Arc::clone(&NO_INDEXES),
        }
    }
}

impl Indexes {
    /// Indexes for the given ids, all empty.
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(ids: I) -> Self {
        Indexes {
            indexes: Arc::new(
                ids.into_iter()
                    .map(|id| (id.into(), Index::default()))
                    .collect(),
            ),
        }
    }

    /// The index with this id.
    pub fn get(&self, id: &str) -> Option<&Index> {
        self.indexes.get(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn non_object_results_go_under_the_none_key_and_null_contributes_nothing() {
        let index = Index::default();
        index.replace("a", &json!(1));
        index.replace("b", &Value::Null);
        assert_eq!(index.keys(), [None]);
        assert_eq!(index.get(None), [json!(1)]);
        index.replace("a", &Value::Null);
        assert!(index.is_empty());
    }

    #[test]
    fn indexes_are_looked_up_by_id() {
        let indexes = Indexes::new(["by_owner"]);
        assert!(indexes.get("by_owner").is_some());
        assert!(indexes.get("other").is_none());
    }
}
