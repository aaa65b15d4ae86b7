//! Kopf's `06-peering`: several replicas of one operator, of which one
//! serves at a time, and a development replica that takes over.
//!
//! Run the operator in two shells with the same `--peering` Lease: one
//! replica leads and serves the objects, the other waits. Start a third
//! with `--dev` (priority 666): the leader pauses and hands the Lease
//! over; stop the `--dev` one (Ctrl+C) and a waiting replica takes over
//! again.
//!
//! ```sh
//! # in each shell, against the cluster in your kubeconfig (with Kopf's CRD)
//! cargo run -p kopf-examples --bin peering -- --peering example --identity a
//! cargo run -p kopf-examples --bin peering -- --peering example --identity b
//! cargo run -p kopf-examples --bin peering -- --peering example --identity dev --dev
//! # or all of it at once, in one process, against an in-process emulator
//! cargo run -p kopf-examples --bin peering -- --emulator
//! ```
//!
//! With `--emulator`, the program plays the shells itself: it starts the
//! replicas `replica-a` and `replica-b` as two [`kopf::Operator`]s in one
//! process, each with its own client and identity, on one emulator with
//! Kopf's demo object. One of them leads; then `replica-dev` joins at
//! priority 666 and is handed the Lease; then `replica-dev` stops, and
//! `replica-a` or `replica-b` leads again. Each step waits for the Lease's
//! holder, and the program exits once the last step is done.
//!
//! Kopf's example has only `create_fn`; here a timer also says, every
//! half second, which replica serves each object (`Ticking as the
//! leader. replica=… uid=…`), so that the handovers can be seen. Kopf
//! elects with its own peering objects; kopf-rs elects on a
//! `coordination.k8s.io/v1` Lease.
//!
//! The Lease's timings are `settings.peering` (15 s, 10 s and 2 s by
//! default). `configure_peering` (an `on_startup` handler) sets them from
//! the environment, in seconds, when given: `PEERING_LEASE_DURATION`,
//! `PEERING_RENEW_DEADLINE` and `PEERING_RETRY_PERIOD` (the tests of this
//! example use short ones). The Lease keeps its duration in whole
//! seconds: give whole seconds for `PEERING_LEASE_DURATION`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use clap::Parser as _;
use k8s_openapi::api::coordination::v1::Lease;
use kopf_examples::KopfExample;
use kopf_runtime as kopf;
use kube::Api;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The Lease the replicas of the `--emulator` demo elect on.
const LEASE: &str = "example";

/// Which replica this is, for the log lines (a process's `--identity`,
/// or each in-process replica's own), and how often it has ticked.
struct Replica {
    name: String,
    ticks: AtomicUsize,
}

impl Replica {
    fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ticks: AtomicUsize::new(0),
        }
    }
}

/// The `--identity` of this process, if given.
static IDENTITY: OnceLock<String> = OnceLock::new();

#[kopf::on_create(KopfExample)]
fn create_fn() {}

/// Says which replica serves the object now.
#[kopf::timer(KopfExample, interval = 0.5, no_finalizers)]
fn serving(uid: &str, memo: &kopf::Memo) {
    let replica = memo.get::<Replica>();
    if let Some(replica) = &replica {
        replica.ticks.fetch_add(1, Ordering::Relaxed);
    }
    let replica = replica.as_deref().map_or("this process", |r| &r.name);
    tracing::info!(replica, uid, "Ticking as the leader.");
}

/// Sets the Lease's timings from `PEERING_*` variables, and remembers
/// which replica this is.
#[kopf::on_startup]
async fn configure_peering(settings: &mut kopf::OperatorSettings, memo: &kopf::Memo) {
    let peering = &mut settings.peering;
    for (variable, setting) in [
        ("PEERING_LEASE_DURATION", &mut peering.lease_duration),
        ("PEERING_RENEW_DEADLINE", &mut peering.renew_deadline),
        ("PEERING_RETRY_PERIOD", &mut peering.retry_period),
    ] {
        let Ok(text) = std::env::var(variable) else {
            continue;
        };
        match text.trim().parse::<f64>().map(Duration::try_from_secs_f64) {
            Ok(Ok(seconds)) => *setting = seconds,
            _ => tracing::warn!(variable, text, "not a number of seconds; ignored"),
        }
    }
    if memo.get::<Replica>().is_none()
        && let Some(identity) = IDENTITY.get()
    {
        memo.insert(Replica::new(identity));
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("manifests") {
        // `peering manifests …`: the runner prints them.
        kopf_examples::runner().run().await?;
        return Ok(());
    }
    let args = kopf::Args::parse();
    if args.emulator {
        return demo(args.emulator_rbac).await;
    }
    if let Some(identity) = &args.identity {
        let _ = IDENTITY.set(identity.clone());
    }
    kopf_examples::runner().args(args).run().await?;
    Ok(())
}

/// One in-process replica: the operator's task, and what stops it.
struct Running {
    name: &'static str,
    replica: Arc<Replica>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), kopf::OperatorError>>,
}

