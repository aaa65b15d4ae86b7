//! Objects that the operator cannot decode (here: nested deeper than its
//! `settings.watching.max_depth`): each is reported once, skipped, and never
//! holds back the other objects of its resource; its deletion is still
//! noticed from its identity, so its timers stop. Objects nested deeper than
//! serde_json's own limit of 128 levels, but within the setting, are served.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Event;
use kopf_runtime::{Error, Kwargs, Registry, RegistryBuilder, ResourceRef};
use kopf_testing::Emulator;
use kopf_tests::{
    Calls, CapturedLogs, Running, capture_logs, create, eventually, raw_api, test_settings,
};
use kube::Api;
use kube::api::{ApiResource, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

/// Objects that decode, served beside the poisoned ones.
const GOOD: usize = 100;
/// The timers' interval.
const TICK: Duration = Duration::from_millis(200);
/// The operator's decoding limit in these tests, below the emulator's.
const MAX_DEPTH: usize = 64;
/// What the operator logs when it skips an object.
const SKIPPED: &str = "skipping an object that cannot be decoded";

fn widgets() -> ApiResource {
    ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}

/// An emulator serving the widgets.
async fn widget_emulator() -> Emulator {
    Emulator::builder()
        .crd("example.com", "v1", "widgets", "Widget", true)
        .start()
        .await
        .expect("emulator starts")
}

/// A value nesting `levels` objects.
fn nested(levels: usize) -> Value {
    (0..levels).fold(json!("bottom"), |inner, _| json!({ "a": inner }))
}

/// A timer on widgets without finalizers, recording `{name, uid}` per tick.
fn ticking(calls: &Calls) -> Registry {
    ticking_with(Registry::builder(), calls)
}

/// `builder` with [`ticking`]'s timer.
fn ticking_with(builder: RegistryBuilder, calls: &Calls) -> Registry {
    let calls = calls.clone();
    builder
        .timer(
            ResourceRef::dynamic("example.com", "v1", "widgets"),
            "tick",
            move |kw: Kwargs| {
                let calls = calls.clone();
                async move {
                    calls.push("tick", json!({"name": kw.name(), "uid": kw.uid()}));
                    Ok::<_, Error>(())
                }
            },
        )
        .interval(TICK)
        .no_finalizers()
        .build()
        .expect("a valid registry")
}

fn ticks_of(calls: &Calls, name: &str) -> usize {
    calls
        .named("tick")
        .iter()
        .filter(|c| c["name"] == name)
        .count()
}

async fn ticked(calls: &Calls, name: &str) {
    eventually(&format!("a tick of {name}"), || {
        let n = ticks_of(calls, name);
        async move { (n > 0).then_some(()) }
    })
    .await;
}

/// Waits until `n` more ticks of `name` than now were seen.
async fn more_ticks(calls: &Calls, name: &str, n: usize) {
    let before = ticks_of(calls, name);
    eventually(&format!("{n} more ticks of {name}"), || {
        let now = ticks_of(calls, name);
        async move { (now >= before + n).then_some(()) }
    })
    .await;
}

/// How often the log reports `default/name` as skipped.
fn reports(logs: &str, name: &str) -> usize {
    let object = format!("default/{name}");
    logs.lines()
        .filter(|l| l.contains(SKIPPED) && l.contains(&object))
        .count()
}

/// Waits until the log reports `default/name` as skipped.
async fn reported(logs: &CapturedLogs, name: &str) {
    eventually(&format!("the report of {name}"), || {
        let found = reports(&logs.text(), name) > 0;
        async move { found.then_some(()) }
    })
    .await;
}

/// Creates a widget that decodes.
async fn create_good(emulator: &Emulator, name: &str) {
    create(
        emulator,
        &widgets(),
        "default",
        name,
        json!({"spec": {"size": 1}}),
    )
    .await;
}

/// Makes the operator list the widgets again (history compacted, watches
/// dropped) and waits for its listing.
async fn relist(emulator: &Emulator) {
    emulator.clear_requests();
    emulator.faults().compact();
    emulator.faults().drop_watches();
    eventually("a re-list", || {
        let listed = emulator
            .requests()
            .iter()
            .any(|r| r.verb == "list" && r.path.contains("widgets") && r.status == 200);
        async move { listed.then_some(()) }
    })
    .await;
}

/// The operator's Events about `name` with `reason`.
async fn events_about(emulator: &Emulator, name: &str, reason: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(emulator.client(), "default");
    let list = events
        .list(&ListParams::default())
        .await
        .expect("events list");
    list.items
        .into_iter()
        .filter(|e| {
            e.involved_object.name.as_deref() == Some(name) && e.reason.as_deref() == Some(reason)
        })
        .collect()
}

#[tokio::test]
async fn poisoned_objects_are_reported_once_and_never_hold_back_the_others() {
    let (logs, _guard) = capture_logs();
    let emulator = widget_emulator().await;
    // Present at start: in the operator's first listing, among good ones.
    create(
        &emulator,
        &widgets(),
        "default",
        "poisoned-at-start",
        json!({"spec": nested(MAX_DEPTH + 20)}),
    )
    .await;
    let names: Vec<String> = (0..GOOD).map(|i| format!("good-{i:03}")).collect();
    futures::stream::iter(names.iter())
        .for_each_concurrent(8, |name| {
            let emulator = &emulator;
            async move {
                create(
                    emulator,
                    &widgets(),
                    "default",
                    name,
                    json!({"spec": {"size": 1}}),
                )
                .await;
            }
        })
        .await;

    let calls = Calls::default();
    let mut settings = test_settings();
    settings.watching.max_depth = MAX_DEPTH;
    settings.posting.enabled = true;
    let operator = Running::start_with(&emulator, ticking(&calls), settings);

    for name in &names {
        ticked(&calls, name).await;
    }
    reported(&logs, "poisoned-at-start").await;

    // Poisoned by a patch while served: the watch goes on past its event.
    create_good(&emulator, "poisoned-later").await;
    ticked(&calls, "poisoned-later").await;
    let api = raw_api(&emulator, &widgets(), "default");
    api.patch(
        "poisoned-later",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": nested(MAX_DEPTH + 20)})),
    )
    .await
    .expect("patched");
    reported(&logs, "poisoned-later").await;
    create_good(&emulator, "after").await;
    ticked(&calls, "after").await;

    // A re-list (history compacted, watches dropped) sees both again: they
    // are not reported again.
    relist(&emulator).await;
    create_good(&emulator, "after-relist").await;
    ticked(&calls, "after-relist").await;

    // Poisoned while served, its timer goes on with the last state that
    // decoded.
    more_ticks(&calls, "poisoned-later", 2).await;
    // Deleting it stops its timer: its DELETED event is read for its
    // identity. The task's end is counted; no tick of it comes after, while
    // the others tick on.
    let stopped_before = operator.task_counters().stopped;
    api.delete("poisoned-later", &DeleteParams::default())
        .await
        .expect("deleted");
    eventually("the timer of poisoned-later to stop", || {
        let stopped = operator.task_counters().stopped;
        async move { (stopped > stopped_before).then_some(()) }
    })
    .await;
    let last = ticks_of(&calls, "poisoned-later");
    more_ticks(&calls, "good-000", 3).await;
    assert_eq!(
        ticks_of(&calls, "poisoned-later"),
        last,
        "ticks after its end"
    );

    let logged = logs.text();
    assert_eq!(reports(&logged, "poisoned-at-start"), 1, "{logged}");
    assert_eq!(reports(&logged, "poisoned-later"), 1, "{logged}");
    assert_eq!(ticks_of(&calls, "poisoned-at-start"), 0);
    assert!(
        logged.lines().all(|l| l.len() < 2_000),
        "no log line carries a body"
    );
    for name in ["poisoned-at-start", "poisoned-later"] {
        let events = eventually(&format!("an Event about {name}"), || async {
            let events = events_about(&emulator, name, "Undecodable").await;
            (!events.is_empty()).then_some(events)
        })
        .await;
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].count.unwrap_or(1), 1, "{events:?}");
        let message = events[0].message.as_deref().unwrap_or_default();
        assert!(message.contains("levels deep"), "{message}");
    }
    assert!(operator.is_running(), "never a crash");
    operator.stop().await;
}

