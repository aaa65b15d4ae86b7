//! Every resource handler kind with every option, typed and dynamic resources.
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kopf_runtime as kopf;
use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug)]
#[kube(group = "kopf.dev", version = "v1", kind = "KopfExample", namespaced, schema = "disabled")]
pub struct KopfExampleSpec {
    size: u32,
}

fn big(kwargs: &kopf::Kwargs) -> bool {
    kwargs.field("spec.size").is_some()
}

fn is_team(value: Option<&str>, _kwargs: &kopf::Kwargs) -> bool {
    value.is_some_and(|v| v.starts_with("team-"))
}

fn positive(value: Option<&Value>, _kwargs: &kopf::Kwargs) -> bool {
    value.and_then(Value::as_i64).is_some_and(|n| n > 0)
}

#[kopf::on_create(KopfExample)]
#[kopf::on_resume(KopfExample, deleted = true)]
async fn created(spec: &KopfExampleSpec, name: &str, logger: &kopf::Logger) -> kopf::Result<Value> {
    logger.info(format!("{name}: {}", spec.size));
    Ok(serde_json::json!({"size": spec.size}))
}

#[kopf::on_create(ConfigMap, id = "cm", retries = 3, backoff = 0.5, timeout = 60, errors = kopf::ErrorsMode::Ignored,
                  labels("app" = "x", "team" = is_team, "gone" = kopf::ABSENT),
                  annotations("seen" = kopf::PRESENT), when = big, field = "data.key", value = "v", param = 42)]
async fn created_cm(body: &ConfigMap, meta: &ObjectMeta, param: u32, uid: Option<&str>, namespace: Option<String>) -> kopf::Result<()> {
    let _ = (body, meta, param, uid, namespace);
    Ok(())
}

#[kopf::on_update("kopf.dev", "v1", "kopfexamples", field = "spec.size", old = positive, new = kopf::PRESENT, errors = "temporary")]
async fn resized(old: Option<u32>, new: &Option<u32>, diff: kopf::Diff, reason: kopf::Reason, retry: usize, started: kopf::Timestamp, runtime: Duration) -> kopf::Result<()> {
    let _ = (old, new, diff, reason, retry, started, runtime);
    Ok(())
}

#[kopf::on_delete(Pod, optional = false, retries = 0)]
fn deleted(status: &Value, labels: &BTreeMap<String, String>, annotations: BTreeMap<String, String>, patch: kopf::Patch) -> kopf::Result<()> {
    let _ = (status, labels, annotations, patch);
    Ok(())
}

#[kopf::on_field("apps/v1", "deployments", field = "spec.replicas", old = 1, new = serde_json::json!(2))]
async fn replicas(_old: Option<i64>, _memo: kopf::Memo) {}

#[kopf::on_event(Secret, id = "spy", param = "p", labels("a" = "b"))]
async fn spied(r#type: Option<&str>, event: Value, body: Value, _param: String) -> kopf::Result<()> {
    let _ = (r#type, event, body);
    Ok(())
}

#[kopf::timer(Secret, interval = 10, initial_delay = 1.5, sharp, idle = 60, no_finalizers, retries = 2, backoff = 5,
              timeout = 30, errors = kopf::ErrorsMode::Permanent, field = "type", value = "Opaque")]
async fn expire(meta: &ObjectMeta, client: kube::Client, stopped: &kopf::Stopped) -> kopf::Result<()> {
    let _ = (meta, client, stopped.is_set());
    Ok(())
}

// As in Kopf's docs: no interval, once the object has been quiet for 10 s.
#[kopf::timer(Secret, idle = 10)]
async fn settled(name: &str, live: &kopf::LiveBody) {
    let _ = (name, live.get());
}

#[kopf::daemon(Pod, initial_delay = 1, cancellation_backoff = 2, cancellation_timeout = 5, cancellation_polling = 0.1,
               no_finalizers = false, annotations("x" = "y"))]
async fn monitor(name: String, stopped: kopf::Stopped, by_node: &kopf::Index, mut live: kopf::LiveBody) -> kopf::Result<()> {
    while !stopped.is_set() {
        let _ = (&name, by_node.get(Some("n")), live.get());
        tokio::select! {
            () = live.changed() => {}
            _ = stopped.wait(Duration::from_secs(10)) => {}
        }
    }
    Ok(())
}

// A plain fn: it runs on a blocking thread and polls its stop flag.
#[kopf::daemon(Secret, cancellation_timeout = 5)]
fn poll(name: String, stopped: &kopf::Stopped) -> kopf::Result<()> {
    while !stopped.wait_blocking(Duration::from_secs(10)) {
        let _ = &name;
    }
    Ok(())
}

#[kopf::index(Pod, field = "spec.nodeName", value = kopf::PRESENT, retries = 1)]
async fn by_node(spec: &Value, name: &str) -> kopf::Result<Value> {
    Ok(serde_json::json!({ spec["nodeName"].as_str().unwrap_or_default(): name }))
}

fn main() {
    let registry = kopf::Registry::from_inventory().expect("valid handlers");
    assert_eq!(registry.len(), 14);
    assert_eq!(registry.resources().len(), 5); // `KopfExample` and "kopfexamples" are one resource
}

#[kopf::on_create(KopfExample, id = "with_children")]
async fn with_children(spec: KopfExampleSpec, subhandlers: kopf::Subhandlers) -> kopf::Result<()> {
    for n in 0..spec.size {
        subhandlers.register(format!("part{n}"), |_kw: kopf::Kwargs| async { Ok::<_, kopf::Error>(()) });
    }
    subhandlers.execute_with(kopf::Lifecycle::AllAtOnce).await
}

#[kopf::on_update(KopfExample)]
fn plain_with_children(subhandlers: &kopf::Subhandlers) {
    subhandlers.add(kopf::Handler::subhandler("slow", |_kw: kopf::Kwargs| async { Ok::<_, kopf::Error>(()) }).retries(3));
}
