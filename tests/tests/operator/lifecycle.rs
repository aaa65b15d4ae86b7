//! Change handlers end to end: an operator and the emulator over real HTTP.

use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kopf_runtime::{Error, Kwargs, Registry, RegistryBuilder, ResourceRef, posting};
use kopf_testing::Emulator;
use kopf_tests::{
    Calls, PATIENCE, Running, capture_logs, configmaps, eventually, only_touched, raw_api,
    test_settings,
};
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use serde_json::{Value, json};

const FINALIZER: &str = "kopf.zalando.org/KopfFinalizerMarker";
const DIFFBASE: &str = "kopf.zalando.org/last-handled-configuration";

fn configmap(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": data,
    }))
    .expect("a valid ConfigMap")
}

fn cms() -> ResourceRef {
    ResourceRef::of::<ConfigMap>()
}

/// Touches `name` (see [`kopf_tests::touch`]): by then, no call that its
/// events so far would cause is still to come.
async fn touch(emulator: &Emulator, name: &str) {
    kopf_tests::touch(&raw_api(emulator, &configmaps(), "default"), name).await;
}

/// The calls other than those of touches.
fn untouched(calls: &Calls) -> Vec<(String, Value)> {
    calls
        .all()
        .into_iter()
        .filter(|(name, _)| name != "touched")
        .collect()
}

