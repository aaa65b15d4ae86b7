//! [`Index`], [`Store`] and [`Indexes`]: in-memory indexes filled by
//! `#[index]` handlers, read by the other handlers (Kopf's `kopf.Index`
//! and `kopf.Store`).
//!
//! An index maps keys to stores of values. Each object an `#[index]`
//! handler serves contributes the handler's result: a JSON object puts each
//! of its values under its key; any other value goes under the `None` key.
//! Values of all objects for one key are collected in that key's
//! [`Store`]; a key whose last value goes away goes away too.
//!
//! Keys are strings (JSON object keys), or `None`. Kopf's tuple keys, such
//! as `(namespace, name)`, are written as one string here, e.g.
//! `format!("{namespace}/{name}")`.
//!
//! Reads are snapshots: a [`Store`] taken from an index does not change
//! afterwards, while the [`Index`] itself (cheap to clone, shared with the
//! engine) always shows the current state.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, LazyLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// An index's key: a string, or `None` for results that are not JSON objects.
pub type IndexKey = Option<String>;

/// Which object contributed a value: its namespace, name and UID (Kopf's
/// key of an indexed object). Ordered by namespace, then name.
pub(crate) type ObjectKey = (Option<String>, Option<String>, Option<String>);

/// What an index holds: the values by key (and by object, in the order of
/// their namespaces and names), and the keys of each object, so that an
/// object's update or removal touches only its own keys.
#[derive(Debug, Default)]
struct Entries {
    by_key: BTreeMap<IndexKey, BTreeMap<ObjectKey, Arc<Value>>>,
    keys_of: HashMap<ObjectKey, Vec<IndexKey>>,
}

impl Entries {
    fn discard(&mut self, object: &ObjectKey) {
        let Some(keys) = self.keys_of.remove(object) else {
            return;
        };
        for key in keys {
            self.discard_one(&key, object);
        }
    }

    fn discard_one(&mut self, key: &IndexKey, object: &ObjectKey) {
        if let Some(store) = self.by_key.get_mut(key) {
            store.remove(object);
            if store.is_empty() {
                self.by_key.remove(key);
            }
        }
    }

    fn replace(&mut self, object: &ObjectKey, result: &Value) {
        let entries: Vec<(IndexKey, &Value)> = match result {
            Value::Object(map) => map.iter().map(|(k, v)| (Some(k.clone()), v)).collect(),
            other => vec![(None, other)],
        };
        let old = self.keys_of.remove(object).unwrap_or_default();
        for key in &old {
            if !entries.iter().any(|(k, _)| k == key) {
                self.discard_one(key, object);
            }
        }
        let mut keys = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            let store = self.by_key.entry(key.clone()).or_default();
            if store.get(object).is_none_or(|had| **had != *value) {
                store.insert(object.clone(), Arc::new(value.clone()));
            }
            keys.push(key);
        }
        if !keys.is_empty() {
            self.keys_of.insert(object.clone(), keys);
        }
    }
}

/// One index: what an `#[index]` handler returned for each object, grouped
/// by key (Kopf's `kopf.Index`). Handlers take it as a parameter named
/// after the index's id.
///
/// `T` is the type its values are read as: `serde_json::Value` by default,
/// or any `T: DeserializeOwned` that the index handler's results
/// deserialize into (typically the type it returns). Reading a value that
/// does not deserialize into `T` is an error, never a panic.
///
/// ```
/// use kopf_runtime::{Index, Kwargs};
///
/// // A handler reading the index `pods_by_node` (node name → pod names).
/// fn crowded(pods_by_node: &Index<String>, node: &str) -> kopf_runtime::Result<Vec<String>> {
///     let Some(pods) = pods_by_node.get(Some(node)) else {
///         return Ok(Vec::new()); // no pod on that node
///     };
///     Ok(pods.to_vec()?)
/// }
/// # let index = Index::<String>::default();
/// # assert!(crowded(&index, "n1").expect("reads").is_empty());
/// ```
pub struct Index<T = Value> {
    entries: Arc<RwLock<Entries>>,
    values: PhantomData<fn() -> T>,
}

impl<T> Clone for Index<T> {
    fn clone(&self) -> Self {
        Index {
            entries: Arc::clone(&self.entries),
            values: PhantomData,
        }
    }
}

impl<T> Default for Index<T> {
    /// An empty index that nothing fills (for tests).
    fn default() -> Self {
        Index {
            entries: Arc::default(),
            values: PhantomData,
        }
    }
}

