//! Handlers' progress records, stored on the objects exactly as Kopf does.
//!
//! Kopf (the default `SmartProgressStorage`) keeps one JSON record per
//! handler in an annotation `<prefix>/<key>` (prefix `kopf.zalando.org`), and
//! still reads (and purges, but never writes) the legacy location
//! `status.kopf.progress.<handler id>`. An operator migrated from Kopf finds
//! its records where Kopf left them, so half-done handlers are not re-run.
//!
//! Annotation keys follow Kopf's `StorageKeyFormingConvention`: `/` becomes
//! `.` and `<`/`>` become `_`; a **v2** key limits the name part to 63
//! characters, a **v1** key (still written while `progress_v1_keys` is on, as
//! Kopf does) limits the whole key to 63; longer names are cut and suffixed
//! with `-` and a BLAKE2b-32 hash in base64 (altchars `-.`). ReplicaSets owned
//! by Deployments get `-ofDRS` appended to every key, since Kubernetes copies
//! Deployment annotations onto them. Prefixes not starting with `kopf.` also
//! get the `<prefix>/kopf-managed: yes` marker, so other Kopf-based operators
//! recognise the annotations as operator state.
//!
//! Patches built here are JSON merge-patch fragments (`serde_json::Value`);
//! `null` removes a key.

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use hashbrown::HashMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::fields::{ensure_field, remove_field, resolve_field, resolve_field_mut};
use crate::settings::PersistenceSettings;

/// The kubectl annotation that never counts as part of an object's essence.
pub(crate) const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Markers that identify an annotation prefix as owned by a Kopf-based operator.
const KNOWN_MARKERS: &[&str] = &["kopf-managed"];
/// Prefixes that are always Kopf-based operators' state.
const KNOWN_PREFIXES: &[&str] = &["kopf.zalando.org"];
/// The maximum length of an annotation name (the part after `/`).
const MAX_NAME_LENGTH: usize = 63;

/// One handler's persisted state, field for field as Kopf's `ProgressRecord`.
///
/// Timestamps are ISO 8601 strings as Kopf writes them (UTC, microseconds,
/// with or without `+00:00`); see [`parse_timestamp`] and [`format_timestamp`].
/// Absent fields are not written (Kopf's non-verbose mode).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ProgressRecord {
    /// When the handler was first called.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started: Option<String>,
    /// When the handler finally succeeded or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// When the handler should be retried.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delayed: Option<String>,
    /// The reason (cause) the handler runs for: `create`, `update`, …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// How many times the handler was called so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// Finished successfully; never re-run in this cycle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub success: Option<bool>,
    /// Failed permanently; never re-run in this cycle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<bool>,
    /// The last error's message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Ids of the sub-handlers this handler spawned, sorted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subrefs: Option<Vec<String>>,
}

impl ProgressRecord {
    /// Whether the handler is done for this cycle (succeeded or failed).
    pub(crate) fn is_finished(&self) -> bool {
        self.success == Some(true) || self.failure == Some(true)
    }

    /// [`Self::started`], parsed.
    pub(crate) fn started_at(&self) -> Option<jiff::Timestamp> {
        self.started.as_deref().and_then(parse_timestamp)
    }

    /// [`Self::delayed`], parsed.
    pub(crate) fn delayed_until(&self) -> Option<jiff::Timestamp> {
        self.delayed.as_deref().and_then(parse_timestamp)
    }

    /// The compact JSON Kopf stores (no spaces, absent fields omitted).
    pub(crate) fn encode(&self) -> String {
        serde_json::to_string(self)
            .expect("invariant: a record of strings, ints and bools serializes")
    }
}

/// Parse a Kopf timestamp: ISO 8601 with an offset or `Z`, or naive (UTC).
pub(crate) fn parse_timestamp(text: &str) -> Option<jiff::Timestamp> {
    if let Ok(ts) = text.parse::<jiff::Timestamp>() {
        return Some(ts);
    }
    let civil = text.parse::<jiff::civil::DateTime>().ok()?;
    civil
        .to_zoned(jiff::tz::TimeZone::UTC)
        .ok()
        .map(|z| z.timestamp())
}

/// Format a timestamp as Kopf does: `2020-02-14T16:58:25.396364+00:00`.
pub(crate) fn format_timestamp(ts: jiff::Timestamp) -> String {
    // The civil time's own printer, microseconds by precision: no format
    // string to parse for every record.
    let utc = jiff::tz::TimeZone::UTC.to_datetime(ts);
    format!("{utc:.6}+00:00")
}

