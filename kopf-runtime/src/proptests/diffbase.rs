//! Essences and diffs: Kopf's semantics, and the diff-base read back as stored.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::{config, json, merge, object};
use crate::model::kwargs::DiffOp;
use crate::persistence::diffbase::{DiffBaseStorage, diff};
use crate::persistence::progress::ProgressStorage;
use crate::settings::PersistenceSettings;

/// `value` without `null` members in its objects (`null` means absent to a
/// diff), down through objects only: lists compare whole.
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Sets (or with `None`, removes) the value at `path`, through objects.
fn set(doc: &mut Value, path: &[String], value: Option<Value>) {
    let Some((last, parents)) = path.split_last() else {
        *doc = value.unwrap_or(Value::Null);
        return;
    };
    let mut current = doc;
    for key in parents {
        current = current
            .as_object_mut()
            .expect("a diff walks through objects only")
            .entry(key.clone())
            .or_insert_with(|| json!({}));
    }
    let map = current
        .as_object_mut()
        .expect("a diff walks through objects only");
    match value {
        Some(value) => {
            map.insert(last.clone(), value);
        }
        None => {
            map.remove(last);
        }
    }
}

/// Annotation keys: plain ones, kubectl's, and those of Kopf-based operators.
fn annotation_key() -> impl Strategy<Value = String> {
    proptest::sample::select(vec![
        "app",
        "example.com/x",
        "example.com/state",
        "example.com/kopf-managed",
        "other.kopf.zalando.org/x",
        "kopf.zalando.org/create_fn",
        "kopf.zalando.org/last-handled-configuration",
        "kopf.zalando.org/touch-dummy",
        "kubectl.kubernetes.io/last-applied-configuration",
        "kopf.zalando.org.example/x",
        "xkopf.zalando.org/y",
    ])
    .prop_map(String::from)
}

/// Bodies of arbitrary content with the fields an essence is made of or
/// leaves out.
fn body() -> impl Strategy<Value = Value> {
    (
        object(),
        proptest::option::of(json()),
        proptest::option::of(proptest::collection::btree_map(".{0,4}", ".{0,4}", 0..3)),
        proptest::option::of(proptest::collection::btree_map(
            annotation_key(),
            ".{0,8}",
            0..6,
        )),
        proptest::option::of(object()),
        any::<bool>(),
    )
        .prop_map(|(fields, spec, labels, annotations, status, typed)| {
            let mut body = fields;
            let map = body.as_object_mut().expect("an object");
            if let Some(spec) = spec {
                map.insert("spec".into(), spec);
            }
            if let Some(status) = status {
                map.insert("status".into(), status);
            }
            if typed {
                map.insert("apiVersion".into(), json!("kopf.dev/v1"));
                map.insert("kind".into(), json!("KopfExample"));
            }
            let mut metadata = Map::new();
            metadata.insert("name".into(), json!("n"));
            if let Some(labels) = labels {
                metadata.insert("labels".into(), json!(labels));
            }
            if let Some(annotations) = annotations {
                metadata.insert("annotations".into(), json!(annotations));
            }
            map.insert("metadata".into(), Value::Object(metadata));
            body
        })
}

/// The settings: Kopf's prefix or another, with or without v1 keys.
fn storages() -> impl Strategy<Value = (DiffBaseStorage, ProgressStorage)> {
    (
        proptest::sample::select(vec!["kopf.zalando.org", "example.com", "op.example.org"]),
        any::<bool>(),
    )
        .prop_map(|(prefix, v1)| {
            let settings = PersistenceSettings {
                progress_prefix: prefix.to_owned(),
                diffbase_key: format!("{prefix}/last-handled-configuration"),
                progress_v1_keys: v1,
                ..PersistenceSettings::default()
            };
            (
                DiffBaseStorage::from_settings(&settings),
                ProgressStorage::from_settings(&settings),
            )
        })
}

/// Handlers' fields an essence keeps besides its own (some it keeps anyway).
const EXTRA_FIELDS: &[&[&str]] = &[
    &[],
    &["status.a"],
    &["status.b.c", "metadata.generation", "spec.a"],
    &["status", "metadata.labels.x"],
    &["metadata.annotations", "kind"],
];