impl<T> fmt::Debug for Index<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries = self.read();
        f.debug_map()
            .entries(
                entries
                    .by_key
                    .iter()
                    .map(|(key, store)| (key, store.values().collect::<Vec<_>>())),
            )
            .finish()
    }
}

impl<T> Index<T> {
    fn read(&self) -> RwLockReadGuard<'_, Entries> {
        self.entries
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Entries> {
        self.entries
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The same index, its values read as `U`.
    pub fn typed<U>(&self) -> Index<U> {
        Index {
            entries: Arc::clone(&self.entries),
            values: PhantomData,
        }
    }

    /// The values under `key` now, if any object has put one there (Kopf's
    /// `index.get(key)`); a store is never empty.
    pub fn get(&self, key: Option<&str>) -> Option<Store<T>> {
        let entries = self.read();
        let store = entries.by_key.get(&key.map(str::to_owned))?;
        Some(Store::of(store.values().cloned().collect()))
    }

    /// Whether some object has put a value under `key` (Kopf's `key in index`).
    pub fn contains_key(&self, key: Option<&str>) -> bool {
        self.read().by_key.contains_key(&key.map(str::to_owned))
    }

    /// The number of keys (Kopf's `len(index)`).
    pub fn len(&self) -> usize {
        self.read().by_key.len()
    }

    /// Whether the index has no key at all.
    pub fn is_empty(&self) -> bool {
        self.read().by_key.is_empty()
    }

    /// The keys, in order (`None` first).
    pub fn keys(&self) -> Vec<IndexKey> {
        self.read().by_key.keys().cloned().collect()
    }

    /// Every key with its store, in the order of the keys, as they are now
    /// (Kopf's `index.items()`).
    pub fn iter(&self) -> std::vec::IntoIter<(IndexKey, Store<T>)> {
        let entries = self.read();
        let items: Vec<(IndexKey, Store<T>)> = entries
            .by_key
            .iter()
            .map(|(key, store)| (key.clone(), Store::of(store.values().cloned().collect())))
            .collect();
        items.into_iter()
    }

    /// Sets an object's contribution from its index handler's result
    /// (`null` is never passed: it keeps the object's values as they are).
    pub(crate) fn replace(&self, object: &ObjectKey, result: &Value) {
        self.write().replace(object, result);
    }

    /// Removes an object's contribution.
    pub(crate) fn discard(&self, object: &ObjectKey) {
        self.write().discard(object);
    }

    /// Removes every object's contribution.
    pub(crate) fn clear(&self) {
        *self.write() = Entries::default();
    }
}

impl<T> IntoIterator for &Index<T> {
    type Item = (IndexKey, Store<T>);
    type IntoIter = std::vec::IntoIter<(IndexKey, Store<T>)>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// A value of an index that does not deserialize into the type it is read as.
#[derive(Debug, thiserror::Error)]
#[error(
    "an index value does not deserialize into `{type_name}`: {message}; read the index as the type its handler returns (or as `serde_json::Value`)"
)]
pub struct IndexError {
    type_name: &'static str,
    message: String,
}

/// The values under one key of an [`Index`], one per object that put a
/// value there, ordered by the objects' namespaces and names (Kopf's
/// `kopf.Store`). A snapshot: it does not change once taken.
pub struct Store<T = Value> {
    values: Vec<Arc<Value>>,
    read_as: PhantomData<fn() -> T>,
}

impl<T> Clone for Store<T> {
    fn clone(&self) -> Self {
        Store::of(self.values.clone())
    }
}

impl<T> fmt::Debug for Store<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.values.iter()).finish()
    }
}

impl<T> Store<T> {
    fn of(values: Vec<Arc<Value>>) -> Self {
        Store {
            values,
            read_as: PhantomData,
        }
    }

    /// The number of values (Kopf's `len(store)`).
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the store is empty (a store taken from an index never is).
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The values as JSON, without deserializing them.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &Value> {
        self.values.iter().map(|v| &**v)
    }
}

impl<T: DeserializeOwned> Store<T> {
    /// The values, each deserialized into `T` (Kopf's `iter(store)`).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Result<T, IndexError>> + '_ {
        self.values.iter().map(|value| {
            T::deserialize(&**value).map_err(|error| IndexError {
                type_name: std::any::type_name::<T>(),
                message: error.to_string(),
            })
        })
    }

    /// Every value, deserialized into `T`.
    ///
    /// # Errors
    /// [`IndexError`] if a value does not deserialize into `T`.
    pub fn to_vec(&self) -> Result<Vec<T>, IndexError> {
        self.iter().collect()
    }
}

