//! What start-up handlers leave for the rest of the operator, end to end:
//! the operator-wide memo and the operator's settings.

use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kopf_runtime::{self as kopf, Error, Kwargs, Operator, OperatorError, Registry, ResourceRef};
use kopf_testing::Emulator;
use kopf_tests::{
    Calls, PATIENCE, Running, annotation, configmaps, create, declared, eventually, get, logs,
    only_touched, raw_api, test_settings, touch,
};
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde_json::{Value, json};

fn cms() -> ResourceRef {
    ResourceRef::of::<ConfigMap>()
}

/// What the start-up handler puts in the operator's memo: one counter,
/// shared by every object.
#[derive(Default)]
struct Created(AtomicUsize);

/// What one object's create handler puts in that object's memo.
struct Own(String);

/// What a memo shows a handler: whether it has the start-up handler's value
/// (and its count so far), and the object's own value if any.
fn seen(kw: &Kwargs) -> Value {
    json!({
        "name": kw.name(),
        "created": kw.memo.get::<Created>().map(|c| c.0.load(Ordering::SeqCst)),
        "own": kw.memo.get::<Own>().map(|own| own.0.clone()),
    })
}

#[tokio::test]
async fn the_startup_memo_is_shared_by_every_object_while_their_own_values_stay_apart() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let (c, u, e, i, b) = (
        calls.clone(),
        calls.clone(),
        calls.clone(),
        calls.clone(),
        calls.clone(),
    );
    let registry = Registry::builder()
        .on_startup("boot", |kw: Kwargs| async move {
            kw.memo.insert(Created::default());
            Ok::<_, Error>(())
        })
        .on_create(cms(), "create_fn", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                calls.push("create", seen(&kw));
                if let Some(created) = kw.memo.get::<Created>() {
                    created.0.fetch_add(1, Ordering::SeqCst);
                }
                let name = kw.name().unwrap_or_default().to_owned();
                kw.memo.insert(Own(name));
                Ok::<_, Error>(())
            }
        })
        .on_update(cms(), "update_fn", move |kw: Kwargs| {
            let calls = u.clone();
            async move {
                if only_touched(&kw) {
                    calls.push("touched", seen(&kw));
                }
                Ok::<_, Error>(())
            }
        })
        .on_event(cms(), "event_fn", move |kw: Kwargs| {
            let calls = e.clone();
            async move {
                calls.push("event", seen(&kw));
                Ok::<_, Error>(())
            }
        })
        .index(cms(), "index_fn", move |kw: Kwargs| {
            let calls = i.clone();
            async move {
                calls.push("index", seen(&kw));
                Ok::<_, Error>(Value::Null)
            }
        })
        .on_cleanup("bye", move |kw: Kwargs| {
            let calls = b.clone();
            async move {
                calls.push("cleanup", seen(&kw));
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    create(&emulator, &configmaps(), "default", "a", json!({})).await;
    calls.wait_for("create", 1).await;
    create(&emulator, &configmaps(), "default", "b", json!({})).await;
    let created = calls.wait_for("create", 2).await;
    assert_eq!(
        created,
        [
            json!({"name": "a", "created": 0, "own": null}),
            json!({"name": "b", "created": 1, "own": null}),
        ],
        "b sees the start-up value a counted in, not a's own value"
    );
    touch(&raw_api(&emulator, &configmaps(), "default"), "a").await;
    assert_eq!(
        calls.named("touched"),
        [json!({"name": "a", "created": 2, "own": "a"})],
        "a's own value stays with a"
    );
    for kind in ["event", "index"] {
        let calls = calls.named(kind);
        assert!(!calls.is_empty(), "{kind} handlers ran");
        assert!(
            calls.iter().all(|call| call["created"].is_number()),
            "{kind} handlers see the start-up value: {calls:?}"
        );
    }
    operator.stop().await;
    assert_eq!(
        calls.named("cleanup"),
        [json!({"name": null, "created": 2, "own": null})],
        "the clean-up handler has the operator's memo, which no object's own value reached"
    );
}

#[tokio::test]
async fn an_embedding_application_passes_the_operators_memo_and_reads_it_after() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let registry = Registry::builder()
        .on_startup("boot", |kw: Kwargs| async move {
            let given = kw.memo.get::<String>().map(|s| s.to_string());
            kw.memo
                .insert(Created(AtomicUsize::new(given.map_or(0, |s| s.len()))));
            Ok::<_, Error>(())
        })
        .on_cleanup("bye", |kw: Kwargs| async move {
            if let Some(created) = kw.memo.get::<Created>() {
                created.0.fetch_add(100, Ordering::SeqCst);
            }
            Ok::<_, Error>(())
        })
        .build()
        .expect("a valid registry");
    let memo = kopf::Memo::new();
    memo.insert(String::from("four"));
    let stop = tokio_util::sync::CancellationToken::new();
    let run = tokio::spawn(
        Operator::new(registry)
            .client(emulator.client())
            .settings(test_settings())
            .memo(memo.clone())
            .run_until(stop.clone().cancelled_owned()),
    );
    let created = eventually("the start-up handler's value", || async {
        memo.get::<Created>()
    })
    .await;
    assert_eq!(
        created.0.load(Ordering::SeqCst),
        4,
        "it read the given value"
    );
    stop.cancel();
    tokio::time::timeout(PATIENCE, run)
        .await
        .expect("the operator stops")
        .expect("the operator task ends")
        .expect("the operator runs");
    assert_eq!(
        created.0.load(Ordering::SeqCst),
        104,
        "the clean-up handler had the same value"
    );
}

/// Where the start-up handler below moves the operator's state on objects.
const FINALIZER: &str = "example.com/from-startup";
const DIFFBASE: &str = "example.com/last-handled";

#[kopf::on_startup(id = "configure_settings")]
async fn configure_settings(settings: &mut kopf::OperatorSettings) {
    settings.persistence.finalizer = FINALIZER.into();
    settings.persistence.diffbase_key = DIFFBASE.into();
    // The tests' settings post no Events: these are posted, by the component named.
    settings.posting.enabled = true;
    settings.posting.reporting_component = "configured-at-startup".into();
}

#[kopf::on_create(ConfigMap, id = "configured_create")]
async fn configured_create(body: &Value) {
    kopf::posting::info(body, "Configured", "created");
}

/// Makes the objects need a finalizer.
#[kopf::on_delete(ConfigMap, id = "configured_delete")]
async fn configured_delete() {}

#[tokio::test]
async fn settings_changed_by_a_startup_handler_serve_every_object_after_it() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let registry = declared(&[
        "configure_settings",
        "configured_create",
        "configured_delete",
    ]);
    let operator = Running::start(&emulator, registry);
    create(&emulator, &configmaps(), "default", "a", json!({})).await;
    let body = eventually("a handled, its diff-base stored", || async {
        get(&emulator, &configmaps(), "default", "a")
            .await
            .filter(|body| annotation(body, DIFFBASE).is_some())
    })
    .await;
    let finalizers = body.pointer("/metadata/finalizers").cloned();
    assert_eq!(finalizers, Some(json!([FINALIZER])), "{body}");
    assert!(
        annotation(&body, kopf_tests::DIFFBASE).is_none(),
        "nothing under the default key: {body}"
    );
    let events: Api<Event> = Api::default_namespaced(emulator.client());
    let event = eventually("the create handler's Event", || async {
        let list = events.list(&ListParams::default()).await.ok()?.items;
        list.into_iter()
            .find(|e| e.reason.as_deref() == Some("Configured"))
    })
    .await;
    assert_eq!(
        event.reporting_component.as_deref(),
        Some("configured-at-startup")
    );
    // The finalizer the start-up handler named is the one released.
    raw_api(&emulator, &configmaps(), "default")
        .delete("a", &DeleteParams::default())
        .await
        .expect("deleted");
    eventually("a gone, its finalizer released", || async {
        get(&emulator, &configmaps(), "default", "a")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    operator.stop().await;
}

#[tokio::test]
async fn a_startup_handler_cannot_change_the_connect_timeout() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let registry = Registry::builder()
        .on_startup("connecting", |kw: Kwargs| async move {
            if let Some(settings) = &kw.settings {
                settings.update(|s| {
                    s.networking.connect_timeout = Some(std::time::Duration::from_secs(1));
                })?;
            }
            Ok::<_, Error>(())
        })
        .build()
        .expect("a valid registry");
    let run = Operator::new(registry)
        .client(emulator.client())
        .settings(test_settings())
        .run_until(std::future::pending());
    let result = tokio::time::timeout(PATIENCE, run)
        .await
        .expect("the operator exits by itself");
    match result {
        Err(OperatorError::Startup { handler, message }) => {
            assert_eq!(handler, "connecting");
            assert!(
                message.contains("`networking.connect_timeout` cannot change"),
                "{message}"
            );
        }
        other => panic!("expected a start-up failure, got {other:?}"),
    }
}