/// [`storages`] keeping the fields of some handlers in their essences, and
/// those fields.
fn storages_with_extra_fields()
-> impl Strategy<Value = (DiffBaseStorage, ProgressStorage, &'static [&'static str])> {
    (storages(), proptest::sample::select(EXTRA_FIELDS.to_vec())).prop_map(
        |((storage, progress), fields)| (storage.with_extra_fields(fields), progress, fields),
    )
}

/// Whether the merge `patch` sets or removes anything at or under one of
/// `fields`.
fn touches_any(patch: &Value, fields: &[&str]) -> bool {
    fields.iter().any(|field| {
        let mut node = patch;
        for key in field.split('.') {
            match node.as_object() {
                Some(map) => match map.get(key) {
                    Some(child) => node = child,
                    None => return false,
                },
                None => return true,
            }
        }
        true
    })
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn an_object_differs_from_itself_in_nothing(a in json()) {
        prop_assert!(diff(&a, &a).is_empty());
    }

    #[test]
    fn applying_a_diff_turns_one_object_into_the_other(a in object(), b in object()) {
        let d = diff(&a, &b);
        let mut patched = a.clone();
        for item in d.items() {
            match item.op {
                DiffOp::Add | DiffOp::Change => set(&mut patched, &item.field, item.new.clone()),
                DiffOp::Remove => set(&mut patched, &item.field, None),
            }
        }
        prop_assert_eq!(without_nulls(&patched), without_nulls(&b), "{:?}", d);
        prop_assert_eq!(d.is_empty(), without_nulls(&a) == without_nulls(&b));
    }

    #[test]
    fn the_essence_leaves_out_what_handlers_do_not_care_about(
        body in body(),
        (storage, progress) in storages(),
    ) {
        let (_, essence) = storage.essences(&body, &progress);
        let map = essence.as_object().expect("an object");
        for key in ["status", "apiVersion", "kind"] {
            prop_assert!(!map.contains_key(key), "{} in {}", key, essence);
        }
        if let Some(metadata) = map.get("metadata").and_then(Value::as_object) {
            prop_assert!(metadata.keys().all(|k| k == "labels" || k == "annotations"), "{}", essence);
        }
        let annotations = essence
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .into_iter()
            .flatten();
        // Prefixes marked as operators' state: Kopf's own, the storage's,
        // and those with a `kopf-managed` marker on the body.
        let marked: Vec<&str> = body
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(key, _)| key.strip_suffix("/kopf-managed"))
            .chain([progress.keys().prefix()])
            .collect();
        for (key, _) in annotations {
            let prefix = key.split_once('/').map_or("", |(prefix, _)| prefix);
            prop_assert!(
                prefix != "kopf.zalando.org"
                    && !prefix.ends_with(".kopf.zalando.org")
                    && !marked.contains(&prefix)
                    && key != "kubectl.kubernetes.io/last-applied-configuration",
                "{} in {}",
                key,
                essence
            );
        }
    }

    #[test]
    fn a_stored_essence_reads_back_as_it_was(
        body in body(),
        (storage, progress, _) in storages_with_extra_fields(),
    ) {
        let (_, essence) = storage.essences(&body, &progress);
        let mut patch = json!({});
        let encoded = storage.store(&body, &essence, &mut patch);
        let mut patched = body.clone();
        merge(&mut patched, &patch);
        prop_assert!(storage.holds(&patched, &encoded));
        // Kopf's format: compact JSON, ASCII only, and a newline.
        prop_assert!(encoded.is_ascii(), "{}", encoded);
        let text = encoded.strip_suffix('\n').expect("a trailing newline");
        prop_assert_eq!(serde_json::from_str::<Value>(text).ok(), Some(essence.clone()));
        let (old, new) = storage.essences(&patched, &progress);
        prop_assert_eq!(old.as_ref(), Some(&essence));
        prop_assert_eq!(&new, &essence);
        prop_assert!(diff(&essence, &new).is_empty());
    }
}

