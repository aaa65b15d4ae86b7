//! One handler of each kind, declared with the macros: the registry holds
//! exactly those, with their options and Kopf's defaults.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kopf_runtime as kopf;
use kopf_runtime::{
    DaemonOptions, ErrorsMode, FieldPath, HandlerKind, KindOptions, Kwargs, MetaValue, Operation,
    Options, Registry, ResourceRef, TimerOptions, ValueFilter, WebhookOptions,
};
use serde_json::{Value, json};

#[derive(Debug, serde::Deserialize, PartialEq)]
struct Spec {
    size: u32,
}

fn is_big(kwargs: &Kwargs) -> bool {
    kwargs
        .spec()
        .get("size")
        .and_then(Value::as_u64)
        .unwrap_or(0)
        > 10
}

#[kopf::on_create("kopf.dev", "v1", "kopfexamples", retries = 3, backoff = 1.5, timeout = 30, errors = kopf::ErrorsMode::Permanent)]
async fn created(spec: &Spec, name: &str, logger: &kopf::Logger) -> kopf::Result<Value> {
    logger.info(format!("creating {name}"));
    Ok(json!({"size": spec.size}))
}

#[kopf::on_update("kopf.dev/v1", "kopfexamples", field = "spec.size", old = kopf::PRESENT, new = 5)]
async fn resized(old: Option<u32>, new: Option<u32>, diff: &kopf::Diff) -> kopf::Result<()> {
    let _ = (old, new, diff);
    Ok(())
}

#[kopf::on_delete(ConfigMap, optional)]
async fn deleted(meta: &ObjectMeta) -> kopf::Result<()> {
    let _ = meta;
    Ok(())
}

#[kopf::on_resume(ConfigMap, deleted, labels("app" = "demo", "tier" = kopf::ABSENT))]
fn resumed(reason: kopf::Reason, patch: &kopf::Patch) -> kopf::Result<()> {
    patch.set("status.resumed", json!(reason.to_string()));
    Ok(())
}

#[kopf::on_field(Pod, field = "metadata.labels", id = "relabel")]
async fn relabelled(new: Option<BTreeMap<String, String>>) {
    let _ = new;
}

#[kopf::on_event(Secret, when = is_big, annotations("example.com/watch" = kopf::PRESENT))]
async fn spied(r#type: Option<kopf::EventType>, event: &Value) -> kopf::Result<()> {
    let _ = (r#type, event);
    Ok(())
}

#[kopf::timer("", "v1", "secrets", interval = 10, initial_delay = 2, sharp, idle = 5, no_finalizers,
              annotations("example.com/ttl" = kopf::PRESENT))]
async fn expire(
    meta: &ObjectMeta,
    stopped: kopf::Stopped,
    by_owner: &kopf::Index,
) -> kopf::Result<()> {
    let _ = (meta, stopped.is_set(), by_owner.len());
    Ok(())
}

#[kopf::daemon(
    Pod,
    cancellation_timeout = 5,
    cancellation_backoff = 1,
    cancellation_polling = 0.25,
    initial_delay = 3
)]
async fn monitor(name: &str, stopped: kopf::Stopped) -> kopf::Result<()> {
    while !stopped.is_set() {
        let _ = name;
        stopped.wait(Duration::from_secs(10)).await;
    }
    Ok(())
}

#[kopf::index(Pod, field = "spec.nodeName", value = kopf::PRESENT)]
async fn by_owner(namespace: Option<&str>, name: String) -> kopf::Result<Value> {
    Ok(json!({ namespace.unwrap_or_default(): name }))
}

#[kopf::on_startup(retries = 1)]
async fn boot(logger: kopf::Logger, memo: &kopf::Memo) -> kopf::Result<()> {
    memo.insert(1_u8);
    logger.info("started");
    Ok(())
}

#[kopf::on_cleanup]
async fn bye(retry: u32) {
    let _ = retry;
}

#[kopf::on_probe(id = "ready")]
async fn probe(runtime: Duration) -> kopf::Result<u64> {
    Ok(runtime.as_secs())
}

#[kopf::on_login(timeout = 60)]
async fn login(started: Option<jiff::Timestamp>) -> kopf::Result<Value> {
    let _ = started;
    Ok(json!({"server": "https://127.0.0.1:6443"}))
}

#[kopf::on_validate(
    "kopf.dev",
    "v1",
    "kopfexamples",
    operations("CREATE", "UPDATE"),
    persistent,
    side_effects = false
)]
async fn check(spec: &Spec, warnings: &kopf::Warnings, dryrun: bool) -> kopf::Result<()> {
    if spec.size == 0 {
        return Err(kopf::Error::admission("size must be positive", 400));
    }
    if dryrun {
        warnings.push("dry run");
    }
    Ok(())
}

