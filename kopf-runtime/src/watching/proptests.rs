//! Property tests of the watch line decoder: no line makes it panic, and any
//! event line as an API server may write it decodes to its type and object.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::events::{Change, Event, Offered, decode};
use crate::proptests::{config, json, object};

type Skip = fn(Change, &str, &str) -> bool;

fn plain(line: &str) -> Result<Option<Event>, kube::Error> {
    decode(line, 1000, None::<(Offered, &mut Skip)>)
}

/// Objects as watches carry them: metadata (maybe partial) and anything else.
fn watched_object() -> impl Strategy<Value = Value> {
    (
        object(),
        proptest::option::of(".{0,8}"),
        proptest::option::of("[0-9]{1,6}"),
        proptest::option::of(json()),
    )
        .prop_map(|(mut obj, uid, version, extra)| {
            let mut metadata = json!({"name": "n"});
            if let Some(uid) = uid {
                metadata["uid"] = json!(uid);
            }
            if let Some(version) = version {
                metadata["resourceVersion"] = json!(version);
            }
            if let Some(extra) = extra {
                metadata["extra"] = extra;
            }
            obj["metadata"] = metadata;
            obj
        })
}

/// The line: compact as API servers write it, or with the fields reordered,
/// spaced out, or followed by more fields.
fn line(kind: &str, object: &Value, form: u8) -> String {
    match form % 4 {
        0 => serde_json::to_string(&json!({"type": kind, "object": object})),
        1 => Ok(format!(
            r#"{{"object":{},"type":"{kind}"}}"#,
            serde_json::to_string(object).expect("serializes")
        )),
        2 => serde_json::to_string_pretty(&json!({"type": kind, "object": object}))
            .map(|text| text.replace('\n', " ")),
        _ => Ok(format!(
            r#"{{"type":"{kind}","object":{},"extra":{{"x":"}}"}}}}"#,
            serde_json::to_string(object).expect("serializes")
        )),
    }
    .expect("serializes")
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn arbitrary_lines_never_panic(
        text in ".{0,80}",
        prefix in proptest::sample::select(vec![
            "", r#"{"type":"ADDED","object":"#, r#"{"type":"MODIFIED","object":"#,
            r#"{"type":"DELETED","object":"#, r#"{"type":"BOOKMARK","object":"#,
            r#"{"type":"ERROR","object":"#, r#"{"kind":"Status","#, r#"{"type":""#,
        ]),
        suffix in proptest::sample::select(vec!["", "}", "}}", "\"}", "]}"]),
        value in json(),
    ) {
        let value = serde_json::to_string(&value).expect("serializes");
        for line in [
            text.clone(),
            format!("{prefix}{text}{suffix}"),
            format!("{prefix}{value}{suffix}"),
        ] {
            let _ = plain(&line);
            let mut skip = |_: Change, _: &str, _: &str| true;
            let _ = decode(&line, 2, Some((Offered::All, &mut skip)));
        }
    }

    #[test]
    fn event_lines_round_trip(
        object in watched_object(),
        kind in proptest::sample::select(vec!["ADDED", "MODIFIED", "DELETED"]),
        form in any::<u8>(),
    ) {
        let line = line(kind, &object, form);
        let event = plain(&line).map_err(|e| TestCaseError::fail(format!("{line}: {e}")))?;
        match (kind, event) {
            ("ADDED" | "MODIFIED", Some(Event::Applied(body))) => prop_assert_eq!(body, object),
            ("DELETED", Some(Event::Deleted(body))) => prop_assert_eq!(body, object),
            (kind, event) => prop_assert!(false, "{} gave {:?} for {}", kind, event, line),
        }
    }

    #[test]
    fn events_are_skipped_by_identity_when_asked(
        object in watched_object(),
        kind in proptest::sample::select(vec![
            ("ADDED", Change::Added),
            ("MODIFIED", Change::Modified),
            ("DELETED", Change::Deleted),
        ]),
        form in any::<u8>(),
        wanted in any::<bool>(),
    ) {
        let (kind, change) = kind;
        let line = line(kind, &object, form);
        let uid = object.pointer("/metadata/uid").and_then(Value::as_str);
        let version = object.pointer("/metadata/resourceVersion").and_then(Value::as_str);
        let mut seen = None;
        let mut skip = |c: Change, u: &str, v: &str| {
            seen = Some((c, u.to_owned(), v.to_owned()));
            wanted
        };
        let event = decode(&line, 1000, Some((Offered::All, &mut skip)))
            .map_err(|e| TestCaseError::fail(format!("{line}: {e}")))?;
        let decoded = |event: Option<Event>| match event {
            Some(Event::Applied(body)) => change != Change::Deleted && body == object,
            Some(Event::Deleted(body)) => change == Change::Deleted && body == object,
            _ => false,
        };
        match (uid, version) {
            (Some(uid), Some(version)) => {
                prop_assert_eq!(seen, Some((change, uid.to_owned(), version.to_owned())));
                match event {
                    Some(Event::Skipped { change: c, version: v }) if wanted => {
                        prop_assert_eq!((c, v.as_str()), (change, version));
                    }
                    other if !wanted => prop_assert!(decoded(other), "{}", line),
                    other => prop_assert!(false, "{:?} for {}", other, line),
                }
            }
            _ => prop_assert!(decoded(event), "{}", line),
        }
    }

    #[test]
    fn bookmarks_and_errors_round_trip(version in "[0-9]{1,12}", code in 400u16..600, message in ".{0,20}") {
        let bookmark = json!({"type": "BOOKMARK", "object": {"kind": "ConfigMap", "metadata": {"resourceVersion": version}}});
        match plain(&bookmark.to_string()) {
            Ok(Some(Event::Bookmark(v))) => prop_assert_eq!(v, version),
            other => prop_assert!(false, "{:?}", other),
        }
        let error = json!({"type": "ERROR", "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": "Expired", "code": code,
        }});
        match plain(&error.to_string()) {
            Ok(Some(Event::Error(status))) => {
                prop_assert_eq!(status.code, code);
                prop_assert_eq!(status.message, message);
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn objects_too_deep_to_decode_keep_their_identity(
        object in watched_object(),
        namespace in proptest::option::of("[a-z]{1,8}"),
        typed in any::<bool>(),
        kind in proptest::sample::select(vec!["ADDED", "MODIFIED", "DELETED"]),
        levels in 2usize..200,
        form in any::<u8>(),
    ) {
        let mut object = object;
        if let Some(namespace) = &namespace {
            object["metadata"]["namespace"] = json!(namespace);
        }
        if typed {
            object["apiVersion"] = json!("v1");
            object["kind"] = json!("ConfigMap");
        } else if let Some(map) = object.as_object_mut() {
            map.remove("apiVersion");
            map.remove("kind");
        }
        object["deep"] = (0..levels).fold(json!(1), |inner, _| json!([inner]));
        let line = line(kind, &object, form);
        let max_depth = levels / 2;
        let event = decode(&line, max_depth, None::<(Offered, &mut Skip)>)
            .map_err(|e| TestCaseError::fail(format!("{line}: {e}")))?;
        let Some(Event::Undecodable { deleted, identity, .. }) = event else {
            return Err(TestCaseError::fail(format!("{event:?} for {line}")));
        };
        prop_assert_eq!(deleted, kind == "DELETED");
        let metadata = &object["metadata"];
        let mut expected = json!({"metadata": {"name": metadata["name"], "uid": metadata["uid"]}});
        for field in ["namespace", "resourceVersion"] {
            if let Some(value) = metadata.get(field) {
                expected["metadata"][field] = value.clone();
            }
        }
        if typed {
            expected["apiVersion"] = json!("v1");
            expected["kind"] = json!("ConfigMap");
        }
        // Tracked by UID: without one, there is no identity.
        let expected = metadata.get("uid").map(|_| expected);
        prop_assert_eq!(identity, expected);
    }
}
