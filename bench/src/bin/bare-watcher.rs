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
use kopf_bench::signals;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::task::{JoinHandle, JoinSet};

const MARK: &str = "kopf-bench/handled";
const FINALIZER: &str = "kopf-bench/finalizer";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Create,
    Event,
    Timer { finalizers: bool },
}

struct Args {
    mode: Mode,
    kubeconfig: String,
    namespace: String,
}

fn parse_args() -> Result<Args, String> {
    let mut argv = std::env::args().skip(1);
    let mode = match argv.next().as_deref() {
        Some("create") => Mode::Create,
        Some("event") => Mode::Event,
        Some("timer") => Mode::Timer { finalizers: true },
        Some("timer-nofin") => Mode::Timer { finalizers: false },
        other => {
            return Err(format!(
                "unknown mode {other:?}: expected create, event, timer or timer-nofin"
            ));
        }
    };
    let (mut kubeconfig, mut namespace) = (None, "default".to_string());
    while let Some(arg) = argv.next() {
        match arg.as_str() {
            "--kubeconfig" => kubeconfig = argv.next(),
            "-n" | "--namespace" => namespace = argv.next().ok_or("-n needs a value")?,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Args {
        mode,
        kubeconfig: kubeconfig.ok_or("--kubeconfig FILE is required")?,
        namespace,
    })
}

async fn client(path: &str) -> Result<Client, String> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| e.to_string())?;
    Client::try_from(config).map_err(|e| e.to_string())
}

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

async fn run(args: Args) -> Result<(), String> {
    let client = client(&args.kubeconfig).await?;
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
                Mode::Event,
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o),
            ) => {
                signals::signal("event", &o.name_any());
            }
            (Mode::Create, watcher::Event::Apply(o) | watcher::Event::InitApply(o))
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
            (Mode::Timer { .. }, watcher::Event::Init) => timers.listed = Some(HashSet::new()),
            (Mode::Timer { .. }, watcher::Event::InitDone) => {
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
                Mode::Timer { finalizers },
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
            (Mode::Timer { .. }, watcher::Event::Delete(o)) => {
                timers.stop(&o.uid().unwrap_or_default())
            }
            _ => {}
        }
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("bare-watcher: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bare-watcher: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let flusher = tokio::spawn(signals::flush_periodically());
        let result = tokio::select! {
            r = run(args) => r,
            _ = shutdown() => Ok(()),
        };
        flusher.abort();
        result
    });
    signals::flush();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bare-watcher: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn shutdown() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        }
        _ => std::future::pending().await,
    }
}
