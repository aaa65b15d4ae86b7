//! `#[index]` handlers: their indexes follow the objects (creation, update,
//! filters, deletion by event and after a watch gap), and the handlers that
//! take an index wait until it is filled at start-up.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use kopf_runtime::{Error, Index, Kwargs, PRESENT, Registry, ResourceRef};
use kopf_testing::{Emulator, FailRule};
use kopf_tests::{
    Calls, Running, capture_logs, configmaps, create, eventually, logs, raw_api, test_settings,
};
use kube::api::{ApiResource, DeleteParams, Patch, PatchParams};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

fn cms() -> ResourceRef {
    ResourceRef::dynamic("", "v1", "configmaps")
}

fn secrets() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&())
}

/// Where a handler that takes the index leaves it for the test to read.
type Slot = Arc<Mutex<Option<Index>>>;

/// The index `by_label`: each ConfigMap labelled `indexed` under every
/// other label of it, as `key=value`; and an event handler that hands the
/// index to the test.
fn by_label(slot: &Slot) -> Registry {
    let slot = Arc::clone(slot);
    Registry::builder()
        .index(cms(), "by_label", |kw: Kwargs| async move {
            let labels = kw.labels().as_object().cloned().unwrap_or_default();
            let keys: serde_json::Map<String, Value> = labels
                .iter()
                .filter(|(key, _)| *key != "indexed")
                .map(|(key, value)| {
                    let key = format!("{key}={}", value.as_str().unwrap_or_default());
                    (key, json!(kw.name()))
                })
                .collect();
            Ok::<_, Error>(Value::Object(keys))
        })
        .label("indexed", PRESENT)
        .on_event(cms(), "reader", move |kw: Kwargs| {
            let slot = Arc::clone(&slot);
            async move {
                let index = kw.indexes.get("by_label").cloned();
                *slot.lock().expect("slot") = index;
                Ok::<_, Error>(())
            }
        })
        .uses_index("by_label".into())
        .build()
        .expect("a valid registry")
}

/// The index, once a handler has handed it over.
async fn index_of(slot: &Slot) -> Index {
    eventually("a handler to take the index", || {
        let index = slot.lock().expect("slot").clone();
        async move { index }
    })
    .await
}

/// The index as `key → names`.
fn contents(index: &Index) -> Vec<(String, Vec<String>)> {
    index
        .iter()
        .map(|(key, store)| {
            let names = store
                .values()
                .map(|v| v.as_str().unwrap_or_default().to_owned())
                .collect();
            (key.unwrap_or_default(), names)
        })
        .collect()
}

/// Waits until the index holds exactly `expected`.
async fn until(index: &Index, what: &str, expected: &[(&str, &[&str])]) {
    let expected: Vec<(String, Vec<String>)> = expected
        .iter()
        .map(|(k, names)| {
            (
                (*k).to_owned(),
                names.iter().map(|n| (*n).to_owned()).collect(),
            )
        })
        .collect();
    eventually(what, || {
        let now = contents(index);
        let matches = now == expected;
        async move { matches.then_some(()) }
    })
    .await;
}

async fn configmap(emulator: &Emulator, name: &str, labels: Value) {
    create(
        emulator,
        &configmaps(),
        "default",
        name,
        json!({"metadata": {"labels": labels}}),
    )
    .await;
}

async fn relabel(emulator: &Emulator, name: &str, labels: Value) {
    let api = raw_api(emulator, &configmaps(), "default");
    let patch = Patch::Merge(json!({"metadata": {"labels": labels}}));
    api.patch(name, &PatchParams::default(), &patch)
        .await
        .unwrap_or_else(|e| panic!("relabelling {name}: {e}"));
}

#[tokio::test]
async fn an_index_follows_creations_updates_filters_and_deletions() {
    logs();
    let emulator = Emulator::start().await.expect("emulator");
    let slot = Slot::default();
    let operator = Running::start(&emulator, by_label(&slot));
    configmap(
        &emulator,
        "a",
        json!({"indexed": "", "team": "x", "tier": "web"}),
    )
    .await;
    let index = index_of(&slot).await;
    until(
        &index,
        "one object under two keys",
        &[("team=x", &["a"]), ("tier=web", &["a"])],
    )
    .await;

    configmap(&emulator, "b", json!({"indexed": "", "team": "x"})).await;
    configmap(&emulator, "unindexed", json!({"team": "x"})).await;
    until(
        &index,
        "two objects under one key",
        &[("team=x", &["a", "b"]), ("tier=web", &["a"])],
    )
    .await;

    relabel(&emulator, "a", json!({"team": "y", "tier": null})).await;
    until(&index, "a moved", &[("team=x", &["b"]), ("team=y", &["a"])]).await;

    relabel(&emulator, "b", json!({"indexed": null})).await;
    until(
        &index,
        "b no longer matching the filter",
        &[("team=y", &["a"])],
    )
    .await;

    let api = raw_api(&emulator, &configmaps(), "default");
    api.delete("a", &DeleteParams::default())
        .await
        .expect("deleted");
    until(&index, "a deleted", &[]).await;
    assert!(index.is_empty());
    operator.stop().await;
}

