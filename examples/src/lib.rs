//! Shared bits of the example operators: Kopf's demo custom resource,
//! `KopfExample` (Kopf's `examples/crd.yaml`), and its demo object
//! (Kopf's `examples/obj.yaml`), which the examples create under
//! `--emulator`.
//!
//! A handler that names the [`KopfExample`] type makes `--emulator`
//! register its CRD (`kopfexamples.kopf.dev`, namespaced, with a status
//! subresource) in the emulator at start.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{CustomResource, ResourceExt};
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
    namespaced,
    status = "Value",
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
