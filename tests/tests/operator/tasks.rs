//! Daemons and timers as Kopf runs them, beyond their stopping (which is
//! `daemons`'): timers without an `interval`, the live body, plain-`fn`
//! daemons.
//!
//! "Nothing more happened" is checked after a witness, a timer with an
//! interval on the same object, has ticked several times more.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Secret};
use kopf_runtime::{Error, Kwargs, Registry, ResourceRef, posting};
use kopf_testing::Emulator;
use kopf_tests::{Calls, Running, declared, eventually, logs, test_settings};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The annotation whose value the handlers record, to tell bodies apart.
const MARK: &str = "example.com/mark";
/// The idle period of the idle-only timer.
const IDLE: Duration = Duration::from_millis(300);
/// The witness's interval.
const TICK: Duration = Duration::from_millis(100);

fn secrets() -> ResourceRef {
    ResourceRef::of::<Secret>()
}

fn mark(body: &Value) -> Value {
    body.pointer("/metadata/annotations/example.com~1mark")
        .cloned()
        .unwrap_or(Value::Null)
}

/// A task handler recording the object's mark into `calls` under `id`.
fn recording(
    calls: &Calls,
    id: &'static str,
) -> impl Fn(Kwargs) -> futures::future::BoxFuture<'static, Result<(), Error>> + Send + Sync + 'static
{
    let calls = calls.clone();
    move |kw: Kwargs| {
        calls.push(id, mark(&kw.body));
        Box::pin(async { Ok(()) })
    }
}

async fn create(api: &Api<Secret>, name: &str, mark: &str) {
    let secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": "default", "annotations": {MARK: mark}},
    }))
    .expect("a valid Secret");
    api.create(&PostParams::default(), &secret)
        .await
        .expect("created");
}

async fn remark(api: &Api<Secret>, name: &str, mark: &str) {
    let patch = Patch::Merge(json!({"metadata": {"annotations": {MARK: mark}}}));
    api.patch(name, &PatchParams::default(), &patch)
        .await
        .expect("patched");
}

/// Waits until the witness has ticked `ticks` more times: by then, much
/// longer than an idle period has passed.
async fn witness(calls: &Calls, ticks: usize) {
    let seen = calls.named("witness").len();
    calls.wait_for("witness", seen + ticks).await;
}

#[tokio::test]
async fn timers_without_an_interval_run_once_per_idle_period_or_once() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let registry = Registry::builder()
        .timer(secrets(), "quiet", recording(&calls, "quiet"))
        .idle(IDLE)
        .no_finalizers()
        .timer(secrets(), "once", recording(&calls, "once"))
        .no_finalizers()
        .timer(secrets(), "witness", recording(&calls, "witness"))
        .interval(TICK)
        .no_finalizers()
        .build()
        .expect("timers without an interval are valid");
    let operator = Running::start_with(&emulator, registry, test_settings());
    let api: Api<Secret> = Api::default_namespaced(emulator.client());

    create(&api, "s", "first").await;
    assert_eq!(calls.wait_for("quiet", 1).await, [json!("first")]);
    assert_eq!(calls.wait_for("once", 1).await, [json!("first")]);
    witness(&calls, 10).await;
    assert_eq!(calls.named("quiet").len(), 1, "once while it stays quiet");

    remark(&api, "s", "second").await;
    assert_eq!(
        calls.wait_for("quiet", 2).await,
        [json!("first"), json!("second")],
        "again once it is quiet after a change"
    );
    witness(&calls, 10).await;
    assert_eq!(calls.named("quiet").len(), 2);
    assert_eq!(calls.named("once"), [json!("first")], "once for good");
    operator.stop().await;
}

#[tokio::test]
async fn a_daemon_follows_its_object_through_its_live_body() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let c = calls.clone();
    let registry = Registry::builder()
        .daemon(secrets(), "follower", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                let mut live = kw.live.clone().expect("daemons get a live body");
                let stopped = kw.stopped.clone().expect("daemons get a stop flag");
                calls.push("body", mark(&kw.body));
                while !stopped.is_set() {
                    calls.push("live", mark(&live.get()));
                    tokio::select! {
                        () = live.changed() => {}
                        () = stopped.cancelled() => {}
                    }
                }
                Ok::<_, Error>(())
            }
        })
        .no_finalizers()
        .build()
        .expect("a valid registry");
    let operator = Running::start_with(&emulator, registry, test_settings());
    let api: Api<Secret> = Api::default_namespaced(emulator.client());
    create(&api, "followed", "first").await;
    assert_eq!(calls.wait_for("live", 1).await, [json!("first")]);
    remark(&api, "followed", "second").await;
    assert_eq!(
        calls.wait_for("live", 2).await,
        [json!("first"), json!("second")]
    );
    assert_eq!(calls.named("body"), [json!("first")], "started once");
    operator.stop().await;
}