#[tokio::test]
async fn objects_deeper_than_serde_jsons_own_limit_are_served() {
    let emulator = widget_emulator().await;
    let calls = Calls::default();
    let (c, u) = (calls.clone(), calls.clone());
    // Change handlers too: the diff-base, as deep as the object, is read
    // back at every later event.
    let creating = Registry::builder()
        .on_create(
            ResourceRef::dynamic("example.com", "v1", "widgets"),
            "create",
            move |kw: Kwargs| {
                let calls = c.clone();
                async move {
                    calls.push("create", json!(kw.name()));
                    Ok::<_, Error>(())
                }
            },
        )
        .on_update(
            ResourceRef::dynamic("example.com", "v1", "widgets"),
            "update",
            move |kw: Kwargs| {
                let calls = u.clone();
                async move {
                    calls.push("update", serde_json::to_value(&kw.diff).unwrap_or_default());
                    Ok::<_, Error>(())
                }
            },
        );
    let operator = Running::start(&emulator, ticking_with(creating, &calls));
    // 300 levels: the watch event, the listing after a re-list, and the
    // deletion all carry it. (Sent as text: kube's typed answers stop at
    // serde_json's limit.)
    let body = json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "deep", "namespace": "default"},
        "spec": nested(300),
    });
    let request = http::Request::post("/apis/example.com/v1/namespaces/default/widgets")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).expect("serializes"))
        .expect("a request");
    emulator
        .client()
        .request_text(request)
        .await
        .expect("created");
    ticked(&calls, "deep").await;
    calls.wait_for("create", 1).await;
    // A later change is handled as a change, not as a creation again.
    let request = http::Request::patch("/apis/example.com/v1/namespaces/default/widgets/deep")
        .header("content-type", "application/merge-patch+json")
        .body(
            serde_json::to_vec(&json!({"metadata": {"labels": {"stage": "2"}}}))
                .expect("serializes"),
        )
        .expect("a request");
    emulator
        .client()
        .request_text(request)
        .await
        .expect("patched");
    let updates = calls.wait_for("update", 1).await;
    assert_eq!(
        updates,
        vec![json!([["add", ["metadata"], null, {"labels": {"stage": "2"}}]])]
    );
    assert_eq!(calls.named("create"), vec![json!("deep")]);
    relist(&emulator).await;
    more_ticks(&calls, "deep", 2).await;
    let stopped_before = operator.task_counters().stopped;
    raw_api(&emulator, &widgets(), "default")
        .delete("deep", &DeleteParams::default())
        .await
        .expect("deleted");
    eventually("the timer of deep to stop", || {
        let stopped = operator.task_counters().stopped;
        async move { (stopped > stopped_before).then_some(()) }
    })
    .await;
    assert!(operator.is_running(), "never a crash");
    operator.stop().await;
}

