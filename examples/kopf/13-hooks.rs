//! Kopf's `13-hooks`: start-up, clean-up and login handlers.
//!
//! - `login_fn` (`on_login`) gives the operator its credentials, before
//!   anything else runs: here the kubeconfig, read after a 2 s pause.
//! - `startup_fn_simple` and `startup_fn_retried` (`on_startup`) run next;
//!   the operator serves nothing until both have succeeded, and the
//!   second fails temporarily three times (retried after 1 s) first.
//! - `pod_task` (`on_event` of Pods) starts a background task per Pod,
//!   which logs now and then until asked to stop.
//! - `cleanup_fn` (`on_cleanup`) runs when the operator exits (SIGINT or
//!   SIGTERM) and asks every task to stop; `main` waits for them, so the
//!   exit is not instant, as in Kopf.
//!
//! - `tasks_count` and `monitored_objects` (`on_probe`) answer the
//!   liveness probe (`--liveness URL`) with the background tasks.
//!
//! ```sh
//! cargo run -p kopf-examples --bin hooks -- --emulator
//! ```
//!
//! With `--emulator`, this example starts the emulator itself (with two
//! demo Pods) rather than through [`kopf::Runner`]: the login handler
//! needs a kubeconfig to read, so the emulator's is written to a temporary
//! file, which both the login handler and the command line's
//! `--kubeconfig` use.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use clap::Parser as _;
use k8s_openapi::api::core::v1::Pod;
use kopf_runtime as kopf;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;

/// The kubeconfig that `login_fn` reads: `--kubeconfig`, if given.
static KUBECONFIG: OnceLock<PathBuf> = OnceLock::new();

/// The stop flags of the background tasks, by namespace and name.
type Stoppers = HashMap<(String, String), watch::Sender<bool>>;

/// The stop flags, set up by `startup_fn_simple`.
static STOPPERS: OnceLock<Mutex<Stoppers>> = OnceLock::new();

/// The background tasks, which `main` awaits after the operator's exit.
static TASKS: std::sync::Mutex<Vec<JoinHandle<()>>> = std::sync::Mutex::new(Vec::new());

#[kopf::on_startup]
async fn startup_fn_simple(logger: &kopf::Logger) {
    logger.info("Initialising the task-lock...");
    STOPPERS.get_or_init(Default::default);
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
    logger.info("Cleaning up...");
    if let Some(stoppers) = STOPPERS.get() {
        for flag in stoppers.lock().await.values() {
            let _ = flag.send(true);
        }
    }
    logger.info("All pod-tasks are requested to stop...");
}

#[kopf::on_login(errors = kopf::ErrorsMode::Permanent)]
async fn login_fn() -> kopf::Result<kube::config::Kubeconfig> {
    println!("Logging in in 2s...");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kubeconfig = match KUBECONFIG.get() {
        Some(path) => kube::config::Kubeconfig::read_from(path)?,
        None => kube::config::Kubeconfig::read()?,
    };
    Ok(kubeconfig)
}

#[kopf::on_probe]
async fn tasks_count() -> kopf::Result<usize> {
    let Some(stoppers) = STOPPERS.get() else {
        return Ok(0);
    };
    Ok(stoppers.lock().await.len())
}

#[kopf::on_probe]
async fn monitored_objects() -> kopf::Result<HashMap<String, Vec<String>>> {
    let mut objects: HashMap<String, Vec<String>> = HashMap::new();
    if let Some(stoppers) = STOPPERS.get() {
        for (namespace, name) in stoppers.lock().await.keys() {
            objects
                .entry(namespace.clone())
                .or_default()
                .push(name.clone());
        }
    }
    for names in objects.values_mut() {
        names.sort();
    }
    Ok(objects)
}

#[kopf::on_event(Pod)]
async fn pod_task(namespace: Option<&str>, name: &str, logger: &kopf::Logger) -> kopf::Result<()> {
    let Some(stoppers) = STOPPERS.get() else {
        return Err(kopf::Error::permanent("the start-up handlers have not run"));
    };
    let key = (namespace.unwrap_or_default().to_owned(), name.to_owned());
    if let Entry::Vacant(entry) = stoppers.lock().await.entry(key) {
        let (flag, stop) = watch::channel(false);
        entry.insert(flag);
        let task = tokio::spawn(task_fn(logger.clone(), stop));
        TASKS.lock().unwrap_or_else(|p| p.into_inner()).push(task);
    }
    Ok(())
}

async fn task_fn(logger: kopf::Logger, mut should_stop: watch::Receiver<bool>) {
    while !*should_stop.borrow() {
        // Kopf waits 1 to 10 s at random; 1 to 3 s here.
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let pause = Duration::from_secs(1 + u64::from(nanos % 3));
        tokio::select! {
            () = tokio::time::sleep(pause) => logger.info("Served by the background task."),
            _ = should_stop.changed() => {}
        }
    }
    logger.info("Serving is finished by request.");
}

/// Two demo Pods in the emulator.
async fn create_demo_pods(client: kube::Client) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client, "default");
    for name in ["demo-1", "demo-2"] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("manifests") {
        // `hooks manifests …`: the runner prints them.
        kopf::Runner::new().run().await?;
        return Ok(());
    }
    let mut args = kopf::Args::parse();
    let mut emulator = None;
    let mut written = None;
    if args.emulator {
        let mut builder = kopf_testing::Emulator::builder();
        if args.emulator_rbac {
            builder = builder.rbac();
        }
        let started = builder.start().await?;
        println!(
            "running against an in-process Kubernetes API emulator (--emulator), not a cluster url={}",
            started.url()
        );
        let path = std::env::temp_dir().join(format!(
            "kopf-example-hooks-{}.kubeconfig",
            std::process::id()
        ));
        if args.emulator_rbac {
            // As `--emulator-rbac` of `kopf::run()`: the operator logs in
            // as its own ServiceAccount, granted what `manifests` prints.
            let mut operator = kopf::Operator::new(kopf::Registry::from_inventory()?)
                .namespaces(args.namespace_selector()?);
            if let Some(peering) = args.peering() {
                operator = operator.peering(peering);
            }
            operator.grant_on_emulator(&started, "hooks").await?;
            let kubeconfig = started.kubeconfig_as_service_account("default", "hooks")?;
            std::fs::write(&path, serde_json::to_vec(&kubeconfig)?)?;
        } else {
            started.write_kubeconfig(&path)?;
        }
        create_demo_pods(started.client()).await?;
        args.emulator = false;
        args.emulator_rbac = false;
        args.kubeconfig = Some(path.clone());
        emulator = Some(started);
        written = Some(path);
    }
    if let Some(path) = &args.kubeconfig {
        KUBECONFIG.get_or_init(|| path.clone());
    }

    let outcome = kopf::Runner::new().args(args).run().await;

    // The tasks were asked to stop by the clean-up handler: wait for them.
    let tasks = std::mem::take(&mut *TASKS.lock().unwrap_or_else(|p| p.into_inner()));
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    }
    if let Some(emulator) = emulator {
        emulator.shutdown().await;
    }
    if let Some(path) = written {
        let _ = std::fs::remove_file(path);
    }
    outcome?;
    Ok(())
}
