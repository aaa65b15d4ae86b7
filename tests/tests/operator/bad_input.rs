//! Bad input from the cluster: specs that do not deserialize into what a
//! handler expects, and malformed state annotations. Reported and retried or
//! ignored, never a crash; other objects are unaffected.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kopf_runtime::{Error, Kwargs, Registry, ResourceRef};
use kopf_testing::Emulator;
use kopf_tests::{
    Calls, DIFFBASE, Running, annotation, capture_logs, configmaps, create, eventually, get, logs,
    only_touched, raw_api, test_settings, touch,
};
use kube::Api;
use kube::api::{ApiResource, ListParams, Patch, PatchParams};
use serde::Deserialize;
use serde_json::{Value, json};

/// What the `typed` handler expects in `spec`.
#[derive(Debug, Deserialize)]
struct WidgetSpec {
    size: u32,
}

fn widgets() -> ApiResource {
    ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}

async fn handled(emulator: &Emulator, resource: &ApiResource, name: &str) -> Value {
    eventually(&format!("{name} to be handled"), || async {
        get(emulator, resource, "default", name)
            .await
            .filter(|b| annotation(b, DIFFBASE).is_some())
    })
    .await
}

/// Waits until the `typed` handler's result is stored on a widget (the
/// status subresource is patched after the main object).
async fn typed(emulator: &Emulator, name: &str) -> Value {
    eventually(&format!("{name}'s result"), || async {
        get(emulator, &widgets(), "default", name)
            .await
            .filter(|b| annotation(b, DIFFBASE).is_some() && !b["status"]["typed"].is_null())
    })
    .await
}

#[tokio::test]
async fn a_spec_that_does_not_deserialize_is_reported_and_retried_and_others_are_served() {
    let (logs, _guard) = capture_logs();
    let emulator = Emulator::builder()
        .crd("example.com", "v1", "widgets", "Widget", true)
        .start()
        .await
        .expect("emulator starts");
    let calls = Calls::default();
    let c = calls.clone();
    let registry = Registry::builder()
        .on_create(
            ResourceRef::dynamic("example.com", "v1", "widgets"),
            "typed",
            move |kw: Kwargs| {
                let calls = c.clone();
                async move {
                    calls.push(kw.name().unwrap_or("?"), json!(kw.retry));
                    let spec: WidgetSpec = serde_json::from_value(kw.spec().clone())?;
                    Ok::<_, Error>(json!({"size": spec.size}))
                }
            },
        )
        .backoff(Duration::from_millis(300))
        .build()
        .expect("a valid registry");
    let mut settings = test_settings();
    settings.posting.enabled = true;
    settings.posting.loggers = true;
    let operator = Running::start_with(&emulator, registry, settings);
    create(
        &emulator,
        &widgets(),
        "default",
        "bad",
        json!({"spec": {"size": "three"}}),
    )
    .await;
    create(
        &emulator,
        &widgets(),
        "default",
        "good",
        json!({"spec": {"size": 3}}),
    )
    .await;

    let good = typed(&emulator, "good").await;
    assert_eq!(good["status"]["typed"], json!({"size": 3}));
    calls.wait_for("bad", 3).await;
    let record = eventually("the failure in bad's progress", || async {
        let body = get(&emulator, &widgets(), "default", "bad").await?;
        let record: Value =
            serde_json::from_str(annotation(&body, "kopf.zalando.org/typed")?).ok()?;
        (record["retries"].as_u64() >= Some(2)).then_some(record)
    })
    .await;
    assert!(
        record["message"]
            .as_str()
            .is_some_and(|m| m.contains("invalid type")),
        "the deserialization error is recorded: {record}"
    );
    let events: Api<Event> = Api::namespaced(emulator.client(), "default");
    let event = eventually("a Kubernetes Event about bad", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find(|e| {
            e.involved_object.name.as_deref() == Some("bad")
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.contains("typed") && m.contains("invalid type"))
        })
    })
    .await;
    let logged = logs.text();
    assert!(
        logged.lines().any(|l| l.contains("default/bad")
            && l.contains("Handler 'typed' failed")
            && l.contains("invalid type")),
        "the failure is logged for the object: {logged}"
    );
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.involved_object.kind.as_deref(), Some("Widget"));
    assert!(operator.is_running(), "never a crash");

    // Fixing the object lets the retried handler succeed.
    raw_api(&emulator, &widgets(), "default")
        .patch(
            "bad",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 5}})),
        )
        .await
        .expect("patched");
    let fixed = typed(&emulator, "bad").await;
    assert_eq!(fixed["status"]["typed"], json!({"size": 5}));
    touch(&raw_api(&emulator, &widgets(), "default"), "good").await;
    assert_eq!(calls.named("good"), vec![json!(0)], "good handled once");
    operator.stop().await;
}