/// An object poisoned while it holds the operator's finalizer: its
/// deletion waits for the finalizer, which is reported with how to go on,
/// and goes through, with its handler, once the object decodes again.
#[tokio::test]
async fn a_poisoned_objects_deletion_waits_for_its_finalizer_and_says_so() {
    let (logs, _guard) = capture_logs();
    let emulator = widget_emulator().await;
    let calls = Calls::default();
    let deleted = calls.clone();
    let registry = Registry::builder()
        .on_delete(
            ResourceRef::dynamic("example.com", "v1", "widgets"),
            "delete",
            move |kw: Kwargs| {
                let calls = deleted.clone();
                async move {
                    calls.push("delete", json!(kw.name()));
                    Ok::<_, Error>(())
                }
            },
        )
        .build()
        .expect("a valid registry");
    let mut settings = test_settings();
    settings.watching.max_depth = MAX_DEPTH;
    settings.posting.enabled = true;
    let finalizer = settings.persistence.finalizer.clone();
    let operator = Running::start_with(&emulator, registry, settings);
    create_good(&emulator, "held").await;
    let api = raw_api(&emulator, &widgets(), "default");
    let finalizers = |object: Option<kube::api::DynamicObject>| {
        object
            .and_then(|o| o.metadata.finalizers)
            .unwrap_or_default()
    };
    eventually("the operator's finalizer", || async {
        let held = finalizers(api.get_opt("held").await.expect("read"));
        held.contains(&finalizer).then_some(())
    })
    .await;

    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": nested(MAX_DEPTH + 20)})),
    )
    .await
    .expect("patched");
    reported(&logs, "held").await;
    api.delete("held", &DeleteParams::default())
        .await
        .expect("deleted");
    let told = eventually("the Event about the deletion held back", || async {
        events_about(&emulator, "held", "Undecodable")
            .await
            .into_iter()
            .filter_map(|e| e.message)
            .find(|m| m.contains("remove the finalizer by hand"))
    })
    .await;
    assert!(told.contains(&finalizer), "{told}");
    assert!(told.contains("levels deep"), "{told}");
    let stored = api.get("held").await.expect("still stored");
    assert!(stored.metadata.deletion_timestamp.is_some());
    assert!(calls.named("delete").is_empty(), "no handler on it");

    // Decodable again: its delete handler runs, and the finalizer goes.
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"a": null, "size": 1}})),
    )
    .await
    .expect("patched");
    calls.wait_for("delete", 1).await;
    eventually("the deletion to go through", || async {
        api.get_opt("held")
            .await
            .expect("read")
            .is_none()
            .then_some(())
    })
    .await;
    assert!(operator.is_running(), "never a crash");
    operator.stop().await;
}
