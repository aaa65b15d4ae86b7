//! Watch events as they come: one JSON document per line.
//!
//! An event's object is decoded into a JSON body only when it is needed: the
//! caller may first look at the object's UID and `resourceVersion` and skip
//! the rest (the operator's own patches, see
//! [`Echoes`](crate::watching::echoes::Echoes), and the objects of other replicas'
//! shard slots), which costs a scan of the text instead of building a tree
//! of allocations.
//!
//! Lines are read the way API servers write them, `{"type":"…","object":…}`,
//! without a pass over the object just to find where it ends; any other
//! line, or one whose object does not decode that way, is decoded in full.
//!
//! An object that does not decode (see [`decoding`]) is
//! an [`Event::Undecodable`], not an error: the watch goes on past it.

use std::borrow::Cow;

use kube::core::Status;
use serde::Deserialize;
use serde::de::Error as _;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::watching::decoding::{self, ObjectHead, Undecodable};

/// One decoded watch line.
#[derive(Debug)]
pub(super) enum Event {
    /// `ADDED` or `MODIFIED`.
    Applied(Value),
    /// `ADDED`, `MODIFIED` or `DELETED`, skipped by the caller.
    Skipped {
        /// Which of them.
        change: Change,
        /// The object's version.
        version: String,
    },
    /// `DELETED`.
    Deleted(Value),
    /// `BOOKMARK`: the version to resume from.
    Bookmark(String),
    /// `ERROR`.
    Error(Box<Status>),
    /// `ADDED`, `MODIFIED` or `DELETED` of an object that does not decode.
    Undecodable {
        /// Whether it was `DELETED`.
        deleted: bool,
        /// The object's identity, if its metadata could be read.
        identity: Option<Value>,
        /// Why it does not decode.
        reason: Undecodable,
    },
}

/// The type of an event about an object, as offered for skipping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    /// `ADDED`.
    Added,
    /// `MODIFIED`.
    Modified,
    /// `DELETED`.
    Deleted,
}

/// Which changes the caller looks at before their objects are decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Offered {
    /// `MODIFIED` only (the operator's own patches come back as those):
    /// the others are decoded without a look.
    Modified,
    /// `ADDED`, `MODIFIED` and `DELETED`.
    All,
}

impl Offered {
    fn includes(self, change: Change) -> bool {
        self == Offered::All || change == Change::Modified
    }
}

impl Change {
    fn of(kind: &str) -> Option<Self> {
        match kind {
            "ADDED" => Some(Self::Added),
            "MODIFIED" => Some(Self::Modified),
            "DELETED" => Some(Self::Deleted),
            _ => None,
        }
    }
}

/// A line as sent: the type, and the object still as text.
#[derive(Deserialize)]
struct Line<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    object: &'a RawValue,
}

/// Decodes one line. For the events of the changes `Offered`, `skip` (if
/// given) sees the type, the object's UID and its `resourceVersion` first;
/// if it says so, the body is not decoded.
/// Objects nest at most `max_depth` levels.
/// `Ok(None)` is a truncated last line, which a broken stream may leave: the
/// watch resumes from the last complete event.
///
/// # Errors
/// A line that is no watch event: a `Status` the server sent instead
/// ([`kube::Error::Api`]), or anything else ([`kube::Error::SerdeError`]).
pub(super) fn decode<F: FnMut(Change, &str, &str) -> bool + ?Sized>(
    line: &str,
    max_depth: usize,
    mut skip: Option<(Offered, &mut F)>,
) -> Result<Option<Event>, kube::Error> {
    // An object that does not decode from the split may have been split
    // wrongly: the whole line is decoded to tell.
    if let Some((kind, object)) = split(line)
        && let Ok(event) = decode_object(
            kind,
            object,
            max_depth,
            skip.as_mut().map(|(offered, skip)| (*offered, &mut **skip)),
        )
        && !matches!(event, Event::Undecodable { .. })
    {
        return Ok(Some(event));
    }
    let parsed: Line<'_> = match serde_json::from_str(line) {
        Ok(parsed) => parsed,
        Err(e) if e.is_eof() => return Ok(None),
        Err(e) => {
            return Err(match serde_json::from_str::<Status>(line) {
                Ok(status) if is_status(line) => kube::Error::Api(Box::new(status)),
                _ => kube::Error::SerdeError(e),
            });
        }
    };
    decode_object(&parsed.kind, parsed.object.get(), max_depth, skip).map(Some)
}

