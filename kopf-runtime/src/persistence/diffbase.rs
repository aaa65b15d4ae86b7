//! The diff-base: the last handled "essence" of an object, stored as Kopf
//! stores it, and Kopf-style diffs between essences.
//!
//! The **essence** of a body is what handlers care about: the body without
//! `apiVersion`, `kind`, `status` and `metadata`, except `metadata.labels`
//! and `metadata.annotations` — minus `kubectl.kubernetes.io/last-applied-configuration`,
//! minus every annotation under a prefix used by any Kopf-based operator
//! (`kopf.zalando.org/…`, `*.kopf.zalando.org/…`, or any prefix that has a
//! `…/kopf-managed` marker), minus the diff-base annotation itself. Empty
//! stanzas are dropped; ignored fields can be dropped.
//!
//! # Extra fields
//!
//! As in Kopf, the essence also keeps the `field` of every handler of the
//! resource (change handlers, `on_event`, daemons and timers alike), copied
//! from the body after the annotations are filtered and before the
//! ignored fields are dropped (see [`DiffBaseStorage::with_extra_fields`]).
//! A handler on `status.phase` makes `status.phase` part of the essence:
//! a change there is an update, for that handler and for every `on_update`
//! handler, and the field is stored in the diff-base. Only fields the
//! essence would not keep anyway (under `status`, `metadata` but for its
//! labels, `apiVersion`, `kind`) change anything; an operator without
//! such handlers builds its essences as before.
//!
//! # Kopf's format
//!
//! The essence of the last handled state lives in the annotation
//! `kopf.zalando.org/last-handled-configuration`, also written under the v1
//! key when it differs, as Kopf writes it: Python's
//! `json.dumps(essence, separators=(',', ':'))` and a newline. The keys are
//! in the order Kopf builds them: the body's own fields (sorted, as the API
//! server sends custom resources), then `metadata` with `labels` and
//! `annotations`, then what the extra fields add, in the handlers' order;
//! every character outside printable ASCII is a `\uXXXX` escape, and floats
//! are written as Python writes them (`1e+16`). Kopf and kopf-rs compare
//! essences decoded, so an order that differs (Kopf's own order of two or
//! more extra fields varies between its runs, as it keeps them in a set;
//! a built-in kind's fields come in its schema's order) is never a change.
//!
//! # Oversized essences
//!
//! The API server refuses an object whose annotations, keys and values
//! together, exceed 256 KiB (Kopf's issue #1087: a large object's diff-base
//! makes every patch fail). When the essence does not fit beside the other
//! annotations, its largest values (strings, numbers and whole lists, which
//! diffs compare whole anyway) are stored as digests,
//! `kopf-rs:digest:blake2b-256:<hex>`, largest first, until it fits. When it
//! is read back, each digest that matches the current value at its place is
//! that value again, so diffs stay exact for what did not change; a value
//! that changed shows its old side as the digest. Kopf operators reading
//! such a diff-base see the digests as the old values.
//!
//! A [`Diff`](crate::Diff) is Kopf's: a list of `(op, field, old, new)` where `op` is
//! `add`/`change`/`remove`, `field` is a path of keys, and lists are compared
//! as a whole. It serializes to Kopf's JSON shape: from
//! `{"spec": {"a": 1, "b": 2}}` to `{"spec": {"a": 1, "b": 3, "c": 4}}`,
//!
//! ```text
//! [["add", ["spec", "c"], null, 4], ["change", ["spec", "b"], 2, 3]]
//! ```

use std::sync::Arc;

use serde_json::{Map, Value};

mod encoding;

use encoding::KeyOrder;

use crate::fields::{ensure_field, remove_field, resolve_field, resolve_field_mut};
use crate::persistence::progress::{
    AnnotationKeys, LAST_APPLIED_ANNOTATION, ProgressStorage, detect_marked_prefixes,
    remove_empty_stanzas,
};
use crate::settings::PersistenceSettings;
use crate::watching::decoding;

/// Where the last handled essence lives: Kopf's `AnnotationsDiffBaseStorage`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DiffBaseStorage {
    keys: AnnotationKeys,
    name: String,
    ignored_fields: Vec<Vec<String>>,
    /// The handlers' fields that an essence would not keep otherwise, in
    /// the handlers' order (see [`with_extra_fields`](Self::with_extra_fields)).
    extra_fields: Vec<Vec<String>>,
}

impl Default for DiffBaseStorage {
    fn default() -> Self {
        Self::from_settings(&PersistenceSettings::default())
    }
}

impl DiffBaseStorage {
    /// The storage as the persistence settings configure it: the
    /// `diffbase_key` is split into the prefix and the name at the last `/`
    /// (a key without `/` uses the progress prefix).
    pub(crate) fn from_settings(settings: &PersistenceSettings) -> Self {
        let (prefix, name) = match settings.diffbase_key.rsplit_once('/') {
            Some((prefix, name)) => (prefix.to_owned(), name.to_owned()),
            None => (
                settings.progress_prefix.clone(),
                settings.diffbase_key.clone(),
            ),
        };
        Self {
            keys: AnnotationKeys::new(prefix, settings.progress_v1_keys),
            name,
            ignored_fields: Vec::new(),
            extra_fields: Vec::new(),
        }
    }

    #[cfg(test)]
    /// Also drop these dotted fields (e.g. `spec.replicas`) from essences.
    pub(crate) fn with_ignored_fields<I: IntoIterator<Item = S>, S: AsRef<str>>(
        mut self,
        fields: I,
    ) -> Self {
        self.ignored_fields = fields
            .into_iter()
            .map(|f| f.as_ref().split('.').map(str::to_owned).collect())
            .collect();
        self
    }

