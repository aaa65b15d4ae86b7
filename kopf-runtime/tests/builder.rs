//! The builder registers every kind with every option, without macros, and
//! several registries with different handler sets coexist in one process.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kopf_runtime::{
    ABSENT, DaemonOptions, ErrorsMode, HandlerKind, KindOptions, Kwargs, MetaFilter, MetaValue,
    Operation, Options, PRESENT, Registry, ResourceRef, TimerOptions, ValueFilter, WebhookOptions,
};
use serde_json::json;

async fn noop(_: Kwargs) {}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn every_kind_and_option_can_be_registered_without_macros() {
    let cm = ResourceRef::of::<ConfigMap>();
    let pods = ResourceRef::of::<Pod>();
    let registry = Registry::builder()
        .on_create(cm.clone(), "create", noop)
        .retries(3)
        .backoff(secs(1))
        .timeout(secs(9))
        .errors(ErrorsMode::Ignored)
        .param(json!(1))
        .label("app", "x")
        .annotation("skip", ABSENT)
        .when(|kw| kw.name().is_some())
        .field("data.key")
        .value(json!("v"))
        .on_update(cm.clone(), "update", noop)
        .field("data")
        .old(PRESENT)
        .new_value(ValueFilter::Callback(std::sync::Arc::new(|v, _| {
            v.is_some()
        })))
        .on_delete(cm.clone(), "delete", noop)
        .optional(true)
        .on_resume(cm.clone(), "resume", noop)
        .deleted(true)
        .on_field(cm.clone(), "field", "metadata.labels", noop)
        .on_event(cm.clone(), "event", noop)
        .labels(MetaFilter::from_iter([("a", MetaValue::Present)]))
        .timer(pods.clone(), "timer", noop)
        .interval(secs(10))
        .initial_delay(secs(2))
        .sharp(true)
        .idle(secs(5))
        .no_finalizers()
        .daemon(pods.clone(), "daemon", noop)
        .initial_delay(secs(1))
        .cancellation_backoff(secs(2))
        .cancellation_timeout(secs(3))
        .cancellation_polling(secs(4))
        .uses_index("index".into())
        .index(pods.clone(), "index", noop)
        .on_validate(pods.clone(), "validate", noop)
        .operations(vec![Operation::Create])
        .subresource("status".into())
        .persistent(true)
        .side_effects(true)
        .ignore_failures(true)
        .on_mutate(pods.clone(), "mutate", noop)
        .on_startup("startup", noop)
        .on_cleanup("cleanup", noop)
        .on_probe("probe", noop)
        .on_login("login", noop)
        .build()
        .expect("valid");

    let mut kinds: Vec<_> = registry.handlers().iter().map(|h| h.kind()).collect();
    kinds.sort();
    assert_eq!(kinds, HandlerKind::ALL);

    let create = registry
        .get(HandlerKind::OnCreate, Some(&cm), "create/data.key")
        .expect("create");
    assert_eq!(
        *create.options(),
        Options {
            retries: Some(3),
            backoff: Some(secs(1)),
            timeout: Some(secs(9)),
            errors: ErrorsMode::Ignored
        }
    );
    assert_eq!(create.param_value(), Some(&json!(1)));
    assert!(create.filters().when.is_some());
    assert_eq!(
        create.filters().value,
        Some(ValueFilter::Equals(json!("v")))
    );

    let timer = registry
        .get(HandlerKind::Timer, Some(&pods), "timer")
        .expect("timer");
    assert_eq!(
        *timer.kind_options(),
        KindOptions::Timer(TimerOptions {
            interval: Some(secs(10)),
            initial_delay: Some(secs(2)),
            sharp: true,
            idle: Some(secs(5))
        })
    );
    assert!(!timer.requires_finalizer());
    let daemon = registry
        .get(HandlerKind::Daemon, Some(&pods), "daemon")
        .expect("daemon");
    assert_eq!(
        *daemon.kind_options(),
        KindOptions::Daemon(DaemonOptions {
            initial_delay: Some(secs(1)),
            cancellation_backoff: Some(secs(2)),
            cancellation_timeout: Some(secs(3)),
            cancellation_polling: Some(secs(4)),
        })
    );
    let validate = registry
        .get(HandlerKind::OnValidate, Some(&pods), "validate")
        .expect("validate");
    assert_eq!(
        *validate.kind_options(),
        KindOptions::Webhook(WebhookOptions {
            operations: vec![Operation::Create],
            subresource: Some("status".into()),
            persistent: true,
            side_effects: true,
            ignore_failures: true,
        })
    );
    assert!(
        registry.requires_finalizer(&pods),
        "the daemon keeps a finalizer"
    );
    assert!(
        !registry.requires_finalizer(&cm),
        "the delete handler is optional"
    );
}

#[tokio::test]
async fn several_registries_with_different_handlers_coexist() {
    let cm = ResourceRef::of::<ConfigMap>();
    let one = Registry::builder()
        .on_create(cm.clone(), "h", |_kw: Kwargs| async {
            Ok::<_, kopf_runtime::Error>(1)
        })
        .build()
        .expect("valid");
    let two = Registry::builder()
        .on_create(cm.clone(), "h", |_kw: Kwargs| async {
            Ok::<_, kopf_runtime::Error>(2)
        })
        .build()
        .expect("valid");
    let call = |registry: &Registry| {
        let handler = registry
            .get(HandlerKind::OnCreate, Some(&cm), "h")
            .expect("registered")
            .clone();
        async move { handler.call(Kwargs::default()).await }
    };
    assert_eq!(call(&one).await, Ok(Some(json!(1))));
    assert_eq!(call(&two).await, Ok(Some(json!(2))));
}
