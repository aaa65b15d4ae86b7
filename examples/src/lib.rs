//! Shared bits of the example operators: Kopf's demo custom resource,
//! `KopfExample` (Kopf's `examples/crd.yaml`), and its demo object
//! (Kopf's `examples/obj.yaml`), which the examples create under
//! `--emulator`.
//!
//! [`runner`] registers the CRD as Kopf declares it ([`crd`]:
//! `kopfexamples.kopf.dev`, namespaced, with a status subresource, the short
//! names `kopfexes`, `kopfex`, `kexes` and `kex`, and the printer columns
//! `Duration`, `Children` and `Message`) in the emulator under `--emulator`,
//! so that `kubectl get kex` works as in Kopf's READMEs.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceValidation, JSONSchemaProps,
};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{CustomResource, CustomResourceExt, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The spec of Kopf's demo resource. Its schema keeps unknown fields, as
/// Kopf's does: fields other than these are in `extra`.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kopf.dev",
    version = "v1",
    kind = "KopfExample",
    plural = "kopfexamples",
    singular = "kopfexample",
    namespaced,
    status = "Value",
    shortname = "kopfexes",
    shortname = "kopfex",
    shortname = "kexes",
    shortname = "kex",
    printcolumn = r#"{"name": "Duration", "type": "string", "priority": 0, "jsonPath": ".spec.duration", "description": "For how long the pod should sleep."}"#,
    printcolumn = r#"{"name": "Children", "type": "string", "priority": 0, "jsonPath": ".status.create_fn.children", "description": "The children pods created."}"#,
    printcolumn = r#"{"name": "Message", "type": "string", "priority": 0, "jsonPath": ".status.create_fn.message", "description": "As returned from the handler (sometimes)."}"#,
    schema = "disabled"
)]
pub struct KopfExampleSpec {
    /// For how long the demo's pods sleep (`"1m"` in the demo object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// A field that the examples watch and change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// A list of items (sub-handlers are made per item).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<String>,
    /// Any other field.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// Kopf's `examples/crd.yaml`: the derived CRD with the schema Kopf
/// declares (`spec` and `status` are objects that keep unknown fields).
pub fn crd() -> CustomResourceDefinition {
    let mut crd = KopfExample::crd();
    let keep_unknown = || JSONSchemaProps {
        type_: Some("object".into()),
        x_kubernetes_preserve_unknown_fields: Some(true),
        ..JSONSchemaProps::default()
    };
    let schema = JSONSchemaProps {
        type_: Some("object".into()),
        properties: Some(
            [
                ("spec".to_owned(), keep_unknown()),
                ("status".to_owned(), keep_unknown()),
            ]
            .into(),
        ),
        ..JSONSchemaProps::default()
    };
    for version in &mut crd.spec.versions {
        version.schema = Some(CustomResourceValidation {
            open_api_v3_schema: Some(schema.clone()),
        });
    }
    crd
}

/// The examples' runner: with `--emulator`, Kopf's CRD ([`crd`]) is
/// registered, as `kubectl apply -f crd.yaml` does in Kopf's READMEs.
pub fn runner() -> kopf_runtime::Runner {
    kopf_runtime::Runner::new().crd(crd())
}

/// An emulator with Kopf's CRD ([`crd`]) registered, for the examples that
/// start one of their own.
pub fn emulator() -> kopf_testing::EmulatorBuilder {
    let crd = serde_json::to_value(crd()).expect("invariant: a CRD serializes to JSON");
    kopf_testing::Emulator::builder().crd_manifest(crd)
}

/// The namespace of the demo objects.
pub const NAMESPACE: &str = "default";

/// The name of the demo object, as in Kopf's `obj.yaml`.
pub const DEMO_NAME: &str = "kopf-example-1";

/// Kopf's demo object (`obj.yaml`): `kopf-example-1` with a label, an
/// annotation, a duration, a field and two items.
pub fn demo_object() -> KopfExample {
    let mut object = KopfExample::new(
        DEMO_NAME,
        KopfExampleSpec {
            duration: Some("1m".into()),
            field: Some("value".into()),
            items: vec!["item1".into(), "item2".into()],
            extra: BTreeMap::new(),
        },
    );
    object.metadata.namespace = Some(NAMESPACE.into());
    object.metadata.labels = Some([("somelabel".to_owned(), "somevalue".to_owned())].into());
    object.metadata.annotations =
        Some([("someannotation".to_owned(), "somevalue".to_owned())].into());
    object
}

/// The API of the demo objects.
pub fn examples_api(client: kube::Client) -> Api<KopfExample> {
    Api::namespaced(client, NAMESPACE)
}

/// Creates `object`, logging what happened (`kubectl apply -f obj.yaml`).
pub async fn create(client: kube::Client, object: &KopfExample) {
    let name = object.name_any();
    match examples_api(client)
        .create(&PostParams::default(), object)
        .await
    {
        Ok(_) => tracing::info!(%name, "created a demo KopfExample"),
        Err(error) => tracing::warn!(%name, %error, "cannot create a demo KopfExample"),
    }
}

/// Merges `patch` into the object `name` (`kubectl patch --type merge`).
pub async fn patch(client: kube::Client, name: &str, patch: Value) {
    match examples_api(client)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => tracing::info!(%name, %patch, "patched a demo KopfExample"),
        Err(error) => tracing::warn!(%name, %error, "cannot patch a demo KopfExample"),
    }
}

