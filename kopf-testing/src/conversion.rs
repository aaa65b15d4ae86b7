//! Showing a stored object through another version of its resource.
//!
//! Objects are stored as they were written. Read through another served
//! version, they get that version's `apiVersion`; Events convert between
//! `core/v1` and `events.k8s.io/v1`, which share one store as in the API server.

use std::borrow::Cow;

use serde_json::{Map, Value};

/// `core/v1` Event fields and their `events.k8s.io/v1` names.
const EVENT_FIELDS: [(&str, &str); 7] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
];

/// `obj` as seen through `api_version` (borrowed when nothing changes).
pub(crate) fn present<'a>(obj: &'a Value, api_version: &str) -> Cow<'a, Value> {
    let current = obj.get("apiVersion").and_then(Value::as_str);
    if current == Some(api_version) {
        return Cow::Borrowed(obj);
    }
    let Some(map) = obj.as_object() else {
        return Cow::Borrowed(obj);
    };
    let is_event = map.get("kind").and_then(Value::as_str) == Some("Event");
    let mut out = match (is_event, api_version) {
        (true, "events.k8s.io/v1") => core_to_events(map),
        (true, "v1") => events_to_core(map),
        _ => map.clone(),
    };
    out.insert("apiVersion".into(), api_version.into());
    Cow::Owned(Value::Object(out))
}

fn rename(map: &Map<String, Value>, to_new: bool) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, v) in map {
        let renamed = EVENT_FIELDS.iter().find_map(|(old, new)| {
            if to_new && k == old {
                Some(*new)
            } else if !to_new && k == new {
                Some(*old)
            } else {
                None
            }
        });
        out.insert(renamed.unwrap_or(k).to_string(), v.clone());
    }
    out
}

/// RFC 3339 with microseconds, as `MicroTime` expects.
fn micro(time: &str) -> String {
    match time.strip_suffix('Z') {
        Some(base) if !base.contains('.') => format!("{base}.000000Z"),
        _ => time.to_string(),
    }
}

fn core_to_events(map: &Map<String, Value>) -> Map<String, Value> {
    let mut out = rename(map, true);
    if out.get("eventTime").is_none_or(Value::is_null) {
        // events.k8s.io requires eventTime; derive it as clients expect one.
        let when = ["deprecatedFirstTimestamp", "deprecatedLastTimestamp"]
            .iter()
            .find_map(|f| out.get(*f).and_then(Value::as_str))
            .or_else(|| {
                map.get("metadata")
                    .and_then(|m| m.get("creationTimestamp"))
                    .and_then(Value::as_str)
            })
            .map(micro);
        if let Some(when) = when {
            out.insert("eventTime".into(), when.into());
        }
    }
    out
}

fn events_to_core(map: &Map<String, Value>) -> Map<String, Value> {
    let mut out = rename(map, false);
    out.entry("involvedObject")
        .or_insert_with(|| Value::Object(Map::new()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn same_version_is_borrowed() {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        assert!(matches!(present(&obj, "v1"), Cow::Borrowed(_)));
    }

    #[test]
    fn other_versions_get_their_api_version() {
        let obj = json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": {}});
        assert_eq!(
            present(&obj, "example.com/v2")["apiVersion"],
            "example.com/v2"
        );
    }

    #[test]
    fn events_convert_both_ways() {
        let new = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "note": "hello", "regarding": {"name": "p1"}, "reportingController": "c", "eventTime": "2026-01-01T00:00:00.000000Z",
        });
        let core = present(&new, "v1");
        assert_eq!(core["message"], "hello");
        assert_eq!(core["involvedObject"]["name"], "p1");
        assert_eq!(core["reportingComponent"], "c");
        let back = present(&core, "events.k8s.io/v1");
        assert_eq!(*back, new);
        let old = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}, "involvedObject": {}});
        assert_eq!(
            present(&old, "events.k8s.io/v1")["eventTime"],
            "2026-01-01T00:00:00.000000Z"
        );
    }
}