proptest! {
    // Each case builds, digests and parses a few hundred KiB.
    #![proptest_config(config(24))]

    #[test]
    fn an_oversized_essence_stored_as_digests_reads_back_when_nothing_changed(
        body in body(),
        sizes in proptest::collection::vec(0usize..200 * 1024, 1..5),
        ballast in 0usize..240 * 1024,
        (storage, progress, _) in storages_with_extra_fields(),
        changed in proptest::option::of(any::<usize>()),
    ) {
        let mut body = body;
        for (i, size) in sizes.iter().enumerate() {
            body["spec"] = if body["spec"].is_object() { body["spec"].take() } else { json!({}) };
            body["spec"][format!("big{i}")] = json!("x".repeat(*size));
        }
        body["metadata"]["annotations"]["example.org/ballast"] = json!("y".repeat(ballast));
        let (_, essence) = storage.essences(&body, &progress);
        let mut patch = json!({});
        let encoded = storage.store(&body, &essence, &mut patch);
        let mut patched = body.clone();
        merge(&mut patched, &patch);
        let (old, new) = storage.essences(&patched, &progress);
        prop_assert_eq!(old.as_ref(), Some(&essence), "stored {} bytes", encoded.len());
        prop_assert_eq!(&new, &essence);

        // A value changed since: the diff finds it (its old side maybe a digest).
        if let Some(pick) = changed {
            let i = pick % sizes.len();
            patched["spec"][format!("big{i}")] = json!("changed");
            let (old, new) = storage.essences(&patched, &progress);
            let d = diff(&old.expect("stored"), &new);
            prop_assert_eq!(d.len(), 1, "{:?}", d);
            let field = vec!["spec".to_owned(), format!("big{i}")];
            prop_assert_eq!(&d.items()[0].field, &field);
        }
    }
}

/// Changes an operator and others make to an object between two versions.
#[derive(Debug, Clone)]
enum Change {
    /// A progress record stored for a handler.
    Progress(String),
    /// The diff-base stored.
    DiffBase,
    /// The object touched to provoke an event.
    Touch(Option<String>),
    /// A field of the status set.
    Status(String, Value),
    /// The version bumped.
    Version(u32),
    /// A finalizer added.
    Finalizer(String),
    /// A field of the spec set.
    Spec(String, Value),
    /// A label set.
    Label(String, String),
    /// An annotation set.
    Annotation(String, String),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        "[a-z_/]{1,70}".prop_map(Change::Progress),
        Just(Change::DiffBase),
        proptest::option::of("[a-z]{0,3}").prop_map(Change::Touch),
        (super::key(), json()).prop_map(|(k, v)| Change::Status(k, v)),
        any::<u32>().prop_map(Change::Version),
        "[a-z./]{1,12}".prop_map(Change::Finalizer),
        (super::key(), json()).prop_map(|(k, v)| Change::Spec(k, v)),
        ("[a-z]{1,3}", "[a-z]{0,3}").prop_map(|(k, v)| Change::Label(k, v)),
        (annotation_key(), "[a-z]{0,3}").prop_map(|(k, v)| Change::Annotation(k, v)),
    ]
}

