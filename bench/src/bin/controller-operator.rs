//! What a Rust user writes instead of kopf-rs: kube-runtime's `Controller`
//! with a reconcile doing the same minimal work as the operators under test
//! (see `kopf_bench::signals`), on a current-thread runtime as they run.
//!
//! ```text
//! controller-operator MODE --kubeconfig FILE [-n NAMESPACE]    MODE: create | event | timer | timer-nofin
//! ```
//! - `create`: signals each object not yet marked, then marks it with one
//!   merge PATCH (an annotation), as Kopf and kopf-rs store their progress;
//!   then waits for a change.
//! - `event`: signals every reconcile; waits for a change.
//! - `timer`, `timer-nofin`: signals a tick and requeues after 1 s, the
//!   timer of a `Controller`; `timer` keeps a finalizer through
//!   kube-runtime's `finalizer` helper (added before the first tick,
//!   removed once the object is being deleted).

use std::convert::Infallible;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kopf_bench::peers::{self, PeerArgs, PeerMode};
use kopf_bench::signals;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event, finalizer};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;

const MARK: &str = "kopf-bench/handled";
const FINALIZER: &str = "kopf-bench/finalizer";
const INTERVAL: Duration = Duration::from_secs(1);

/// What every reconcile shares.
struct Context {
    mode: PeerMode,
    api: Api<ConfigMap>,
}

/// A failed reconcile: a failed request, retried after a second.
#[derive(Debug)]
struct Failed(String);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failed {}

async fn reconcile(object: Arc<ConfigMap>, context: Arc<Context>) -> Result<Action, Failed> {
    let name = object.name_any();
    match context.mode {
        PeerMode::Event => {
            signals::signal("event", &name);
            Ok(Action::await_change())
        }
        PeerMode::Create => {
            if object.annotations().contains_key(MARK)
                || object.metadata.deletion_timestamp.is_some()
            {
                return Ok(Action::await_change());
            }
            signals::signal("create", &name);
            let mark = json!({"metadata": {"annotations": {MARK: "1"}}});
            context
                .api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&mark))
                .await
                .map_err(|e| Failed(format!("patching {name}: {e}")))?;
            Ok(Action::await_change())
        }
        PeerMode::Timer { finalizers: false } => {
            if object.metadata.deletion_timestamp.is_some() {
                return Ok(Action::await_change());
            }
            signals::signal("tick", &name);
            Ok(Action::requeue(INTERVAL))
        }
        PeerMode::Timer { finalizers: true } => {
            let ticked = finalizer(&context.api, FINALIZER, object, |event| async move {
                match event {
                    Event::Apply(object) => {
                        signals::signal("tick", &object.name_any());
                        Ok::<_, Infallible>(Action::requeue(INTERVAL))
                    }
                    Event::Cleanup(_) => Ok(Action::await_change()),
                }
            });
            ticked
                .await
                .map_err(|e| Failed(format!("the finalizer of {name}: {e}")))
        }
    }
}

fn error_policy(_: Arc<ConfigMap>, error: &Failed, _: Arc<Context>) -> Action {
    eprintln!("controller-operator: {error}");
    Action::requeue(Duration::from_secs(1))
}

async fn run(args: PeerArgs) -> Result<(), String> {
    let client = args.client().await?;
    let api: Api<ConfigMap> = Api::namespaced(client, &args.namespace);
    let context = Arc::new(Context {
        mode: args.mode,
        api: api.clone(),
    });
    Controller::new(api, watcher::Config::default())
        .run(reconcile, error_policy, context)
        .for_each(|_| async {})
        .await;
    Ok(())
}

fn main() -> ExitCode {
    peers::main("controller-operator", run)
}