    /// Also keep these dotted fields (e.g. `status.phase`) in essences: the
    /// fields of the resource's handlers, as Kopf keeps them (its registry's
    /// `get_extra_fields`), so that a change there is a change of the
    /// essence. Only what an essence would not keep anyway is remembered:
    /// fields under `apiVersion`, `kind`, `status`, or `metadata` but for
    /// `metadata.labels`. Without such fields, essences cost nothing more.
    pub(crate) fn with_extra_fields<I: IntoIterator<Item = S>, S: AsRef<str>>(
        mut self,
        fields: I,
    ) -> Self {
        for field in fields {
            let path: Vec<String> = field.as_ref().split('.').map(str::to_owned).collect();
            if outside_the_essence(&path) && !self.extra_fields.contains(&path) {
                self.extra_fields.push(path);
            }
        }
        self
    }

    /// The annotation keys of the diff-base on `body` (v2, then v1 if different).
    pub(crate) fn keys(&self, body: &Value) -> Arc<[String]> {
        self.keys.make_keys(&self.name, body)
    }

    /// The essence of `body`, with the [extra fields](Self::with_extra_fields).
    pub(crate) fn build(&self, body: &Value) -> Value {
        // Inserted one by one: collecting would gather and sort the few
        // fields in a vector first.
        let mut essence = Map::new();
        for (key, value) in body.as_object().into_iter().flatten() {
            if !matches!(key.as_str(), "apiVersion" | "kind" | "metadata" | "status") {
                essence.insert(key.clone(), value.clone());
            }
        }
        // Only the annotations kept are copied: the others (the stored
        // essence among them) are often the larger part of the metadata.
        let mut metadata = Map::new();
        if let Some(labels) = resolve_field(body, &["metadata", "labels"]) {
            metadata.insert("labels".to_owned(), labels.clone());
        }
        match resolve_field(body, &["metadata", "annotations"]) {
            Some(Value::Object(annotations)) => {
                let ignored = detect_marked_prefixes(annotations.keys().map(String::as_str));
                let kept = annotations.iter().filter(|(key, _)| {
                    *key != LAST_APPLIED_ANNOTATION
                        && !ignored.iter().any(|p| {
                            key.strip_prefix(p.as_str())
                                .is_some_and(|rest| rest.starts_with('/'))
                        })
                });
                let mut annotations = Map::new();
                for (key, value) in kept {
                    annotations.insert(key.clone(), value.clone());
                }
                metadata.insert("annotations".to_owned(), Value::Object(annotations));
            }
            Some(other) => {
                metadata.insert("annotations".to_owned(), other.clone());
            }
            None => {}
        }
        if !metadata.is_empty() {
            essence.insert("metadata".to_owned(), Value::Object(metadata));
        }
        let mut essence = Value::Object(essence);
        cherrypick(body, &mut essence, &self.extra_fields);
        for field in &self.ignored_fields {
            let path: Vec<&str> = field.iter().map(String::as_str).collect();
            remove_field(&mut essence, &path);
        }

        if let Some(annotations) = resolve_field_mut(&mut essence, &["metadata", "annotations"])
            .and_then(Value::as_object_mut)
        {
            let own = self.keys(body);
            annotations.retain(|key, _| !own.contains(key));
        }
        remove_empty_stanzas(&mut essence);
        essence
    }

    /// The stored essence, if any. A malformed annotation is logged as a
    /// warning and treated as absent.
    pub(crate) fn fetch(&self, body: &Value) -> Option<Value> {
        for key in self.keys(body).iter() {
            let Some(encoded) = resolve_field(body, &["metadata", "annotations", key.as_str()])
            else {
                continue;
            };
            let Some(text) = encoded.as_str() else {
                tracing::warn!(annotation = %key, "ignoring a non-string diff-base annotation");
                continue;
            };
            // As deep as the objects the watch decodes: an essence nests as
            // deeply as its object.
            match decoding::from_str::<Value>(text, decoding::DEFAULT_MAX_DEPTH) {
                Ok(Value::Null) => continue,
                Ok(essence @ Value::Object(_)) => return Some(essence),
                Ok(_) => {
                    tracing::warn!(annotation = %key, "ignoring a non-object diff-base annotation")
                }
                Err(error) => {
                    tracing::warn!(annotation = %key, %error, "ignoring a malformed diff-base annotation")
                }
            }
        }
        None
    }

    /// Write `essence` as the new diff-base into the merge `patch`; returns
    /// the annotation's text. An essence too large for the annotations
    /// keeps its largest values as digests (see the [module docs](self)).
    ///
    /// The text is the one Kopf writes for the same essence: the same
    /// keys in the same order, the same escapes and numbers (see
    /// [Kopf's format](self#kopfs-format)).
    pub(crate) fn store(&self, body: &Value, essence: &Value, patch: &mut Value) -> String {
        let keys = self.keys(body);
        let order = self.key_order(body);
        let mut encoded = encoding::encode(essence, &order);
        let room = diffbase_room(body, &keys);
        if encoded.len() >= room {
            encoded = shrink(essence, &order, room);
        }
        encoded.push('\n');
        for key in keys.iter() {
            ensure_field(
                patch,
                &["metadata", "annotations", key.as_str()],
                Value::String(encoded.clone()),
            );
        }
        self.keys.store_marker(body, patch);
        encoded
    }

    /// Whether `body` holds `encoded` (as [`store`](Self::store) returned
    /// it) as its diff-base, under every key.
    pub(crate) fn holds(&self, body: &Value, encoded: &str) -> bool {
        let annotations = resolve_field(body, &["metadata", "annotations"]);
        self.keys(body).iter().all(|key| {
            annotations
                .and_then(|a| a.get(key.as_str()))
                .and_then(Value::as_str)
                == Some(encoded)
        })
    }