#[tokio::test]
async fn an_object_deleted_during_a_watch_gap_leaves_the_index() {
    logs();
    let emulator = Emulator::start().await.expect("emulator");
    let slot = Slot::default();
    let operator = Running::start(&emulator, by_label(&slot));
    configmap(&emulator, "gone", json!({"indexed": "", "team": "x"})).await;
    configmap(&emulator, "kept", json!({"indexed": "", "team": "x"})).await;
    let index = index_of(&slot).await;
    until(&index, "both indexed", &[("team=x", &["gone", "kept"])]).await;

    // Keep the operator from seeing the DELETED event: its watch and list
    // fail while the object is deleted, then the history is forgotten, so
    // that it re-lists and finds the object missing.
    let faults = emulator.faults();
    for verb in ["watch", "list"] {
        faults.fail_next(
            1_000_000,
            FailRule::status(500).verb(verb).path_contains("configmaps"),
        );
    }
    faults.drop_watches();
    eventually("a failed watch attempt", || {
        let failed = emulator
            .requests()
            .iter()
            .any(|r| r.verb == "watch" && r.path.contains("configmaps") && r.status == 500);
        async move { failed.then_some(()) }
    })
    .await;
    let api = raw_api(&emulator, &configmaps(), "default");
    api.delete("gone", &DeleteParams::default())
        .await
        .expect("deleted");
    faults.compact();
    faults.clear();
    until(&index, "the vanished object gone", &[("team=x", &["kept"])]).await;
    operator.stop().await;
}

/// What the typed index of Secrets holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Member {
    name: String,
}

#[tokio::test]
async fn a_handler_waits_until_the_index_it_takes_is_filled() {
    let (captured, _guard) = capture_logs();
    let emulator = Emulator::start().await.expect("emulator");
    for name in ["s1", "s2"] {
        let labels = json!({"metadata": {"labels": {"team": "x"}}});
        create(&emulator, &secrets(), "default", name, labels).await;
    }
    create(&emulator, &configmaps(), "default", "reader", json!({})).await;
    // The listing of Secrets, which fills the index, is held back.
    let held = emulator.faults().hold(Some("list"), Some("secrets"));

    let calls = Calls::default();
    let recorded = calls.clone();
    let registry = Registry::builder()
        .index(
            ResourceRef::dynamic("", "v1", "secrets"),
            "members",
            |kw: Kwargs| async move {
                let team = kw.label("team").unwrap_or_default().to_owned();
                Ok::<_, Error>(
                    json!({ team: Member { name: kw.name().unwrap_or_default().into() } }),
                )
            },
        )
        .on_create(cms(), "reader", move |kw: Kwargs| {
            let calls = recorded.clone();
            async move {
                let members: Index<Member> = kw
                    .indexes
                    .get("members")
                    .map(Index::typed)
                    .expect("the index");
                let team = members.get(Some("x")).map(|s| s.to_vec()).transpose()?;
                calls.push("reader", json!(team.unwrap_or_default()));
                Ok::<_, Error>(())
            }
        })
        .uses_index("members".into())
        .build()
        .expect("a valid registry");
    let operator = Running::start_with(&emulator, registry, test_settings());

    // The reader's object is listed and due (or, were it not held back,
    // handled) while the Secrets are not listed yet.
    eventually("the reader due while the index is unfilled", || {
        let due = captured
            .text()
            .contains("Waiting for the indexes to be filled")
            || !calls.named("reader").is_empty();
        let unfilled = held.waiting() > 0;
        async move { (due && unfilled).then_some(()) }
    })
    .await;
    assert!(
        calls.named("reader").is_empty(),
        "the reader ran with the index unfilled: {:?}",
        calls.all()
    );

    held.release();
    let seen = calls.wait_for("reader", 1).await;
    let names: BTreeSet<String> = serde_json::from_value::<Vec<Member>>(seen[0].clone())
        .expect("members")
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(names, BTreeSet::from(["s1".into(), "s2".into()]));
    operator.stop().await;
}