/// Kopf's annotation key forming (v1 and v2 keys, hash suffixes, markers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AnnotationKeys {
    prefix: String,
    v1: bool,
    /// Keys already formed, by marked name: forming them hashes and formats,
    /// and every processing of every object asks for the same few.
    formed: FormedKeys,
}

/// A cache of formed keys; clones share it.
#[derive(Clone, Default)]
struct FormedKeys(Arc<Mutex<HashMap<String, Arc<[String]>>>>);

/// Plenty for every handler id of an operator; a safety net only.
const FORMED_KEYS_LIMIT: usize = 4_096;

impl FormedKeys {
    fn get_or_form(&self, marked: &str, form: impl FnOnce(&str) -> Vec<String>) -> Arc<[String]> {
        let mut formed = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(keys) = formed.get(marked) {
            return Arc::clone(keys);
        }
        if formed.len() >= FORMED_KEYS_LIMIT {
            formed.clear();
        }
        let keys: Arc<[String]> = form(marked).into();
        formed.insert(marked.to_owned(), Arc::clone(&keys));
        keys
    }
}

impl fmt::Debug for FormedKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FormedKeys")
    }
}

/// A cache: any two are alike.
impl PartialEq for FormedKeys {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for FormedKeys {}

impl AnnotationKeys {
    /// Keys under `prefix` (e.g. `kopf.zalando.org`), also v1 keys if `v1`.
    pub(crate) fn new(prefix: impl Into<String>, v1: bool) -> Self {
        Self {
            prefix: prefix.into(),
            v1,
            formed: FormedKeys::default(),
        }
    }

    /// The prefix, without the `/`.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// All annotation keys for `name` on `body`: the v2 key first, then the
    /// v1 key if enabled and different.
    pub(crate) fn make_keys(&self, name: &str, body: &Value) -> Arc<[String]> {
        self.formed.get_or_form(&mark_key(name, body), |marked| {
            let v2 = self.v2_key(marked);
            let mut keys = vec![v2];
            if self.v1 {
                let v1 = self.v1_key(marked);
                if v1 != keys[0] {
                    keys.push(v1);
                }
            }
            keys
        })
    }

    /// Kopf's `make_v2_key`: only the name part is limited to 63 characters.
    pub(crate) fn v2_key(&self, key: &str) -> String {
        let suffix = if key.chars().count() > MAX_NAME_LENGTH {
            make_suffix(key)
        } else {
            String::new()
        };
        let limit = MAX_NAME_LENGTH.saturating_sub(suffix.len());
        let safe: String = make_safe_key(key).chars().take(limit).collect();
        format!("{}/{safe}{suffix}", self.prefix)
    }

    /// Kopf's `make_v1_key`: the whole key is limited to 63 characters.
    pub(crate) fn v1_key(&self, key: &str) -> String {
        let safe = make_safe_key(key);
        let prefix = format!("{}/", self.prefix);
        let room = MAX_NAME_LENGTH.saturating_sub(prefix.len());
        let suffix = if safe.chars().count() <= room {
            String::new()
        } else {
            make_suffix(&safe)
        };
        let cut: String = safe
            .chars()
            .take(room.saturating_sub(suffix.len()))
            .collect();
        format!("{prefix}{cut}{suffix}")
    }

    /// Add the `<prefix>/kopf-managed: yes` marker to `patch` unless the
    /// prefix is Kopf's own or the marker is there already.
    pub(crate) fn store_marker(&self, body: &Value, patch: &mut Value) {
        if self.prefix.is_empty() || self.prefix.starts_with("kopf.") {
            return;
        }
        let marker = format!("{}/kopf-managed", self.prefix);
        let path = ["metadata", "annotations", marker.as_str()];
        if resolve_field(body, &path).is_none() && resolve_field(patch, &path).is_none() {
            ensure_field(patch, &path, Value::String("yes".into()));
        }
    }
}

/// Kopf's `make_safe_key`: `/` → `.`, `<` and `>` → `_`.
pub(crate) fn make_safe_key(key: &str) -> String {
    key.chars()
        .map(|c| match c {
            '/' => '.',
            '<' | '>' => '_',
            c => c,
        })
        .collect()
}

/// Kopf's collision evasion: ReplicaSets owned by Deployments get `-ofDRS`.
fn mark_key<'a>(key: &'a str, body: &Value) -> Cow<'a, str> {
    // Only a ReplicaSet's owners are looked at.
    let is_rs = body.get("kind").and_then(Value::as_str) == Some("ReplicaSet");
    if is_rs
        && resolve_field(body, &["metadata", "ownerReferences"])
            .and_then(Value::as_array)
            .is_some_and(|owners| {
                owners
                    .iter()
                    .any(|o| o.get("kind").and_then(Value::as_str) == Some("Deployment"))
            })
    {
        Cow::Owned(format!("{key}-ofDRS"))
    } else {
        Cow::Borrowed(key)
    }
}