    /// Whether `a` and `b` certainly have the same essence, found without
    /// building either. Every part an essence is made of must be equal in
    /// both: the fields besides `apiVersion`, `kind`, `metadata` and
    /// `status`, the labels, and the annotations, except those no essence
    /// ever keeps and the operator itself writes (the diff-base, and
    /// everything under the `progress` storage's prefix). Fields an essence
    /// drops otherwise (ignored fields, other operators' annotations) count
    /// too, so `false` only means "maybe not": build the essences then.
    pub(crate) fn same_essence(&self, a: &Value, b: &Value, progress: &ProgressStorage) -> bool {
        let (Some(a_map), Some(b_map)) = (a.as_object(), b.as_object()) else {
            return false;
        };
        let essential = |(key, _): &(&String, &Value)| {
            !matches!(key.as_str(), "apiVersion" | "kind" | "metadata" | "status")
        };
        if !a_map
            .iter()
            .filter(essential)
            .eq(b_map.iter().filter(essential))
        {
            return false;
        }
        // The metadata is found once for all the fields compared in it.
        let none = Map::new();
        let (Some(a_meta), Some(b_meta)) = (
            child_map(a_map, "metadata", &none),
            child_map(b_map, "metadata", &none),
        ) else {
            return false;
        };
        // The diff-base's keys depend on the kind and the owners only.
        if a_meta.get("labels") != b_meta.get("labels")
            || a_map.get("kind") != b_map.get("kind")
            || a_meta.get("ownerReferences") != b_meta.get("ownerReferences")
        {
            return false;
        }
        // The extra fields, where they are not among the parts above.
        if !self
            .extra_fields
            .iter()
            .all(|path| resolve_path(a, path) == resolve_path(b, path))
        {
            return false;
        }
        let written = self.written(b, progress);
        // No annotations at all are as good as none kept (a new object,
        // and the same object with the operator's diff-base).
        let (Some(a), Some(b)) = (
            child_map(a_meta, "annotations", &none),
            child_map(b_meta, "annotations", &none),
        ) else {
            return false;
        };
        let kept = |(key, _): &(&String, &Value)| !written(key);
        a.iter().filter(kept).eq(b.iter().filter(kept))
    }

    /// Whether `patch` (a merge patch for `body`) changes nothing an
    /// essence is made of, and nothing but the operator's bookkeeping: the
    /// annotations of the diff-base and of the `progress` storage, the
    /// finalizers, the `resourceVersion` precondition, and the `status`
    /// (where handlers' results go) but for the extra fields. The object
    /// patched with it has the same essence as `body`, and the same fields
    /// besides.
    pub(crate) fn only_bookkeeping(
        &self,
        body: &Value,
        patch: &Value,
        progress: &ProgressStorage,
    ) -> bool {
        if self.extra_fields.iter().any(|path| touches(patch, path)) {
            return false;
        }
        let Some(patch) = patch.as_object() else {
            return false;
        };
        if patch.keys().any(|key| key != "metadata" && key != "status") {
            return false;
        }
        let Some(metadata) = patch.get("metadata") else {
            return true;
        };
        let Some(metadata) = metadata.as_object() else {
            return false;
        };
        let written = self.written(body, progress);
        metadata.iter().all(|(key, value)| match key.as_str() {
            "finalizers" | "resourceVersion" => true,
            "annotations" => value
                .as_object()
                .is_some_and(|annotations| annotations.keys().all(|key| written(key))),
            _ => false,
        })
    }

    /// Which annotation keys of `body` the operator itself writes and no
    /// essence keeps: the diff-base's, and everything under the `progress`
    /// storage's prefix.
    fn written<'a>(
        &self,
        body: &Value,
        progress: &'a ProgressStorage,
    ) -> impl Fn(&str) -> bool + use<'a> {
        let own = self.keys(body);
        let prefix = progress.keys().prefix();
        move |key: &str| {
            own.iter().any(|own| own == key)
                || key
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with('/'))
        }
    }

    /// Where Kopf's essence of `body` has its keys: `metadata` after the
    /// body's fields if the body has labels or annotations, then what the
    /// extra fields add, in their order.
    fn key_order(&self, body: &Value) -> KeyOrder<'_> {
        let mut order = KeyOrder::default();
        let metadata = body.get("metadata").and_then(Value::as_object);
        for stanza in ["labels", "annotations"] {
            if metadata.is_some_and(|m| m.contains_key(stanza)) {
                order.copy(["metadata", stanza]);
            }
        }
        for path in &self.extra_fields {
            if resolve_path(body, path).is_some() {
                order.copy(path.iter().map(String::as_str));
            }
        }
        order
    }

    /// The old (stored) and new (current) essences as Kopf's processing
    /// computes them: both cleared of the progress storage's fields.
    pub(crate) fn essences(
        &self,
        body: &Value,
        progress: &ProgressStorage,
    ) -> (Option<Value>, Value) {
        let new = progress.clear(self.build(body));
        let old = self.fetch(body).map(|old| {
            let mut old = progress.clear(old);
            restore_digests(&mut old, &new);
            old
        });
        (old, new)
    }
}

/// The API server's limit on the annotations of one object: keys and
/// values together.
pub(crate) const ANNOTATIONS_LIMIT: usize = 256 * 1024;

/// What is kept free of the annotations for the progress records that the
/// same patch may write.
const PROGRESS_ROOM: usize = 16 * 1024;

