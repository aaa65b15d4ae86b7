//! Activities and admission webhooks with all their options and parameters.
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime as kopf;
use serde_json::Value;

#[kopf::on_startup(id = "boot", retries = 3, backoff = 1, timeout = 10, errors = kopf::ErrorsMode::Permanent, param = true)]
async fn startup(logger: kopf::Logger, memo: &kopf::Memo, param: bool, client: &kube::Client) -> kopf::Result<()> {
    let _ = (logger, memo, param, client);
    Ok(())
}

#[kopf::on_cleanup]
fn cleanup(retry: u64, started: SystemTime, runtime: Duration) {
    let _ = (retry, started, runtime);
}

#[kopf::on_probe(id = "nodes")]
async fn probe(by_phase: &kopf::Index) -> kopf::Result<usize> {
    Ok(by_phase.len())
}

#[kopf::on_login(retries = 1)]
async fn login(logger: &kopf::Logger) -> kopf::Result<Value> {
    let _ = logger;
    Ok(serde_json::json!({"server": "https://127.0.0.1:6443"}))
}

#[kopf::on_validate(Pod, operations("CREATE", "UPDATE", "DELETE", "CONNECT"), subresource = "status", persistent,
                    side_effects, ignore_failures = false, labels("app" = kopf::PRESENT), field = "spec", value = kopf::PRESENT)]
async fn validate(
    spec: &Value,
    operation: &str,
    dryrun: bool,
    warnings: kopf::Warnings,
    userinfo: &Value,
    subresource: Option<&str>,
    headers: &BTreeMap<String, String>,
) -> kopf::Result<()> {
    let _ = (spec, operation, dryrun, userinfo, subresource, headers);
    warnings.push("looked");
    Ok(())
}

#[kopf::on_mutate(Pod, id = "defaults", param = "x")]
async fn mutate(
    patch: &kopf::Patch,
    operation: kopf::Operation,
    _param: Option<String>,
    old: Option<Value>,
    new: &Value,
    diff: &kopf::Diff,
    sslpeer: &Value,
    name: Option<&str>,
    memo: &kopf::Memo,
) {
    let _ = (operation, old, new, diff, sslpeer, name, memo);
    patch.set("metadata.labels.mutated", serde_json::json!("yes"));
}

#[kopf::index(Pod)]
async fn by_phase(status: &Value) -> kopf::Result<Value> {
    Ok(status["phase"].clone())
}

fn main() {
    let registry = kopf::Registry::from_inventory().expect("valid handlers");
    assert_eq!(registry.len(), 7);
    assert_eq!(registry.of_kind(kopf::HandlerKind::OnProbe).count(), 1);
}
