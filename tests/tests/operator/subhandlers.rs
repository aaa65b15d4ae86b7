//! Sub-handlers end to end (Kopf's `examples/07-subhandlers`): children
//! registered at run time, their progress on the object in Kopf's layout,
//! and a partly finished set resumed after a restart.

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime::{Error, Kwargs, Lifecycle, Registry, ResourceRef};
use kopf_testing::Emulator;
use kopf_tests::{Calls, DIFFBASE, Running, annotation, configmaps, create, eventually, get, logs};
use serde_json::{Value, json};

fn cms() -> ResourceRef {
    ResourceRef::of::<ConfigMap>()
}

/// A parent `create_fn` with one child per key of the ConfigMap's data
/// (as Kopf's example has one per item of `spec.items`); `child` says
/// what a child returns, by key. With a lifecycle, the parent executes its
/// children itself.
fn registry(
    calls: &Calls,
    lifecycle: Option<Lifecycle>,
    child: fn(&str) -> Option<kopf_runtime::Result<Value>>,
) -> Registry {
    let calls = calls.clone();
    Registry::builder()
        .on_create(cms(), "create_fn", move |kw: Kwargs| {
            calls.push("create_fn", json!(kw.retry));
            let subhandlers = kw.subhandlers().expect("change handlers have sub-handlers");
            let items: Vec<String> = kw.body["data"]
                .as_object()
                .map(|data| data.keys().cloned().collect())
                .unwrap_or_default();
            for item in items {
                let calls = calls.clone();
                subhandlers.register(item.clone(), move |_kw: Kwargs| {
                    calls.push(&item, json!(null));
                    let outcome = child(&item);
                    async move {
                        match outcome {
                            Some(outcome) => outcome,
                            // Blocked until the operator is stopped.
                            None => std::future::pending().await,
                        }
                    }
                });
            }
            async move {
                if let Some(lifecycle) = lifecycle {
                    subhandlers.execute_with(lifecycle).await?;
                }
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry")
}

/// The object once its creation is handled: the diff-base is stored.
async fn handled(emulator: &Emulator, name: &str) -> Value {
    eventually(&format!("the diff-base of {name}"), || async {
        get(emulator, &configmaps(), "default", name)
            .await
            .filter(|b| annotation(b, DIFFBASE).is_some())
    })
    .await
}

/// The names of the progress annotations left on `body`.
fn progress_keys(body: &Value) -> Vec<String> {
    body["metadata"]["annotations"]
        .as_object()
        .map(|a| {
            a.keys()
                .filter(|k| k.starts_with("kopf.zalando.org/create_fn"))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn every_item_gets_its_own_sub_handler_and_results() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let operator = Running::start(
        &emulator,
        registry(&calls, None, |item| Some(Ok(json!({"item": item})))),
    );
    let data = json!({"data": {"item1": "x", "item2": "y", "item3": "z"}});
    create(&emulator, &configmaps(), "default", "items", data).await;
    let body = handled(&emulator, "items").await;
    for item in ["item1", "item2", "item3"] {
        assert_eq!(calls.named(item).len(), 1, "{item}: {:?}", calls.all());
        assert_eq!(
            body["status"][format!("create_fn/{item}")],
            json!({"item": item})
        );
    }
    // One child per step (Kopf's default): the parent ran once per child.
    assert_eq!(calls.named("create_fn"), [json!(0), json!(1), json!(2)]);
    assert!(progress_keys(&body).is_empty(), "purged: {body}");
    operator.stop().await;
}

#[tokio::test]
async fn executed_all_at_once_the_children_run_in_one_pass() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let operator = Running::start(
        &emulator,
        registry(&calls, Some(Lifecycle::AllAtOnce), |_| {
            Some(Ok(json!(null)))
        }),
    );
    let data = json!({"data": {"a": "1", "b": "2"}});
    create(&emulator, &configmaps(), "default", "at-once", data).await;
    let body = handled(&emulator, "at-once").await;
    assert_eq!(calls.named("create_fn").len(), 1, "{:?}", calls.all());
    assert_eq!((calls.named("a").len(), calls.named("b").len()), (1, 1));
    assert!(progress_keys(&body).is_empty(), "purged: {body}");
    operator.stop().await;
}

#[tokio::test]
async fn a_restart_resumes_the_unfinished_children_only() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    // `a` succeeds; `b` is still running when the operator stops.
    let operator = Running::start(
        &emulator,
        registry(&calls, None, |item| (item == "a").then(|| Ok(json!("a")))),
    );
    let data = json!({"data": {"a": "1", "b": "2"}});
    create(&emulator, &configmaps(), "default", "resumed", data).await;
    calls.wait_for("b", 1).await;
    let body = get(&emulator, &configmaps(), "default", "resumed")
        .await
        .expect("the object");
    let parent: Value = serde_json::from_str(
        annotation(&body, "kopf.zalando.org/create_fn").expect("the parent's record"),
    )
    .expect("JSON");
    assert_eq!(parent["subrefs"], json!(["create_fn/a", "create_fn/b"]));
    let a: Value = serde_json::from_str(
        annotation(&body, "kopf.zalando.org/create_fn.a").expect("a's record, in Kopf's key"),
    )
    .expect("JSON");
    assert_eq!(a["success"], true);
    operator.stop().await;

    let again = Calls::default();
    let operator = Running::start(&emulator, registry(&again, None, |_| Some(Ok(json!("ok")))));
    let body = handled(&emulator, "resumed").await;
    assert!(
        again.named("a").is_empty(),
        "a finished child is not re-run: {:?}",
        again.all()
    );
    assert_eq!(again.named("b").len(), 1);
    assert_eq!(body["status"]["create_fn/a"], "a", "a's result stays");
    assert_eq!(body["status"]["create_fn/b"], "ok");
    assert!(progress_keys(&body).is_empty(), "purged: {body}");
    operator.stop().await;
}
