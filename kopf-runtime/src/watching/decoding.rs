//! Object bodies from the API server's JSON text, whatever that text holds.
//!
//! One object must never stop the others: an object nested deeper than
//! serde_json's default limit of 128 levels still decodes (on a stack that
//! grows on the heap), up to [`WatchingSettings::max_depth`]; one that does
//! not decode at all keeps its identity, read from its metadata alone, so
//! that it is tracked by UID and its deletion is still noticed.
//!
//! # Guarantees
//!
//! - Text is never recursed into on the thread's own stack beyond 128
//!   levels: deeper objects are measured by a flat scan first, and decoded by
//!   a decoder whose stack grows on the heap.
//! - [`identity`] reads `metadata` of an object of any depth: the rest of
//!   the text is skipped by serde_json's iterative scanner.
//! - A reason for an undecodable object is short (see [`Undecodable`]): the
//!   body itself never reaches a log line.
//!
//! # Caveats
//!
//! The API server accepts objects up to 10,000 levels deep. Bodies reach
//! handlers as [`serde_json::Value`]s, whose clone, comparison and drop
//! recurse once per level: at 10,000 levels each of them overflows a 2 MiB
//! tokio worker stack (measured; about 1,500 levels is the limit of a debug
//! build). So the default limit is 1,000 levels, and deeper objects are
//! reported and skipped like any other undecodable object; an operator
//! whose threads have larger stacks may raise it.
//!
//! [`WatchingSettings::max_depth`]: crate::settings::WatchingSettings::max_depth

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// The default of [`WatchingSettings::max_depth`](crate::settings::WatchingSettings::max_depth).
pub(crate) const DEFAULT_MAX_DEPTH: usize = 1000;

/// The depth at which serde_json stops by itself.
const SERDE_JSON_DEPTH: usize = 128;

/// How much of a decoding error a report keeps.
const REASON_LIMIT: usize = 200;

/// Why an object's body could not be decoded: a short text, never the body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Undecodable(String);

impl Undecodable {
    fn new(reason: impl std::fmt::Display) -> Self {
        let mut text = reason.to_string();
        if text.len() > REASON_LIMIT {
            let mut end = REASON_LIMIT;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            text.push('…');
        }
        Self(text)
    }