/// How a value kept only as a digest begins.
const DIGEST_PREFIX: &str = "kopf-rs:digest:blake2b-256:";

/// How many bytes one copy of the diff-base may take, stored under each of
/// `keys`, beside the other annotations of `body`.
fn diffbase_room(body: &Value, keys: &[String]) -> usize {
    let others: usize = resolve_field(body, &["metadata", "annotations"])
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(key, _)| !keys.contains(key))
        .map(|(key, value)| key.len() + value.as_str().map_or(0, str::len))
        .sum();
    let own_keys: usize = keys.iter().map(String::len).sum();
    ANNOTATIONS_LIMIT.saturating_sub(others + own_keys + PROGRESS_ROOM) / keys.len().max(1)
}

/// The digest that stands for `value` in a diff-base too large to keep it.
fn digest(value: &Value) -> String {
    use blake2::digest::{Update, VariableOutput};
    let text = serde_json::to_string(value).expect("invariant: a JSON value always serializes");
    let mut hasher =
        blake2::Blake2bVar::new(32).expect("invariant: a 32-byte digest is a valid size");
    hasher.update(text.as_bytes());
    let mut out = [0u8; 32];
    hasher
        .finalize_variable(&mut out)
        .expect("invariant: the buffer has the digest's size");
    let mut digest = String::with_capacity(DIGEST_PREFIX.len() + 64);
    digest.push_str(DIGEST_PREFIX);
    for byte in out {
        digest.push_str(&format!("{byte:02x}"));
    }
    digest
}

/// `essence` encoded in under `room` bytes if it can be: its largest
/// leaves (anything but a map) replaced by their digests, largest first.
fn shrink(essence: &Value, order: &KeyOrder<'_>, room: usize) -> String {
    fn leaves<'a>(value: &'a Value, path: &mut Vec<&'a str>, out: &mut Vec<(usize, Vec<&'a str>)>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    path.push(key);
                    leaves(child, path, out);
                    path.pop();
                }
            }
            leaf => {
                let size = encoding::encode(leaf, &KeyOrder::default()).len();
                if size > DIGEST_PREFIX.len() + 66 {
                    out.push((size, path.clone()));
                }
            }
        }
    }
    let mut found = Vec::new();
    leaves(essence, &mut Vec::new(), &mut found);
    found.sort_by_key(|leaf| std::cmp::Reverse(leaf.0));
    let mut shrunk = essence.clone();
    let mut size = encoding::encode(essence, order).len();
    for (leaf_size, path) in found {
        if size < room {
            break;
        }
        if let Some(leaf) = resolve_field_mut(&mut shrunk, &path) {
            let marker = digest(leaf);
            size = size + marker.len() + 2 - leaf_size;
            *leaf = Value::String(marker);
        }
    }
    if size >= room {
        tracing::warn!(
            size,
            room,
            "the diff-base does not fit the annotations even with digests; the API server may refuse it"
        );
    }
    encoding::encode(&shrunk, order)
}

/// Puts back into a stored essence the values it keeps as digests, where
/// `current` holds the same value at the same place.
fn restore_digests(stored: &mut Value, current: &Value) {
    match stored {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if let Some(current) = current.get(key) {
                    restore_digests(child, current);
                }
            }
        }
        Value::String(text) if text.starts_with(DIGEST_PREFIX) && *text == digest(current) => {
            *stored = current.clone();
        }
        _ => {}
    }
}

/// The map under `key` in `map`, `none` if there is nothing there; `None`
/// if it is not a map.
fn child_map<'a>(
    map: &'a Map<String, Value>,
    key: &str,
    none: &'a Map<String, Value>,
) -> Option<&'a Map<String, Value>> {
    match map.get(key) {
        None => Some(none),
        Some(child) => child.as_object(),
    }
}

/// Copy the `fields` that exist in `src` into `dst` (Kopf's `cherrypick`).
fn cherrypick(src: &Value, dst: &mut Value, fields: &[Vec<String>]) {
    for path in fields {
        if let Some(value) = resolve_path(src, path) {
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            ensure_field(dst, &path, value.clone());
        }
    }
}

/// The value at `path`, as [`resolve_field`] finds it.
fn resolve_path<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter()
        .try_fold(value, |value, key| value.as_object()?.get(key))
}

/// Whether an essence without the extra field `path` could differ there
/// from one with it: unless `path` is in a top-level field besides
/// `apiVersion`, `kind`, `metadata` and `status`, or in `metadata.labels`,
/// which essences keep whole.
fn outside_the_essence(path: &[String]) -> bool {
    match path.first().map(String::as_str) {
        Some("apiVersion" | "kind" | "status") => true,
        Some("metadata") => path.get(1).map(String::as_str) != Some("labels"),
        _ => false,
    }
}

/// Whether the merge `patch` sets or removes anything at or under `path`.
fn touches(patch: &Value, path: &[String]) -> bool {
    let mut node = patch;
    for key in path {
        match node {
            Value::Object(map) => match map.get(key) {
                Some(child) => node = child,
                None => return false,
            },
            // A value that is no object replaces (or with `null`, removes)
            // everything under it.
            _ => return true,
        }
    }
    true
}