/// Kopf's `make_suffix`: `-` + base64(blake2b-32(key), altchars `-.`),
/// with trailing `=`, `-`, `.` stripped.
fn make_suffix(key: &str) -> String {
    let digest = blake2b::<4>(key.as_bytes());
    let encoded = base64_alt(&digest);
    format!("-{encoded}")
        .trim_end_matches(['=', '-', '.'])
        .to_owned()
}

/// Prefixes of annotations written by Kopf-based operators (any of them),
/// as Kopf's `_detect_marked_prefixes`.
pub(crate) fn detect_marked_prefixes<'a>(keys: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut prefixes: Vec<String> = Vec::new();
    for key in keys {
        let Some((prefix, name)) = key.split_once('/') else {
            continue;
        };
        let marked = KNOWN_MARKERS.contains(&name)
            || KNOWN_PREFIXES.contains(&prefix)
            || KNOWN_PREFIXES.iter().any(|p| {
                prefix
                    .strip_suffix(p)
                    .is_some_and(|head| head.ends_with('.'))
            });
        if marked && !prefixes.iter().any(|p| p == prefix) {
            prefixes.push(prefix.to_owned());
        }
    }
    prefixes
}

/// Remove empty `metadata.annotations`, `metadata.labels`, `metadata` and
/// `status` stanzas (Kopf's `remove_empty_stanzas`).
pub(crate) fn remove_empty_stanzas(essence: &mut Value) {
    let is_empty = |v: &Value| v.as_object().is_some_and(|m| m.is_empty()) || v.is_null();
    if let Some(meta) = essence.get_mut("metadata").and_then(Value::as_object_mut) {
        for stanza in ["annotations", "labels"] {
            if meta.get(stanza).is_some_and(is_empty) {
                meta.remove(stanza);
            }
        }
    }
    if let Some(obj) = essence.as_object_mut() {
        for stanza in ["metadata", "status"] {
            if obj.get(stanza).is_some_and(is_empty) {
                obj.remove(stanza);
            }
        }
    }
}

/// Where handlers' progress lives: Kopf's default `SmartProgressStorage`
/// (annotations read and written; `status.kopf.progress` read and purged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProgressStorage {
    keys: AnnotationKeys,
    touch_key: String,
}

/// Where Kopf's legacy progress records live: `status.kopf.progress.<id>`.
const STATUS_FIELD: [&str; 3] = ["status", "kopf", "progress"];

impl Default for ProgressStorage {
    fn default() -> Self {
        Self::from_settings(&PersistenceSettings::default())
    }
}

impl ProgressStorage {
    /// The storage as the persistence settings configure it.
    pub(crate) fn from_settings(settings: &PersistenceSettings) -> Self {
        Self {
            keys: AnnotationKeys::new(settings.progress_prefix.clone(), settings.progress_v1_keys),
            touch_key: "touch-dummy".into(),
        }
    }

    /// The key forming used for the annotations.
    pub(crate) fn keys(&self) -> &AnnotationKeys {
        &self.keys
    }