/// A registry recording every change handler call into `calls` (an update
/// that is only a touch as `touched`).
fn recording(calls: &Calls) -> Registry {
    let (c, u, d, r) = (calls.clone(), calls.clone(), calls.clone(), calls.clone());
    Registry::builder()
        .on_create(cms(), "create_fn", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                calls.push(
                    "create",
                    json!({"name": kw.name(), "reason": kw.reason.map(|r| r.to_string())}),
                );
                Ok::<_, Error>(json!({"message": "created"}))
            }
        })
        .on_update(cms(), "update_fn", move |kw: Kwargs| {
            let calls = u.clone();
            async move {
                if only_touched(&kw) {
                    calls.push("touched", json!({"name": kw.name()}));
                    return Ok(());
                }
                let diff = serde_json::to_value(&kw.diff).unwrap_or_default();
                calls.push(
                    "update",
                    json!({"diff": diff, "old": kw.old.as_deref(), "new": kw.new.as_deref()}),
                );
                Ok::<_, Error>(())
            }
        })
        .on_delete(cms(), "delete_fn", move |kw: Kwargs| {
            let calls = d.clone();
            async move {
                calls.push("delete", json!({"name": kw.name()}));
                Ok::<_, Error>(())
            }
        })
        .on_resume(cms(), "resume_fn", move |kw: Kwargs| {
            let calls = r.clone();
            async move {
                calls.push("resume", json!({"name": kw.name()}));
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry")
}

/// `builder` with an update handler recording each call's diff into `calls`
/// (a touch's as `touched`).
fn recording_diffs(builder: RegistryBuilder, calls: &Calls) -> RegistryBuilder {
    let calls = calls.clone();
    builder.on_update(cms(), "update_fn", move |kw: Kwargs| {
        let calls = calls.clone();
        async move {
            let diff = serde_json::to_value(&kw.diff).unwrap_or_default();
            let what = if only_touched(&kw) {
                "touched"
            } else {
                "update"
            };
            calls.push(what, json!({"diff": diff}));
            Ok::<_, Error>(())
        }
    })
}

/// Kopf's memo for event handlers: one per object, kept from event to event
/// (the operator only keeps it while it holds something).
#[tokio::test]
async fn an_event_handlers_memo_lasts_from_event_to_event_per_object() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let seen = calls.clone();
    let registry = Registry::builder()
        .on_event(cms(), "count_fn", move |kw: Kwargs| {
            let calls = seen.clone();
            async move {
                let counter = kw.memo.get_or_insert_with(|| AtomicUsize::new(0));
                let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                calls.push("event", json!({"name": kw.name(), "n": n}));
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    api.create(&PostParams::default(), &configmap("a", json!({})))
        .await
        .expect("created");
    calls.wait_for("event", 1).await;
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await
    .expect("patched");
    calls.wait_for("event", 2).await;
    api.create(&PostParams::default(), &configmap("b", json!({})))
        .await
        .expect("created");
    calls.wait_for("event", 3).await;
    api.delete("a", &DeleteParams::default())
        .await
        .expect("deleted");
    let events = calls.wait_for("event", 4).await;
    assert_eq!(
        events,
        [
            json!({"name": "a", "n": 1}),
            json!({"name": "a", "n": 2}),
            json!({"name": "b", "n": 1}),
            json!({"name": "a", "n": 3}),
        ]
    );
    operator.stop().await;
}

/// The object as the API server has it (a typed ConfigMap would drop `status`).
async fn get(api: &Api<ConfigMap>, name: &str) -> Option<Value> {
    let raw: Api<DynamicObject> = Api::default_namespaced_with(
        api.clone().into_client(),
        &ApiResource::erase::<ConfigMap>(&()),
    );
    raw.get_opt(name)
        .await
        .expect("get works")
        .map(|o| serde_json::to_value(o).expect("serializable"))
}

#[tokio::test]
async fn create_runs_the_create_handler_once_and_stores_its_result_and_diffbase() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let operator = Running::start(&emulator, recording(&calls));
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    api.create(&PostParams::default(), &configmap("a", json!({"k": "v"})))
        .await
        .expect("created");

    let created = calls.wait_for("create", 1).await;
    assert_eq!(created[0], json!({"name": "a", "reason": "create"}));
    let body = eventually("the result in status", || async {
        get(&api, "a")
            .await
            .filter(|b| b.pointer("/status/create_fn").is_some())
    })
    .await;
    assert_eq!(body["status"]["create_fn"], json!({"message": "created"}));
    let diffbase = body["metadata"]["annotations"][DIFFBASE]
        .as_str()
        .expect("a diff-base annotation");
    let essence: Value = serde_json::from_str(diffbase).expect("the diff-base is JSON");
    assert_eq!(essence["data"], json!({"k": "v"}));
    assert_eq!(
        body["metadata"]["finalizers"],
        json!([FINALIZER]),
        "a delete handler needs the finalizer"
    );
    let progress: Vec<&String> = body["metadata"]["annotations"]
        .as_object()
        .map(|a| a.keys().filter(|k| k.ends_with("create_fn")).collect())
        .unwrap_or_default();
    assert!(
        progress.is_empty(),
        "progress is purged once done: {progress:?}"
    );

    // Nothing else happens: no second call, no resume.
    touch(&emulator, "a").await;
    assert_eq!(calls.named("create").len(), 1);
    assert!(
        calls.named("update").is_empty() && calls.named("resume").is_empty(),
        "{:?}",
        calls.all()
    );
    operator.stop().await;
}

#[tokio::test]
async fn update_runs_the_update_handler_with_the_diff_and_noop_changes_run_nothing() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let operator = Running::start(&emulator, recording(&calls));
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    api.create(&PostParams::default(), &configmap("u", json!({"k": "v1"})))
        .await
        .expect("created");
    calls.wait_for("create", 1).await;
    eventually("the diff-base", || async {
        get(&api, "u").await.filter(|b| {
            b.pointer(&format!(
                "/metadata/annotations/{}",
                DIFFBASE.replace('/', "~1")
            ))
            .is_some()
        })
    })
    .await;

    // A change outside the essence (status) is a no-op.
    let status = Patch::Merge(json!({"status": {"unrelated": true}}));
    api.patch("u", &PatchParams::default(), &status)
        .await
        .expect("patched");
    touch(&emulator, "u").await;
    assert!(
        calls.named("update").is_empty(),
        "status changes are not essential: {:?}",
        calls.all()
    );

    let change = Patch::Merge(json!({"data": {"k": "v2"}}));
    api.patch("u", &PatchParams::default(), &change)
        .await
        .expect("patched");
    let updates = calls.wait_for("update", 1).await;
    assert_eq!(
        updates[0]["diff"],
        json!([["change", ["data", "k"], "v1", "v2"]])
    );
    assert_eq!(updates[0]["old"]["data"], json!({"k": "v1"}));
    assert_eq!(updates[0]["new"]["data"], json!({"k": "v2"}));
    touch(&emulator, "u").await;
    assert_eq!(calls.named("update").len(), 1, "one update, one call");
    operator.stop().await;
}

/// The operator's own patch comes back carrying the diff-base of the body
/// it handled. A change that reached the object between that body and the
/// patch (here made by the create handler itself, so it surely falls in
/// between) is in the body that comes back, and is an update: the body is
/// not taken for the operator's mere echo.
#[tokio::test]
async fn a_change_made_while_the_create_handler_runs_is_then_handled_as_an_update() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let c = calls.clone();
    let client = emulator.client();
    let registry = recording_diffs(Registry::builder(), &calls)
        .on_create(cms(), "create_fn", move |kw: Kwargs| {
            let (calls, client) = (c.clone(), client.clone());
            async move {
                let api: Api<ConfigMap> = Api::default_namespaced(client);
                let change = Patch::Merge(json!({"data": {"k": "changed-meanwhile"}}));
                api.patch(
                    kw.name().unwrap_or_default(),
                    &PatchParams::default(),
                    &change,
                )
                .await
                .expect("patched by the handler");
                calls.push("create", json!({"name": kw.name()}));
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    api.create(&PostParams::default(), &configmap("m", json!({"k": "v1"})))
        .await
        .expect("created");

    calls.wait_for("create", 1).await;
    let updates = calls.wait_for("update", 1).await;
    assert_eq!(
        updates[0]["diff"],
        json!([["change", ["data", "k"], "v1", "changed-meanwhile"]])
    );
    // Then the update's own patch comes back with nothing new: no more calls.
    touch(&emulator, "m").await;
    assert_eq!(untouched(&calls).len(), 2, "{:?}", calls.all());
    // The create's outcome was guarded by the body it handled, which the
    // handler's change outdated: refused, then sent again unguarded.
    let patches: Vec<u16> = emulator
        .requests()
        .iter()
        .filter(|r| r.verb == "patch")
        .map(|r| r.status)
        .collect();
    assert_eq!(
        patches,
        [200, 409, 200, 200, 200, 200],
        "the handler's change, the create's outcome refused and re-sent, the update's outcome, \
         the touch and its outcome"
    );
    operator.stop().await;
}

/// What the operator logs when it processes a body with nothing new in it.
const NOT_INTERESTED: &str = "Something has changed, but we are not interested";

/// The patch that records a handled change is guarded by the handled
/// body's version, so the body it makes comes back known: it is not
/// processed again (not even decoded). Changes after it still are.
#[tokio::test]
async fn the_operators_own_patch_is_not_processed_again_but_later_changes_are() {
    let (logs, _guard) = capture_logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let c = calls.clone();
    let registry = recording_diffs(Registry::builder(), &calls)
        .on_create(cms(), "create_fn", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                calls.push("create", json!({"name": kw.name()}));
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    api.create(&PostParams::default(), &configmap("e", json!({"k": "v1"})))
        .await
        .expect("created");
    calls.wait_for("create", 1).await;
    let handled = eventually("the diff-base", || async {
        get(&api, "e")
            .await
            .filter(|b| b["metadata"]["annotations"][DIFFBASE].is_string())
    })
    .await;
    touch(&emulator, "e").await;
    assert!(
        !logs.text().contains(NOT_INTERESTED),
        "the own patch was processed again:\n{}",
        logs.text()
    );

    api.patch(
        "e",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v2"}})),
    )
    .await
    .expect("patched");
    let updates = calls.wait_for("update", 1).await;
    assert_eq!(
        updates[0]["diff"],
        json!([["change", ["data", "k"], "v1", "v2"]]),
        "the diff-base the skipped body carried is the one compared with"
    );
    touch(&emulator, "e").await;
    assert_eq!(untouched(&calls).len(), 2, "{:?}", calls.all());
    assert!(!logs.text().contains(NOT_INTERESTED), "{}", logs.text());
    assert_ne!(
        get(&api, "e")
            .await
            .map(|b| b["metadata"]["annotations"][DIFFBASE].clone()),
        Some(handled["metadata"]["annotations"][DIFFBASE].clone()),
        "the update stored a new diff-base"
    );
    operator.stop().await;
}

/// Event handlers see every event, the operator's own patches included:
/// with one, nothing is skipped.
#[tokio::test]
async fn event_handlers_see_the_operators_own_patches() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let (c, e) = (calls.clone(), calls.clone());
    let registry = Registry::builder()
        .on_create(cms(), "create_fn", move |_kw: Kwargs| {
            let calls = c.clone();
            async move {
                calls.push("create", json!({}));
                Ok::<_, Error>(())
            }
        })
        .on_event(cms(), "event_fn", move |kw: Kwargs| {
            let calls = e.clone();
            async move {
                let handled = kw.body["metadata"]["annotations"][DIFFBASE].is_string();
                calls.push("event", json!({"handled": handled}));
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    api.create(&PostParams::default(), &configmap("w", json!({})))
        .await
        .expect("created");
    calls.wait_for("create", 1).await;
    let events = calls.wait_for("event", 2).await;
    assert_eq!(events[0], json!({"handled": false}));
    assert_eq!(events[1], json!({"handled": true}), "the own patch, back");
    operator.stop().await;
}

/// What event handlers patch is applied, as Kopf applies it: once, after
/// all of them, with what the change handlers of the same event patch.
#[tokio::test]
async fn event_handlers_patch_their_object() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let (c, e) = (calls.clone(), calls.clone());
    let labelling = |id: &'static str, calls: Calls| {
        move |kw: Kwargs| {
            let calls = calls.clone();
            async move {
                calls.push(id, json!(kw.event_type.map(|t| t.as_str())));
                // Only once: every patch brings a new event.
                if kw.label(id).is_none() {
                    kw.patch
                        .set(&format!("metadata.labels.{id}"), json!("seen"));
                }
                Ok::<_, Error>(())
            }
        }
    };
    let only_events = Registry::builder()
        .on_event(cms(), "spy", labelling("spy", e))
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, only_events);
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    api.create(&PostParams::default(), &configmap("spied", json!({})))
        .await
        .expect("created");
    eventually("the event handler's label", || async {
        let labels = api.get("spied").await.ok()?.metadata.labels?;
        (labels.get("spy")? == "seen").then_some(())
    })
    .await;
    operator.stop().await;

    let with_changes = Registry::builder()
        .on_event(cms(), "spy", labelling("spy", calls.clone()))
        .on_create(cms(), "create_fn", move |_kw: Kwargs| {
            let calls = c.clone();
            async move {
                calls.push("create", json!({}));
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, with_changes);
    let versions = api
        .watch(&WatchParams::default().fields("metadata.name=both"), "0")
        .await
        .expect("a watch");
    api.create(&PostParams::default(), &configmap("both", json!({})))
        .await
        .expect("created");
    let mut versions = std::pin::pin!(versions);
    let labelled = tokio::time::timeout(PATIENCE, async {
        while let Some(event) = versions.next().await {
            if let Ok(WatchEvent::Added(cm) | WatchEvent::Modified(cm)) = event
                && cm
                    .metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key("spy"))
            {
                return cm;
            }
        }
        panic!("the watch ended before the event handler's label came");
    })
    .await
    .expect("the event handler's label");
    assert!(
        labelled
            .metadata
            .annotations
            .is_some_and(|a| a.contains_key(DIFFBASE)),
        "the event's patch and the step's, in one request"
    );
    operator.stop().await;
}

#[tokio::test]
async fn delete_runs_the_delete_handler_then_releases_the_finalizer_and_the_object_goes() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let operator = Running::start(&emulator, recording(&calls));
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    api.create(&PostParams::default(), &configmap("d", json!({})))
        .await
        .expect("created");
    eventually("the finalizer", || async {
        get(&api, "d")
            .await
            .filter(|b| b["metadata"]["finalizers"] == json!([FINALIZER]))
    })
    .await;
    calls.wait_for("create", 1).await;

    api.delete("d", &DeleteParams::default())
        .await
        .expect("deletion requested");
    calls.wait_for("delete", 1).await;
    eventually("the object to be gone", || async {
        get(&api, "d").await.is_none().then_some(())
    })
    .await;
    // A later object is handled: the deletion is not handled again meanwhile.
    api.create(&PostParams::default(), &configmap("later", json!({})))
        .await
        .expect("created");
    eventually("the later object's diff-base", || async {
        get(&api, "later")
            .await
            .filter(|b| b["metadata"]["annotations"][DIFFBASE].is_string())
    })
    .await;
    assert_eq!(calls.named("delete").len(), 1);
    operator.stop().await;
}

#[tokio::test]
async fn a_restarted_operator_resumes_existing_objects_and_does_not_recreate_them() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let operator = Running::start(&emulator, recording(&calls));
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    api.create(&PostParams::default(), &configmap("r", json!({"k": "v"})))
        .await
        .expect("created");
    calls.wait_for("create", 1).await;
    eventually("the diff-base", || async {
        get(&api, "r")
            .await
            .filter(|b| b["metadata"]["annotations"].get(DIFFBASE).is_some())
    })
    .await;
    operator.stop().await;
    assert!(
        calls.named("resume").is_empty(),
        "no resume for an object created while running"
    );

    let calls2 = Calls::default();
    let operator = Running::start(&emulator, recording(&calls2));
    let resumed = calls2.wait_for("resume", 1).await;
    assert_eq!(resumed[0]["name"], "r");
    touch(&emulator, "r").await;
    assert!(
        calls2.named("create").is_empty(),
        "not created again: {:?}",
        calls2.all()
    );
    assert_eq!(calls2.named("resume").len(), 1, "resumed once");
    operator.stop().await;
}

/// Events about `name`, as `(reason, message)`.
async fn events_about(emulator: &Emulator, name: &str) -> Vec<(String, String)> {
    let events: Api<Event> = Api::default_namespaced(emulator.client());
    let mut list = events
        .list(&ListParams::default())
        .await
        .expect("events listed")
        .items;
    list.retain(|e| e.involved_object.name.as_deref() == Some(name));
    list.into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// Kopf 1.45's `settings.posting.loggers`: log lines become Events only when
/// asked; explicit `posting::info` always does.
async fn log_lines_as_events(loggers: bool) -> Vec<(String, String)> {
    let emulator = Emulator::start().await.expect("emulator starts");
    let registry = Registry::builder()
        .on_create(cms(), "create_fn", |kw: Kwargs| async move {
            kw.logger.info("said by the handler");
            let name = kw.name().unwrap_or("?").to_owned();
            posting::info(kw.body.as_ref(), "Explicit", &name);
            Ok::<_, Error>(())
        })
        .build()
        .expect("a valid registry");
    let mut settings = test_settings();
    settings.posting.enabled = true;
    settings.posting.loggers = loggers;
    let operator = Running::start_with(&emulator, registry, settings);
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    api.create(&PostParams::default(), &configmap("a", json!({})))
        .await
        .expect("created");
    eventually("a's diff-base stored, so its handler is done", || async {
        get(&api, "a").await.filter(|b| {
            b.pointer("/metadata/annotations")
                .is_some_and(|a| a.get(DIFFBASE).is_some())
        })
    })
    .await;
    // Events are posted one by one in order: once b's explicit Event is in,
    // every Event queued about `a` before it is in too.
    api.create(&PostParams::default(), &configmap("b", json!({})))
        .await
        .expect("created");
    eventually("b's explicit Event", || async {
        let b = events_about(&emulator, "b").await;
        b.iter()
            .any(|(reason, _)| reason == "Explicit")
            .then_some(())
    })
    .await;
    let about_a = events_about(&emulator, "a").await;
    operator.stop().await;
    about_a
}

/// A plain `fn`: it runs on a blocking thread, out of its task.
#[kopf_runtime::on_create(ConfigMap, id = "posting_from_a_thread")]
fn posting_from_a_thread(body: &Value, name: &str) {
    posting::info(body, "FromAThread", name);
}

#[tokio::test]
async fn plain_fn_handlers_post_their_events() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let mut settings = test_settings();
    settings.posting.enabled = true;
    let registry = kopf_tests::declared(&["posting_from_a_thread"]);
    let operator = Running::start_with(&emulator, registry, settings);
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    api.create(&PostParams::default(), &configmap("threaded", json!({})))
        .await
        .expect("created");
    eventually("the Event posted from the blocking thread", || async {
        let about = events_about(&emulator, "threaded").await;
        about
            .contains(&("FromAThread".to_owned(), "threaded".to_owned()))
            .then_some(())
    })
    .await;
    operator.stop().await;
}

#[tokio::test]
async fn log_lines_are_not_events_by_default_but_explicit_events_are() {
    let about_a = log_lines_as_events(false).await;
    assert_eq!(about_a, vec![("Explicit".to_owned(), "a".to_owned())]);
}

#[tokio::test]
async fn with_posting_loggers_log_lines_are_events_too() {
    let about_a = log_lines_as_events(true).await;
    let messages: Vec<&str> = about_a.iter().map(|(_, m)| m.as_str()).collect();
    assert!(messages.contains(&"a"), "{about_a:?}");
    assert!(messages.contains(&"said by the handler"), "{about_a:?}");
    assert!(
        messages.iter().any(|m| m.contains("'create_fn' succeeded")),
        "{about_a:?}"
    );
}
