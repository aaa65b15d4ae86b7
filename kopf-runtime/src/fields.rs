//! Fields of JSON bodies and patches, by a path of object keys: read them
//! (safely: a non-object on the way is absence, as Kopf's `resolve`), set
//! them creating parents (Kopf's `ensure`), and remove them with the
//! parents left empty (Kopf's `remove`). Keys are taken as they are, with no
//! JSON-pointer escapes, and nothing is allocated to read.

use serde_json::{Map, Value};

/// The value at `path` (object keys only), if every level is an object.
/// Non-object intermediate values count as absent (Kopf's safe `resolve`).
pub(crate) fn resolve_field<'a>(body: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(body, |value, key| value.as_object()?.get(*key))
}

/// A string field of the object's `metadata` (`name`, `uid`, …), if set.
pub(crate) fn meta_str<'a>(body: &'a Value, key: &str) -> Option<&'a str> {
    resolve_field(body, &["metadata", key]).and_then(Value::as_str)
}

/// Several string fields of the object's `metadata`, as [`meta_str`] finds
/// each, with the metadata found once for all of them.
pub(crate) fn meta_strs<'a, const N: usize>(
    body: &'a Value,
    keys: [&str; N],
) -> [Option<&'a str>; N] {
    let metadata = body.get("metadata").and_then(Value::as_object);
    keys.map(|key| metadata.and_then(|m| m.get(key)).and_then(Value::as_str))
}

/// The field at `path` for changing in place, if every step is an object.
/// Like [`resolve_field`], and unlike `Value::pointer_mut`, it allocates
/// nothing: keys are taken as they are, with no `~1` escapes to undo.
pub(crate) fn resolve_field_mut<'a>(body: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    path.iter()
        .try_fold(body, |value, key| value.as_object_mut()?.get_mut(*key))
}

/// Set `path` to `value`, creating intermediate objects (replacing
/// non-object intermediates) as Kopf's `ensure`. An empty path is ignored.
pub(crate) fn ensure_field(patch: &mut Value, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = patch;
    for key in parents {
        if !current.is_object() {
            *current = Value::Object(Map::new());
        }
        let map = current
            .as_object_mut()
            .expect("invariant: made an object above");
        current = map
            .entry((*key).to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !current.is_object() {
        *current = Value::Object(Map::new());
    }
    current
        .as_object_mut()
        .expect("invariant: made an object above")
        .insert((*last).to_owned(), value);
}

/// Remove `path` and every parent object left empty by it (Kopf's `remove`).
/// Absent paths are fine.
pub(crate) fn remove_field(body: &mut Value, path: &[&str]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let Some(map) = body.as_object_mut() else {
        return;
    };
    if rest.is_empty() {
        map.remove(*first);
        return;
    }
    if let Some(child) = map.get_mut(*first) {
        remove_field(child, rest);
        if child.as_object().is_some_and(Map::is_empty) {
            map.remove(*first);
        }
    }
}

/// `namespace/name`, or `name` for cluster-scoped objects.
pub(crate) fn object_name(body: &Value) -> String {
    let [namespace, name] = meta_strs(body, ["namespace", "name"]);
    qualified_name(namespace, name)
}

/// `namespace/name`, or `name` for cluster-scoped objects, or `?`.
pub(crate) fn qualified_name(namespace: Option<&str>, name: Option<&str>) -> String {
    match (namespace, name) {
        (Some(ns), Some(name)) => [ns, "/", name].concat(),
        (None, Some(name)) => name.to_owned(),
        _ => "?".to_owned(),
    }
}

/// Merges the JSON merge patch `src` into `dst` (RFC 7386 composition: the
/// later patch wins on conflicts).
pub(crate) fn merge_into(dst: &mut Value, src: Value) {
    match (dst, src) {
        (Value::Object(dst), Value::Object(src)) => {
            for (key, value) in src {
                match dst.get_mut(&key) {
                    Some(existing) if existing.is_object() && value.is_object() => {
                        merge_into(existing, value)
                    }
                    _ => {
                        dst.insert(key, value);
                    }
                }
            }
        }
        (dst, src) => *dst = src,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn resolve_is_safe_on_non_objects() {
        let body = json!({"a": {"b": 1, "c": [1]}});
        assert_eq!(resolve_field(&body, &["a", "b"]), Some(&json!(1)));
        assert_eq!(resolve_field(&body, &["a", "b", "x"]), None);
        assert_eq!(resolve_field(&body, &["a", "c", "0"]), None);
        assert_eq!(resolve_field(&body, &[]), Some(&body));
    }

    #[test]
    fn ensure_creates_parents() {
        let mut patch = json!({});
        ensure_field(&mut patch, &["metadata", "annotations", "x/y"], json!("v"));
        ensure_field(&mut patch, &["metadata", "labels", "l"], Value::Null);
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {"x/y": "v"}, "labels": {"l": null}}})
        );
        let mut scalar = json!({"a": 1});
        ensure_field(&mut scalar, &["a", "b"], json!(2));
        assert_eq!(scalar, json!({"a": {"b": 2}}));
    }

    #[test]
    fn remove_cleans_empty_parents() {
        let mut body = json!({"a": {"b": {"c": 1}}, "d": {"e": 1, "f": 2}});
        remove_field(&mut body, &["a", "b", "c"]);
        remove_field(&mut body, &["d", "e"]);
        remove_field(&mut body, &["x", "y"]);
        assert_eq!(body, json!({"d": {"f": 2}}));
    }

    #[test]
    fn objects_are_named_as_kopf_logs_them() {
        assert_eq!(
            object_name(&json!({"metadata": {"namespace": "ns", "name": "a"}})),
            "ns/a"
        );
        assert_eq!(object_name(&json!({"metadata": {"name": "a"}})), "a");
    }
}
