//! The floor: a bare `kube::runtime::watcher` on a current-thread runtime doing
//! the same minimal work as the operators under test, and no more.
//!
//! ```text
//! bare-watcher MODE --kubeconfig FILE [-n NAMESPACE]    MODE: create | event | timer | timer-nofin
//! ```
//! - `create`: signals each object not yet marked, then marks it with one
//!   merge PATCH (an annotation), as Kopf and kopf-rs store their progress.
//! - `event`: signals every watch event; keeps no store.
//! - `timer`, `timer-nofin`: one task per object (by UID) that signals and
//!   sleeps 1 s; stopped on a DELETED event, on a `deletionTimestamp`, and for
//!   objects missing from a re-list. `timer` also adds a finalizer with one
//!   PATCH and removes it once the object is being deleted.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::process::ExitCode;
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kopf_bench::peers::{self, PeerArgs, PeerMode};
use kopf_bench::signals;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::task::{JoinHandle, JoinSet};

const MARK: &str = "kopf-bench/handled";
const FINALIZER: &str = "kopf-bench/finalizer";

/// The per-object timer tasks, keyed by UID, and the patches in flight.
struct Timers {
    tasks: HashMap<String, JoinHandle<()>>,
    listed: Option<HashSet<String>>,
}

impl Timers {
    fn stop(&mut self, uid: &str) {
        if let Some(task) = self.tasks.remove(uid) {
            task.abort();
        }
    }
}

async fn run(args: PeerArgs) -> Result<(), String> {
    let client = args.client().await?;
    let api: Api<ConfigMap> = Api::namespaced(client, &args.namespace);
    let mut events =
        std::pin::pin!(watcher(api.clone(), watcher::Config::default()).default_backoff());
    let mut patches: JoinSet<()> = JoinSet::new();
    let mut timers = Timers {
        tasks: HashMap::new(),
        listed: None,
    };
    let patch = |patches: &mut JoinSet<()>, name: String, body: serde_json::Value| {
        let api = api.clone();
        patches.spawn(async move {
            if let Err(e) = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
                .await
            {
                eprintln!("bare-watcher: patching {name}: {e}");
            }
        });
    };
    loop {
        while patches.try_join_next().is_some() {}
        let event = match events.try_next().await {
            Ok(Some(event)) => event,
            Ok(None) => return Ok(()),
            Err(e) => {
                eprintln!("bare-watcher: watch error: {e}");
                continue;
            }
        };
        match (args.mode, event) {
            (
                PeerMode::Event,
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o),
            ) => {
                signals::signal("event", &o.name_any());
            }
            (PeerMode::Create, watcher::Event::Apply(o) | watcher::Event::InitApply(o))
                if !o.annotations().contains_key(MARK)
                    && o.metadata.deletion_timestamp.is_none() =>
            {
                let name = o.name_any();
                signals::signal("create", &name);
                patch(
                    &mut patches,
                    name,
                    json!({"metadata": {"annotations": {MARK: "1"}}}),
                );
            }
            (PeerMode::Timer { .. }, watcher::Event::Init) => timers.listed = Some(HashSet::new()),
            (PeerMode::Timer { .. }, watcher::Event::InitDone) => {
                // Objects that vanished while the watch was down count as deleted.
                if let Some(listed) = timers.listed.take() {
                    let gone: Vec<String> = timers
                        .tasks
                        .keys()
                        .filter(|uid| !listed.contains(*uid))
                        .cloned()
                        .collect();
                    for uid in gone {
                        timers.stop(&uid);
                    }
                }
            }
            (
                PeerMode::Timer { finalizers },
                watcher::Event::Apply(o) | watcher::Event::InitApply(o),
            ) => {
                let uid = o.uid().unwrap_or_default();
                if let Some(listed) = timers.listed.as_mut() {
                    listed.insert(uid.clone());
                }
                let has_finalizer = o.finalizers().iter().any(|f| f == FINALIZER);
                if o.metadata.deletion_timestamp.is_some() {
                    timers.stop(&uid);
                    if has_finalizer {
                        let rest: Vec<&String> =
                            o.finalizers().iter().filter(|f| *f != FINALIZER).collect();
                        patch(
                            &mut patches,
                            o.name_any(),
                            json!({"metadata": {"finalizers": rest}}),
                        );
                    }
                    continue;
                }
                if finalizers && !has_finalizer {
                    let mut all = o.finalizers().to_vec();
                    all.push(FINALIZER.into());
                    patch(
                        &mut patches,
                        o.name_any(),
                        json!({"metadata": {"finalizers": all}}),
                    );
                }
                if let Entry::Vacant(slot) = timers.tasks.entry(uid) {
                    let name = o.name_any();
                    slot.insert(tokio::spawn(async move {
                        loop {
                            signals::signal("tick", &name);
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }));
                }
            }
            (PeerMode::Timer { .. }, watcher::Event::Delete(o)) => {
                timers.stop(&o.uid().unwrap_or_default())
            }
            _ => {}
        }
    }
}

fn main() -> ExitCode {
    peers::main("bare-watcher", run)
}
