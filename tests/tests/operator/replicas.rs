//! Replicas electing the one that serves on a Lease, in one process with
//! separate clients and identities, over real HTTP: only the leader
//! serves; its exit hands over at once; a leader that cannot renew pauses
//! its tasks (`leadership-lost`) and resumes from a fresh listing when it
//! leads again; tasks that outlive the lease end the run.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime::settings::{OperatorSettings, PeeringSettings};
use kopf_runtime::{Error, Kwargs, OperatorError, Peering, Registry, ResourceRef};
use kopf_testing::{Emulator, FailRule};
use kopf_tests::{
    Calls, Running, declared, eventually, get_json, http_get, logs, new_configmap, scrape,
    test_settings,
};
use serde_json::json;

fn cms() -> ResourceRef {
    ResourceRef::of::<ConfigMap>()
}

/// Test settings with short Lease timings: 1.5 s, 1 s, 0.2 s.
fn settings() -> OperatorSettings {
    let mut settings = test_settings();
    settings.peering = PeeringSettings {
        lease_duration: Duration::from_millis(1500),
        renew_deadline: Duration::from_millis(1000),
        retry_period: Duration::from_millis(200),
    };
    settings
}

fn peering(identity: &str) -> Peering {
    Peering::new("op").namespace("default").identity(identity)
}

/// A 0.1 s timer on ConfigMaps recording which replica ticked.
fn ticking(me: &'static str, calls: &Calls) -> Registry {
    let calls = calls.clone();
    Registry::builder()
        .timer(cms(), "tick", move |_: Kwargs| {
            calls.push("tick", json!(me));
            async { Ok::<_, Error>(()) }
        })
        .interval(Duration::from_millis(100))
        .build()
        .expect("a valid registry")
}

/// The replicas that ticked since the `after`-th tick.
fn tickers(calls: &Calls, after: usize) -> Vec<String> {
    let mut who: Vec<String> = calls.named("tick")[after..]
        .iter()
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect();
    who.dedup();
    who
}

#[tokio::test]
async fn only_the_leader_serves_and_its_exit_hands_over_at_once() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    new_configmap(&emulator, "cm").await;
    let calls = Calls::default();
    let a = Running::replica(&emulator, ticking("a", &calls), settings(), peering("a")).await;
    calls.wait_for("tick", 1).await;
    let b = Running::replica(&emulator, ticking("b", &calls), settings(), peering("b")).await;
    // b is ready and follows: it has tried to take the Lease many times
    // while a ticked on.
    eventually("b to be ready", || async {
        (http_get(&b.urls().readiness).await.0 == 200).then_some(())
    })
    .await;
    let now = calls.named("tick").len();
    calls.wait_for("tick", now + 20).await;
    assert_eq!(tickers(&calls, 0), ["a"], "only the leader serves");
    assert_eq!(
        scrape(&a.urls().metrics).await.value("kopf_leader", &[]),
        1.0
    );
    assert_eq!(
        scrape(&b.urls().metrics).await.value("kopf_leader", &[]),
        0.0
    );

    a.stop().await;
    let handed = calls.named("tick").len();
    let begun = tokio::time::Instant::now();
    calls.wait_for("tick", handed + 1).await;
    // Released on exit: well before the Lease (2 s) could expire.
    assert!(
        begun.elapsed() < Duration::from_secs(1),
        "b took over within a retry period and its first tick: {:?}",
        begun.elapsed()
    );
    assert_eq!(
        tickers(&calls, handed),
        ["b"],
        "no tick of a after its exit"
    );
    assert_eq!(
        scrape(&b.urls().metrics).await.value("kopf_leader", &[]),
        1.0
    );
    b.stop().await;
}