impl<T: Serialize> Store<T> {
    /// Whether the store holds a value equal to `value` (Kopf's `value in
    /// store`), compared as JSON.
    pub fn contains(&self, value: &T) -> bool {
        match serde_json::to_value(value) {
            Ok(wanted) => self.values.iter().any(|v| **v == wanted),
            Err(_) => false,
        }
    }
}

/// All indexes of an operator by index (handler) id, as the engine hands
/// them to handlers.
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

    /// Whether there is no index at all.
    pub fn is_empty(&self) -> bool {
        self.indexes.is_empty()
    }

    /// Empties every index.
    pub(crate) fn clear(&self) {
        for index in self.indexes.values() {
            index.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(name: &str) -> ObjectKey {
        (
            Some("ns".into()),
            Some(name.into()),
            Some(format!("uid-{name}")),
        )
    }

    fn values(index: &Index, key: Option<&str>) -> Vec<Value> {
        index
            .get(key)
            .map(|store| store.values().cloned().collect())
            .unwrap_or_default()
    }

    #[test]
    fn object_results_index_by_key_and_others_under_none() {
        let index: Index = Index::default();
        index.replace(&object("a"), &json!({"team-x": "a", "team-y": 1}));
        index.replace(&object("b"), &json!({"team-x": "b"}));
        index.replace(&object("c"), &json!(["not", "a", "map"]));
        assert_eq!(
            index.keys(),
            [None, Some("team-x".into()), Some("team-y".into())]
        );
        assert_eq!(values(&index, Some("team-x")), [json!("a"), json!("b")]);
        assert_eq!(values(&index, None), [json!(["not", "a", "map"])]);
        assert_eq!(index.len(), 3);
        assert!(index.contains_key(Some("team-y")));
        assert!(!index.contains_key(Some("team-z")));
    }

    #[test]
    fn a_replaced_result_leaves_its_old_keys_and_emptied_keys_vanish() {
        let index: Index = Index::default();
        index.replace(&object("a"), &json!({"k1": 1, "k2": 2}));
        index.replace(&object("b"), &json!({"k1": 3}));
        index.replace(&object("a"), &json!({"k2": 4, "k3": 5}));
        assert_eq!(values(&index, Some("k1")), [json!(3)]);
        assert_eq!(values(&index, Some("k2")), [json!(4)]);
        index.discard(&object("b"));
        assert!(!index.contains_key(Some("k1")), "{index:?}");
        index.discard(&object("a"));
        assert!(index.is_empty());
        index.discard(&object("a"));
        assert!(index.is_empty(), "discarding twice is harmless");
    }

    #[test]
    fn an_empty_object_result_contributes_nothing() {
        let index: Index = Index::default();
        index.replace(&object("a"), &json!({"k": 1}));
        index.replace(&object("a"), &json!({}));
        assert!(index.is_empty());
    }

    #[test]
    fn stores_are_snapshots_in_object_order() {
        let index: Index = Index::default();
        index.replace(&object("b"), &json!("b"));
        index.replace(&object("a"), &json!("a"));
        let store = index.get(None).expect("a store");
        index.discard(&object("a"));
        assert_eq!(
            store.values().collect::<Vec<_>>(),
            [&json!("a"), &json!("b")]
        );
        assert_eq!(index.get(None).map(|s| s.len()), Some(1));
    }

    #[test]
    fn typed_reads_deserialize_or_say_which_type_failed() {
        #[derive(serde::Deserialize, serde::Serialize, Debug, PartialEq)]
        struct Pod {
            name: String,
        }
        let index: Index = Index::default();
        index.replace(&object("a"), &json!({"n1": {"name": "a"}}));
        let typed: Index<Pod> = index.typed();
        let store = typed.get(Some("n1")).expect("a store");
        assert_eq!(store.to_vec().expect("pods"), [Pod { name: "a".into() }]);
        assert!(store.contains(&Pod { name: "a".into() }));
        assert!(!store.contains(&Pod { name: "b".into() }));

        index.replace(&object("b"), &json!({"n1": 7}));
        let error = typed
            .get(Some("n1"))
            .expect("a store")
            .to_vec()
            .expect_err("7 is no pod");
        assert!(error.to_string().contains("Pod"), "{error}");
        let all: Vec<(IndexKey, usize)> = typed.iter().map(|(k, s)| (k, s.len())).collect();
        assert_eq!(all, [(Some("n1".into()), 2)]);
    }

    #[test]
    fn indexes_are_looked_up_by_id() {
        let indexes = Indexes::new(["by_owner"]);
        assert!(indexes.get("by_owner").is_some());
        assert!(indexes.get("other").is_none());
        assert!(Indexes::default().is_empty());
    }
}
