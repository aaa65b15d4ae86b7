//! Kopf's `02-children`: a handler that creates a child object.
//!
//! On the creation of a `KopfExample`, a Pod is rendered from the spec
//! (`spec.duration` for its sleep, `spec.field` for its `FIELD` variable),
//! adopted with [`kopf::adopt`] (owned by the object, named after it, in
//! its namespace, with its labels), and created; the handler's result puts
//! the Pod's UID in `status.create_fn.children`.
//!
//! ```sh
//! cargo run -p kopf-examples --bin children -- --emulator
//! ```
//!
//! Under `--emulator`, the demo object of Kopf's `obj.yaml` is created; the
//! emulator stores the Pod but runs no containers.

use k8s_openapi::api::core::v1::Pod;
use kopf_examples::{KopfExample, KopfExampleSpec};
use kopf_runtime as kopf;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

#[kopf::rbac(
    groups = "",
    resources = "pods",
    verbs = "create",
    why = "the children Pods are created"
)]
#[kopf::on_create(KopfExample)]
async fn create_fn(
    spec: &KopfExampleSpec,
    body: &Value,
    namespace: Option<&str>,
    client: kube::Client,
) -> kopf::Result<Value> {
    // Render the pod with some spec fields used in the template.
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": {
            "containers": [{
                "name": "the-only-one",
                "image": "busybox",
                "command": ["sh", "-x", "-c"],
                "args": [format!(
                    "echo \"FIELD=$FIELD\"\nsleep {}\n",
                    spec.duration.as_deref().unwrap_or("0")
                )],
                "env": [{
                    "name": "FIELD",
                    "value": spec.field.as_deref().unwrap_or("default-value"),
                }],
            }],
        },
    });

    // Make it our child: assign the namespace, name, labels, owner references, etc.
    kopf::adopt(&mut pod, body)?;
    let pod: Pod = serde_json::from_value(pod)?;

    // Actually create an object by requesting the Kubernetes API.
    let pods: Api<Pod> = Api::namespaced(client, namespace.unwrap_or("default"));
    let pod = pods.create(&PostParams::default(), &pod).await?;

    // Update the parent's status.
    Ok(json!({"children": [pod.metadata.uid]}))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    kopf_examples::runner()
        .on_emulator(|client| async move {
            kopf_examples::create(client, &kopf_examples::demo_object()).await;
        })
        .run()
        .await?;
    Ok(())
}