/// Deletes the object `name` (`kubectl delete`).
pub async fn delete(client: kube::Client, name: &str) {
    match examples_api(client)
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => tracing::info!(%name, "deleted a demo KopfExample"),
        Err(error) => tracing::warn!(%name, %error, "cannot delete a demo KopfExample"),
    }
}

/// The annotation in which kopf-runtime keeps the last handled state.
const LAST_HANDLED: &str = "kopf.zalando.org/last-handled-configuration";

/// Waits until the operator has handled the object `name` as it is now:
/// its last handled state (the annotation the operator writes once every
/// change handler of a cause is done) has the object's current spec.
/// Gives up after `patience`, with a warning; the demo goes on anyway.
pub async fn wait_handled(client: kube::Client, name: &str, patience: Duration) {
    let api = examples_api(client);
    let deadline = tokio::time::Instant::now() + patience;
    while tokio::time::Instant::now() < deadline {
        if let Ok(object) = api.get(name).await {
            let handled = object
                .annotations()
                .get(LAST_HANDLED)
                .and_then(|text| serde_json::from_str::<Value>(text).ok());
            let spec = serde_json::to_value(&object.spec).unwrap_or_default();
            if handled.is_some_and(|handled| handled["spec"] == spec) {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tracing::warn!(%name, "the operator has not handled the demo object in time");
}

/// The line before which an example that runs an emulator of its own
/// prints, under `--emulator-rbac`, the generated rules nothing used.
pub const UNUSED_RULES: &str = "unused RBAC rules: ";

/// What an example that runs an emulator of its own does under
/// `--emulator-rbac` before it ends, as the tests of the others check
/// from outside: fails if any request was denied, and prints the rules
/// of the roles named `name` that allowed no request, after
/// [`UNUSED_RULES`], as a JSON list of `Kind/namespace/name#index: rule`.
pub async fn rbac_report(emulator: &kopf_testing::Emulator, name: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::rbac::v1::{ClusterRole, Role};

    let usage = emulator.rbac_usage();
    anyhow::ensure!(
        usage.denials.is_empty(),
        "requests were denied: {:#?}",
        usage.denials
    );
    let used: std::collections::BTreeSet<(String, String, usize)> = usage
        .grants
        .iter()
        .filter(|used| used.grant.role.name == name)
        .map(|used| {
            let role = &used.grant.role;
            (role.kind.clone(), role.namespace.clone(), used.grant.rule)
        })
        .collect();
    let client = emulator.client();
    let mut roles: Vec<(&str, String, Value)> = Vec::new();
    if let Some(role) = Api::<ClusterRole>::all(client.clone())
        .get_opt(name)
        .await?
    {
        roles.push(("ClusterRole", String::new(), serde_json::to_value(role)?));
    }
    for role in Api::<Role>::all(client)
        .list(&Default::default())
        .await?
        .items
    {
        if role.metadata.name.as_deref() == Some(name) {
            let namespace = role.metadata.namespace.clone().unwrap_or_default();
            roles.push(("Role", namespace, serde_json::to_value(role)?));
        }
    }
    let mut unused = Vec::new();
    for (kind, namespace, role) in roles {
        let rules = role["rules"].as_array().cloned().unwrap_or_default();
        for (index, rule) in rules.iter().enumerate() {
            if !used.contains(&(kind.to_owned(), namespace.clone(), index)) {
                unused.push(format!("{kind}/{namespace}/{name}#{index}: {rule}"));
            }
        }
    }
    println!("{UNUSED_RULES}{}", serde_json::to_string(&unused)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crd_declares_what_kopfs_crd_yaml_declares() {
        let crd = serde_json::to_value(crd()).expect("a CRD serializes");
        assert_eq!(crd["metadata"]["name"], "kopfexamples.kopf.dev");
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        let names = &crd["spec"]["names"];
        assert_eq!(names["singular"], "kopfexample");
        assert_eq!(
            names["shortNames"],
            serde_json::json!(["kopfexes", "kopfex", "kexes", "kex"])
        );
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], "v1");
        assert_eq!(version["subresources"]["status"], serde_json::json!({}));
        let columns: Vec<(&str, &str)> = version["additionalPrinterColumns"]
            .as_array()
            .expect("printer columns")
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or_default(),
                    c["jsonPath"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            columns,
            [
                ("Duration", ".spec.duration"),
                ("Children", ".status.create_fn.children"),
                ("Message", ".status.create_fn.message"),
            ]
        );
        let schema = &version["schema"]["openAPIV3Schema"];
        for part in ["spec", "status"] {
            assert_eq!(
                schema["properties"][part]["x-kubernetes-preserve-unknown-fields"], true,
                "{part} keeps unknown fields"
            );
        }
    }
}
