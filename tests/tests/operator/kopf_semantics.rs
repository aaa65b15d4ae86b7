//! Where Kopf's semantics are subtle, kopf-rs does as Kopf does: handlers'
//! fields outside the essence (in `status`) are part of it.

use kopf_runtime::{Error, Kwargs, Registry, ResourceRef};
use kopf_testing::Emulator;
use kopf_tests::{Calls, DIFFBASE, Running, annotation, eventually, logs, test_settings, touch};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// A namespaced custom resource with a status subresource.
fn examples() -> ApiResource {
    ApiResource {
        group: "kopf.dev".into(),
        version: "v1".into(),
        api_version: "kopf.dev/v1".into(),
        kind: "KopfExample".into(),
        plural: "kopfexamples".into(),
    }
}

fn example_ref() -> ResourceRef {
    ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples")
}

async fn emulator() -> Emulator {
    Emulator::builder()
        .crd("kopf.dev", "v1", "kopfexamples", "KopfExample", true)
        .start()
        .await
        .expect("emulator starts")
}

fn api(emulator: &Emulator) -> Api<DynamicObject> {
    Api::namespaced_with(emulator.client(), "default", &examples())
}

/// A handler recording `{name, reason, old, new, retry}` under `id`.
fn record(
    calls: &Calls,
    id: &'static str,
) -> impl Fn(Kwargs) -> futures::future::BoxFuture<'static, Result<(), Error>> + Send + Sync + 'static
{
    let calls = calls.clone();
    move |kw: Kwargs| {
        let calls = calls.clone();
        Box::pin(async move {
            calls.push(id, call_of(&kw));
            Ok(())
        })
    }
}

fn call_of(kw: &Kwargs) -> Value {
    json!({
        "name": kw.name(),
        "reason": kw.reason.map(|r| r.to_string()),
        "old": kw.old.as_deref(),
        "new": kw.new.as_deref(),
        "retry": kw.retry,
    })
}

/// The calls of `id` as `[name, reason, old, new]`.
fn changes(calls: &Calls, id: &str) -> Vec<Value> {
    calls
        .named(id)
        .into_iter()
        .map(|c| json!([c["name"], c["reason"], c["old"], c["new"]]))
        .collect()
}

/// Creates `name` with `body` merged in, then sets its `status`.
async fn create(api: &Api<DynamicObject>, name: &str, body: Value, status: Option<Value>) {
    let mut object = json!({
        "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": name, "namespace": "default"},
    });
    merge(&mut object, body);
    let object: DynamicObject = serde_json::from_value(object).expect("a valid object");
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating {name}: {e}"));
    if let Some(status) = status {
        set_status(api, name, status).await;
    }
}

async fn set_status(api: &Api<DynamicObject>, name: &str, status: Value) {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .unwrap_or_else(|e| panic!("patching the status of {name}: {e}"));
}

async fn patch(api: &Api<DynamicObject>, name: &str, patch: Value) {
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap_or_else(|e| panic!("patching {name}: {e}"));
}

fn merge(dst: &mut Value, patch: Value) {
    match (dst, patch) {
        (Value::Object(dst), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(dst.entry(key).or_insert(Value::Null), value);
            }
        }
        (dst, patch) => *dst = patch,
    }
}

async fn body(api: &Api<DynamicObject>, name: &str) -> Option<Value> {
    let object = api.get_opt(name).await.expect("get works")?;
    Some(serde_json::to_value(object).expect("serializable"))
}

/// Waits until the diff-base of `name` holds `value` at `pointer`.
async fn stored_at(api: &Api<DynamicObject>, name: &str, pointer: &str, value: Value) {
    eventually(
        &format!("{name}'s diff-base to hold {value} at {pointer}"),
        || async {
            let body = body(api, name).await?;
            let essence: Value = serde_json::from_str(annotation(&body, DIFFBASE)?).ok()?;
            (essence.pointer(pointer) == Some(&value)).then_some(())
        },
    )
    .await
}

#[tokio::test]
async fn field_handlers_on_the_status_fire_on_its_changes_and_it_is_in_the_essence() {
    logs();
    let emulator = emulator().await;
    let calls = Calls::default();
    let c = calls.clone();
    let registry = Registry::builder()
        .on_field(
            example_ref(),
            "phase",
            "status.phase",
            record(&calls, "phase"),
        )
        .on_update(example_ref(), "running", record(&calls, "running"))
        .field("status.phase")
        .new_value(json!("Running"))
        .on_update(example_ref(), "app", record(&calls, "app"))
        .field("metadata.labels.app")
        .on_update(example_ref(), "any", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                let fields: Vec<Value> = kw.diff.items().iter().map(|i| json!(i.field)).collect();
                calls.push("any", json!(fields));
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start_with(&emulator, registry, test_settings());
    let api = api(&emulator);
    create(
        &api,
        "s",
        json!({"metadata": {"labels": {"app": "a"}}, "spec": {"size": 1}}),
        None,
    )
    .await;
    stored_at(&api, "s", "/spec/size", json!(1)).await;

    set_status(&api, "s", json!({"phase": "Pending"})).await;
    stored_at(&api, "s", "/status/phase", json!("Pending")).await;
    set_status(&api, "s", json!({"phase": "Running", "other": 1})).await;
    stored_at(&api, "s", "/status/phase", json!("Running")).await;
    patch(&api, "s", json!({"metadata": {"labels": {"app": "b"}}})).await;
    stored_at(&api, "s", "/metadata/labels/app", json!("b")).await;
    // A status field no handler watches is no change, and not stored.
    set_status(&api, "s", json!({"other": 2})).await;
    touch(&api, "s").await;

    let essence: Value = serde_json::from_str(
        annotation(&body(&api, "s").await.expect("exists"), DIFFBASE).expect("stored"),
    )
    .expect("JSON");
    assert_eq!(essence["status"], json!({"phase": "Running"}), "{essence}");
    assert_eq!(
        changes(&calls, "phase"),
        [
            json!(["s", "update", null, "Pending"]),
            json!(["s", "update", "Pending", "Running"]),
        ]
    );
    assert_eq!(
        changes(&calls, "running"),
        [json!(["s", "update", "Pending", "Running"])]
    );
    assert_eq!(
        changes(&calls, "app"),
        [json!(["s", "update", "a", "b"])],
        "created with the label: no update"
    );
    // An `on_update` handler without a field sees the status changes too.
    let any = calls.named("any");
    assert_eq!(any.len(), 4, "{any:?}");
    assert_eq!(any[0], json!([["status"]]));
    assert_eq!(any[1], json!([["status", "phase"]]));
    operator.stop().await;
}