    /// The stored record of handler `id`, if any.
    ///
    /// Annotations (v2 key, then v1) come first, then the legacy
    /// `status.kopf.progress.<id>`. A record that is not a JSON object of the
    /// expected shape is logged as a warning and treated as absent.
    pub(crate) fn fetch(&self, id: &str, body: &Value) -> Option<ProgressRecord> {
        for key in self.keys.make_keys(id, body).iter() {
            let Some(encoded) = resolve_field(body, &["metadata", "annotations", key.as_str()])
            else {
                continue;
            };
            let Some(text) = encoded.as_str() else {
                tracing::warn!(annotation = %key, "ignoring a non-string progress annotation");
                continue;
            };
            match serde_json::from_str::<Option<ProgressRecord>>(text) {
                Ok(Some(record)) => return Some(record),
                Ok(None) => continue,
                Err(error) => {
                    tracing::warn!(annotation = %key, %error, "ignoring a malformed progress annotation");
                }
            }
        }
        let [status, kopf, progress] = STATUS_FIELD;
        let path = [status, kopf, progress, id];
        let value = resolve_field(body, &path)?;
        match serde_json::from_value::<Option<ProgressRecord>>(value.clone()) {
            Ok(record) => record,
            Err(error) => {
                tracing::warn!(field = %path.join("."), %error, "ignoring a malformed progress record");
                None
            }
        }
    }

    /// Write `record` of handler `id` into the merge `patch`.
    pub(crate) fn store(&self, id: &str, record: &ProgressRecord, body: &Value, patch: &mut Value) {
        let encoded = Value::String(record.encode());
        for key in self.keys.make_keys(id, body).iter() {
            ensure_field(
                patch,
                &["metadata", "annotations", key.as_str()],
                encoded.clone(),
            );
        }
        self.mark_managed(body, patch);
    }

    /// Mark this storage's annotation prefix as managed, as
    /// [`store`](Self::store) does (for a prefix other than Kopf's own):
    /// for a cause finished in the step that would store a record, whose
    /// records are purged instead.
    pub(crate) fn mark_managed(&self, body: &Value, patch: &mut Value) {
        self.keys.store_marker(body, patch);
    }

    /// Remove handler `id`'s record: `null` for what the body has, and drop
    /// what only the patch was about to add.
    pub(crate) fn purge(&self, id: &str, body: &Value, patch: &mut Value) {
        for key in self.keys.make_keys(id, body).iter() {
            purge_field(body, patch, &["metadata", "annotations", key.as_str()]);
        }
        let [status, kopf, progress] = STATUS_FIELD;
        purge_field(body, patch, &[status, kopf, progress, id]);
    }

    #[cfg(test)]
    /// Set (or with `None`, remove) the `touch-dummy` annotation if it differs
    /// from `value`; used to provoke a new watch event for the object.
    pub(crate) fn touch(&self, body: &Value, patch: &mut Value, value: Option<&str>) {
        for key in self.keys.make_keys(&self.touch_key, body).iter() {
            let path = ["metadata", "annotations", key.as_str()];
            let current = resolve_field(body, &path).and_then(Value::as_str);
            if current != value {
                let new = value.map_or(Value::Null, |v| Value::String(v.to_owned()));
                ensure_field(patch, &path, new);
                self.keys.store_marker(body, patch);
            }
        }
    }

    /// Remove this storage's own fields from an essence (Kopf's `clear`):
    /// every `<prefix>/…` annotation and `status.kopf.progress`.
    pub(crate) fn clear(&self, mut essence: Value) -> Value {
        let prefix = self.keys.prefix.as_str();
        if let Some(annotations) = resolve_field_mut(&mut essence, &["metadata", "annotations"])
            .and_then(Value::as_object_mut)
        {
            annotations.retain(|key, _| {
                !key.strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with('/'))
            });
        }
        // Once, at the end: removing the field makes no stanza non-empty.
        remove_field(&mut essence, &STATUS_FIELD);
        remove_empty_stanzas(&mut essence);
        essence
    }
}

/// `null` in the patch if the body has the field; otherwise drop it from the patch.
fn purge_field(body: &Value, patch: &mut Value, path: &[&str]) {
    if resolve_field(body, path).is_some() {
        ensure_field(patch, path, Value::Null);
    } else if resolve_field(patch, path).is_some() {
        remove_field(patch, path);
    }
}

/// Standard base64 with padding and Kopf's altchars `-` and `.`.
fn base64_alt(data: &[u8]) -> String {
    use base64::Engine as _;
    use base64::alphabet::Alphabet;
    use base64::engine::{GeneralPurpose, general_purpose::PAD};
    const ALPHABET: Alphabet =
        match Alphabet::new("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-.") {
            Ok(alphabet) => alphabet,
            Err(_) => panic!("invariant: 64 distinct printable characters"),
        };
    GeneralPurpose::new(&ALPHABET, PAD).encode(data)
}