#[kopf::on_mutate(
    "kopf.dev",
    "v1",
    "kopfexamples",
    subresource = "status",
    ignore_failures,
    param = "x"
)]
async fn mutate(
    patch: &kopf::Patch,
    param: &String,
    operation: kopf::Operation,
) -> kopf::Result<()> {
    patch.set(
        "metadata.annotations.op",
        json!(format!("{param}:{}", operation.as_str())),
    );
    Ok(())
}

fn registry() -> Registry {
    Registry::from_inventory().expect("the handlers are valid")
}

fn examples() -> ResourceRef {
    ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples")
}

#[test]
fn the_registry_holds_exactly_one_handler_of_each_kind() {
    let registry = registry();
    let mut kinds: Vec<_> = registry.handlers().iter().map(|h| h.kind()).collect();
    kinds.sort();
    assert_eq!(kinds, HandlerKind::ALL);
    let mut ids: Vec<_> = registry.handlers().iter().map(|h| h.id()).collect();
    ids.sort();
    assert_eq!(
        ids,
        [
            "boot",
            "by_owner",
            "bye",
            "check",
            "created",
            "deleted",
            "expire",
            "login",
            "monitor",
            "mutate",
            "ready",
            "relabel/metadata.labels",
            "resized/spec.size",
            "resumed",
            "spied",
        ]
    );
}

#[test]
fn options_are_recorded_and_defaults_are_kopfs() {
    let registry = registry();
    let created = registry
        .get(HandlerKind::OnCreate, Some(&examples()), "created")
        .expect("created");
    assert_eq!(
        *created.options(),
        Options {
            retries: Some(3),
            backoff: Some(Duration::from_millis(1500)),
            timeout: Some(Duration::from_secs(30)),
            errors: ErrorsMode::Permanent
        }
    );
    assert_eq!(created.source(), "all_kinds::created");
    assert!(!created.requires_finalizer() && !created.is_blocking());

    let resized = registry
        .get(
            HandlerKind::OnUpdate,
            Some(&examples()),
            "resized/spec.size",
        )
        .expect("resized");
    assert_eq!(*resized.options(), Options::default());
    assert_eq!(
        resized.options().backoff,
        None,
        "unset: settings.execution.default_backoff decides"
    );
    assert_eq!(resized.filters().field, FieldPath::parse("spec.size"));
    assert_eq!(resized.filters().old, Some(ValueFilter::Present));
    assert_eq!(resized.filters().new, Some(ValueFilter::Equals(json!(5))));

    let cm = ResourceRef::of::<ConfigMap>();
    let deleted = registry
        .get(HandlerKind::OnDelete, Some(&cm), "deleted")
        .expect("deleted");
    assert_eq!(
        *deleted.kind_options(),
        KindOptions::Delete { optional: true }
    );
    assert!(!deleted.requires_finalizer());

    let resumed = registry
        .get(HandlerKind::OnResume, Some(&cm), "resumed")
        .expect("resumed");
    assert_eq!(
        *resumed.kind_options(),
        KindOptions::Resume { deleted: true }
    );
    assert!(resumed.is_blocking());
    assert_eq!(
        resumed.filters().labels.entries,
        [
            ("app".to_owned(), MetaValue::Equals("demo".into())),
            ("tier".to_owned(), MetaValue::Absent)
        ]
    );

    let secrets = ResourceRef::of::<Secret>();
    let expire = registry
        .get(HandlerKind::Timer, Some(&secrets), "expire")
        .expect("expire");
    assert_eq!(
        *expire.kind_options(),
        KindOptions::Timer(TimerOptions {
            interval: Some(Duration::from_secs(10)),
            initial_delay: Some(Duration::from_secs(2)),
            sharp: true,
            idle: Some(Duration::from_secs(5)),
        })
    );
    assert!(!expire.requires_finalizer());
    assert_eq!(expire.index_params(), ["by_owner"]);

    let pods = ResourceRef::of::<Pod>();
    let monitor = registry
        .get(HandlerKind::Daemon, Some(&pods), "monitor")
        .expect("monitor");
    assert_eq!(
        *monitor.kind_options(),
        KindOptions::Daemon(DaemonOptions {
            initial_delay: Some(Duration::from_secs(3)),
            cancellation_backoff: Some(Duration::from_secs(1)),
            cancellation_timeout: Some(Duration::from_secs(5)),
            cancellation_polling: Some(Duration::from_millis(250)),
        })
    );
    assert!(
        monitor.requires_finalizer(),
        "daemons keep finalizers by default"
    );
    assert_eq!(*monitor.options(), Options::default());

    let index = registry
        .get(HandlerKind::Index, Some(&pods), "by_owner")
        .expect("index ids get no field suffix");
    assert_eq!(index.filters().value, Some(ValueFilter::Present));

    let check = registry
        .get(HandlerKind::OnValidate, Some(&examples()), "check")
        .expect("check");
    assert_eq!(
        *check.kind_options(),
        KindOptions::Webhook(WebhookOptions {
            operations: vec![Operation::Create, Operation::Update],
            subresource: None,
            persistent: true,
            side_effects: false,
            ignore_failures: false,
        })
    );
    let mutate = registry
        .get(HandlerKind::OnMutate, Some(&examples()), "mutate")
        .expect("mutate");
    assert_eq!(mutate.param_value(), Some(&json!("x")));

    let probe = registry
        .get(HandlerKind::OnProbe, None, "ready")
        .expect("probe by id");
    assert!(probe.resource().is_none());
    let login = registry
        .get(HandlerKind::OnLogin, None, "login")
        .expect("login");
    assert_eq!(login.options().timeout, Some(Duration::from_secs(60)));
    assert_eq!(registry.index_ids(), ["by_owner"]);
}

