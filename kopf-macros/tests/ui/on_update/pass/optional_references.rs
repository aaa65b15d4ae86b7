//! `Option<&T>` borrows wherever `Option<T>` owns: `old`, `new`, `param` and
//! the object parameters.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kopf_runtime as kopf;
use serde_json::Value;

#[kopf::on_update(ConfigMap, param = 42)]
async fn changed(
    old: Option<&Value>,
    new: Option<&ConfigMap>,
    body: Option<&ConfigMap>,
    spec: Option<&Value>,
    status: Option<&Value>,
    meta: Option<&ObjectMeta>,
    labels: Option<&BTreeMap<String, String>>,
    annotations: std::option::Option<&BTreeMap<String, String>>,
    param: Option<&u32>,
    namespace: Option<&str>,
) -> kopf::Result<()> {
    let _ = (old, new, body, spec, status, meta, labels, annotations, param, namespace);
    Ok(())
}

#[kopf::on_field(ConfigMap, field = "data.key")]
fn key_changed(old: Option<&String>, new: Option<&String>, uid: Option<&str>) {
    let _ = (old, new, uid);
}

fn main() {}