    /// The reason, for logs and Events.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// Decodes an object's body from its JSON text: any depth up to
/// `max_depth` levels, and only a JSON object (with `metadata`, if any, an
/// object too).
///
/// # Errors
/// Malformed JSON, a body that is no object, or one nested deeper than
/// `max_depth`.
pub(crate) fn body(text: &str, max_depth: usize) -> Result<Value, Undecodable> {
    let value = from_str::<Value>(text, max_depth)?;
    match &value {
        Value::Object(map) if map.get("metadata").is_none_or(Value::is_object) => Ok(value),
        Value::Object(_) => Err(Undecodable::new("metadata is not an object")),
        _ => Err(Undecodable::new("the object is not a JSON object")),
    }
}

/// Decodes any `T` from JSON text nested at most `max_depth` levels.
///
/// # Errors
/// Malformed JSON, JSON that is no `T`, or JSON nested too deeply.
pub(crate) fn from_str<T: DeserializeOwned>(
    text: &str,
    max_depth: usize,
) -> Result<T, Undecodable> {
    // serde_json stops at its own limit; a lower one costs a scan.
    if max_depth < SERDE_JSON_DEPTH {
        check_depth(text, max_depth)?;
    }
    match serde_json::from_str::<T>(text) {
        Ok(value) => Ok(value),
        Err(error) if is_too_deep(&error) => deep(text, max_depth),
        Err(error) => Err(Undecodable::new(error)),
    }
}

/// Whether serde_json gave up for its own recursion limit.
fn is_too_deep(error: &serde_json::Error) -> bool {
    error.is_syntax() && error.to_string().starts_with("recursion limit exceeded")
}

/// Decodes text nested deeper than serde_json's own limit, on a stack that
/// grows on the heap, after a flat scan has found it no deeper than
/// `max_depth`.
fn deep<T: DeserializeOwned>(text: &str, max_depth: usize) -> Result<T, Undecodable> {
    check_depth(text, max_depth)?;
    let mut json = serde_json::Deserializer::from_str(text);
    json.disable_recursion_limit();
    let value =
        T::deserialize(serde_stacker::Deserializer::new(&mut json)).map_err(Undecodable::new)?;
    json.end().map_err(Undecodable::new)?;
    Ok(value)
}

/// Refuses text nested deeper than `max_depth`.
fn check_depth(text: &str, max_depth: usize) -> Result<(), Undecodable> {
    let depth = nesting(text);
    if depth > max_depth {
        return Err(Undecodable::new(format_args!(
            "nested {depth} levels deep, deeper than the {max_depth} this operator decodes \
             (settings.watching.max_depth)"
        )));
    }
    Ok(())
}

/// The deepest nesting of arrays and objects in JSON text, by a flat scan
/// (strings skipped, escapes included). Malformed text gives some depth;
/// the decoder then finds what is wrong with it.
pub(crate) fn nesting(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut bytes = text.bytes();
    while let Some(byte) = bytes.next() {
        match byte {
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'"' => {
                while let Some(byte) = bytes.next() {
                    match byte {
                        b'\\' => {
                            bytes.next();
                        }
                        b'"' => break,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    deepest
}

/// The head of an object's text: `apiVersion`, `kind` and the `metadata`
/// that identify it, read without decoding the rest (serde_json's scanner
/// skips it, at any depth). The one partial decoder of objects: the watch
/// reads an object's UID and version from it before deciding to decode the
/// object, and [`identity`] is what is left of an object that does not
/// decode.
///
/// Only `uid` and `resourceVersion` must be strings (or absent) for the
/// head to read; the other fields are kept as text, so that a malformed
/// one spoils only what reads it.
#[derive(Deserialize, Default)]
pub(crate) struct ObjectHead<'a> {
    #[serde(borrow, default, rename = "apiVersion")]
    api_version: Option<&'a RawValue>,
    #[serde(borrow, default)]
    kind: Option<&'a RawValue>,
    /// The object's metadata.
    #[serde(borrow, default)]
    pub(crate) metadata: HeadMetadata<'a>,
}

/// The `metadata` of an [`ObjectHead`].
#[derive(Deserialize, Default)]
pub(crate) struct HeadMetadata<'a> {
    /// `uid`.
    #[serde(borrow, default)]
    pub(crate) uid: Option<Cow<'a, str>>,
    /// `resourceVersion`.
    #[serde(borrow, default, rename = "resourceVersion")]
    pub(crate) resource_version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    namespace: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "deletionTimestamp")]
    deletion_timestamp: Option<&'a RawValue>,
    #[serde(borrow, default)]
    finalizers: Option<&'a RawValue>,
}

/// The string of a field kept as text: `Ok(None)` if absent or `null`,
/// `Err` if it is no string.
fn string(raw: Option<&RawValue>) -> Result<Option<String>, serde_json::Error> {
    raw.map(|raw| serde_json::from_str::<String>(raw.get()))
        .transpose()
}

/// The identity of an object (`apiVersion`, `kind`, and `metadata` with
/// `uid`, `name`, `namespace` and `resourceVersion`, and
/// `deletionTimestamp` and `finalizers` when well-formed) as a body,
/// whatever the rest of its text holds; `None` if `uid` or `name` is
/// missing, or any of the first is of the wrong type.
pub(crate) fn identity(text: &str) -> Option<Value> {
    let head: ObjectHead<'_> = serde_json::from_str(text).ok()?;
    let meta = head.metadata;
    let uid = meta.uid?;
    let name = string(meta.name).ok()??;
    let namespace = string(meta.namespace).ok()?;
    let api_version = string(head.api_version).ok()?;
    let kind = string(head.kind).ok()?;
    let mut metadata = Map::new();
    metadata.insert("name".into(), name.into());
    metadata.insert("uid".into(), uid.into());
    if let Some(namespace) = namespace {
        metadata.insert("namespace".into(), namespace.into());
    }
    if let Some(version) = meta.resource_version {
        metadata.insert("resourceVersion".into(), version.into());
    }
    if let Ok(Some(since)) = string(meta.deletion_timestamp) {
        metadata.insert("deletionTimestamp".into(), since.into());
    }
    let finalizers = meta.finalizers;
    if let Some(Ok(finalizers)) =
        finalizers.map(|raw| serde_json::from_str::<Vec<String>>(raw.get()))
    {
        metadata.insert("finalizers".into(), finalizers.into());
    }
    let mut object = Map::new();
    if let Some(api_version) = api_version {
        object.insert("apiVersion".into(), api_version.into());
    }
    if let Some(kind) = kind {
        object.insert("kind".into(), kind.into());
    }
    object.insert("metadata".into(), Value::Object(metadata));
    Some(Value::Object(object))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An object whose `spec` nests `levels` objects and arrays in turn.
    pub(crate) fn nested(levels: usize) -> String {
        let mut text =
            String::from(r#"{"metadata":{"name":"deep","uid":"u1","resourceVersion":"7"},"spec":"#);
        for level in 0..levels {
            text.push_str(if level % 2 == 0 { r#"{"a":"# } else { "[" });
        }
        text.push_str(r#""x]}\"""#);
        for level in (0..levels).rev() {
            text.push(if level % 2 == 0 { '}' } else { ']' });
        }
        text.push('}');
        text
    }

    #[test]
    fn shallow_objects_decode_as_serde_json_does() {
        let text = r#"{"metadata":{"name":"a"},"spec":{"k":[1,"v"]}}"#;
        assert_eq!(
            body(text, 1000),
            Ok(serde_json::from_str::<Value>(text).expect("valid"))
        );
    }

    #[test]
    fn objects_deeper_than_serde_jsons_limit_decode_up_to_the_setting() {
        let text = nested(900);
        assert_eq!(nesting(&text), 901);
        let value = body(&text, 1000).expect("decodes");
        let mut node = &value["spec"];
        for level in 0..900 {
            node = if level % 2 == 0 { &node["a"] } else { &node[0] };
        }
        assert_eq!(
            node, "x]}\"",
            "strings with brackets and escapes are not nesting"
        );
        // Dropped on a small stack, as the runtime's threads have.
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || drop(value))
            .expect("spawns")
            .join()
            .expect("drops without overflowing");
    }

    #[test]
    fn objects_deeper_than_the_setting_are_refused_with_a_short_reason() {
        let text = nested(20_000);
        let error = body(&text, 1000).expect_err("too deep");
        assert!(
            error.as_str().starts_with("nested 20001 levels deep"),
            "{error}"
        );
        assert!(error.as_str().len() <= REASON_LIMIT + '…'.len_utf8());
        let identity = identity(&text).expect("the identity is read at any depth");
        assert_eq!(
            identity,
            serde_json::json!({"metadata": {"name": "deep", "uid": "u1", "resourceVersion": "7"}})
        );
    }

    #[test]
    fn a_body_as_deep_as_the_default_limit_goes_through_a_small_stack() {
        use crate::persistence::diffbase::{DiffBaseStorage, diff};
        use crate::persistence::progress::ProgressStorage;
        // What processing does with a body, recursively: decode, build and
        // compare essences, diff them, store the diff-base, clone, drop.
        // All of it on the 2 MiB stack of a tokio worker (or a test thread).
        let text = nested(DEFAULT_MAX_DEPTH - 2);
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                let body = body(&text, DEFAULT_MAX_DEPTH).expect("decodes");
                let storage = DiffBaseStorage::default();
                let progress = ProgressStorage::default();
                let (old, new) = storage.essences(&body, &progress);
                assert!(old.is_none());
                let mut patch = serde_json::json!({});
                let encoded = storage.store(&body, &new, &mut patch);
                let mut stored = body.clone();
                stored["metadata"]["annotations"] =
                    serde_json::json!({"kopf.zalando.org/last-handled-configuration": encoded});
                let (old, new) = storage.essences(&stored, &progress);
                assert_eq!(old.as_ref(), Some(&new));
                assert!(diff(&new, &new).is_empty());
                drop((body, stored, old, new, patch));
            })
            .expect("spawns")
            .join()
            .expect("no stack overflow");
    }

    #[test]
    fn a_limit_below_serde_jsons_own_is_kept() {
        let text = nested(40);
        assert!(body(&text, 41).is_ok());
        let error = body(&text, 40).expect_err("too deep");
        assert!(
            error.as_str().starts_with("nested 41 levels deep"),
            "{error}"
        );
    }

    #[test]
    fn malformed_objects_are_refused_and_keep_their_identity_if_any() {
        for (text, reason) in [
            (r#"[1, 2]"#, "the object is not a JSON object"),
            (
                r#"{"metadata": ["not", "a", "map"]}"#,
                "metadata is not an object",
            ),
        ] {
            assert_eq!(body(text, 1000).map_err(|e| e.0), Err(reason.to_owned()));
        }
        let garbage = r#"{"metadata":{"name":"a","uid":"u"},"spec":{"k":tru}}"#;
        assert!(body(garbage, 1000).is_err());
        assert!(
            identity(garbage).is_none(),
            "the scanner stops at the garbage"
        );
        let nameless = r#"{"metadata":{"uid":"u"}}"#;
        assert!(identity(nameless).is_none());
        let numeric = r#"{"metadata":{"uid":5,"name":"a"}}"#;
        assert!(identity(numeric).is_none());
    }

    #[test]
    fn the_identity_says_whether_a_deletion_waits_on_finalizers() {
        let deleting = r#"{"metadata":{"name":"a","uid":"u","finalizers":["x/y"],
            "deletionTimestamp":"2026-01-01T00:00:00Z"},"spec":{"k":[]}}"#;
        let identity = identity(deleting).expect("an identity");
        assert_eq!(
            identity["metadata"]["finalizers"],
            serde_json::json!(["x/y"])
        );
        assert_eq!(
            identity["metadata"]["deletionTimestamp"],
            "2026-01-01T00:00:00Z"
        );
        // Malformed ones are left out, and spoil nothing else.
        let odd = r#"{"metadata":{"name":"a","uid":"u","finalizers":[1,{}],
            "deletionTimestamp":{"no":"time"}}}"#;
        let identity = self::identity(odd).expect("an identity");
        assert_eq!(
            identity["metadata"],
            serde_json::json!({"name": "a", "uid": "u"})
        );
    }

    #[test]
    fn a_head_reads_the_version_whatever_else_the_metadata_holds() {
        let text = r#"{"kind":7,"metadata":{"name":["odd"],"uid":"u","resourceVersion":"9"}}"#;
        let head: ObjectHead<'_> = serde_json::from_str(text).expect("a head");
        assert_eq!(head.metadata.uid.as_deref(), Some("u"));
        assert_eq!(head.metadata.resource_version.as_deref(), Some("9"));
        assert!(identity(text).is_none(), "no identity without a name");
        let typeless = r#"{"metadata":{"name":"a","uid":"u","namespace":null}}"#;
        assert_eq!(
            identity(typeless),
            Some(serde_json::json!({"metadata": {"name": "a", "uid": "u"}}))
        );
    }

    #[test]
    fn long_reasons_are_cut_on_a_character_boundary() {
        let reason = Undecodable::new("é".repeat(300));
        assert!(reason.as_str().ends_with('…'));
        assert!(reason.as_str().len() <= REASON_LIMIT + '…'.len_utf8());
    }
}
