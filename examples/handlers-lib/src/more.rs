//! Handlers in a submodule: kept by `link!` as well.

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime as kopf;

/// Counts ConfigMaps in an index.
#[kopf::index(ConfigMap)]
pub(crate) async fn configmaps_by_namespace(
    namespace: Option<&str>,
    name: &str,
) -> kopf::Result<serde_json::Value> {
    Ok(serde_json::json!({ namespace.unwrap_or_default(): name }))
}

/// Says goodbye.
#[kopf::on_cleanup]
pub(crate) fn goodbye() {}