#[tokio::test]
async fn malformed_progress_and_diffbase_annotations_are_treated_as_absent() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let (c, u) = (calls.clone(), calls.clone());
    let registry = Registry::builder()
        .on_create(
            ResourceRef::of::<ConfigMap>(),
            "create_fn",
            move |kw: Kwargs| {
                let calls = c.clone();
                async move {
                    calls.push("create", json!(kw.name()));
                    Ok::<_, Error>(json!("created"))
                }
            },
        )
        .on_update(
            ResourceRef::of::<ConfigMap>(),
            "update_fn",
            move |kw: Kwargs| {
                let calls = u.clone();
                async move {
                    let what = if only_touched(&kw) {
                        "touched"
                    } else {
                        "update"
                    };
                    calls.push(what, json!(kw.name()));
                    Ok::<_, Error>(())
                }
            },
        )
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    let objects = [
        ("garbled", "kopf.zalando.org/create_fn", "{not json"),
        (
            "mistyped",
            "kopf.zalando.org/create_fn",
            r#"{"retries":"many","success":"yes"}"#,
        ),
        ("listed", "kopf.zalando.org/create_fn", "[1, 2]"),
        ("nodiff", DIFFBASE, "garbage"),
        ("arraydiff", DIFFBASE, "[]"),
        ("legacy", "status", "garbage"),
    ];
    for (name, key, value) in objects {
        let extra = if key == "status" {
            // Kopf's legacy location of progress records.
            json!({"status": {"kopf": {"progress": {"create_fn": value}}}, "data": {"k": name}})
        } else {
            json!({"metadata": {"annotations": {key: value}}, "data": {"k": name}})
        };
        create(&emulator, &configmaps(), "default", name, extra).await;
    }
    for (name, _, _) in objects {
        let body = eventually(&format!("{name} to be handled"), || async {
            get(&emulator, &configmaps(), "default", name)
                .await
                .filter(|b| b["status"]["create_fn"] == "created")
        })
        .await;
        assert!(
            annotation(&body, "kopf.zalando.org/create_fn").is_none(),
            "{name}: progress purged once done: {body}"
        );
        assert!(
            body.pointer("/status/kopf/progress/create_fn").is_none(),
            "{name}: legacy progress purged once done: {body}"
        );
    }
    for (name, _, _) in objects {
        let body = handled(&emulator, &configmaps(), name).await;
        let essence: Value = serde_json::from_str(annotation(&body, DIFFBASE).unwrap_or("?"))
            .unwrap_or_else(|e| panic!("{name}: a valid diff-base now: {e}"));
        assert_eq!(essence["data"]["k"], name);
    }
    for (name, _, _) in objects {
        touch(&raw_api(&emulator, &configmaps(), "default"), name).await;
    }
    let mut created: Vec<String> = calls
        .named("create")
        .iter()
        .map(|n| n.as_str().unwrap_or("?").to_owned())
        .collect();
    created.sort();
    assert_eq!(
        created,
        [
            "arraydiff",
            "garbled",
            "legacy",
            "listed",
            "mistyped",
            "nodiff"
        ],
        "each created once"
    );
    assert!(calls.named("update").is_empty(), "{:?}", calls.all());
    assert_eq!(calls.named("touched").len(), objects.len());
    assert!(operator.is_running());
    operator.stop().await;
}

