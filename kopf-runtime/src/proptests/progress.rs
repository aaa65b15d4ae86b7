//! Progress records: what is stored reads back as the same record, as Kopf
//! stores and reads it.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::{config, merge};
use crate::persistence::progress::{
    ProgressRecord, ProgressStorage, format_timestamp, parse_timestamp,
};
use crate::settings::PersistenceSettings;

fn record() -> impl Strategy<Value = ProgressRecord> {
    let text = || proptest::option::of(".{0,24}");
    (
        (text(), text(), text(), text()),
        proptest::option::of(any::<u32>()),
        proptest::option::of(any::<bool>()),
        proptest::option::of(any::<bool>()),
        text(),
        proptest::option::of(proptest::collection::vec(".{0,12}", 0..4)),
    )
        .prop_map(
            |(
                (started, stopped, delayed, purpose),
                retries,
                success,
                failure,
                message,
                subrefs,
            )| {
                ProgressRecord {
                    started,
                    stopped,
                    delayed,
                    purpose,
                    retries,
                    success,
                    failure,
                    message,
                    subrefs,
                }
            },
        )
}

/// Handler ids: short and long, with the characters keys replace.
fn handler_id() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_]{1,20}",
        "[a-z_/<>.]{1,20}",
        "[a-zA-Z0-9_/<>.-]{40,120}",
        "[a-z]{1,10}/[a-z]{1,10}",
    ]
}

/// The owner references a body may have (a Deployment's ReplicaSet gets
/// its own keys).
fn owners() -> impl Strategy<Value = Value> {
    proptest::sample::select(vec![
        json!(null),
        json!([]),
        json!([{"kind": "Deployment", "apiVersion": "apps/v1", "name": "d", "uid": "u"}]),
        json!([{"kind": "Job", "apiVersion": "batch/v1", "name": "j", "uid": "u"}]),
    ])
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn a_stored_record_reads_back_as_it_was(
        record in record(),
        id in handler_id(),
        prefix in proptest::sample::select(vec!["kopf.zalando.org", "example.com", "a.b.c.example.org"]),
        v1 in any::<bool>(),
        kind in proptest::sample::select(vec!["KopfExample", "ReplicaSet"]),
        owners in owners(),
    ) {
        let storage = ProgressStorage::from_settings(&PersistenceSettings {
            progress_prefix: prefix.to_owned(),
            progress_v1_keys: v1,
            ..PersistenceSettings::default()
        });
        let mut body = json!({"kind": kind, "metadata": {"name": "n"}});
        if !owners.is_null() {
            body["metadata"]["ownerReferences"] = owners;
        }
        let mut patch = json!({});
        storage.store(&id, &record, &body, &mut patch);
        let mut patched = body.clone();
        merge(&mut patched, &patch);
        prop_assert_eq!(storage.fetch(&id, &patched), Some(record.clone()));
        // Kopf's form: a compact JSON object of the fields set, under keys
        // whose name part is at most 63 characters.
        let encoded = record.encode();
        let annotations = patched["metadata"]["annotations"].as_object().expect("stored");
        for (key, value) in annotations {
            let (_, name) = key.split_once('/').expect("a prefixed key");
            prop_assert!(name.chars().count() <= 63, "{}", key);
            if !key.ends_with("/kopf-managed") {
                prop_assert_eq!(value.as_str(), Some(encoded.as_str()));
            }
        }
        // Purged, it is gone.
        let mut purge = json!({});
        storage.purge(&id, &patched, &mut purge);
        merge(&mut patched, &purge);
        prop_assert_eq!(storage.fetch(&id, &patched), None);
    }

    #[test]
    fn a_record_decodes_from_its_encoding(record in record()) {
        let encoded = record.encode();
        prop_assert_eq!(serde_json::from_str::<ProgressRecord>(&encoded).ok(), Some(record));
    }

    #[test]
    fn arbitrary_annotations_never_panic(text in ".{0,64}", id in handler_id()) {
        let storage = ProgressStorage::default();
        let body = json!({"metadata": {"annotations": {
            storage.keys().v2_key(&id): text,
        }}, "status": {"kopf": {"progress": {id.clone(): text}}}});
        let _ = storage.fetch(&id, &body);
    }

    #[test]
    fn timestamps_round_trip_as_kopf_writes_them(
        seconds in -8_000_000_000i64..8_000_000_000,
        micros in 0i32..1_000_000,
    ) {
        let ts = jiff::Timestamp::new(seconds, micros * 1000).expect("in range");
        let text = format_timestamp(ts);
        prop_assert_eq!(parse_timestamp(&text), Some(ts));
        // Kopf also writes them naive, in UTC.
        let naive = text.strip_suffix("+00:00").expect("UTC");
        prop_assert_eq!(parse_timestamp(naive), Some(ts));
    }
}