#[tokio::test]
async fn handlers_receive_their_kwargs_by_name() {
    let registry = registry();
    let created = registry
        .get(HandlerKind::OnCreate, Some(&examples()), "created")
        .expect("created");
    let kwargs = Kwargs::new(json!({"metadata": {"name": "ex"}, "spec": {"size": 7}}));
    assert_eq!(created.call(kwargs).await, Ok(Some(json!({"size": 7}))));

    let mutate = registry
        .get(HandlerKind::OnMutate, Some(&examples()), "mutate")
        .expect("mutate");
    let mut kwargs = Kwargs::new(json!({}));
    kwargs.admission = Some(kopf::Admission {
        operation: Operation::Update,
        ..Default::default()
    });
    let patch = kwargs.patch.clone();
    assert_eq!(mutate.call(kwargs).await, Ok(None));
    assert_eq!(
        patch.to_value(),
        json!({"metadata": {"annotations": {"op": "x:UPDATE"}}})
    );
}

#[tokio::test]
async fn blocking_handlers_run_off_the_async_threads() {
    let registry = registry();
    let resumed = registry
        .get(
            HandlerKind::OnResume,
            Some(&ResourceRef::of::<ConfigMap>()),
            "resumed",
        )
        .expect("resumed");
    let mut kwargs = Kwargs::new(json!({}));
    kwargs.reason = Some(kopf::Reason::Resume);
    let patch = kwargs.patch.clone();
    assert_eq!(resumed.call(kwargs).await, Ok(None));
    assert_eq!(patch.to_value(), json!({"status": {"resumed": "resume"}}));
}

#[tokio::test]
async fn a_malformed_object_is_an_error_value_not_a_panic() {
    let registry = registry();
    let created = registry
        .get(HandlerKind::OnCreate, Some(&examples()), "created")
        .expect("created");
    let kwargs = Kwargs::new(json!({"metadata": {"name": "ex"}, "spec": {"size": "big"}}));
    let outcome = created.call(kwargs).await;
    assert!(
        matches!(
            &outcome,
            Err(kopf::HandlerError::Kwarg(kopf::KwargError::Deserialize {
                kwarg: "spec",
                ..
            }))
        ),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn admission_rejections_and_missing_kwargs_are_reported() {
    let registry = registry();
    let check = registry
        .get(HandlerKind::OnValidate, Some(&examples()), "check")
        .expect("check");
    let mut kwargs = Kwargs::new(json!({"spec": {"size": 0}}));
    kwargs.admission = Some(kopf::Admission::default());
    assert_eq!(
        check.call(kwargs).await,
        Err(kopf::HandlerError::Admission {
            message: "size must be positive".into(),
            code: 400
        })
    );
    let monitor = registry
        .get(
            HandlerKind::Daemon,
            Some(&ResourceRef::of::<Pod>()),
            "monitor",
        )
        .expect("monitor");
    assert_eq!(
        monitor
            .call(Kwargs::new(json!({"metadata": {"name": "p"}})))
            .await,
        Err(kopf::HandlerError::Kwarg(kopf::KwargError::Missing {
            kwarg: "stopped"
        }))
    );
}