/// BLAKE2b with an `N`-byte digest and no key, as Python's
/// `hashlib.blake2b(digest_size=N)`.
fn blake2b<const N: usize>(data: &[u8]) -> [u8; N] {
    use blake2::digest::{Update, VariableOutput};
    let mut hasher = blake2::Blake2bVar::new(N).expect("invariant: 1..=64 byte digests are valid");
    hasher.update(data);
    let mut out = [0u8; N];
    hasher
        .finalize_variable(&mut out)
        .expect("invariant: the buffer has the digest's size");
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_record_kopf_stored_is_fetched_and_purged() {
        let storage = ProgressStorage::default();
        let body = json!({"metadata": {"annotations": {
            "kopf.zalando.org/create_fn": r#"{"started":"2020-02-14T16:58:25.396364","retries":1}"#,
        }}});
        let record = storage.fetch("create_fn", &body).expect("stored by Kopf");
        assert_eq!(record.retries, Some(1));

        let mut patch = json!({});
        storage.purge("create_fn", &body, &mut patch);
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {"kopf.zalando.org/create_fn": null}}})
        );
    }

    fn hex<const N: usize>(bytes: [u8; N]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn blake2b_matches_python_hashlib() {
        assert_eq!(hex(blake2b::<4>(b"")), "1271cf25");
        assert_eq!(hex(blake2b::<4>(b"abc")), "63906248");
        assert_eq!(
            hex(blake2b::<4>(b"The quick brown fox jumps over the lazy dog")),
            "f1d38416"
        );
        let long: Vec<u8> = (0..200u8).collect();
        assert_eq!(hex(blake2b::<4>(&long)), "913cd807");
        assert_eq!(
            &hex(blake2b::<64>(b"abc"))[..32],
            "ba80a53f981c4d0d6a2797b69f12f6e9"
        );
    }

    #[test]
    fn suffix_matches_kopf() {
        assert_eq!(base64_alt(&[0x63, 0x90, 0x62, 0x48]), "Y5BiSA==");
        assert_eq!(make_suffix(&"x".repeat(100)), "-AqgtMg");
    }

    // Expected values computed with Kopf's own key-forming code.
    #[test]
    fn keys_match_kopf_for_short_ids() {
        let keys = AnnotationKeys::new("kopf.zalando.org", true);
        let body = json!({});
        assert_eq!(
            keys.make_keys("create_fn", &body)[..],
            ["kopf.zalando.org/create_fn"]
        );
        assert_eq!(
            keys.make_keys("update_fn/spec.field", &body)[..],
            ["kopf.zalando.org/update_fn.spec.field"]
        );
        assert_eq!(
            keys.make_keys("fn/sub<1>", &body)[..],
            ["kopf.zalando.org/fn.sub_1_"]
        );
    }

    #[test]
    fn keys_match_kopf_for_long_ids() {
        let keys = AnnotationKeys::new("kopf.zalando.org", true);
        let body = json!({});
        let a50 = "a".repeat(50);
        assert_eq!(
            keys.make_keys(&a50, &body)[..],
            [
                format!("kopf.zalando.org/{a50}"),
                format!("kopf.zalando.org/{}-koaVtw", "a".repeat(39))
            ]
        );
        assert_eq!(
            keys.make_keys(
                "handler_with_a_fairly_long_name/and/some/subhandlers/here/x",
                &body
            )[..],
            [
                "kopf.zalando.org/handler_with_a_fairly_long_name.and.some.subhandlers.here.x",
                "kopf.zalando.org/handler_with_a_fairly_long_name.and.som-wwyiKw",
            ]
        );
        let b70 = "b".repeat(70);
        assert_eq!(
            keys.make_keys(&b70, &body)[..],
            [
                format!("kopf.zalando.org/{}-HIAfAA", "b".repeat(56)),
                format!("kopf.zalando.org/{}-HIAfAA", "b".repeat(39)),
            ]
        );
        let v2_only = AnnotationKeys::new("kopf.zalando.org", false);
        assert_eq!(
            v2_only.make_keys(&a50, &body)[..],
            [format!("kopf.zalando.org/{a50}")]
        );
    }

    #[test]
    fn keys_of_deployment_replicasets_are_marked() {
        let keys = AnnotationKeys::new("kopf.zalando.org", false);
        let rs = json!({"kind": "ReplicaSet", "metadata": {"ownerReferences": [{"kind": "Deployment"}]}});
        assert_eq!(keys.make_keys("fn", &rs)[..], ["kopf.zalando.org/fn-ofDRS"]);
        let lone_rs = json!({"kind": "ReplicaSet", "metadata": {}});
        assert_eq!(keys.make_keys("fn", &lone_rs)[..], ["kopf.zalando.org/fn"]);
    }

    #[test]
    fn fetch_reads_kopf_annotation() {
        let storage = ProgressStorage::default();
        let body = json!({"metadata": {"annotations": {
            "kopf.zalando.org/create_fn_1": r#"{"started": "2020-02-14T16:58:25.396364", "stopped": "2020-02-14T16:58:25.401844", "retries": 1, "success": true}"#,
            "kopf.zalando.org/create_fn_2": r#"{"started":"2020-02-14T16:58:25.396421","retries":0,"purpose":"create","subrefs":["create_fn_2/a"],"unknown":1}"#,
        }}});
        let r1 = storage.fetch("create_fn_1", &body).expect("present");
        assert_eq!(r1.retries, Some(1));
        assert_eq!(r1.success, Some(true));
        assert!(r1.is_finished());
        assert_eq!(r1.stopped.as_deref(), Some("2020-02-14T16:58:25.401844"));
        let r2 = storage.fetch("create_fn_2", &body).expect("present");
        assert_eq!(r2.purpose.as_deref(), Some("create"));
        assert_eq!(r2.subrefs, Some(vec!["create_fn_2/a".to_string()]));
        assert!(!r2.is_finished());
        assert_eq!(storage.fetch("absent", &body), None);
    }

    #[test]
    fn fetch_falls_back_to_v1_key_then_status() {
        let storage = ProgressStorage::default();
        let a50 = "a".repeat(50);
        let v1 = format!("kopf.zalando.org/{}-koaVtw", "a".repeat(39));
        let body = json!({"metadata": {"annotations": {v1: r#"{"retries":3}"#}}});
        assert_eq!(storage.fetch(&a50, &body).and_then(|r| r.retries), Some(3));

        let body = json!({"status": {"kopf": {"progress": {"fn/sub": {"retries": 2, "message": "oops"}}}}});
        let record = storage
            .fetch("fn/sub", &body)
            .expect("legacy status record");
        assert_eq!(record.retries, Some(2));
        assert_eq!(record.message.as_deref(), Some("oops"));
    }

    #[test]
    fn malformed_records_are_absent_not_fatal() {
        let storage = ProgressStorage::default();
        for bad in ["not json", "[1,2]", r#"{"retries":"many"}"#, "null"] {
            let body = json!({"metadata": {"annotations": {"kopf.zalando.org/fn": bad}}});
            assert_eq!(storage.fetch("fn", &body), None, "{bad}");
        }
        let body = json!({"status": {"kopf": {"progress": {"fn": "garbage"}}}});
        assert_eq!(storage.fetch("fn", &body), None);
        let body = json!({"status": {"kopf": "garbage"}});
        assert_eq!(storage.fetch("fn", &body), None);
    }

    #[test]
    fn store_writes_compact_json_like_kopf() {
        let storage = ProgressStorage::default();
        let record = ProgressRecord {
            started: Some("2020-02-14T16:58:25.396364+00:00".into()),
            retries: Some(1),
            success: Some(true),
            purpose: Some("create".into()),
            ..ProgressRecord::default()
        };
        let mut patch = json!({});
        storage.store("create_fn", &record, &json!({}), &mut patch);
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {
                "kopf.zalando.org/create_fn":
                    r#"{"started":"2020-02-14T16:58:25.396364+00:00","purpose":"create","retries":1,"success":true}"#,
            }}})
        );
    }

    #[test]
    fn store_with_custom_prefix_adds_marker_once() {
        let settings = PersistenceSettings {
            progress_prefix: "example.com".into(),
            ..Default::default()
        };
        let storage = ProgressStorage::from_settings(&settings);
        let mut patch = json!({});
        storage.store("fn", &ProgressRecord::default(), &json!({}), &mut patch);
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {"example.com/fn": "{}", "example.com/kopf-managed": "yes"}}})
        );
        let marked = json!({"metadata": {"annotations": {"example.com/kopf-managed": "yes"}}});
        let mut patch = json!({});
        storage.store("fn", &ProgressRecord::default(), &marked, &mut patch);
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {"example.com/fn": "{}"}}})
        );
    }

    #[test]
    fn purge_nulls_present_and_drops_pending() {
        let storage = ProgressStorage::default();
        let body = json!({
            "metadata": {"annotations": {"kopf.zalando.org/a": "{}"}},
            "status": {"kopf": {"progress": {"a": {"retries": 1}}}},
        });
        let mut patch = json!({"metadata": {"annotations": {"kopf.zalando.org/b": "{}"}}});
        storage.purge("a", &body, &mut patch);
        storage.purge("b", &body, &mut patch);
        assert_eq!(
            patch,
            json!({
                "metadata": {"annotations": {"kopf.zalando.org/a": null}},
                "status": {"kopf": {"progress": {"a": null}}},
            })
        );
    }

    #[test]
    fn touch_sets_only_when_different() {
        let storage = ProgressStorage::default();
        let mut patch = json!({});
        storage.touch(&json!({}), &mut patch, Some("x"));
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {"kopf.zalando.org/touch-dummy": "x"}}})
        );
        let body = json!({"metadata": {"annotations": {"kopf.zalando.org/touch-dummy": "x"}}});
        let mut patch = json!({});
        storage.touch(&body, &mut patch, Some("x"));
        assert_eq!(patch, json!({}));
        storage.touch(&body, &mut patch, None);
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {"kopf.zalando.org/touch-dummy": null}}})
        );
    }

    #[test]
    fn clear_removes_own_annotations_and_status() {
        let storage = ProgressStorage::default();
        let essence = json!({
            "metadata": {"annotations": {"kopf.zalando.org/fn": "{}", "other": "x"}},
            "spec": {"a": 1},
            "status": {"kopf": {"progress": {"fn": {}}}},
        });
        assert_eq!(
            storage.clear(essence),
            json!({"metadata": {"annotations": {"other": "x"}}, "spec": {"a": 1}})
        );
    }

    #[test]
    fn timestamps_are_formatted_with_microseconds_and_the_utc_offset() {
        for (text, formatted) in [
            ("2020-02-14T16:58:25Z", "2020-02-14T16:58:25.000000+00:00"),
            (
                "2020-02-14T16:58:25.0000019Z",
                "2020-02-14T16:58:25.000001+00:00",
            ),
            (
                "1969-12-31T23:59:59.999999Z",
                "1969-12-31T23:59:59.999999+00:00",
            ),
            ("0001-01-01T00:00:00Z", "0001-01-01T00:00:00.000000+00:00"),
            ("9999-12-30T21:59:59.5Z", "9999-12-30T21:59:59.500000+00:00"),
        ] {
            let ts: jiff::Timestamp = text.parse().expect("valid RFC 3339");
            assert_eq!(format_timestamp(ts), formatted, "{text}");
            assert!(
                parse_timestamp(formatted).is_some(),
                "{formatted} parses back"
            );
        }
        // Years before 1 are written too (ISO 8601's extended years).
        let far = jiff::Timestamp::MIN;
        assert!(format_timestamp(far).ends_with("+00:00"));
    }

    #[test]
    fn timestamps_roundtrip_in_kopf_formats() {
        let naive = parse_timestamp("2020-02-14T16:58:25.396364").expect("naive is UTC");
        let aware = parse_timestamp("2020-02-14T16:58:25.396364+00:00").expect("aware");
        assert_eq!(naive, aware);
        assert_eq!(
            parse_timestamp("2020-02-14T16:58:25Z"),
            parse_timestamp("2020-02-14T16:58:25")
        );
        assert_eq!(format_timestamp(aware), "2020-02-14T16:58:25.396364+00:00");
        assert_eq!(parse_timestamp("yesterday"), None);
        let record = ProgressRecord {
            delayed: Some("2020-02-14T16:58:25.396364".into()),
            ..Default::default()
        };
        assert_eq!(record.delayed_until(), Some(aware));
    }

    #[test]
    fn marked_prefixes_are_detected() {
        let keys = [
            "kopf.zalando.org/x",
            "example.com/kopf-managed",
            "example.com/y",
            "my.kopf.zalando.org/z",
            "other.org/a",
            "plain",
        ];
        let prefixes = detect_marked_prefixes(keys);
        assert_eq!(
            prefixes,
            ["kopf.zalando.org", "example.com", "my.kopf.zalando.org"]
        );
    }
}