#[cfg(test)]
/// Kopf's `diff(a, b)` between two essences; `null` means absent.
/// See [`Diff`](crate::Diff) for the order and the wire form.
pub(crate) fn diff(old: &Value, new: &Value) -> crate::model::kwargs::Diff {
    crate::model::kwargs::Diff::between(Some(old), Some(new))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::kwargs::DiffOp;

    #[test]
    fn a_diff_serializes_to_kopfs_shape() {
        let d = diff(
            &json!({"spec": {"a": 1, "b": 2}}),
            &json!({"spec": {"a": 1, "b": 3, "c": 4}}),
        );
        assert_eq!(
            serde_json::to_value(&d).expect("a diff serializes"),
            json!([
                ["add", ["spec", "c"], null, 4],
                ["change", ["spec", "b"], 2, 3]
            ]),
        );
        assert_eq!(d.reduce(&["spec", "c"]).items()[0].op, DiffOp::Add);
    }

    fn kopf_body() -> Value {
        json!({
            "apiVersion": "kopf.dev/v1",
            "kind": "KopfExample",
            "metadata": {
                "name": "kopf-example-1",
                "namespace": "default",
                "uid": "6a0e4f0c-1234",
                "resourceVersion": "12345",
                "generation": 3,
                "creationTimestamp": "2020-02-14T16:58:25Z",
                "finalizers": ["kopf.zalando.org/KopfFinalizerMarker"],
                "labels": {"somelabel": "somevalue"},
                "annotations": {
                    "someannotation": "somevalue",
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{}}",
                    "kopf.zalando.org/last-handled-configuration":
                        "{\"spec\":{\"duration\":\"1m\",\"field\":\"value\",\"items\":[\"item1\",\"item2\"]},\"metadata\":{\"labels\":{\"somelabel\":\"somevalue\"},\"annotations\":{\"someannotation\":\"somevalue\"}}}\n",
                    "kopf.zalando.org/create_fn": "{\"started\":\"2020-02-14T16:58:25.396364\",\"retries\":0}",
                    "other.kopf.zalando.org/x": "y",
                    "example.com/kopf-managed": "yes",
                    "example.com/state": "z",
                },
            },
            "spec": {"duration": "1m", "field": "value2", "items": ["item1", "item2"]},
            "status": {"create_fn": {"message": "hello"}, "kopf": {"progress": {}}},
        })
    }

    #[test]
    fn essence_drops_system_and_kopf_fields() {
        let storage = DiffBaseStorage::default();
        assert_eq!(
            storage.build(&kopf_body()),
            json!({
                "metadata": {"labels": {"somelabel": "somevalue"}, "annotations": {"someannotation": "somevalue"}},
                "spec": {"duration": "1m", "field": "value2", "items": ["item1", "item2"]},
            })
        );
    }

    #[test]
    fn essence_keeps_extra_fields_and_drops_ignored_and_empty_stanzas() {
        let storage = DiffBaseStorage::default()
            .with_ignored_fields(["spec.duration"])
            .with_extra_fields(["status.a", "status.missing"]);
        let body = json!({"metadata": {"name": "x", "labels": {}}, "spec": {"duration": "1m"}, "status": {"a": 1, "b": 2}});
        assert_eq!(storage.build(&body), json!({"status": {"a": 1}}));
    }

    #[test]
    fn only_fields_outside_the_essence_are_extra() {
        let storage = DiffBaseStorage::default().with_extra_fields([
            "spec.size",
            "data.k",
            "metadata.labels",
            "metadata.labels.app",
            "status.phase",
            "metadata.annotations",
            "metadata.generation",
            "kind",
            "status.phase",
        ]);
        let kept: Vec<String> = storage.extra_fields.iter().map(|p| p.join(".")).collect();
        assert_eq!(
            kept,
            [
                "status.phase",
                "metadata.annotations",
                "metadata.generation",
                "kind"
            ]
        );
        assert!(
            DiffBaseStorage::default().with_extra_fields(["spec.size"])
                == DiffBaseStorage::default()
        );
    }

    /// A custom resource as the API server sends it (sorted keys), handled
    /// by a Kopf operator with handlers on `spec.size`, `status.phase` and
    /// `metadata.labels`.
    fn handled_by_kopf() -> Value {
        json!({
            "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
            "metadata": {
                "annotations": {
                    "kopf.zalando.org/last-handled-configuration": "{\"spec\":{\"mode\":\"fast\",\"size\":1},\"metadata\":{\"labels\":{\"app\":\"a\"}},\"status\":{\"phase\":\"Pending\"}}\n",
                    "kopf.zalando.org/size.spec.size": "{\"started\":\"2024-05-01T10:00:00.000000+00:00\",\"stopped\":\"2024-05-01T10:00:01.000000+00:00\",\"purpose\":\"update\",\"retries\":1,\"success\":true,\"failure\":false}",
                    "note": "kept",
                },
                "generation": 2,
                "labels": {"app": "a"},
                "name": "x", "namespace": "default", "resourceVersion": "7", "uid": "u",
            },
            "spec": {"mode": "fast", "size": 2},
            "status": {"phase": "Running", "size/spec.size": {"done": true}},
        })
    }

    fn kopfs_handlers() -> DiffBaseStorage {
        DiffBaseStorage::default().with_extra_fields([
            "spec.size",
            "status.phase",
            "metadata.labels",
        ])
    }

    #[test]
    fn kopfs_diffbase_with_extra_fields_reads_back_and_diffs_exactly() {
        let (storage, progress) = (kopfs_handlers(), ProgressStorage::default());
        let body = handled_by_kopf();
        let (old, new) = storage.essences(&body, &progress);
        let old = old.expect("stored by Kopf");
        assert_eq!(
            serde_json::to_value(diff(&old, &new)).expect("serializes"),
            json!([
                ["add", ["metadata", "annotations"], null, {"note": "kept"}],
                ["change", ["spec", "size"], 1, 2],
                ["change", ["status", "phase"], "Pending", "Running"],
            ])
        );
        // Without the extra field, the phase would be a removal.
        let (old, new) = DiffBaseStorage::default().essences(&body, &progress);
        let removed = diff(old.as_ref().expect("stored"), &new);
        assert!(
            removed
                .items()
                .iter()
                .any(|i| i.op == DiffOp::Remove && i.field == ["status"])
        );
    }

    #[test]
    fn the_diffbase_is_stored_byte_for_byte_as_kopf_stores_it() {
        let storage = kopfs_handlers();
        let body = handled_by_kopf();
        let mut patch = json!({});
        let text = storage.store(
            &body,
            &storage.essences(&body, &ProgressStorage::default()).1,
            &mut patch,
        );
        // Kopf 1.45: `json.dumps(essence, separators=(',', ':')) + '\n'`, the
        // essence built by `AnnotationsDiffBaseStorage.build` (the body's
        // fields, then `metadata` with labels and annotations, then the
        // extra fields) and cleared by `SmartProgressStorage.clear`.
        assert_eq!(
            text,
            "{\"spec\":{\"mode\":\"fast\",\"size\":2},\"metadata\":{\"labels\":{\"app\":\"a\"},\"annotations\":{\"note\":\"kept\"}},\"status\":{\"phase\":\"Running\"}}\n"
        );
        // Labels absent, a new extra stanza before `metadata` is placed.
        let storage =
            DiffBaseStorage::default().with_extra_fields(["status.phase", "metadata.generation"]);
        let body = json!({"metadata": {"generation": 1, "name": "x"}, "spec": {"é": 0.00001}, "status": {"phase": "P"}});
        assert_eq!(
            storage.store(&body, &storage.build(&body), &mut json!({})),
            "{\"spec\":{\"\\u00e9\":1e-05},\"status\":{\"phase\":\"P\"},\"metadata\":{\"generation\":1}}\n"
        );
    }

    #[test]
    fn extra_fields_count_in_the_essence_shortcuts() {
        let (storage, progress) = (kopfs_handlers(), ProgressStorage::default());
        let body = handled_by_kopf();
        let mut phased = body.clone();
        phased["status"]["phase"] = json!("Failed");
        assert!(!storage.same_essence(&body, &phased, &progress));
        assert!(DiffBaseStorage::default().same_essence(&body, &phased, &progress));
        let mut resulted = body.clone();
        resulted["status"]["size/spec.size"] = json!({"done": false});
        assert!(storage.same_essence(&body, &resulted, &progress));

        let results = json!({"status": {"size/spec.size": {"done": 1}}});
        assert!(storage.only_bookkeeping(&body, &results, &progress));
        for patch in [
            json!({"status": {"phase": "Failed"}}),
            json!({"status": {"phase": null}}),
            json!({"status": null}),
        ] {
            assert!(
                !storage.only_bookkeeping(&body, &patch, &progress),
                "{patch}"
            );
            assert!(DiffBaseStorage::default().only_bookkeeping(&body, &patch, &progress));
        }
    }

    #[test]
    fn fetch_reads_kopf_diffbase_and_diff_finds_the_change() {
        let storage = DiffBaseStorage::default();
        let progress = ProgressStorage::default();
        let body = kopf_body();
        let (old, new) = storage.essences(&body, &progress);
        let old = old.expect("stored by Kopf");
        assert_eq!(old["spec"]["field"], json!("value"));
        let d = diff(&old, &new);
        assert_eq!(
            serde_json::to_value(&d).expect("serializable"),
            json!([["change", ["spec", "field"], "value", "value2"]])
        );
    }

    #[test]
    fn an_essence_too_large_for_the_annotations_keeps_its_largest_values_as_digests() {
        let storage = DiffBaseStorage::default();
        let big = "x".repeat(300 * 1024);
        let other = "y".repeat(4 * 1024);
        let handled = json!({
            "metadata": {"name": "a", "annotations": {"example.com/note": "small"}},
            "spec": {"replicas": 1, "data": big, "other": other},
        });
        let essence = storage.build(&handled);
        let mut patch = json!({});
        let encoded = storage.store(&handled, &essence, &mut patch);
        let keys = storage.keys(&handled);
        let total: usize = keys.iter().map(|k| k.len() + encoded.len()).sum();
        assert!(total < ANNOTATIONS_LIMIT, "{total} bytes");
        assert!(encoded.contains(DIGEST_PREFIX));
        assert!(encoded.contains(&other), "smaller values stay as they are");

        // Read back: unchanged values are whole again; the diff is exact.
        let mut stored = handled.clone();
        stored["metadata"]["annotations"][keys[0].as_str()] = json!(encoded);
        let mut changed = stored.clone();
        changed["spec"]["replicas"] = json!(2);
        let progress = ProgressStorage::default();
        let (old, new) = storage.essences(&changed, &progress);
        let d = diff(old.as_ref().expect("stored"), &new);
        assert_eq!(
            serde_json::to_value(&d).expect("serializes"),
            json!([["change", ["spec", "replicas"], 1, 2]])
        );
        let (old, new) = storage.essences(&stored, &progress);
        assert_eq!(old.as_ref(), Some(&new), "nothing changed");

        // A changed large value shows its old side as the digest.
        let mut grown = stored.clone();
        grown["spec"]["data"] = json!(format!("{big}z"));
        let (old, new) = storage.essences(&grown, &progress);
        let d = diff(old.as_ref().expect("stored"), &new);
        assert_eq!(d.len(), 1);
        let old_side = d.items()[0]
            .old
            .as_ref()
            .and_then(Value::as_str)
            .unwrap_or_default();
        assert!(old_side.starts_with(DIGEST_PREFIX), "{old_side}");
    }

    #[test]
    fn malformed_diffbase_is_absent() {
        let storage = DiffBaseStorage::default();
        for bad in ["{not json", "[1]", "\"str\""] {
            let body = json!({"metadata": {"annotations": {"kopf.zalando.org/last-handled-configuration": bad}}});
            assert_eq!(storage.fetch(&body), None, "{bad}");
        }
        assert_eq!(storage.fetch(&json!({})), None);
    }

    #[test]
    fn store_writes_compact_json_with_newline() {
        let storage = DiffBaseStorage::default();
        let mut patch = json!({});
        storage.store(&json!({}), &json!({"spec": {"a": 1}}), &mut patch);
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {"kopf.zalando.org/last-handled-configuration": "{\"spec\":{\"a\":1}}\n"}}})
        );
    }

    #[test]
    fn custom_key_gets_marker_and_is_excluded_from_essence() {
        let settings = PersistenceSettings {
            diffbase_key: "example.com/last".into(),
            ..Default::default()
        };
        let storage = DiffBaseStorage::from_settings(&settings);
        let mut patch = json!({});
        storage.store(&json!({}), &json!({}), &mut patch);
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {"example.com/last": "{}\n", "example.com/kopf-managed": "yes"}}})
        );
        let body = json!({"metadata": {"annotations": {"example.com/last": "{}", "keep": "1"}}});
        assert_eq!(
            storage.build(&body),
            json!({"metadata": {"annotations": {"keep": "1"}}})
        );
    }

    #[test]
    fn diff_of_creation_and_deletion() {
        assert_eq!(
            serde_json::to_value(diff(&Value::Null, &json!({"spec": 1}))).expect("ok"),
            json!([["add", [], null, {"spec": 1}]])
        );
        assert_eq!(
            serde_json::to_value(diff(&json!({"spec": 1}), &Value::Null)).expect("ok"),
            json!([["remove", [], {"spec": 1}, null]])
        );
        assert!(diff(&Value::Null, &Value::Null).is_empty());
        assert!(diff(&json!({"a": [1, 2]}), &json!({"a": [1, 2]})).is_empty());
    }

    #[test]
    fn diff_orders_adds_removes_then_changes() {
        let d = diff(
            &json!({"b": 1, "c": 1, "x": {"y": 1}}),
            &json!({"a": 1, "c": 2, "x": {"y": 1, "z": null}}),
        );
        assert_eq!(
            serde_json::to_value(&d).expect("ok"),
            json!([
                ["add", ["a"], null, 1],
                ["remove", ["b"], 1, null],
                ["change", ["c"], 1, 2]
            ])
        );
        let lists = diff(&json!({"l": [1]}), &json!({"l": [1, 2]}));
        assert_eq!(lists.items()[0].op, DiffOp::Change);
        assert_eq!(lists.items()[0].field, ["l"]);
    }

    #[test]
    fn reduce_cuts_prefixes_and_expands_parents() {
        let d = diff(
            &json!({"spec": {"a": {"b": 1}, "c": 1}}),
            &json!({"spec": {"a": {"b": 2}, "c": 2}}),
        );
        let reduced = d.reduce(&["spec", "a"]);
        assert_eq!(
            serde_json::to_value(&reduced).expect("ok"),
            json!([["change", ["b"], 1, 2]])
        );

        let created = diff(&Value::Null, &json!({"spec": {"a": {"b": 1}}}));
        assert_eq!(
            serde_json::to_value(created.reduce(&["spec", "a", "b"])).expect("ok"),
            json!([["add", [], null, 1]])
        );
        assert!(created.reduce(&["spec", "zzz"]).is_empty());
        assert_eq!(created.reduce(&[]), created);
        let scalar_parent = diff(&json!({"spec": 1}), &json!({"spec": {"a": 2}}));
        assert_eq!(
            serde_json::to_value(scalar_parent.reduce(&["spec", "a"])).expect("ok"),
            json!([["add", [], null, 2]])
        );
    }

    /// A new object, then the same object as the operator's own patch
    /// returns it: the diff-base, a progress record, a finalizer, a status
    /// and a newer version added.
    fn handled_and_echoed() -> (Value, Value) {
        let new = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u", "resourceVersion": "1",
                         "labels": {"l": "1"}},
            "data": {"k": "v"},
        });
        let mut echoed = new.clone();
        crate::fields::merge_into(
            &mut echoed,
            json!({
                "metadata": {
                    "resourceVersion": "2",
                    "finalizers": ["kopf.zalando.org/KopfFinalizerMarker"],
                    "annotations": {
                        "kopf.zalando.org/last-handled-configuration": "{\"data\":{\"k\":\"v\"}}\n",
                        "kopf.zalando.org/create_fn": "{\"retries\":1}",
                    },
                },
                "status": {"create_fn": {"done": true}},
            }),
        );
        (new, echoed)
    }

    #[test]
    fn the_operators_own_additions_leave_the_essence_the_same() {
        let (storage, progress) = (DiffBaseStorage::default(), ProgressStorage::default());
        let (new, echoed) = handled_and_echoed();
        assert!(storage.same_essence(&new, &echoed, &progress));
        assert!(storage.same_essence(&echoed, &new, &progress));
        // What `same_essence` vouches for, the essences confirm.
        assert_eq!(
            progress.clear(storage.build(&new)),
            progress.clear(storage.build(&echoed))
        );
    }

    #[test]
    fn any_change_to_what_an_essence_is_made_of_may_change_it() {
        let (storage, progress) = (DiffBaseStorage::default(), ProgressStorage::default());
        let (new, echoed) = handled_and_echoed();
        let changes = [
            json!({"data": {"k": "v2"}}),
            json!({"data": {"more": "x"}}),
            json!({"spec": {"new": "field"}}),
            json!({"metadata": {"labels": {"l": "2"}}}),
            json!({"metadata": {"labels": null}}),
            json!({"metadata": {"annotations": {"someone/else": "x"}}}),
            // Dropped from essences, yet not written by this operator: a
            // change there is not vouched for (the essences are built).
            json!({"metadata": {"annotations": {"other.kopf.zalando.org/x": "y"}}}),
            json!({"metadata": {"annotations": {"example.com/kopf-managed": "yes"}}}),
            // What the diff-base's own keys depend on.
            json!({"kind": "ReplicaSet"}),
            json!({"metadata": {"ownerReferences": [{"kind": "Deployment", "name": "d"}]}}),
        ];
        for change in changes {
            let mut changed = echoed.clone();
            crate::fields::merge_into(&mut changed, change.clone());
            assert!(!storage.same_essence(&new, &changed, &progress), "{change}");
        }
        let mut odd = echoed.clone();
        odd["metadata"]["annotations"] = json!("not a map");
        assert!(!storage.same_essence(&new, &odd, &progress));
        assert!(!storage.same_essence(&new, &json!("not an object"), &progress));
    }

    #[test]
    fn a_deployments_replicaset_has_diffbase_keys_of_its_own() {
        let storage = DiffBaseStorage::default();
        let plain = storage.keys(&json!({"kind": "ConfigMap"}));
        assert_eq!(&plain[..1], ["kopf.zalando.org/last-handled-configuration"]);
        let owned = json!({"kind": "ReplicaSet", "metadata": {"ownerReferences": [{"kind": "Deployment"}]}});
        let marked = storage.keys(&owned);
        assert!(!marked.is_empty());
        assert!(
            marked.iter().all(|key| key.ends_with("-ofDRS")),
            "{marked:?}"
        );
        let alone =
            json!({"kind": "ReplicaSet", "metadata": {"ownerReferences": [{"kind": "Job"}]}});
        assert_eq!(storage.keys(&alone), plain);
        let mut patch = json!({});
        storage.store(&owned, &json!({"spec": {}}), &mut patch);
        assert!(storage.holds(&merged(&owned, &patch), "{\"spec\":{}}\n"));
        assert!(!storage.holds(
            &merged(&json!({"kind": "ConfigMap"}), &patch),
            "{\"spec\":{}}\n"
        ));
    }

    fn merged(body: &Value, patch: &Value) -> Value {
        let mut body = body.clone();
        crate::fields::merge_into(&mut body, patch.clone());
        body
    }

    #[test]
    fn only_the_operators_bookkeeping_leaves_a_patched_object_as_handled() {
        let (storage, progress) = (DiffBaseStorage::default(), ProgressStorage::default());
        let (new, _) = handled_and_echoed();
        let bookkeeping = [
            json!({}),
            json!({"metadata": {"annotations": {
                "kopf.zalando.org/last-handled-configuration": "{}\n",
                "kopf.zalando.org/create_fn": null,
            }}}),
            json!({"metadata": {"finalizers": null, "resourceVersion": "1"}}),
            // Handlers' results: no essence keeps the status.
            json!({"status": {"create_fn": {"message": "done"}}}),
        ];
        for patch in bookkeeping {
            assert!(storage.only_bookkeeping(&new, &patch, &progress), "{patch}");
        }
        let more = [
            json!({"data": {"k": "v2"}}),
            json!({"status": {}, "data": {"k": "v2"}}),
            json!({"metadata": null}),
            json!({"metadata": {"labels": {"l": "2"}}}),
            json!({"metadata": {"annotations": {"someone/else": "x"}}}),
            json!({"metadata": {"annotations": {"other.kopf.zalando.org/x": "y"}}}),
            json!({"metadata": {"annotations": null}}),
            json!({"metadata": {"annotations": {"kopf.zalando.org/x": "y"}, "labels": {}}}),
            json!("not a patch"),
        ];
        for patch in more {
            assert!(
                !storage.only_bookkeeping(&new, &patch, &progress),
                "{patch}"
            );
        }
    }

    #[test]
    fn the_stored_diffbase_is_recognised_under_every_key() {
        let storage = DiffBaseStorage::default();
        let (new, _) = handled_and_echoed();
        let mut patch = json!({});
        let encoded = storage.store(&new, &json!({"data": {"k": "v"}}), &mut patch);
        assert_eq!(encoded, "{\"data\":{\"k\":\"v\"}}\n");
        let mut echoed = new.clone();
        crate::fields::merge_into(&mut echoed, patch);
        assert!(storage.holds(&echoed, &encoded));
        assert!(!storage.holds(&new, &encoded), "not stored yet");
        assert!(!storage.holds(&echoed, "{}\n"), "another diff-base");
    }

    #[test]
    fn the_diffbase_is_written_as_kopf_writes_it() {
        use crate::persistence::diffbase::DiffBaseStorage;
        use serde_json::json;

        let storage = DiffBaseStorage::default().with_extra_fields(["spec.size", "status.phase"]);
        let body = json!({
            "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
            "metadata": {"name": "x", "labels": {"app": "é"}},
            "spec": {"size": 1}, "status": {"phase": "Running", "other": 1},
        });
        let mut patch = json!({});
        let text = storage.store(&body, &storage.build(&body), &mut patch);
        assert_eq!(
            text,
            "{\"spec\":{\"size\":1},\"metadata\":{\"labels\":{\"app\":\"\\u00e9\"}},\"status\":{\"phase\":\"Running\"}}\n",
        );
    }
}
