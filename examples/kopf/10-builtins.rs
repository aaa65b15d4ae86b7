//! Kopf's `10-builtins`: handlers of a built-in resource, Pods.
//!
//! Every Pod outside the `kube-*` namespaces gets a limited life: when it
//! is created, or found when the operator starts (`on_resume`), a task is
//! started that deletes it after [`POD_LIFETIME`]; when the Pod is deleted
//! first, `on_delete` cancels the task. Kopf allows 30 seconds; this port
//! allows 5, so that the demo shows it soon.
//!
//! The tasks are kept by hand, as in Kopf's example, to show the three
//! handlers of a built-in kind. An operator written for kopf-rs would
//! rather use a `#[kopf::daemon(Pod, no_finalizers)]`, which is started,
//! stopped on the Pod's deletion and owned by the runtime, without
//! holding the Pod's deletion with a finalizer as `on_delete` does.
//!
//! ```sh
//! cargo run -p kopf-examples --bin builtins -- --emulator
//! ```
//!
//! Under `--emulator`, three Pods are created: `default/expr1`, which is
//! killed; `default/expr2`, deleted by the demo a second later, so that its
//! task is cancelled; and `kube-system/protected`, which is left alone.
//! The emulator stores Pods but runs no containers.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kopf_runtime as kopf;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use tokio::sync::oneshot;

/// How long a Pod may live (Kopf's example: 30 s).
const POD_LIFETIME: Duration = Duration::from_secs(5);

/// The killer tasks' cancels, by namespace and name: dropping a sender (or
/// sending on it) cancels its task.
type Tasks = HashMap<(String, String), oneshot::Sender<()>>;

static TASKS: LazyLock<Mutex<Tasks>> = LazyLock::new(Default::default);

fn tasks() -> std::sync::MutexGuard<'static, Tasks> {
    TASKS.lock().unwrap_or_else(PoisonError::into_inner)
}

#[kopf::rbac(
    groups = "",
    resources = "pods",
    verbs = "delete",
    why = "the Pods are killed after their lifetime"
)]
#[kopf::on_resume(Pod)]
#[kopf::on_create(Pod)]
async fn pod_in_sight(
    namespace: Option<&str>,
    name: &str,
    logger: &kopf::Logger,
    client: kube::Client,
) {
    let Some(namespace) = namespace else { return };
    if namespace.starts_with("kube-") {
        return;
    }
    let (cancel, cancelled) = oneshot::channel();
    let key = (namespace.to_owned(), name.to_owned());
    tasks().insert(key.clone(), cancel);
    tokio::spawn(pod_killer(key, logger.clone(), client, cancelled));
}

#[kopf::on_delete(Pod)]
async fn pod_deleted(namespace: Option<&str>, name: &str) {
    let key = (namespace.unwrap_or_default().to_owned(), name.to_owned());
    if let Some(cancel) = tasks().remove(&key) {
        let _ = cancel.send(());
    }
}

async fn pod_killer(
    (namespace, name): (String, String),
    logger: kopf::Logger,
    client: kube::Client,
    cancelled: oneshot::Receiver<()>,
) {
    logger.info(format!(
        "=== Pod killing happens in {}s.",
        POD_LIFETIME.as_secs()
    ));
    tokio::select! {
        () = tokio::time::sleep(POD_LIFETIME) => {}
        _ = cancelled => {
            logger.info("=== Pod killing is cancelled!");
            return;
        }
    }
    logger.info("=== Pod killing happens NOW!");
    tasks().remove(&(namespace.clone(), name.clone()));
    let pods: Api<Pod> = Api::namespaced(client, &namespace);
    if let Err(error) = pods.delete(&name, &DeleteParams::default()).await {
        logger.warn(format!("=== Pod killing failed: {error}"));
    }
}

/// The demo Pods, and the deletion of one of them.
async fn demo(client: kube::Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let system = serde_json::from_value(json!({"metadata": {"name": "kube-system"}}))
        .expect("a valid namespace");
    let _ = namespaces.create(&PostParams::default(), &system).await;
    for (namespace, name) in [
        ("default", "expr1"),
        ("default", "expr2"),
        ("kube-system", "protected"),
    ] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "ubuntu", "args": ["bash", "-i"]}]},
        }))
        .expect("a valid pod");
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        match pods.create(&PostParams::default(), &pod).await {
            Ok(_) => tracing::info!(%namespace, %name, "created a demo Pod"),
            Err(error) => tracing::warn!(%namespace, %name, %error, "cannot create a demo Pod"),
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    match pods.delete("expr2", &DeleteParams::default()).await {
        Ok(_) => tracing::info!("deleted the demo Pod default/expr2"),
        Err(error) => tracing::warn!(%error, "cannot delete the demo Pod default/expr2"),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    kopf::Runner::new().on_emulator(demo).run().await?;
    Ok(())
}
