//! The start-up check of the operator's permissions, against the
//! emulator's RBAC: what is missing is named, all at once, before anything
//! is served.

use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kopf_runtime::{
    Kwargs, MissingPermissions, NamespaceSelector, Operator, OperatorError, Permission, Registry,
    ResourceRef,
};
use kopf_testing::Emulator;
use kopf_tests::{Running, Urls, captured_warnings, eventually, logs, test_settings};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

async fn noop(_: Kwargs) {}

/// An emulator enforcing RBAC, with the ServiceAccount `default/op` and
/// no rule for it.
async fn emulator_with_service_account() -> Emulator {
    let emulator = Emulator::builder()
        .rbac()
        .start()
        .await
        .expect("emulator starts");
    let accounts: Api<ServiceAccount> = Api::namespaced(emulator.client(), "default");
    let account = serde_json::from_value(json!({"metadata": {"name": "op"}})).expect("an account");
    accounts
        .create(&PostParams::default(), &account)
        .await
        .expect("the ServiceAccount is created");
    emulator
}

/// An operator of ConfigMaps in `default`, as the ServiceAccount `op`.
fn operator_as_service_account(emulator: &Emulator) -> Operator {
    let registry = Registry::builder()
        .on_create(ResourceRef::of::<ConfigMap>(), "create", noop)
        .build()
        .expect("a registry");
    let client = emulator
        .client_as_service_account("default", "op")
        .expect("a client as the ServiceAccount");
    Operator::new(registry)
        .client(client)
        .settings(test_settings())
        .namespaces(NamespaceSelector::new(["default"], false).expect("a selector"))
        .rbac(
            Permission::new("", "secrets")
                .verbs(["get"])
                .why("the handler reads a Secret"),
        )
}

#[tokio::test]
async fn an_operator_lacking_permissions_names_every_one_and_serves_nothing() {
    logs();
    let emulator = emulator_with_service_account().await;
    let running = Running::operator(operator_as_service_account(&emulator), Urls::default());
    let error = running
        .outcome()
        .await
        .expect_err("the operator does not start");
    let OperatorError::MissingPermissions { missing, report } = &error else {
        panic!("not a permissions error: {error}");
    };
    let named: Vec<String> = missing
        .iter()
        .map(|m| format!("{} {}.{} {:?}", m.verb, m.resource, m.group, m.namespace))
        .collect();
    assert_eq!(
        named,
        [
            "get secrets. Some(\"default\")",
            "list configmaps. Some(\"default\")",
            "list customresourcedefinitions.apiextensions.k8s.io None",
            "patch configmaps. Some(\"default\")",
            "patch configmaps/status. Some(\"default\")",
            "watch configmaps. Some(\"default\")",
            "watch customresourcedefinitions.apiextensions.k8s.io None",
        ],
        "{report}"
    );
    assert!(
        report.contains(
            "cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\""
        ),
        "{report}"
    );
    assert!(report.contains("the handler reads a Secret"), "{report}");
    assert!(report.contains("manifests"), "{report}");
    // Nothing was tried before the check: no request of the operator was denied.
    let usage = emulator.rbac_usage();
    assert!(usage.denials.is_empty(), "{:#?}", usage.denials);
}

#[tokio::test]
async fn with_missing_permissions_warned_the_operator_starts_anyway() {
    logs();
    let emulator = emulator_with_service_account().await;
    let operator =
        operator_as_service_account(&emulator).missing_permissions(MissingPermissions::Warn);
    let running = Running::operator(operator, Urls::default());
    // It goes on to serve, and is refused there.
    eventually("a request of the operator refused", || async {
        (!emulator.rbac_usage().denials.is_empty()).then_some(())
    })
    .await;
    assert!(running.is_running(), "the operator ended");
    assert!(
        captured_warnings().contains("the operator lacks 7 permission(s) it needs"),
        "{}",
        captured_warnings()
    );
    running.stop().await;
}