/// The merge patch of one change to `body`, as the operator or another
/// client would send it.
fn patch_of(
    change: &Change,
    body: &Value,
    storage: &DiffBaseStorage,
    progress: &ProgressStorage,
) -> Value {
    let mut patch = json!({});
    match change {
        Change::Progress(id) => {
            let record = crate::persistence::progress::ProgressRecord {
                retries: Some(1),
                ..Default::default()
            };
            progress.store(id, &record, body, &mut patch);
        }
        Change::DiffBase => {
            let (_, essence) = storage.essences(body, progress);
            storage.store(body, &essence, &mut patch);
        }
        Change::Touch(value) => progress.touch(body, &mut patch, value.as_deref()),
        Change::Status(key, value) => patch = json!({"status": {key.as_str(): value}}),
        Change::Version(version) => {
            patch = json!({"metadata": {"resourceVersion": version.to_string()}})
        }
        Change::Finalizer(finalizer) => patch = json!({"metadata": {"finalizers": [finalizer]}}),
        Change::Spec(key, value) => patch = json!({"spec": {key.as_str(): value}}),
        Change::Label(key, value) => patch = json!({"metadata": {"labels": {key.as_str(): value}}}),
        Change::Annotation(key, value) => {
            patch = json!({"metadata": {"annotations": {key.as_str(): value}}})
        }
    }
    patch
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn the_operators_bookkeeping_leaves_the_essence_alone(
        body in body(),
        (storage, progress, fields) in storages_with_extra_fields(),
        changes in proptest::collection::vec(change(), 1..5),
    ) {
        let (_, before) = storage.essences(&body, &progress);
        let mut patched = body.clone();
        for change in &changes {
            let patch = patch_of(change, &patched, &storage, &progress);
            let bookkeeping = storage.only_bookkeeping(&patched, &patch, &progress);
            // Unless it reaches a field some handler watches.
            let operators = matches!(
                change,
                Change::Progress(_) | Change::DiffBase | Change::Touch(_) | Change::Status(..)
                    | Change::Version(_) | Change::Finalizer(_)
            ) && !touches_any(&patch, fields);
            prop_assert!(bookkeeping || !operators, "{:?} is bookkeeping: {}", change, patch);
            let unpatched = patched.clone();
            merge(&mut patched, &patch);
            if bookkeeping {
                let (_, old) = storage.essences(&unpatched, &progress);
                let (_, new) = storage.essences(&patched, &progress);
                prop_assert_eq!(old, new, "{:?} changed the essence: {}", change, patch);
            }
        }
        let watched = |c: &Change| fields.iter().any(|f| {
            matches!(c, Change::Status(..)) && f.starts_with("status")
                || matches!(c, Change::Finalizer(_) | Change::Version(_)) && f.starts_with("metadata.")
                    && !f.starts_with("metadata.labels")
                || matches!(c, Change::Progress(_) | Change::DiffBase | Change::Touch(_))
                    && f.starts_with("metadata.annotations")
        });
        if changes.iter().all(|c| {
            !matches!(c, Change::Spec(..) | Change::Label(..) | Change::Annotation(..)) && !watched(c)
        }) {
            let (_, after) = storage.essences(&patched, &progress);
            prop_assert_eq!(&after, &before);
        }
    }

    #[test]
    fn objects_said_to_have_the_same_essence_have_it(
        body in body(),
        (storage, progress, _) in storages_with_extra_fields(),
        changes in proptest::collection::vec(change(), 0..4),
    ) {
        let mut other = body.clone();
        for change in &changes {
            let patch = patch_of(change, &other, &storage, &progress);
            merge(&mut other, &patch);
        }
        if storage.same_essence(&body, &other, &progress) {
            let (_, a) = storage.essences(&body, &progress);
            let (_, b) = storage.essences(&other, &progress);
            prop_assert_eq!(a, b, "after {:?}", changes);
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn a_diff_reads_back_from_kopfs_wire_form(a in json(), b in json()) {
        let d = diff(&a, &b);
        let wire = serde_json::to_value(&d).expect("serializes");
        for item in wire.as_array().expect("a list") {
            let tuple = item.as_array().expect("a tuple");
            prop_assert_eq!(tuple.len(), 4);
            prop_assert!(tuple[1].is_array());
        }
        let back: crate::model::kwargs::Diff = serde_json::from_value(wire).expect("deserializes");
        prop_assert_eq!(back, d);
    }

    #[test]
    fn a_reduced_diff_is_the_diff_of_the_field(
        a in object(),
        b in object(),
        field in proptest::collection::vec(super::key(), 0..3),
    ) {
        let field: Vec<&str> = field.iter().map(String::as_str).collect();
        let reduced = diff(&a, &b).reduce(&field);
        let resolve = |v| crate::fields::resolve_field(v, &field);
        let direct = crate::model::kwargs::Diff::between(resolve(&a), resolve(&b));
        prop_assert_eq!(reduced, direct);
    }
}