/// The UID and `resourceVersion` of an object (as text), read without
/// decoding the object; `None` without a UID.
pub(super) fn identity_of(object: &str) -> Option<(Cow<'_, str>, Option<Cow<'_, str>>)> {
    let metadata = serde_json::from_str::<ObjectHead<'_>>(object)
        .ok()?
        .metadata;
    Some((metadata.uid?, metadata.resource_version))
}

/// Whether a line of an `ADDED` or `MODIFIED` event is an `ADDED` one.
pub(super) fn is_added(line: &str) -> bool {
    match split(line) {
        Some((kind, _)) => kind == "ADDED",
        None => serde_json::from_str::<Line<'_>>(line).is_ok_and(|l| l.kind == "ADDED"),
    }
}

/// Whether a line is a `Status` (every field of which is optional, so that
/// any JSON object decodes as one).
fn is_status(line: &str) -> bool {
    #[derive(Deserialize)]
    struct Kind<'a> {
        #[serde(borrow, default)]
        kind: Option<Cow<'a, str>>,
    }
    serde_json::from_str::<Kind<'_>>(line).is_ok_and(|k| k.kind.as_deref() == Some("Status"))
}

/// The type and the object's text of a line as API servers write it:
/// `{"type":"…","object":…}` and nothing else. Whether the object's text
/// is one JSON value (and the line therefore this one object) is for its
/// decoding to find.
fn split(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix(r#"{"type":""#)?;
    let (kind, rest) = rest.split_once('"')?;
    let object = rest
        .strip_prefix(r#","object":"#)?
        .trim_end()
        .strip_suffix('}')?;
    Some((kind, object))
}

/// Decodes an event of type `kind` from its object's text.
fn decode_object<F: FnMut(Change, &str, &str) -> bool + ?Sized>(
    kind: &str,
    object: &str,
    max_depth: usize,
    skip: Option<(Offered, &mut F)>,
) -> Result<Event, kube::Error> {
    let body = |deleted: bool, event: fn(Value) -> Event| match decoding::body(object, max_depth) {
        Ok(body) => event(body),
        Err(reason) => Event::Undecodable {
            deleted,
            identity: decoding::identity(object),
            reason,
        },
    };
    if let (Some(change), Some((offered, skip))) = (Change::of(kind), skip)
        && offered.includes(change)
        && let Ok(ObjectHead { metadata, .. }) = serde_json::from_str::<ObjectHead<'_>>(object)
        && let (Some(uid), Some(version)) = (metadata.uid, metadata.resource_version)
        && skip(change, &uid, &version)
    {
        return Ok(Event::Skipped {
            change,
            version: version.into_owned(),
        });
    }
    let event = match kind {
        "ADDED" | "MODIFIED" => body(false, Event::Applied),
        "DELETED" => body(true, Event::Deleted),
        "BOOKMARK" => {
            let head: ObjectHead<'_> =
                serde_json::from_str(object).map_err(kube::Error::SerdeError)?;
            let version = head.metadata.resource_version.ok_or_else(|| {
                kube::Error::SerdeError(serde_json::Error::custom(
                    "a BOOKMARK event without metadata.resourceVersion",
                ))
            })?;
            Event::Bookmark(version.into_owned())
        }
        "ERROR" => Event::Error(Box::new(
            serde_json::from_str(object).map_err(kube::Error::SerdeError)?,
        )),
        other => {
            return Err(kube::Error::SerdeError(serde_json::Error::custom(format!(
                "an unknown watch event type {other:?}"
            ))));
        }
    };
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Skip = fn(Change, &str, &str) -> bool;

    fn plain(line: &str) -> Event {
        decode(line, 1000, None::<(Offered, &mut Skip)>)
            .expect("decodes")
            .expect("complete")
    }

    #[test]
    fn every_event_type_decodes() {
        let object = r#"{"kind":"ConfigMap","metadata":{"name":"a","uid":"u","resourceVersion":"5"},"data":{"k":"v"}}"#;
        for kind in ["ADDED", "MODIFIED"] {
            let Event::Applied(body) = plain(&format!(r#"{{"type":"{kind}","object":{object}}}"#))
            else {
                panic!("{kind} is applied");
            };
            assert_eq!(body["data"]["k"], "v");
        }
        let Event::Deleted(body) = plain(&format!(r#"{{"type":"DELETED","object":{object}}}"#))
        else {
            panic!("deleted");
        };
        assert_eq!(body["metadata"]["uid"], "u");
        let bookmark = r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","metadata":{"resourceVersion":"9"}}}"#;
        assert!(matches!(plain(bookmark), Event::Bookmark(v) if v == "9"));
        let error = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old","reason":"Expired","code":410}}"#;
        assert!(matches!(plain(error), Event::Error(s) if s.code == 410));
    }

    #[test]
    fn lines_written_otherwise_decode_the_same() {
        let cases = [
            r#"{"object":{"metadata":{"uid":"u","resourceVersion":"5"}},"type":"MODIFIED"}"#,
            r#"{ "type": "MODIFIED", "object": {"metadata":{"uid":"u","resourceVersion":"5"}} }"#,
            r#"{"type":"MODIFIED","object":{"metadata":{"uid":"u","resourceVersion":"5"}},"extra":{"a":1}}"#,
        ];
        for line in cases {
            let Event::Applied(body) = plain(line) else {
                panic!("{line} is applied");
            };
            assert_eq!(body["metadata"]["resourceVersion"], "5", "{line}");
        }
        // What follows the object is never taken for a part of it.
        for line in [
            r#"{"type":"ADDED","object":{"a":1},"object":{"a":2}}"#,
            r#"{"type":"ADDED","object":{"a":1},"type":"DELETED"}"#,
        ] {
            let result = decode(line, 1000, None::<(Offered, &mut Skip)>);
            assert!(
                matches!(result, Err(kube::Error::SerdeError(_))),
                "{line}: {result:?}"
            );
        }
    }

    #[test]
    fn a_skipped_object_is_not_decoded_and_gives_its_version() {
        let line = r#"{"type":"MODIFIED","object":{"metadata":{"uid":"u\u0031","resourceVersion":"7"},"spec":{}}}"#;
        let mut seen = Vec::new();
        let mut skip = |change: Change, uid: &str, version: &str| {
            seen.push((change, uid.to_owned(), version.to_owned()));
            true
        };
        let event = decode(line, 1000, Some((Offered::All, &mut skip))).expect("decodes");
        assert!(matches!(
            event,
            Some(Event::Skipped { change: Change::Modified, version }) if version == "7"
        ));
        assert_eq!(
            seen,
            [(Change::Modified, "u1".to_owned(), "7".to_owned())],
            "escapes are undone"
        );
    }

    #[test]
    fn objects_with_an_identity_are_offered_for_skipping_with_their_change() {
        let mut offered = Vec::new();
        let mut skip = |change: Change, _: &str, _: &str| {
            offered.push(change);
            change != Change::Modified
        };
        let deleted =
            r#"{"type":"DELETED","object":{"metadata":{"uid":"u","resourceVersion":"7"}}}"#;
        assert!(matches!(
            decode(deleted, 1000, Some((Offered::All, &mut skip))),
            Ok(Some(Event::Skipped {
                change: Change::Deleted,
                ..
            }))
        ));
        let added = r#"{"type":"ADDED","object":{"metadata":{"uid":"u","resourceVersion":"7"}}}"#;
        assert!(matches!(
            decode(added, 1000, Some((Offered::All, &mut skip))),
            Ok(Some(Event::Skipped {
                change: Change::Added,
                ..
            }))
        ));
        let modified =
            r#"{"type":"MODIFIED","object":{"metadata":{"uid":"u","resourceVersion":"7"}}}"#;
        assert!(matches!(
            decode(modified, 1000, Some((Offered::All, &mut skip))),
            Ok(Some(Event::Applied(_)))
        ));
        // Without a UID and a version, nothing is offered.
        let nameless = r#"{"type":"MODIFIED","object":{"metadata":{"resourceVersion":"7"}}}"#;
        assert!(matches!(
            decode(nameless, 1000, Some((Offered::All, &mut skip))),
            Ok(Some(Event::Applied(_)))
        ));
        let odd = r#"{"type":"DELETED","object":{"metadata":{"uid":5,"resourceVersion":"7"}}}"#;
        assert!(matches!(
            decode(odd, 1000, Some((Offered::All, &mut skip))),
            Ok(Some(Event::Deleted(_)))
        ));
        assert_eq!(offered, [Change::Deleted, Change::Added, Change::Modified]);
    }

    #[test]
    fn only_modified_events_are_offered_unless_all_are_asked_for() {
        let mut offered = 0;
        let mut skip = |_: Change, _: &str, _: &str| {
            offered += 1;
            true
        };
        let added = r#"{"type":"ADDED","object":{"metadata":{"uid":"u","resourceVersion":"7"}}}"#;
        assert!(matches!(
            decode(added, 1000, Some((Offered::Modified, &mut skip))),
            Ok(Some(Event::Applied(_)))
        ));
        let deleted =
            r#"{"type":"DELETED","object":{"metadata":{"uid":"u","resourceVersion":"7"}}}"#;
        assert!(matches!(
            decode(deleted, 1000, Some((Offered::Modified, &mut skip))),
            Ok(Some(Event::Deleted(_)))
        ));
        assert_eq!(offered, 0);
    }

    #[test]
    fn the_identity_of_an_object_is_read_without_decoding_it() {
        let identity = |text| {
            identity_of(text).map(|(uid, version)| (uid.into_owned(), version.map(Cow::into_owned)))
        };
        assert_eq!(
            identity(
                r#"{"spec":{"x":[1,2]},"metadata":{"name":"a","uid":"u\u0031","resourceVersion":"7"}}"#
            ),
            Some(("u1".to_owned(), Some("7".to_owned())))
        );
        assert_eq!(
            identity(r#"{"metadata":{"uid":"u1"}}"#),
            Some(("u1".to_owned(), None))
        );
        assert_eq!(identity(r#"{"metadata":{"name":"a"}}"#), None);
        assert_eq!(identity("not json"), None);
    }

    #[test]
    fn objects_that_do_not_decode_are_events_with_their_identity() {
        let deep = format!(
            r#"{{"metadata":{{"name":"a","uid":"u","resourceVersion":"7"}},"spec":{}1{}}}"#,
            "[".repeat(300),
            "]".repeat(300)
        );
        for (kind, deleted) in [("ADDED", false), ("MODIFIED", false), ("DELETED", true)] {
            let line = format!(r#"{{"type":"{kind}","object":{deep}}}"#);
            let event = decode(&line, 100, None::<(Offered, &mut Skip)>);
            let Ok(Some(Event::Undecodable {
                deleted: d,
                identity: Some(identity),
                reason,
            })) = event
            else {
                panic!("{kind}: {event:?}");
            };
            assert_eq!(d, deleted);
            assert_eq!(identity["metadata"]["uid"], "u");
            assert!(reason.as_str().contains("301 levels deep"), "{reason}");
        }
        // Within the limit, deeper than serde_json's own: decoded.
        let line = format!(r#"{{"type":"ADDED","object":{deep}}}"#);
        let event = decode(&line, 1000, None::<(Offered, &mut Skip)>);
        assert!(matches!(event, Ok(Some(Event::Applied(_)))), "{event:?}");
    }

    #[test]
    fn a_truncated_line_is_no_event() {
        let line = r#"{"type":"ADDED","object":{"metadata":{"uid":"u""#;
        assert!(matches!(
            decode(line, 1000, None::<(Offered, &mut Skip)>),
            Ok(None)
        ));
    }

    #[test]
    fn a_status_instead_of_an_event_is_an_api_error() {
        let line = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"forbidden","reason":"Forbidden","code":403}"#;
        assert!(
            matches!(decode(line, 1000, None::<(Offered, &mut Skip)>), Err(kube::Error::Api(s)) if s.code == 403)
        );
    }

    #[test]
    fn garbage_and_unknown_types_are_decoding_errors() {
        for line in [
            "not json",
            r#"{"type":"RENAMED","object":{}}"#,
            r#"{"type":"BOOKMARK","object":{"metadata":{}}}"#,
        ] {
            let result = decode(line, 1000, None::<(Offered, &mut Skip)>);
            assert!(
                matches!(result, Err(kube::Error::SerdeError(_))),
                "{line}: {result:?}"
            );
        }
    }
}