/// What the plain-fn daemons below record.
static PLAIN: LazyLock<Calls> = LazyLock::new(Calls::default);

/// Lets `stubborn` return: it ignores its stop flag until then.
static RELEASED: AtomicBool = AtomicBool::new(false);

/// A plain fn: it runs on a blocking thread, waits on its stop flag there,
/// and posts an Event from it.
#[kopf_runtime::daemon(Secret, id = "plain", no_finalizers)]
fn plain(name: String, body: &Value, stopped: &kopf_runtime::Stopped) {
    PLAIN.push("plain", json!(name));
    posting::info(body, "PlainDaemon", "on a thread");
    while !stopped.wait_blocking(Duration::from_millis(50)) {}
    PLAIN.push("plain:exit", json!(name));
}

/// A plain fn that ignores its stop flag.
#[kopf_runtime::daemon(
    Secret,
    id = "stubborn",
    no_finalizers,
    cancellation_backoff = 0.2,
    cancellation_timeout = 0.3
)]
fn stubborn(name: String) {
    PLAIN.push("stubborn", json!(name));
    while !RELEASED.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
    }
    PLAIN.push("stubborn:exit", json!(name));
}

async fn events(emulator: &Emulator, reason: &str, name: &str) -> Vec<Event> {
    let events: Api<Event> = Api::default_namespaced(emulator.client());
    let mut list = events
        .list(&ListParams::default())
        .await
        .expect("events listed")
        .items;
    list.retain(|e| {
        e.reason.as_deref() == Some(reason) && e.involved_object.name.as_deref() == Some(name)
    });
    list
}

#[tokio::test]
async fn a_plain_fn_daemon_runs_on_a_thread_until_its_stop_flag_is_set() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let mut settings = test_settings();
    settings.posting.enabled = true;
    let operator = Running::start_with(&emulator, declared(&["plain"]), settings);
    let api: Api<Secret> = Api::default_namespaced(emulator.client());
    create(&api, "threaded", "first").await;
    eventually("the daemon's start", || async {
        PLAIN
            .named("plain")
            .contains(&json!("threaded"))
            .then_some(())
    })
    .await;
    eventually("the Event posted from its thread", || async {
        (!events(&emulator, "PlainDaemon", "threaded")
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    api.delete("threaded", &DeleteParams::default())
        .await
        .expect("deleted");
    eventually("the daemon's return", || async {
        PLAIN
            .named("plain:exit")
            .contains(&json!("threaded"))
            .then_some(())
    })
    .await;
    eventually("the task's end", || {
        let counters = operator.task_counters();
        async move { (counters.stopped == 1).then_some(()) }
    })
    .await;
    assert_eq!(operator.task_counters().abandoned, 0);
    operator.stop().await;
}

#[tokio::test]
async fn a_plain_fn_daemon_ignoring_its_stop_flag_is_abandoned_and_reported() {
    /// Lets the thread end with the test, failed or not.
    struct Release;
    impl Drop for Release {
        fn drop(&mut self) {
            RELEASED.store(true, Ordering::SeqCst);
        }
    }
    let _release = Release;
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let mut settings = test_settings();
    settings.posting.enabled = true;
    let operator = Running::start_with(&emulator, declared(&["stubborn"]), settings);
    let api: Api<Secret> = Api::default_namespaced(emulator.client());
    create(&api, "stubborn", "first").await;
    eventually("the daemon's start", || async {
        PLAIN
            .named("stubborn")
            .contains(&json!("stubborn"))
            .then_some(())
    })
    .await;
    api.delete("stubborn", &DeleteParams::default())
        .await
        .expect("deleted");
    eventually("the task abandoned", || {
        let counters = operator.task_counters();
        async move { (counters.abandoned == 1).then_some(()) }
    })
    .await;
    assert!(
        PLAIN.named("stubborn:exit").is_empty(),
        "abandoned while its thread still runs"
    );
    eventually("an Abandoned Event", || async {
        (!events(&emulator, "Abandoned", "stubborn").await.is_empty()).then_some(())
    })
    .await;
    operator.stop().await;
}
