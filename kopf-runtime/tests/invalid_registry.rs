//! Handlers that compile but conflict: `Registry::from_inventory` reports
//! every problem at once and names the offending fns by path.

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime as kopf;
use kopf_runtime::{Registry, RegistryError};

#[kopf::on_create(ConfigMap, id = "same")]
async fn first() {}

mod elsewhere {
    use kopf_runtime as kopf;

    #[kopf::on_create("", "v1", "configmaps", id = "same")]
    pub(crate) async fn second() {}
}

#[kopf::timer(ConfigMap, interval = 1)]
async fn reads_a_missing_index(pods_by_node: &kopf::Index) {
    let _ = pods_by_node;
}

#[test]
fn duplicate_ids_and_unknown_indexes_name_the_fns() {
    let _ = elsewhere::second;
    let error = Registry::from_inventory().expect_err("conflicting handlers");
    let RegistryError::Multiple(errors) = &error else {
        panic!("expected two problems: {error}")
    };
    assert_eq!(
        errors,
        &[
            RegistryError::DuplicateId {
                id: "same".into(),
                resource: "`configmaps.v1`".into(),
                kind_scope: "on_create",
                first: "invalid_registry::elsewhere::second".into(),
                second: "invalid_registry::first".into(),
            },
            RegistryError::UnknownIndex {
                handler: "invalid_registry::reads_a_missing_index".into(),
                index: "pods_by_node".into(),
                known: "none".into(),
            },
        ]
    );
    let message = error.to_string();
    assert!(
        message.contains("`invalid_registry::elsewhere::second` and `invalid_registry::first`"),
        "{message}"
    );
}
