//! Where Kopf's semantics are subtle, kopf-rs does as Kopf does: handlers'
//! fields outside the essence (in `status`) are part of it, `field` alone
//! means "present", `value` matches the old or the new value, a `null` is
//! present, and the state Kopf 1.45 persists on an object (its diff-base
//! and progress annotations) carries over to kopf-rs and back, byte for
//! byte.

use std::sync::Arc;
use std::time::Duration;

use kopf_runtime::{ABSENT, Error, Kwargs, PRESENT, Registry, ResourceRef};
use kopf_testing::Emulator;
use kopf_tests::{
    Calls, DIFFBASE, Running, TOUCH, annotation, eventually, logs, test_settings, touch,
};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

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

/// Waits until the diff-base annotation of `name` is exactly `text`.
async fn stored(api: &Api<DynamicObject>, name: &str, text: &str) -> Value {
    eventually(
        &format!("the diff-base of {name} to be {text:?}"),
        || async {
            body(api, name)
                .await
                .filter(|b| annotation(b, DIFFBASE) == Some(text))
        },
    )
    .await
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

/// The touch label's value on `name` (see [`touch`]).
async fn touched(api: &Api<DynamicObject>, name: &str) -> String {
    let body = body(api, name).await.expect("exists");
    body["metadata"]["labels"][TOUCH]
        .as_str()
        .expect("touched")
        .to_owned()
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

#[tokio::test]
async fn a_field_alone_means_present_and_a_null_is_present() {
    logs();
    let emulator = emulator().await;
    let calls = Calls::default();
    let registry = Registry::builder()
        .on_create(example_ref(), "present", record(&calls, "present"))
        .field("spec.opt")
        .on_create(example_ref(), "null", record(&calls, "null"))
        .field("spec.opt")
        .value(json!(null))
        .on_create(example_ref(), "absent", record(&calls, "absent"))
        .field("spec.opt")
        .value(ABSENT)
        .on_event(example_ref(), "seen", record(&calls, "seen"))
        .field("spec.opt")
        .on_event(example_ref(), "unseen", record(&calls, "unseen"))
        .field("spec.opt")
        .value(ABSENT)
        .build()
        .expect("a valid registry");
    let operator = Running::start_with(&emulator, registry, test_settings());
    let api = api(&emulator);
    create(&api, "with", json!({"spec": {"opt": 1}}), None).await;
    create(&api, "nulled", json!({"spec": {"opt": null}}), None).await;
    create(&api, "without", json!({"spec": {"other": 1}}), None).await;
    for name in ["with", "nulled", "without"] {
        touch(&api, name).await;
    }
    let names = |id: &str| {
        let mut names: Vec<String> = calls
            .named(id)
            .iter()
            .map(|c| c["name"].as_str().unwrap_or("?").to_owned())
            .collect();
        names.sort();
        names.dedup();
        names
    };
    assert_eq!(names("present"), ["nulled", "with"]);
    assert_eq!(names("null"), ["nulled"]);
    // A change handler sees the old value too, which is absent on creation:
    // `value = ABSENT` matches every creation, as in Kopf.
    assert_eq!(names("absent"), ["nulled", "with", "without"]);
    // Other handlers see the body alone.
    assert_eq!(names("seen"), ["nulled", "with"]);
    assert_eq!(names("unseen"), ["without"]);
    assert_eq!(
        calls.named("present").len() + calls.named("null").len() + calls.named("absent").len(),
        6,
        "once each: {:?}",
        calls.all()
    );
    operator.stop().await;
}

#[tokio::test]
async fn an_object_without_the_field_is_not_kept_until_it_has_it() {
    logs();
    let emulator = emulator().await;
    let calls = Calls::default();
    let registry = Registry::builder()
        .on_update(example_ref(), "opt", record(&calls, "opt"))
        .field("spec.opt")
        .on_create(example_ref(), "marker", record(&calls, "marker"))
        .field("spec.marker")
        .build()
        .expect("a valid registry");
    let operator = Running::start_with(&emulator, registry, test_settings());
    let api = api(&emulator);
    create(&api, "blind", json!({"spec": {"size": 1}}), None).await;
    // Handled after `blind`'s creation, by the same watch.
    create(&api, "later", json!({"spec": {"marker": 1}}), None).await;
    calls.wait_for("marker", 1).await;
    stored_at(&api, "later", "/spec/marker", json!(1)).await;
    let blind = body(&api, "blind").await.expect("exists");
    assert!(
        blind["metadata"].get("annotations").is_none(),
        "no handler's field is present: the object is not handled at all: {blind}"
    );

    // The field appears: the object is new to the handlers, so created.
    patch(&api, "blind", json!({"spec": {"opt": "x"}})).await;
    stored_at(&api, "blind", "/spec/opt", json!("x")).await;
    patch(&api, "blind", json!({"spec": {"opt": "y"}})).await;
    stored_at(&api, "blind", "/spec/opt", json!("y")).await;
    assert_eq!(
        changes(&calls, "opt"),
        [json!(["blind", "update", "x", "y"])]
    );
    operator.stop().await;
}

#[tokio::test]
async fn value_old_and_new_tell_null_from_absent_in_changes() {
    logs();
    let emulator = emulator().await;
    let calls = Calls::default();
    let registry = Registry::builder()
        .on_update(example_ref(), "nulled", record(&calls, "nulled"))
        .field("spec.opt")
        .new_value(json!(null))
        .on_update(example_ref(), "removed", record(&calls, "removed"))
        .field("spec.opt")
        .new_value(ABSENT)
        .on_update(example_ref(), "appeared", record(&calls, "appeared"))
        .field("spec.opt")
        .old(ABSENT)
        .new_value(PRESENT)
        .on_field(example_ref(), "one", "spec.opt", record(&calls, "one"))
        .value(json!(1))
        .build()
        .expect("a valid registry");
    let operator = Running::start_with(&emulator, registry, test_settings());
    let api = api(&emulator);
    create(&api, "n", json!({"spec": {"opt": 1, "step": 0}}), None).await;
    stored_at(&api, "n", "/spec/step", json!(0)).await;
    let steps = [
        // 1 → null: set by a JSON patch (a merge patch's null removes).
        json!([{"op": "replace", "path": "/spec/opt", "value": null}, {"op": "replace", "path": "/spec/step", "value": 1}]),
        json!([{"op": "remove", "path": "/spec/opt"}, {"op": "replace", "path": "/spec/step", "value": 2}]),
        json!([{"op": "add", "path": "/spec/opt", "value": 1}, {"op": "replace", "path": "/spec/step", "value": 3}]),
        json!([{"op": "replace", "path": "/spec/opt", "value": 2}, {"op": "replace", "path": "/spec/step", "value": 4}]),
    ];
    for (step, ops) in steps.into_iter().enumerate() {
        api.patch(
            "n",
            &PatchParams::default(),
            &Patch::<Value>::Json(
                serde_json::from_value::<json_patch::Patch>(ops).expect("a JSON patch"),
            ),
        )
        .await
        .expect("patched");
        stored_at(&api, "n", "/spec/step", json!(step + 1)).await;
    }
    assert_eq!(changes(&calls, "nulled"), [json!(["n", "update", 1, null])]);
    assert_eq!(
        changes(&calls, "removed"),
        [json!(["n", "update", null, null])]
    );
    assert_eq!(
        changes(&calls, "appeared"),
        [json!(["n", "update", null, 1])],
        "a null is present: 1 appears once, from absent"
    );
    assert_eq!(
        changes(&calls, "one"),
        [
            json!(["n", "create", null, 1]),
            json!(["n", "update", 1, null]),
            json!(["n", "update", null, 1]),
            json!(["n", "update", 1, 2]),
        ],
        "from or to 1"
    );
    operator.stop().await;
}

/// The handlers of a Kopf operator, registered with the same ids Kopf gives
/// `@kopf.on.update(…, field='spec.size') def size`, `@kopf.on.field(…,
/// field='status.phase') def phase` and `@kopf.on.field(…,
/// field='metadata.labels') def labels`.
fn kopfs_handlers(calls: &Calls, gate: &Arc<Semaphore>) -> Registry {
    let (c, gate) = (calls.clone(), Arc::clone(gate));
    Registry::builder()
        .on_update(example_ref(), "size", record(calls, "size"))
        .field("spec.size")
        .on_field(example_ref(), "phase", "status.phase", move |kw: Kwargs| {
            let (calls, gate) = (c.clone(), Arc::clone(&gate));
            async move {
                calls.push("phase", call_of(&kw));
                if kw.name() == Some("midway") && kw.retry == 1 {
                    return Err(Error::temporary("not yet", Duration::from_millis(100)));
                }
                if kw.name() == Some("midway") && kw.retry == 2 {
                    let _pass = gate.acquire().await.expect("open");
                }
                Ok(())
            }
        })
        .on_field(
            example_ref(),
            "labels",
            "metadata.labels",
            record(calls, "labels"),
        )
        .build()
        .expect("a valid registry")
}

/// The diff-base Kopf 1.45 writes for an object with `spec.size`, the
/// label `app` and `status.phase`, handled by [`kopfs_handlers`]:
/// `json.dumps(essence, separators=(',', ':')) + '\n'` of the essence
/// `AnnotationsDiffBaseStorage.build` makes (the body's fields, then
/// `metadata.labels`, then the extra field `status.phase`), with Kopf's own
/// annotations filtered out and the empty stanzas dropped.
fn kopfs_diffbase(size: u32, labels: &str, phase: &str) -> String {
    format!(
        "{{\"spec\":{{\"size\":{size}}},\"metadata\":{{\"labels\":{{{labels}}}}},\"status\":{{\"phase\":\"{phase}\"}}}}\n"
    )
}

/// Kopf 1.45's progress record (`ProgressRecord` as
/// `AnnotationsProgressStorage.store` writes it, `verbose=False`: `None`s
/// dropped, `success`/`failure` written as booleans) of a handler that
/// succeeded in one attempt.
const KOPF_SUCCEEDED: &str = r#"{"started":"2024-05-01T10:00:00.000000+00:00","stopped":"2024-05-01T10:00:01.000000+00:00","purpose":"update","retries":1,"success":true,"failure":false}"#;

/// Kopf 1.45's progress record of a handler whose first attempt failed
/// with `kopf.TemporaryError("not yet", delay=60)`.
const KOPF_DELAYED: &str = r#"{"started":"2024-05-01T10:00:00.000000+00:00","delayed":"2024-05-01T10:01:00.000000+00:00","purpose":"update","retries":1,"success":false,"failure":false,"message":"not yet"}"#;

#[tokio::test]
async fn the_state_kopf_persisted_carries_over_and_kopf_rs_writes_it_as_kopf_would() {
    logs();
    let emulator = emulator().await;
    let api = api(&emulator);
    // Handled by Kopf, nothing changed since.
    create(
        &api,
        "settled",
        json!({
            "metadata": {"labels": {"app": "a"}, "annotations": {
                DIFFBASE: kopfs_diffbase(1, r#""app":"a""#, "Pending"),
            }},
            "spec": {"size": 1},
        }),
        Some(json!({"phase": "Pending"})),
    )
    .await;
    // Changed in `spec.size` and `status.phase`; Kopf stopped in the middle
    // of the update: `size` succeeded, `phase` waits for its retry.
    create(
        &api,
        "midway",
        json!({
            "metadata": {"labels": {"app": "a"}, "annotations": {
                DIFFBASE: kopfs_diffbase(1, r#""app":"a""#, "Pending"),
                "kopf.zalando.org/size.spec.size": KOPF_SUCCEEDED,
                "kopf.zalando.org/phase.status.phase": KOPF_DELAYED,
            }},
            "spec": {"size": 2},
        }),
        Some(json!({"phase": "Running"})),
    )
    .await;

    let calls = Calls::default();
    let gate = Arc::new(Semaphore::new(0));
    let operator = Running::start_with(&emulator, kopfs_handlers(&calls, &gate), test_settings());

    // The retry of `phase` ran (its record says it is due) and failed
    // again: the record kopf-rs writes is Kopf's, the start kept.
    let (text, record) = eventually("the second attempt's record", || async {
        let body = body(&api, "midway").await?;
        let text = annotation(&body, "kopf.zalando.org/phase.status.phase")?.to_owned();
        let record: Value = serde_json::from_str(&text).ok()?;
        (record["retries"] == 2).then_some((text, record))
    })
    .await;
    let delayed = record["delayed"].as_str().expect("delayed");
    assert!(kopf_timestamp(delayed), "{delayed}");
    // What Kopf writes after such an attempt (`HandlerState.with_outcome`,
    // then `for_storage`), in the fields' order.
    assert_eq!(
        text,
        format!(
            r#"{{"started":"2024-05-01T10:00:00.000000+00:00","delayed":"{delayed}","purpose":"update","retries":2,"success":false,"failure":false,"message":"not yet"}}"#
        )
    );
    gate.add_permits(1);
    let midway = stored(
        &api,
        "midway",
        &kopfs_diffbase(2, r#""app":"a""#, "Running"),
    )
    .await;
    let annotations = midway["metadata"]["annotations"]
        .as_object()
        .expect("annotations");
    assert_eq!(
        annotations.keys().collect::<Vec<_>>(),
        [DIFFBASE],
        "the records are purged: {midway}"
    );

    // Nothing changed in `settled`: no handler runs (a touch is a change of
    // the labels, seen by `labels` alone), and its diff-base is the same
    // but for the label, byte for byte.
    touch(&api, "settled").await;
    let label = touched(&api, "settled").await;
    stored(
        &api,
        "settled",
        &kopfs_diffbase(1, &format!(r#""app":"a","{TOUCH}":"{label}""#), "Pending"),
    )
    .await;

    // Later changes are seen, once each.
    set_status(&api, "settled", json!({"phase": "Running"})).await;
    stored_at(&api, "settled", "/status/phase", json!("Running")).await;
    patch(&api, "settled", json!({"spec": {"size": 3}})).await;
    stored_at(&api, "settled", "/spec/size", json!(3)).await;
    patch(
        &api,
        "midway",
        json!({"metadata": {"labels": {"app": "b"}}}),
    )
    .await;
    stored_at(&api, "midway", "/metadata/labels/app", json!("b")).await;

    assert_eq!(
        changes(&calls, "size"),
        [json!(["settled", "update", 1, 3])],
        "the size of `midway` was handled by Kopf"
    );
    let phases: Vec<Value> = calls
        .named("phase")
        .iter()
        .map(|c| json!([c["name"], c["old"], c["new"], c["retry"]]))
        .collect();
    assert_eq!(
        phases,
        [
            json!(["midway", "Pending", "Running", 1]),
            json!(["midway", "Pending", "Running", 2]),
            json!(["settled", "Pending", "Running", 0]),
        ]
    );
    let labels: Vec<(Value, Value)> = calls
        .named("labels")
        .iter()
        .map(|c| (c["name"].clone(), c["new"]["app"].clone()))
        .collect();
    assert_eq!(
        labels,
        [
            (json!("settled"), json!("a")),
            (json!("midway"), json!("b"))
        ],
        "the touch of `settled` and the new label of `midway`"
    );
    operator.stop().await;
}

/// Whether `text` is a timestamp as Kopf writes them:
/// `datetime.isoformat(timespec='microseconds')` in UTC.
fn kopf_timestamp(text: &str) -> bool {
    let bytes = text.as_bytes();
    let shape = "dddd-dd-ddTdd:dd:dd.dddddd+00:00";
    bytes.len() == shape.len()
        && shape.bytes().zip(bytes).all(|(s, b)| match s {
            b'd' => b.is_ascii_digit(),
            s => s == *b,
        })
}
