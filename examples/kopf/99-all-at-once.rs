//! Kopf's `99-all-at-once`: most of the features together.
//!
//! Start-up handlers (one slow, one retried), a clean-up handler, two
//! creation handlers that return values into the status (one posts Events,
//! one is a blocking `fn` that fails once), an update handler printing the
//! diff, a field handler, a deletion handler, a creation handler that
//! creates an adopted and labelled Pod, and an event handler for the Pods
//! with that label.
//!
//! `create_2` fails with a regular error on its first try; Kopf retries it
//! after the default backoff (60 s), this port after 1 s (`backoff = 1`),
//! so that the demo shows it soon.
//!
//! ```sh
//! cargo run -p kopf-examples --bin all_at_once -- --emulator
//! ```
//!
//! Under `--emulator`, the demo object is created, then, once handled, its
//! `spec.lst` is set, then it is deleted.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kopf_examples::{DEMO_NAME, KopfExample};
use kopf_runtime as kopf;
use kopf_runtime::posting::{self, Severity};
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

#[kopf::on_startup]
async fn startup_fn_simple(logger: &kopf::Logger) {
    logger.info("Starting in 1s...");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[kopf::on_startup]
async fn startup_fn_retried(retry: u32, logger: &kopf::Logger) -> kopf::Result<()> {
    if retry < 3 {
        return Err(kopf::Error::temporary(
            format!("Going to succeed in {}s", 3 - retry),
            Duration::from_secs(1),
        ));
    }
    logger.info("Starting retried...");
    Ok(())
}

#[kopf::on_cleanup]
async fn cleanup_fn(logger: &kopf::Logger) {
    logger.info("Cleaning up in 3s...");
    tokio::time::sleep(Duration::from_secs(3)).await;
}

#[kopf::on_create(KopfExample)]
async fn create_1(body: &Value) -> kopf::Result<Value> {
    let children = create_children(body);

    posting::info(body, "AnyReason", "");
    posting::event(body, Severity::Warning, "SomeReason", "Cannot do something");
    for child in &children {
        posting::event(
            child,
            Severity::Normal,
            "SomeReason",
            "Created as part of the job1step",
        );
    }

    Ok(json!({"job1-status": 100}))
}

#[kopf::on_create(KopfExample, backoff = 1)]
fn create_2(retry: u32) -> kopf::Result<Value> {
    wait_for_something(); // specific for job2, e.g. an external API poller

    if retry == 0 {
        // will be retried by the framework, even if it has been restarted
        Err(std::io::Error::other("Whoops!"))?;
    }

    Ok(json!({"job2-status": 100}))
}

#[kopf::on_update(KopfExample)]
async fn update(diff: &kopf::Diff) -> kopf::Result<()> {
    println!("Handling the diff");
    println!("{}", serde_json::to_string_pretty(diff)?);
    Ok(())
}

#[kopf::on_field(KopfExample, field = "spec.lst")]
async fn update_lst(old: Option<Value>, new: Option<Value>) {
    let show = |v: Option<Value>| v.map_or_else(|| "None".to_owned(), |v| v.to_string());
    println!("Handling the FIELD = {} -> {}", show(old), show(new));
}

#[kopf::on_delete(KopfExample)]
async fn delete() {}

/// The children of `owner` that `create_1` would make: none, in this demo.
fn create_children(owner: &Value) -> Vec<Value> {
    let _ = owner;
    Vec::new()
}

fn wait_for_something() {
    // Note: intentionally blocking; a plain `fn` runs on a blocking thread.
    std::thread::sleep(Duration::from_secs(1));
}

#[kopf::rbac(
    groups = "",
    resources = "pods",
    verbs = "create",
    why = "a child Pod is created"
)]
#[kopf::on_create(KopfExample)]
async fn create_pod(
    body: &Value,
    namespace: Option<&str>,
    client: kube::Client,
) -> kopf::Result<()> {
    // Render the pod with some spec fields used in the template.
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": {
            "containers": [{
                "name": "the-only-one",
                "image": "busybox",
                "command": ["sh", "-x", "-c", "sleep 1"],
            }],
        },
    });

    // Make it our child: assign the namespace, name, labels, owner references, etc.
    kopf::adopt(&mut pod, body)?;
    kopf::label(&mut pod, [("application", "kopf-example-10")])?;

    // Actually create an object by requesting the Kubernetes API.
    let pod: Pod = serde_json::from_value(pod)?;
    let pods: Api<Pod> = Api::namespaced(client, namespace.unwrap_or("default"));
    pods.create(&PostParams::default(), &pod).await?;
    Ok(())
}

#[kopf::on_event(Pod, labels("application" = "kopf-example-10"))]
async fn example_pod_change(logger: &kopf::Logger) {
    logger.info("This pod is special for us.");
}

/// Creates, changes and deletes the demo object, one handled step at a time.
async fn demo(client: kube::Client) {
    let patience = Duration::from_secs(30);
    kopf_examples::create(client.clone(), &kopf_examples::demo_object()).await;
    kopf_examples::wait_handled(client.clone(), DEMO_NAME, patience).await;
    kopf_examples::patch(client.clone(), DEMO_NAME, json!({"spec": {"lst": [1, 2]}})).await;
    kopf_examples::wait_handled(client.clone(), DEMO_NAME, patience).await;
    kopf_examples::delete(client, DEMO_NAME).await;
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    kopf_examples::runner().on_emulator(demo).run().await?;
    Ok(())
}