impl Running {
    /// Starts the replica `name` at `priority` on `client`.
    fn start(client: kube::Client, name: &'static str, priority: i64) -> anyhow::Result<Self> {
        let memo = kopf::Memo::new();
        memo.insert(Replica::new(name));
        let replica = memo.get::<Replica>().expect("inserted just now");
        let (stop, stopped) = oneshot::channel::<()>();
        let operator = kopf::Operator::new(kopf::Registry::from_inventory()?)
            .client(client)
            .memo(memo)
            .peering(
                kopf::Peering::new(LEASE)
                    .namespace(kopf_examples::NAMESPACE)
                    .identity(name)
                    .priority(priority),
            );
        let task = tokio::spawn(operator.run_until(async {
            let _ = stopped.await;
        }));
        println!("Started {name} (priority {priority}).");
        Ok(Self {
            name,
            replica,
            stop,
            task,
        })
    }

    /// Stops the replica (as Ctrl+C does), and waits until it has exited.
    async fn stop(self) -> anyhow::Result<()> {
        println!("Stopping {}.", self.name);
        let _ = self.stop.send(());
        self.task.await??;
        Ok(())
    }
}

/// Waits until one of `replicas` holds the Lease and has served the
/// demo object (its timer ticked).
async fn leader(client: kube::Client, replicas: &[&Running]) -> anyhow::Result<()> {
    let leases: Api<Lease> = Api::namespaced(client, kopf_examples::NAMESPACE);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut holding = None;
    while tokio::time::Instant::now() < deadline {
        if holding.is_none()
            && let Some(lease) = leases.get_opt(LEASE).await?
        {
            let holder = lease.spec.and_then(|s| s.holder_identity);
            holding = replicas
                .iter()
                .find(|r| holder.as_deref() == Some(r.name))
                .map(|r| (*r, r.replica.ticks.load(Ordering::Relaxed)));
            if let Some((replica, _)) = holding {
                println!("The Lease is {}'s.", replica.name);
            }
        }
        if let Some((replica, ticks)) = holding
            && replica.replica.ticks.load(Ordering::Relaxed) > ticks
        {
            println!("{} serves the objects.", replica.name);
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let names: Vec<_> = replicas.iter().map(|r| r.name).collect();
    anyhow::bail!("none of {names:?} took the Lease and served within 60 s")
}

/// The shells of Kopf's README, played in one process on an emulator;
/// with `rbac` (`--emulator-rbac`), the emulator enforces RBAC and the
/// replicas run as the operator's ServiceAccount, granted what
/// `manifests` would print for them.
async fn demo(rbac: bool) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let mut builder = kopf_examples::emulator();
    if rbac {
        builder = builder.rbac();
    }
    let emulator = builder.start().await?;
    tracing::info!(
        url = %emulator.url(),
        "running against an in-process Kubernetes API emulator (--emulator), not a cluster"
    );
    let client = emulator.client();
    kopf_examples::create(client.clone(), &kopf_examples::demo_object()).await;
    let replica_client = || -> anyhow::Result<kube::Client> {
        Ok(if rbac {
            emulator.client_as_service_account(kopf_examples::NAMESPACE, "peering")?
        } else {
            emulator.client()
        })
    };
    if rbac {
        kopf::Operator::new(kopf::Registry::from_inventory()?)
            .peering(kopf::Peering::new(LEASE).namespace(kopf_examples::NAMESPACE))
            .grant_on_emulator(&emulator, "peering")
            .await?;
    }

    // Shells A and B: one leads, the other waits.
    let a = Running::start(replica_client()?, "replica-a", 0)?;
    let b = Running::start(replica_client()?, "replica-b", 0)?;
    leader(client.clone(), &[&a, &b]).await?;

    // A developer's replica joins with --dev (priority 666): the leader
    // pauses and hands the Lease over.
    let dev = Running::start(replica_client()?, "replica-dev", 666)?;
    leader(client.clone(), &[&dev]).await?;

    // The developer is done: a waiting replica takes over again.
    dev.stop().await?;
    leader(client.clone(), &[&a, &b]).await?;

    a.stop().await?;
    b.stop().await?;
    if rbac {
        kopf_examples::rbac_report(&emulator, "peering").await?;
    }
    emulator.shutdown().await;
    println!("Done.");
    Ok(())
}
