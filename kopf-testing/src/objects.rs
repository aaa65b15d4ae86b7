//! Helpers on objects kept as JSON: metadata access, timestamps, names and
//! the rules the API server applies when objects are written.

use serde_json::{Map, Value};

/// `metadata.<field>` as a string, if present.
pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
}

/// `metadata.name` or "".
pub(crate) fn name(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or("")
}

/// `metadata.namespace` or "".
pub(crate) fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace").unwrap_or("")
}

/// The `metadata` map, created if missing or not an object.
pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let map = obj.as_object_mut().expect("invariant: just made an object");
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut()
        .expect("invariant: just made an object")
}

/// `metadata.finalizers` as strings.
pub(crate) fn finalizers(obj: &Value) -> Vec<&str> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Whether `metadata.deletionTimestamp` is set.
pub(crate) fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// `metadata.resourceVersion` parsed as an integer.
pub(crate) fn resource_version(obj: &Value) -> Option<&str> {
    meta_str(obj, "resourceVersion").filter(|s| !s.is_empty())
}

/// The current time in the API server's RFC 3339 format (seconds, `Z`).
pub(crate) fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A random 5-character suffix for `generateName`, from the alphabet the API server uses.
pub(crate) fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4().as_bytes()[..5]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// A fresh UID.
pub(crate) fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Whether two objects differ outside `metadata` (and outside `status` when it
/// is a subresource): the rule for bumping `metadata.generation`.
pub(crate) fn spec_changed(old: &Value, new: &Value, status_is_subresource: bool) -> bool {
    let skip = |k: &str| {
        k == "metadata"
            || (status_is_subresource && k == "status")
            || k == "apiVersion"
            || k == "kind"
    };
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        return old != new;
    };
    let empty = Value::Null;
    o.keys()
        .chain(n.keys())
        .filter(|k| !skip(k))
        .any(|k| o.get(k).unwrap_or(&empty) != n.get(k).unwrap_or(&empty))
}

/// Folds a Secret's `stringData` into base64 `data` (as the API server does).
pub(crate) fn fold_string_data(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let Some(Value::Object(string_data)) = map.remove("stringData") else {
        return;
    };
    let data = map
        .entry("data")
        .or_insert_with(|| Value::Object(Map::new()));
    if !data.is_object() {
        *data = Value::Object(Map::new());
    }
    if let Some(data) = data.as_object_mut() {
        for (k, v) in string_data {
            let text = match v {
                Value::String(s) => s,
                other => other.to_string(),
            };
            data.insert(k, Value::String(base64(text.as_bytes())));
        }
    }
}

/// Standard base64 with padding.
pub(crate) fn base64(input: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(input)
}

/// Whether `s` is an RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub(crate) fn is_dns_label(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| alnum(c) || c == '-')
        && s.chars().next().is_some_and(alnum)
        && s.chars().last().is_some_and(alnum)
}

/// Whether `s` is an RFC 1123 subdomain: dot-separated labels, at most 253 characters.
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Hex encoding (for opaque continue tokens).
pub(crate) fn hex(input: &[u8]) -> String {
    input.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex decoding; `None` on bad input.
pub(crate) fn unhex(input: &str) -> Option<Vec<u8>> {
    if !input.len().is_multiple_of(2) {
        return None;
    }
    (0..input.len())
        .step_by(2)
        .map(|i| {
            input
                .get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn generation_ignores_metadata_and_status_subresource() {
        let old = json!({"metadata": {"labels": {"a": "b"}}, "spec": {"x": 1}, "status": {"s": 1}});
        let relabelled = json!({"metadata": {}, "spec": {"x": 1}, "status": {"s": 1}});
        assert!(!spec_changed(&old, &relabelled, true));
        let status = json!({"metadata": {}, "spec": {"x": 1}, "status": {"s": 2}});
        assert!(!spec_changed(&old, &status, true));
        assert!(spec_changed(&old, &status, false));
        let spec = json!({"metadata": {}, "spec": {"x": 2}, "status": {"s": 1}});
        assert!(spec_changed(&old, &spec, true));
    }

    #[test]
    fn string_data_is_folded_into_data() {
        let mut secret = json!({"data": {"a": "YQ=="}, "stringData": {"b": "hello", "c": "hi!"}});
        fold_string_data(&mut secret);
        assert_eq!(
            secret,
            json!({"data": {"a": "YQ==", "b": "aGVsbG8=", "c": "aGkh"}})
        );
    }

    #[test]
    fn dns_names() {
        assert!(is_dns_label("a-1"));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label("A"));
        assert!(!is_dns_label("a.b"));
        assert!(is_dns_subdomain("a.b-c.d"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain("has space"));
        assert!(!is_dns_subdomain(""));
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(unhex(&hex(b"12|ns|name")).unwrap(), b"12|ns|name");
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("abc"), None);
    }

    #[test]
    fn suffix_has_five_safe_chars() {
        let s = random_suffix();
        assert_eq!(s.len(), 5);
        assert!(
            s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
    }

    #[test]
    fn timestamps_are_rfc3339_seconds() {
        let t = now();
        assert_eq!(t.len(), 20);
        assert!(t.ends_with('Z'));
    }
}