#[tokio::test]
async fn a_resource_whose_crd_is_installed_after_the_start_is_served_once_it_exists() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let c = calls.clone();
    let registry = Registry::builder()
        .on_create(
            ResourceRef::dynamic("example.com", "v1", "widgets"),
            "typed",
            move |kw: Kwargs| {
                let calls = c.clone();
                async move {
                    calls.push(kw.name().unwrap_or("?"), json!(kw.retry));
                    let spec: WidgetSpec = serde_json::from_value(kw.spec().clone())?;
                    Ok::<_, Error>(json!({"size": spec.size}))
                }
            },
        )
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    eventually("the operator to look for the resource", || async {
        emulator
            .requests()
            .iter()
            .any(|r| r.path == "/apis")
            .then_some(())
    })
    .await;
    let crd: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}},
            }],
        },
    }))
    .expect("a CRD");
    let crds = ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    };
    Api::<kube::api::DynamicObject>::all_with(emulator.client(), &crds)
        .create(&kube::api::PostParams::default(), &crd)
        .await
        .expect("the CRD is created");
    create(
        &emulator,
        &widgets(),
        "default",
        "w",
        json!({"spec": {"size": 7}}),
    )
    .await;
    let body = typed(&emulator, "w").await;
    assert_eq!(body["status"]["typed"], json!({"size": 7}));
    assert_eq!(calls.named("w").len(), 1);
    operator.stop().await;
}

/// Kopf's #1087: an object whose diff-base would not fit the API server's
/// 256 KiB limit on annotations (which the emulator enforces) is handled
/// once, stores a diff-base that fits, and a later change is seen exactly.
#[tokio::test]
async fn an_object_too_large_for_its_diffbase_is_handled_once_and_its_changes_exactly() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let (c, u) = (calls.clone(), calls.clone());
    let registry = Registry::builder()
        .on_create(
            ResourceRef::of::<ConfigMap>(),
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
            ResourceRef::of::<ConfigMap>(),
            "update",
            move |kw: Kwargs| {
                let calls = u.clone();
                async move {
                    let what = if only_touched(&kw) {
                        "touched"
                    } else {
                        "update"
                    };
                    calls.push(what, serde_json::to_value(&kw.diff).unwrap_or_default());
                    Ok::<_, Error>(())
                }
            },
        )
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    // 300 KiB of data: the essence alone is larger than all annotations
    // may be.
    let big = "x".repeat(300 * 1024);
    create(
        &emulator,
        &configmaps(),
        "default",
        "big",
        json!({"data": {"big": big, "size": "1"}}),
    )
    .await;
    let handled = handled(&emulator, &configmaps(), "big").await;
    let stored = annotation(&handled, DIFFBASE).expect("a diff-base");
    assert!(stored.len() < 256 * 1024, "{} bytes", stored.len());
    assert!(
        stored.contains("kopf-rs:digest:"),
        "the large value is a digest"
    );
    assert!(stored.contains(r#""size":"1""#), "small values are kept");

    raw_api(&emulator, &configmaps(), "default")
        .patch(
            "big",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"size": "2"}})),
        )
        .await
        .expect("patched");
    let updates = calls.wait_for("update", 1).await;
    assert_eq!(
        updates[0],
        json!([["change", ["data", "size"], "1", "2"]]),
        "the unchanged large value is not part of the diff"
    );
    // A later change of its own shows the change was handled, and once.
    touch(&raw_api(&emulator, &configmaps(), "default"), "big").await;
    assert_eq!(calls.named("create"), vec![json!("big")]);
    assert_eq!(calls.named("update").len(), 1, "{:?}", calls.all());
    assert!(operator.is_running());
    operator.stop().await;
}
