//! A crate that only declares handlers, as an operator split into crates would.
//!
//! A binary that depends on this crate but uses nothing from it gets none of
//! its handlers: the linker drops the `inventory` records. The binary keeps
//! them with `kopf_runtime::link!(kopf_example_handlers);`, which needs the
//! `kopf_runtime::handlers_crate!();` declaration below.

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime as kopf;

kopf::handlers_crate!();

mod more;

/// Logs every new ConfigMap.
#[kopf::on_create(ConfigMap)]
pub async fn configmap_created(name: &str, logger: &kopf::Logger) -> kopf::Result<()> {
    logger.info(format!("configmap {name} created"));
    Ok(())
}
