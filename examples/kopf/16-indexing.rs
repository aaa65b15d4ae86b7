//! Kopf's `16-indexing`: in-memory indexes of Pods, read by a timer.
//!
//! Two `#[index]` handlers keep, for every Pod, whether it is running
//! (`is_running`, by `namespace/name`) and its name under each of its
//! labels (`by_label`, by `label=value`). The indexes follow the Pods:
//! a change replaces a Pod's values, a deletion removes them. A timer of
//! every `KopfExample` takes both indexes as parameters, by their ids,
//! every 5 s: it prints the Pods by label and puts the running Pods of
//! `kube-system` and `default` into `status.running-pods` (as
//! `namespace::name`, as Kopf's example does). Handlers that take an
//! index do not run until it is filled.
//!
//! Kopf's index keys may be tuples; kopf-rs's are strings, so
//! `(namespace, name)` is written `namespace/name`. Two `on_probe`
//! handlers read the index too: the liveness endpoint (served on a free
//! loopback port under `--emulator`, its URL in the log) answers with the
//! number of Pods and their names.
//!
//! ```sh
//! cargo run -p kopf-examples --bin indexing -- --emulator
//! ```
//!
//! Under `--emulator`, three Pods are created (`default/web-1` running,
//! `default/web-2` pending, `kube-system/etcd` running; the emulator runs
//! no containers, so the demo sets their phases), then the demo object.

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kopf_examples::KopfExample;
use kopf_runtime as kopf;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

#[kopf::index(Pod)]
async fn is_running(namespace: Option<&str>, name: &str, status: &Value) -> kopf::Result<Value> {
    let namespace = namespace.unwrap_or_default();
    Ok(json!({ format!("{namespace}/{name}"): status["phase"] == "Running" }))
}

#[kopf::index(Pod)]
async fn by_label(labels: &Value, name: &str) -> kopf::Result<Value> {
    let labels = labels.as_object().into_iter().flatten();
    let by_label: serde_json::Map<_, _> = labels
        .map(|(label, value)| {
            let value = value.as_str().unwrap_or_default();
            (format!("{label}={value}"), json!(name))
        })
        .collect();
    Ok(by_label.into())
}

#[kopf::on_probe]
async fn pod_count(is_running: &kopf::Index<bool>) -> kopf::Result<usize> {
    Ok(is_running.len())
}

#[kopf::on_probe]
async fn pod_names(is_running: &kopf::Index<bool>) -> kopf::Result<Vec<String>> {
    let keys = is_running.iter().filter_map(|(key, _)| key);
    Ok(keys
        .filter_map(|key| key.split_once('/').map(|(_, name)| name.to_owned()))
        .collect())
}

#[kopf::timer(KopfExample, interval = 5)]
async fn intervalled(
    is_running: &kopf::Index<bool>,
    by_label: &kopf::Index<String>,
    patch: &kopf::Patch,
) -> kopf::Result<()> {
    for (label, names) in by_label.iter() {
        println!("{}: {:?}", label.unwrap_or_default(), names.to_vec()?);
    }
    let mut running = Vec::new();
    for (key, store) in is_running.iter() {
        let Some((namespace, name)) = key.as_deref().and_then(|k| k.split_once('/')) else {
            continue;
        };
        if ["kube-system", "default"].contains(&namespace) && store.contains(&true) {
            running.push(format!("{namespace}::{name}"));
        }
    }
    patch.set("status.running-pods", json!(running));
    Ok(())
}

/// The demo Pods, with their phases set as a kubelet would, then the demo
/// object.
async fn demo(client: kube::Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let system = serde_json::from_value(json!({"metadata": {"name": "kube-system"}}))
        .expect("a valid namespace");
    let _ = namespaces.create(&PostParams::default(), &system).await;
    for (namespace, name, app, phase) in [
        ("default", "web-1", "web", "Running"),
        ("default", "web-2", "web", "Pending"),
        ("kube-system", "etcd", "etcd", "Running"),
    ] {
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": app}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        }))
        .expect("a valid pod");
        let status = Patch::Merge(json!({"status": {"phase": phase}}));
        let created = match pods.create(&PostParams::default(), &pod).await {
            Ok(_) => {
                pods.patch_status(name, &PatchParams::default(), &status)
                    .await
            }
            Err(error) => Err(error),
        };
        match created {
            Ok(_) => tracing::info!(%namespace, %name, %phase, "created a demo Pod"),
            Err(error) => tracing::warn!(%namespace, %name, %error, "cannot create a demo Pod"),
        }
    }
    kopf_examples::create(client, &kopf_examples::demo_object()).await;
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    kopf_examples::runner().on_emulator(demo).run().await?;
    Ok(())
}