#[tokio::test]
async fn a_leader_that_cannot_renew_pauses_and_resumes_when_it_leads_again() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let (created, resumed, daemon) = (calls.clone(), calls.clone(), calls.clone());
    let registry = Registry::builder()
        .on_create(cms(), "create", move |_: Kwargs| {
            created.push("create", json!(null));
            async { Ok::<_, Error>(()) }
        })
        .on_resume(cms(), "resume", move |_: Kwargs| {
            resumed.push("resume", json!(null));
            async { Ok::<_, Error>(()) }
        })
        .daemon(cms(), "daemon", move |kw: Kwargs| {
            let calls = daemon.clone();
            async move {
                calls.push("started", json!(null));
                let stopped = kw.stopped.clone().expect("daemons get a stop flag");
                stopped.cancelled().await;
                let reason = stopped.reason().map(|r| r.as_str());
                calls.push("stopped", json!(reason));
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::replica(&emulator, registry, settings(), peering("a")).await;
    new_configmap(&emulator, "cm").await;
    calls.wait_for("create", 1).await;
    calls.wait_for("started", 1).await;

    // Every request about the Lease fails: the leader steps down.
    emulator.faults().fail_next(
        usize::MAX / 2,
        FailRule::status(500).path_contains("/leases"),
    );
    let stopped = calls.wait_for("stopped", 1).await;
    assert_eq!(stopped, [json!("leadership-lost")]);
    eventually("the leader gauge to fall", || async {
        (scrape(&operator.urls().metrics)
            .await
            .value("kopf_leader", &[])
            == 0.0)
            .then_some(())
    })
    .await;
    assert_eq!(
        get_json(&operator.urls().readiness).await.0,
        200,
        "readiness never depends on leadership"
    );

    // The API answers again: it leads again, from a fresh listing.
    emulator.faults().clear();
    calls.wait_for("resume", 1).await;
    calls.wait_for("started", 2).await;
    assert_eq!(calls.named("create").len(), 1, "created once");
    assert_eq!(
        scrape(&operator.urls().metrics)
            .await
            .value("kopf_leader", &[]),
        1.0
    );
    operator.stop().await;
    assert_eq!(
        calls.named("stopped").last(),
        Some(&json!("operator-exiting"))
    );
}

/// How often `outliving` started, and what lets it return.
static OUTLIVING: AtomicUsize = AtomicUsize::new(0);
static RELEASED: AtomicBool = AtomicBool::new(false);

/// A plain fn that ignores its stop flag, on a thread that cannot be
/// cancelled, and may take a minute to be abandoned.
#[kopf_runtime::daemon(ConfigMap, id = "outliving", cancellation_timeout = 60)]
fn outliving() {
    OUTLIVING.fetch_add(1, Ordering::SeqCst);
    while !RELEASED.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn tasks_that_outlive_the_lease_end_the_run() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    new_configmap(&emulator, "cm").await;
    let operator = Running::replica(
        &emulator,
        declared(&["outliving"]),
        settings(),
        peering("a"),
    )
    .await;
    eventually("the daemon to start", || async {
        (OUTLIVING.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await;
    emulator.faults().fail_next(
        usize::MAX / 2,
        FailRule::status(500).path_contains("/leases"),
    );
    let outcome = operator.outcome().await;
    RELEASED.store(true, Ordering::SeqCst);
    assert!(
        matches!(&outcome, Err(OperatorError::LeaseOutlived { lease }) if lease == "default/op"),
        "{outcome:?}"
    );
    let message = outcome.expect_err("outlived").to_string();
    assert!(
        message.contains("two replicas never act on one object"),
        "{message}"
    );
}

/// As a process (`outliving-replica`): the run ends with exit code 3 and
/// a message saying why, before another replica may take the Lease.
#[tokio::test]
async fn a_process_whose_tasks_outlive_the_lease_exits_with_code_3() {
    let emulator = Emulator::start().await.expect("emulator starts");
    new_configmap(&emulator, "cm").await;
    let kubeconfig =
        std::env::temp_dir().join(format!("kopf-outliving-{}.kubeconfig", std::process::id()));
    emulator
        .write_kubeconfig(&kubeconfig)
        .expect("the kubeconfig is written");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_outliving-replica"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["-n", "default", "--peering", "op", "--identity", "a"])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("outliving-replica starts");
    // The logs go to stdout: read on, in the background, to the end.
    let stdout = child.stdout.take().expect("piped");
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let reading = tokio::spawn(async move {
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
        let (mut output, mut started_tx) = (String::new(), Some(started_tx));
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("outliving: started")
                && let Some(started) = started_tx.take()
            {
                let _ = started.send(());
            }
            output.push_str(&line);
            output.push('\n');
        }
        output
    });
    tokio::time::timeout(Duration::from_secs(60), started)
        .await
        .expect("the daemon starts")
        .expect("outliving-replica runs until its daemon starts");
    // Its renewals fail from now on.
    emulator.faults().fail_next(
        usize::MAX / 2,
        FailRule::status(500).path_contains("/leases"),
    );
    let failed = std::time::Instant::now();
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("it exits")
        .expect("its status");
    let took = failed.elapsed();
    let _ = std::fs::remove_file(&kubeconfig);
    let output = reading.await.expect("its output is read");
    assert_eq!(status.code(), Some(3), "{output}");
    assert!(
        output.contains("two replicas never act on one object"),
        "{output}"
    );
    // Not before the renewals could fail for the renew deadline (1 s), and
    // no later than the Lease could be another's (1.5 s after the last
    // renewal), with the time to reach the deadline's end.
    assert!(took <= Duration::from_secs(5), "{took:?}");
}

/// A 0.1 s timer on ConfigMaps recording which replica ticked which name.
fn ticking_names(me: &'static str, calls: &Calls) -> Registry {
    let calls = calls.clone();
    Registry::builder()
        .timer(cms(), "tick", move |kw: Kwargs| {
            calls.push("tick", json!([me, kw.name()]));
            async { Ok::<_, Error>(()) }
        })
        .interval(Duration::from_millis(100))
        .no_finalizers()
        .build()
        .expect("a valid registry")
}

/// Which replica ticked each ConfigMap since the `after`-th tick, and
/// whether one ticked on two.
fn owners(calls: &Calls, after: usize) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut owners = std::collections::BTreeMap::<String, Vec<String>>::new();
    for tick in &calls.named("tick")[after..] {
        let (Some(who), Some(name)) = (tick[0].as_str(), tick[1].as_str()) else {
            continue;
        };
        let replicas = owners.entry(name.to_owned()).or_default();
        if !replicas.iter().any(|r| r == who) {
            replicas.push(who.to_owned());
        }
    }
    owners
}

/// The `kopf_shard_slots_held` of each replica.
async fn slots_held(replicas: &[&Running]) -> Vec<u32> {
    let mut held = Vec::new();
    for replica in replicas {
        let metrics = scrape(&replica.urls().metrics).await;
        held.push(metrics.value("kopf_shard_slots_held", &[]) as u32);
    }
    held
}

#[tokio::test]
async fn shards_spread_the_objects_over_the_replicas_and_move_when_one_leaves() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    for n in 0..24 {
        new_configmap(&emulator, &format!("cm-{n}")).await;
    }
    let calls = Calls::default();
    let sharded = |me: &str| peering(me).shards(8);
    let a = Running::replica(
        &emulator,
        ticking_names("a", &calls),
        settings(),
        sharded("a"),
    )
    .await;
    let b = Running::replica(
        &emulator,
        ticking_names("b", &calls),
        settings(),
        sharded("b"),
    )
    .await;
    let c = Running::replica(
        &emulator,
        ticking_names("c", &calls),
        settings(),
        sharded("c"),
    )
    .await;
    let balanced = |mut held: Vec<u32>, members: usize| {
        held.sort_unstable();
        let share = 8_u32.div_ceil(members as u32);
        held.iter().sum::<u32>() == 8 && held.iter().all(|h| *h + 1 >= share && *h <= share)
    };
    eventually("the slots to spread over three replicas", || async {
        balanced(slots_held(&[&a, &b, &c]).await, 3).then_some(())
    })
    .await;
    // Every object ticks, each in one replica only.
    let after = calls.named("tick").len();
    eventually("every object to tick", || async {
        (owners(&calls, after).len() == 24).then_some(())
    })
    .await;
    let now = calls.named("tick").len();
    calls.wait_for("tick", now + 100).await;
    let settled = owners(&calls, after);
    assert!(
        settled.values().all(|replicas| replicas.len() == 1),
        "each object ticks in one replica: {settled:?}"
    );
    let mut spread: Vec<&str> = settled.values().map(|r| r[0].as_str()).collect();
    spread.sort_unstable();
    spread.dedup();
    assert_eq!(spread, ["a", "b", "c"], "the objects are spread");

    // c leaves: its slots move to a and b, balanced.
    c.stop().await;
    let left = tokio::time::Instant::now();
    eventually("the slots to spread over two replicas", || async {
        balanced(slots_held(&[&a, &b]).await, 2).then_some(())
    })
    .await;
    let moved = left.elapsed();
    assert!(
        moved < Duration::from_millis(1500 + 200 + 1000),
        "c's slots moved within the lease duration and a retry period (and a margin): {moved:?}"
    );
    let after = calls.named("tick").len();
    eventually("every object to tick again", || async {
        (owners(&calls, after).len() == 24).then_some(())
    })
    .await;
    let now = calls.named("tick").len();
    calls.wait_for("tick", now + 100).await;
    let settled = owners(&calls, now);
    assert!(
        settled
            .values()
            .all(|replicas| replicas.len() == 1 && replicas[0] != "c"),
        "each object ticks in one of the replicas left: {settled:?}"
    );
    // Replicas never paused hold nothing back; the series are there at 0.
    for replica in [&a, &b] {
        let metrics = scrape(&replica.urls().metrics).await;
        for what in ["event", "timer", "daemon", "write"] {
            assert_eq!(
                metrics.get("kopf_fenced_total", &[("what", what)]),
                Some(0.0),
                "kopf_fenced_total{{what={what:?}}}"
            );
        }
    }
    a.stop().await;
    b.stop().await;
}
