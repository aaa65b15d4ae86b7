//! Daemons and timers end to end, especially with `no_finalizers`: the task
//! still stops once its object is gone, however the operator learns of it
//! (DESIGN.md, "Daemons and timers without finalizers").
//!
//! Every case that applies to both kinds runs once per kind. Timings are
//! short (ticks of 150 ms) and nothing asserts exact tick counts: only "at
//! least", and "no more" once the task's end is counted and a witness object
//! created later has run meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Secret};
use kopf_runtime::settings::OperatorSettings;
use kopf_runtime::{Error, Kwargs, Registry, RegistryBuilder, ResourceRef};
use kopf_testing::{Emulator, FailRule};
use kopf_tests::{Calls, PATIENCE, Running, captured_warnings, eventually, logs, test_settings};
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, api::PostParams};
use serde_json::{Value, json};

const FINALIZER: &str = "kopf.zalando.org/KopfFinalizerMarker";
/// A finalizer of "another controller", holding objects in deletion.
const FOREIGN: &str = "example.com/hold";
/// The annotation whose value the handlers record, to tell bodies apart.
const MARK: &str = "example.com/mark";
/// The timers' interval and the daemons' polling period.
const TICK: Duration = Duration::from_millis(150);
/// How many ticks of a witness's timer a stopped timer is watched for.
const WITNESS_TICKS: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Daemon,
    Timer,
}

fn secrets() -> ResourceRef {
    ResourceRef::of::<Secret>()
}

fn secret(name: &str, mark: &str, finalizers: &[&str]) -> Secret {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": name, "namespace": "default",
            "annotations": {MARK: mark},
            "finalizers": finalizers,
        },
        "data": {},
    }))
    .expect("a valid Secret")
}

fn mark(body: &Value) -> Value {
    body.pointer(&format!(
        "/metadata/annotations/{}",
        MARK.replace('/', "~1")
    ))
    .cloned()
    .unwrap_or(Value::Null)
}

/// Adds a task handler `id` of `kind` on Secrets, recording into `calls`:
/// `id` with `{uid, name, mark}` on every call (each tick of a timer, the
/// start of a daemon), and `id:exit` with `{uid}` when a daemon returns after
/// its stop flag was set.
fn add_task(builder: RegistryBuilder, kind: Kind, id: &str, calls: &Calls) -> RegistryBuilder {
    let (calls, name) = (calls.clone(), id.to_owned());
    match kind {
        Kind::Daemon => builder.daemon(secrets(), id, move |kw: Kwargs| {
            let (calls, name) = (calls.clone(), name.clone());
            async move {
                calls.push(
                    &name,
                    json!({"uid": kw.uid(), "name": kw.name(), "mark": mark(&kw.body)}),
                );
                let stopped = kw.stopped.clone().expect("daemons get a stop flag");
                while !stopped.wait(TICK).await {}
                calls.push(&format!("{name}:exit"), json!({"uid": kw.uid()}));
                Ok::<_, Error>(())
            }
        }),
        Kind::Timer => builder
            .timer(secrets(), id, move |kw: Kwargs| {
                let (calls, name) = (calls.clone(), name.clone());
                async move {
                    calls.push(
                        &name,
                        json!({"uid": kw.uid(), "name": kw.name(), "mark": mark(&kw.body)}),
                    );
                    Ok::<_, Error>(())
                }
            })
            .interval(TICK),
    }
}

/// One task handler `task` of `kind` with `no_finalizers`.
fn light(kind: Kind, calls: &Calls) -> Registry {
    add_task(Registry::builder(), kind, "task", calls)
        .no_finalizers()
        .build()
        .expect("a valid registry")
}

fn uid_of(call: &Value) -> &str {
    call["uid"].as_str().unwrap_or_default()
}

/// The calls of handler `id` for object `uid`.
fn calls_for(calls: &Calls, id: &str, uid: &str) -> Vec<Value> {
    calls
        .named(id)
        .into_iter()
        .filter(|c| uid_of(c) == uid)
        .collect()
}

/// Waits for the first call of `id` on the object named `name`; returns its UID.
async fn first_call(calls: &Calls, id: &str, name: &str) -> String {
    eventually(&format!("a call of {id} for {name}"), || {
        let found = calls
            .named(id)
            .into_iter()
            .find(|c| c["name"] == name)
            .map(|c| uid_of(&c).to_owned());
        async move { found }
    })
    .await
}

/// How many of the operator's tasks have ended, whichever way.
fn ended(operator: &Running) -> u64 {
    let counters = operator.task_counters();
    counters.finished + counters.stopped + counters.cancelled + counters.abandoned
}

/// Creates a new object (labelled `tick=yes`, for the filtered handlers)
/// and waits until the task of `id` runs for it (a timer: ticks
/// [`WITNESS_TICKS`] times): something that happens after anything before
/// it was asked for. Returns its UID.
async fn witness(api: &Api<Secret>, calls: &Calls, kind: Kind, id: &str) -> String {
    static WITNESSES: AtomicUsize = AtomicUsize::new(0);
    let name = format!("witness-{}", WITNESSES.fetch_add(1, Ordering::Relaxed));
    let mut body = secret(&name, "witness", &[]);
    body.metadata.labels = Some([("tick".to_owned(), "yes".to_owned())].into());
    let uid = create(api, &body).await;
    let runs = match kind {
        Kind::Daemon => 1,
        Kind::Timer => WITNESS_TICKS,
    };
    eventually(&format!("{runs} call(s) of {id} for {name}"), || {
        let now = calls_for(calls, id, &uid).len();
        async move { (now >= runs).then_some(()) }
    })
    .await;
    uid
}

/// Asserts that the task of `id` on `uid` has stopped: the operator counts
/// `ends` ended tasks (the count before the stop, plus the tasks it stops),
/// a daemon returned after its stop flag was set; then the task of a
/// witness created later runs, and that of `uid` does not run again.
async fn assert_stopped(
    kind: Kind,
    operator: &Running,
    api: &Api<Secret>,
    calls: &Calls,
    (id, uid): (&str, &str),
    ends: u64,
) {
    eventually(&format!("the task {id} of {uid} to end"), || {
        let now = ended(operator);
        async move { (now >= ends).then_some(()) }
    })
    .await;
    if kind == Kind::Daemon {
        // Every run of it (it may have been restarted) has exited.
        eventually(&format!("the daemon {id} of {uid} to exit"), || {
            let started = calls_for(calls, id, uid).len();
            let exited = calls_for(calls, &format!("{id}:exit"), uid).len();
            async move { (started > 0 && exited >= started).then_some(()) }
        })
        .await;
    }
    let runs = calls_for(calls, id, uid).len();
    witness(api, calls, kind, id).await;
    assert_eq!(
        calls_for(calls, id, uid).len(),
        runs,
        "the task {id} of {uid} runs again"
    );
}

/// Asserts that the task of `id` on `uid` keeps running: a timer ticks
/// again; a daemon has not exited once the daemon of a witness created
/// later has started.
async fn assert_running(kind: Kind, api: &Api<Secret>, calls: &Calls, id: &str, uid: &str) {
    match kind {
        Kind::Daemon => {
            witness(api, calls, kind, id).await;
            assert!(
                calls_for(calls, &format!("{id}:exit"), uid).is_empty(),
                "the daemon {id} of {uid} exited"
            );
        }
        Kind::Timer => {
            let before = calls_for(calls, id, uid).len();
            eventually(&format!("more ticks of {id} on {uid}"), || {
                let now = calls_for(calls, id, uid).len();
                async move { (now > before).then_some(()) }
            })
            .await;
        }
    }
}

/// The object as the API server has it, untyped (a typed Secret drops `status`).
async fn get(emulator: &Emulator, name: &str) -> Option<Value> {
    let raw: Api<DynamicObject> =
        Api::default_namespaced_with(emulator.client(), &ApiResource::erase::<Secret>(&()));
    raw.get_opt(name)
        .await
        .expect("get works")
        .map(|o| serde_json::to_value(o).expect("serializable"))
}

fn finalizers(body: &Value) -> Vec<String> {
    serde_json::from_value(body["metadata"]["finalizers"].clone()).unwrap_or_default()
}

async fn create(api: &Api<Secret>, secret: &Secret) -> String {
    api.create(&PostParams::default(), secret)
        .await
        .expect("created")
        .metadata
        .uid
        .expect("a UID")
}

async fn delete(api: &Api<Secret>, name: &str) {
    api.delete(name, &DeleteParams::default())
        .await
        .expect("deleted");
}

/// Settings for these tests: short watch back-offs (the gap tests hold the
/// watch down with failures and want it back at once).
fn settings() -> OperatorSettings {
    let mut settings = test_settings();
    settings.watching.error_backoffs = vec![Duration::from_millis(100)];
    settings.watching.reconnect_backoff = Duration::from_millis(50);
    settings
}

/// An operator with `registry` and these tests' settings; the Secrets API.
fn serve(emulator: &Emulator, registry: Registry) -> (Running, Api<Secret>) {
    let operator = Running::start_with(emulator, registry, settings());
    (operator, Api::default_namespaced(emulator.client()))
}

async fn setup(kind: Kind) -> (Emulator, Calls, Running, Api<Secret>) {
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let (operator, api) = serve(&emulator, light(kind, &calls));
    (emulator, calls, operator, api)
}

/// How long the slow handler below keeps its object's worker busy: longer
/// than the test may take.
const BUSY: Duration = Duration::from_secs(4 * PATIENCE.as_secs());

/// The DELETED event stops an object's tasks when it is seen, not when the
/// object's worker gets to it: here the worker is busy in a slow handler.
async fn deleted_event_stops_while_busy(kind: Kind) {
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let slow = calls.clone();
    let registry = add_task(Registry::builder(), kind, "task", &calls)
        .no_finalizers()
        .on_event(secrets(), "slow", move |kw: Kwargs| {
            let calls = slow.clone();
            async move {
                if mark(&kw.body) == "slow" {
                    calls.push("slow", json!({"uid": kw.uid()}));
                    tokio::time::sleep(BUSY).await;
                    calls.push("slow:done", json!({"uid": kw.uid()}));
                }
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry");
    let (operator, api) = serve(&emulator, registry);
    let uid = create(&api, &secret("busy", "1", &[])).await;
    first_call(&calls, "task", "busy").await;
    api.patch(
        "busy",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {MARK: "slow"}}})),
    )
    .await
    .expect("patched");
    // Once the worker is in the slow handler, delete.
    calls.wait_for("slow", 1).await;
    let ends = ended(&operator) + 1;
    delete(&api, "busy").await;
    assert_stopped(kind, &operator, &api, &calls, ("task", &uid), ends).await;
    assert!(
        calls.named("slow:done").is_empty(),
        "stopped on the DELETED event, not after the slow handler"
    );
    operator.stop().await;
}

#[tokio::test]
async fn daemon_stops_on_the_deleted_event_while_its_object_is_busy_in_a_slow_handler() {
    deleted_event_stops_while_busy(Kind::Daemon).await;
}

#[tokio::test]
async fn timer_stops_on_the_deleted_event_while_its_object_is_busy_in_a_slow_handler() {
    deleted_event_stops_while_busy(Kind::Timer).await;
}

// ---------------------------------------------------------------------------
// With the finalizer: the task starts from the finalizer patch's answer.

/// A task that holds the finalizer starts once the finalizer is on, from
/// the patch's answer, not when that patch comes back on the watch (at
/// start-up, only after the whole listing). Here no watch event comes at
/// all: the watches are silent from the start.
async fn starts_from_the_finalizer_patch(kind: Kind) {
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let api: Api<Secret> = Api::default_namespaced(emulator.client());
    let uid = create(&api, &secret("held", "1", &[])).await;
    emulator.faults().silence_watches();
    let registry = add_task(Registry::builder(), kind, "task", &calls)
        .build()
        .expect("a valid registry");
    let (operator, _) = serve(&emulator, registry);

    assert_eq!(first_call(&calls, "task", "held").await, uid);
    let body = get(&emulator, "held").await.expect("the object is there");
    assert_eq!(finalizers(&body), [FINALIZER], "{body}");
    if kind == Kind::Timer {
        eventually("a second tick", || {
            let ticks = calls_for(&calls, "task", &uid).len();
            async move { (ticks >= 2).then_some(()) }
        })
        .await;
    }
    let patches = emulator
        .requests()
        .iter()
        .filter(|r| r.verb == "patch" && r.path.ends_with("/secrets/held"))
        .count();
    assert_eq!(
        patches, 1,
        "the finalizer is added once, and nothing else patched"
    );
    emulator.faults().clear();
    operator.stop().await;
}

#[tokio::test]
async fn daemon_with_the_finalizer_starts_without_waiting_for_its_patch_to_come_back() {
    starts_from_the_finalizer_patch(Kind::Daemon).await;
}

#[tokio::test]
async fn timer_with_the_finalizer_starts_without_waiting_for_its_patch_to_come_back() {
    starts_from_the_finalizer_patch(Kind::Timer).await;
}

// ---------------------------------------------------------------------------
// No finalizer, and an existing one only it needed is removed.

async fn no_finalizers_keep_objects_free(kind: Kind) {
    let (emulator, calls, operator, api) = setup(kind).await;
    create(&api, &secret("fresh", "1", &[])).await;
    create(&api, &secret("stale", "1", &[FINALIZER, FOREIGN])).await;

    first_call(&calls, "task", "fresh").await;
    first_call(&calls, "task", "stale").await;
    eventually("the stale finalizer removed", || async {
        get(&emulator, "stale")
            .await
            .filter(|b| finalizers(b) == [FOREIGN])
    })
    .await;
    // The tasks keep running and nothing adds a finalizer meanwhile.
    let uid = first_call(&calls, "task", "fresh").await;
    assert_running(kind, &api, &calls, "task", &uid).await;
    let fresh = get(&emulator, "fresh").await.expect("exists");
    assert!(finalizers(&fresh).is_empty(), "{fresh}");
    let stale = get(&emulator, "stale").await.expect("exists");
    assert_eq!(finalizers(&stale), [FOREIGN]);
    operator.stop().await;
}

#[tokio::test]
async fn daemon_without_finalizers_adds_none_and_removes_one_only_it_needed() {
    no_finalizers_keep_objects_free(Kind::Daemon).await;
}

#[tokio::test]
async fn timer_without_finalizers_adds_none_and_removes_one_only_it_needed() {
    no_finalizers_keep_objects_free(Kind::Timer).await;
}

/// The operator used to keep a finalizer (e.g. an older version without
/// `no_finalizers`); the object was deleted while it was down.
async fn stale_finalizer_released_in_deletion(kind: Kind) {
    let emulator = Emulator::start().await.expect("emulator starts");
    let api: Api<Secret> = Api::default_namespaced(emulator.client());
    create(&api, &secret("stale", "1", &[FINALIZER])).await;
    delete(&api, "stale").await;
    let body = get(&emulator, "stale")
        .await
        .expect("held by the finalizer");
    assert!(body["metadata"]["deletionTimestamp"].is_string());

    let calls = Calls::default();
    let operator = Running::start_with(&emulator, light(kind, &calls), settings());
    eventually("the object released and gone", || async {
        get(&emulator, "stale").await.is_none().then_some(())
    })
    .await;
    let witness = witness(&api, &calls, kind, "task").await;
    assert!(
        calls.all().iter().all(|(_, call)| uid_of(call) == witness),
        "nothing starts for an object in deletion: {:?}",
        calls.all()
    );
    assert_eq!(operator.task_counters().spawned, 1, "the witness's alone");
    operator.stop().await;
}

#[tokio::test]
async fn daemon_without_finalizers_releases_a_stale_finalizer_of_an_object_in_deletion() {
    stale_finalizer_released_in_deletion(Kind::Daemon).await;
}

#[tokio::test]
async fn timer_without_finalizers_releases_a_stale_finalizer_of_an_object_in_deletion() {
    stale_finalizer_released_in_deletion(Kind::Timer).await;
}

// ---------------------------------------------------------------------------
// 1. The DELETED watch event.

async fn deleted_event_stops(kind: Kind) {
    let (emulator, calls, operator, api) = setup(kind).await;
    let uid = create(&api, &secret("gone", "1", &[])).await;
    first_call(&calls, "task", "gone").await;

    let ends = ended(&operator) + 1;
    delete(&api, "gone").await;
    assert!(
        get(&emulator, "gone").await.is_none(),
        "nothing holds the object"
    );
    assert_stopped(kind, &operator, &api, &calls, ("task", &uid), ends).await;
    eventually("the task counted as stopped", || {
        let counters = operator.task_counters();
        async move { (counters.stopped + counters.cancelled >= 1).then_some(()) }
    })
    .await;
    assert_eq!(operator.task_counters().abandoned, 0);
    operator.stop().await;
}

#[tokio::test]
async fn daemon_without_finalizers_stops_on_the_deleted_event() {
    deleted_event_stops(Kind::Daemon).await;
}

#[tokio::test]
async fn timer_without_finalizers_stops_on_the_deleted_event() {
    deleted_event_stops(Kind::Timer).await;
}

// ---------------------------------------------------------------------------
// 2. A watch gap: objects missing from the fresh listing count as deleted.

async fn watch_gap_stops(kind: Kind) {
    let (emulator, calls, operator, api) = setup(kind).await;
    let gone = create(&api, &secret("gone", "1", &[])).await;
    let kept = create(&api, &secret("kept", "1", &[])).await;
    first_call(&calls, "task", "gone").await;
    first_call(&calls, "task", "kept").await;

    // Hold the operator's watch and list of Secrets down, so that it cannot
    // see the DELETED event; delete; forget the history; let it back.
    let faults = emulator.faults();
    faults.fail_next(
        1_000_000,
        FailRule::status(500).verb("watch").path_contains("secrets"),
    );
    faults.fail_next(
        1_000_000,
        FailRule::status(500).verb("list").path_contains("secrets"),
    );
    faults.drop_watches();
    // The watch is down (its next attempt failed) before the deletion: the
    // DELETED event never reaches the operator.
    eventually("a failed watch attempt", || {
        let failed = emulator
            .requests()
            .iter()
            .any(|r| r.verb == "watch" && r.path.contains("secrets") && r.status == 500);
        async move { failed.then_some(()) }
    })
    .await;
    let ends = ended(&operator) + 1;
    delete(&api, "gone").await;
    // Re-created under the same name during the gap: a new UID.
    let again = create(&api, &secret("gone", "again", &[])).await;
    faults.compact();
    emulator.clear_requests();
    faults.clear();

    assert_stopped(kind, &operator, &api, &calls, ("task", &gone), ends).await;
    assert!(
        emulator
            .requests()
            .iter()
            .any(|r| r.verb == "list" && r.path.contains("secrets") && r.status == 200),
        "the operator re-listed"
    );
    assert_running(kind, &api, &calls, "task", &kept).await;
    assert_running(kind, &api, &calls, "task", &again).await;
    for call in calls_for(&calls, "task", &gone) {
        assert_eq!(call["mark"], "1", "the old task saw another body: {call}");
    }
    for call in calls_for(&calls, "task", &again) {
        assert_eq!(
            call["mark"], "again",
            "the new task saw another body: {call}"
        );
    }
    operator.stop().await;
}

#[tokio::test]
async fn daemon_without_finalizers_stops_when_its_object_vanished_during_a_watch_gap() {
    watch_gap_stops(Kind::Daemon).await;
}

#[tokio::test]
async fn timer_without_finalizers_stops_when_its_object_vanished_during_a_watch_gap() {
    watch_gap_stops(Kind::Timer).await;
}

/// The operator restarts its watch after the API server restarts; an object
/// deleted meanwhile is gone from the listing.
async fn server_restart_stops(kind: Kind) {
    let (emulator, calls, operator, api) = setup(kind).await;
    let uid = create(&api, &secret("gone", "1", &[])).await;
    first_call(&calls, "task", "gone").await;

    let ends = ended(&operator) + 1;
    emulator.restart(false).await;
    assert!(
        get(&emulator, "gone").await.is_none(),
        "wiped by the restart"
    );
    assert_stopped(kind, &operator, &api, &calls, ("task", &uid), ends).await;
    operator.stop().await;
}

#[tokio::test]
async fn daemon_without_finalizers_stops_when_the_server_restarts_without_its_object() {
    server_restart_stops(Kind::Daemon).await;
}

#[tokio::test]
async fn timer_without_finalizers_stops_when_the_server_restarts_without_its_object() {
    server_restart_stops(Kind::Timer).await;
}

// ---------------------------------------------------------------------------
// 3. A deletionTimestamp while another controller's finalizer holds the object.

async fn deletion_timestamp_stops(kind: Kind) {
    let (emulator, calls, operator, api) = setup(kind).await;
    let uid = create(&api, &secret("held", "1", &[FOREIGN])).await;
    first_call(&calls, "task", "held").await;

    let ends = ended(&operator) + 1;
    delete(&api, "held").await;
    let body = get(&emulator, "held").await.expect("held by its finalizer");
    assert!(body["metadata"]["deletionTimestamp"].is_string(), "{body}");
    assert_stopped(kind, &operator, &api, &calls, ("task", &uid), ends).await;
    let body = get(&emulator, "held").await.expect("still held");
    assert_eq!(finalizers(&body), [FOREIGN], "ours was never added");

    // Releasing it deletes it; nothing restarts on the way.
    let runs = calls_for(&calls, "task", &uid).len();
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("released");
    eventually("the object gone", || async {
        get(&emulator, "held").await.is_none().then_some(())
    })
    .await;
    let spawned = operator.task_counters().spawned;
    witness(&api, &calls, kind, "task").await;
    assert_eq!(
        operator.task_counters().spawned,
        spawned + 1,
        "nothing respawned but the witness's"
    );
    assert_eq!(
        calls_for(&calls, "task", &uid).len(),
        runs,
        "{:?}",
        calls.all()
    );
    operator.stop().await;
}

#[tokio::test]
async fn daemon_without_finalizers_stops_on_a_deletion_timestamp_held_by_another_finalizer() {
    deletion_timestamp_stops(Kind::Daemon).await;
}

#[tokio::test]
async fn timer_without_finalizers_stops_on_a_deletion_timestamp_held_by_another_finalizer() {
    deletion_timestamp_stops(Kind::Timer).await;
}

// ---------------------------------------------------------------------------
// 4. Tasks are keyed by UID.

async fn recreated_gets_new_tasks(kind: Kind) {
    let (_emulator, calls, operator, api) = setup(kind).await;
    let old = create(&api, &secret("same", "old", &[])).await;
    first_call(&calls, "task", "same").await;

    let ends = ended(&operator) + 1;
    delete(&api, "same").await;
    let new = create(&api, &secret("same", "new", &[])).await;
    assert_ne!(old, new);
    eventually("a call for the new object", || {
        let found = !calls_for(&calls, "task", &new).is_empty();
        async move { found.then_some(()) }
    })
    .await;
    assert_stopped(kind, &operator, &api, &calls, ("task", &old), ends).await;
    assert_running(kind, &api, &calls, "task", &new).await;

    for call in calls_for(&calls, "task", &old) {
        assert_eq!(call["mark"], "old", "the old task saw another body: {call}");
    }
    for call in calls_for(&calls, "task", &new) {
        assert_eq!(call["mark"], "new", "the new task saw another body: {call}");
    }
    assert!(operator.task_counters().spawned >= 2);
    operator.stop().await;
}

#[tokio::test]
async fn daemon_of_a_recreated_object_is_new_and_the_old_one_never_sees_the_new_body() {
    recreated_gets_new_tasks(Kind::Daemon).await;
}

#[tokio::test]
async fn timer_of_a_recreated_object_is_new_and_the_old_one_never_sees_the_new_body() {
    recreated_gets_new_tasks(Kind::Timer).await;
}

// ---------------------------------------------------------------------------
// 5. Tasks that ignore the stop: cancelled, or abandoned and reported.

/// A handler that never looks at its stop flag but yields (so it can be
/// cancelled), or that blocks its thread for `BLOCKED` (so it cannot).
#[derive(Debug, Clone, Copy)]
enum Stubborn {
    Yielding,
    Blocking,
}

const BLOCKED: Duration = Duration::from_secs(4);

fn stubborn(kind: Kind, how: Stubborn, calls: &Calls) -> Registry {
    let calls = calls.clone();
    let handler = move |kw: Kwargs| {
        let calls = calls.clone();
        async move {
            calls.push("task", json!({"uid": kw.uid(), "name": kw.name()}));
            match how {
                Stubborn::Yielding => loop {
                    tokio::task::yield_now().await;
                },
                Stubborn::Blocking => {
                    // Blocks its thread, so no cancellation can reach it;
                    // `block_in_place` hands the worker's other tasks to
                    // another thread, so the rest of the test runs on.
                    tokio::task::block_in_place(|| std::thread::sleep(BLOCKED));
                    calls.push("task:unblocked", json!({"uid": kw.uid()}));
                }
            }
            Ok::<_, Error>(())
        }
    };
    let builder = match kind {
        Kind::Daemon => Registry::builder()
            .daemon(secrets(), "task", handler)
            .cancellation_backoff(Duration::from_millis(200))
            .cancellation_timeout(Duration::from_millis(300)),
        Kind::Timer => Registry::builder()
            .timer(secrets(), "task", handler)
            .interval(TICK),
    };
    builder.no_finalizers().build().expect("a valid registry")
}

/// Timers have no cancellation options of their own: the settings' apply.
fn stubborn_settings() -> OperatorSettings {
    let mut settings = settings();
    settings.posting.enabled = true;
    settings.background.graceful_exit_limit = Duration::from_millis(200);
    settings.background.default_cancellation_timeout = Duration::from_millis(300);
    settings
}

async fn ignoring_stop_is_cancelled(kind: Kind) {
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let registry = stubborn(kind, Stubborn::Yielding, &calls);
    let operator = Running::start_with(&emulator, registry, stubborn_settings());
    let api: Api<Secret> = Api::default_namespaced(emulator.client());
    create(&api, &secret("stubborn", "1", &[])).await;
    first_call(&calls, "task", "stubborn").await;

    let deleted = Instant::now();
    delete(&api, "stubborn").await;
    eventually("the task cancelled", || {
        let counters = operator.task_counters();
        async move { (counters.cancelled >= 1).then_some(()) }
    })
    .await;
    assert!(
        deleted.elapsed() >= Duration::from_millis(200),
        "cancelled only after its grace period"
    );
    assert_eq!(operator.task_counters().abandoned, 0);
    operator.stop().await;
}

#[tokio::test]
async fn daemon_ignoring_its_stop_flag_is_cancelled_after_its_grace_period() {
    ignoring_stop_is_cancelled(Kind::Daemon).await;
}

#[tokio::test]
async fn timer_ignoring_its_stop_flag_is_cancelled_after_the_graceful_exit_limit() {
    ignoring_stop_is_cancelled(Kind::Timer).await;
}

async fn blocking_is_abandoned(kind: Kind) {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let registry = stubborn(kind, Stubborn::Blocking, &calls);
    let operator = Running::start_with(&emulator, registry, stubborn_settings());
    let api: Api<Secret> = Api::default_namespaced(emulator.client());
    let name = format!("blocking-{kind:?}").to_lowercase();
    let uid = create(&api, &secret(&name, "1", &[])).await;
    first_call(&calls, "task", &name).await;

    delete(&api, &name).await;
    // Read in this order, an abandonment counted before the handler was
    // seen unblocked happened while it was still blocked.
    let unblocked = eventually("the task abandoned", || {
        let abandoned = operator.task_counters().abandoned;
        let unblocked = calls_for(&calls, "task:unblocked", &uid).len();
        async move { (abandoned >= 1).then_some(unblocked) }
    })
    .await;
    assert_eq!(
        unblocked, 0,
        "abandoned while still blocked, not after it ended"
    );
    let events: Api<Event> = Api::default_namespaced(emulator.client());
    let event = eventually("an Abandoned event", || async {
        events
            .list(&ListParams::default())
            .await
            .expect("events listed")
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("Abandoned"))
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.involved_object.name.as_deref(), Some(name.as_str()));
    assert_eq!(event.involved_object.uid.as_deref(), Some(uid.as_str()));
    let message = event.message.unwrap_or_default();
    assert!(message.contains("'task'"), "{message}");
    eventually("the warning logged", || {
        let logged = captured_warnings()
            .lines()
            .any(|l| l.contains("WARN") && l.contains(&uid) && l.contains("abandoned"));
        async move { logged.then_some(()) }
    })
    .await;
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn daemon_blocking_its_thread_is_abandoned_and_reported_by_log_event_and_counter() {
    blocking_is_abandoned(Kind::Daemon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn timer_blocking_its_thread_is_abandoned_and_reported_by_log_event_and_counter() {
    blocking_is_abandoned(Kind::Timer).await;
}

// ---------------------------------------------------------------------------
// 6. A patch from a task whose object is gone ends the task quietly.

/// A timer (each tick) or a daemon (polling) that, once `armed`, deletes its
/// own object (and re-creates it under the same name if `recreate`), then
/// returns a result: the result's patch finds the object gone (404) or
/// replaced (409).
fn self_deleting(kind: Kind, calls: &Calls, armed: &Arc<AtomicBool>, recreate: bool) -> Registry {
    let (calls, armed) = (calls.clone(), Arc::clone(armed));
    let handler = move |kw: Kwargs| {
        let (calls, armed) = (calls.clone(), Arc::clone(&armed));
        async move {
            calls.push("task", json!({"uid": kw.uid(), "name": kw.name()}));
            let api: Api<Secret> = Api::default_namespaced(kw.client.clone().expect("a client"));
            let name = kw.name().unwrap_or_default().to_owned();
            loop {
                if armed.load(Ordering::SeqCst) && mark(&kw.body) == "original" {
                    api.delete(&name, &DeleteParams::default()).await?;
                    if recreate {
                        api.create(&PostParams::default(), &secret(&name, "replacement", &[]))
                            .await?;
                    }
                    calls.push("task:deleted", json!({"uid": kw.uid()}));
                    break;
                }
                match &kw.stopped {
                    // A daemon polls until armed (or stopped).
                    Some(stopped) if kind == Kind::Daemon => {
                        if stopped.wait(TICK / 3).await {
                            return Ok(json!(null));
                        }
                    }
                    // A timer checks once per tick.
                    _ => break,
                }
            }
            Ok::<_, Error>(json!({"ticked": true}))
        }
    };
    let builder = match kind {
        Kind::Daemon => Registry::builder().daemon(secrets(), "task", handler),
        Kind::Timer => Registry::builder()
            .timer(secrets(), "task", handler)
            .interval(TICK),
    };
    builder.no_finalizers().build().expect("a valid registry")
}

async fn patch_of_a_gone_object_ends_quietly(kind: Kind, recreate: bool, name: &str) {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let armed = Arc::new(AtomicBool::new(false));
    let registry = self_deleting(kind, &calls, &armed, recreate);
    let (operator, api) = serve(&emulator, registry);
    let uid = create(&api, &secret(name, "original", &[])).await;
    first_call(&calls, "task", name).await;
    if kind == Kind::Timer {
        // Results land while the object lives (what ends later is the task).
        eventually("the first result in status", || async {
            get(&emulator, name)
                .await
                .filter(|b| b.pointer("/status/task").is_some())
        })
        .await;
    }

    // Keep the operator from hearing of the deletion by its watch: only the
    // patch can tell the task that its object is gone.
    let faults = emulator.faults();
    faults.fail_next(
        1_000_000,
        FailRule::status(500).verb("watch").path_contains("secrets"),
    );
    faults.fail_next(
        1_000_000,
        FailRule::status(500).verb("list").path_contains("secrets"),
    );
    faults.drop_watches();
    let stopped_before = operator.task_counters().stopped;
    armed.store(true, Ordering::SeqCst);

    calls.wait_for("task:deleted", 1).await;
    eventually("the task ended by its patch", || {
        let counters = operator.task_counters();
        async move { (counters.stopped > stopped_before).then_some(()) }
    })
    .await;
    // Its end is counted: its patch is done, and while the watch is down,
    // nothing else reaches the object.
    let ticks = calls_for(&calls, "task", &uid).len();
    let now = get(&emulator, name).await;
    if recreate {
        let now = now.expect("the replacement exists");
        assert_eq!(mark(&now), "replacement");
        assert!(
            now.pointer("/status/task").is_none(),
            "patched the wrong object: {now}"
        );
    } else {
        assert!(now.is_none(), "the patch did not re-create it");
    }
    let warnings = captured_warnings();
    assert!(
        !warnings.lines().any(|l| l.contains(name)),
        "not quiet: {warnings}"
    );

    faults.clear();
    if recreate {
        // Once the watch is back, the replacement gets a task of its own.
        eventually("a tick of the replacement", || {
            let found = calls
                .named("task")
                .iter()
                .any(|c| c["name"] == name && uid_of(c) != uid);
            async move { found.then_some(()) }
        })
        .await;
    }
    // With the watch back, a witness created later runs; the task does not.
    witness(&api, &calls, kind, "task").await;
    assert_eq!(
        calls_for(&calls, "task", &uid).len(),
        ticks,
        "no tick after the patch"
    );
    operator.stop().await;
}

#[tokio::test]
async fn daemon_whose_result_patch_finds_the_object_deleted_ends_quietly() {
    patch_of_a_gone_object_ends_quietly(Kind::Daemon, false, "daemon-404").await;
}

#[tokio::test]
async fn daemon_whose_result_patch_finds_the_object_replaced_ends_quietly() {
    patch_of_a_gone_object_ends_quietly(Kind::Daemon, true, "daemon-409").await;
}

#[tokio::test]
async fn timer_whose_result_patch_finds_the_object_deleted_ends_quietly() {
    patch_of_a_gone_object_ends_quietly(Kind::Timer, false, "timer-404").await;
}

#[tokio::test]
async fn timer_whose_result_patch_finds_the_object_replaced_ends_quietly() {
    patch_of_a_gone_object_ends_quietly(Kind::Timer, true, "timer-409").await;
}

// ---------------------------------------------------------------------------
// Mixed handlers on one resource.

#[tokio::test]
async fn mixed_handlers_keep_the_finalizer_until_the_finalizer_keeping_daemon_stopped() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let slow = calls.clone();
    let registry = add_task(Registry::builder(), Kind::Timer, "light", &calls)
        .no_finalizers()
        .daemon(secrets(), "keeper", move |kw: Kwargs| {
            let calls = slow.clone();
            async move {
                calls.push("keeper", json!({"uid": kw.uid(), "name": kw.name()}));
                let stopped = kw.stopped.clone().expect("daemons get a stop flag");
                stopped.wait(PATIENCE).await;
                // A slow exit: the object must wait for it.
                tokio::time::sleep(Duration::from_millis(700)).await;
                calls.push("keeper:exit", json!({"uid": kw.uid()}));
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry");
    let (operator, api) = serve(&emulator, registry);
    let uid = create(&api, &secret("mixed", "1", &[])).await;

    first_call(&calls, "keeper", "mixed").await;
    first_call(&calls, "light", "mixed").await;
    let body = eventually("the finalizer", || async {
        get(&emulator, "mixed")
            .await
            .filter(|b| finalizers(b) == [FINALIZER])
    })
    .await;
    assert_eq!(finalizers(&body), [FINALIZER]);

    // Both tasks end: the keeper and the light one.
    let ends = ended(&operator) + 2;
    delete(&api, "mixed").await;
    let body = get(&emulator, "mixed")
        .await
        .expect("held by the keeper's finalizer");
    assert!(body["metadata"]["deletionTimestamp"].is_string());
    eventually("the object released and gone", || async {
        get(&emulator, "mixed").await.is_none().then_some(())
    })
    .await;
    assert_eq!(
        calls_for(&calls, "keeper:exit", &uid).len(),
        1,
        "released only once the keeper had stopped"
    );
    assert_stopped(Kind::Timer, &operator, &api, &calls, ("light", &uid), ends).await;
    operator.stop().await;
}

#[tokio::test]
async fn mixed_handlers_do_not_hold_the_object_for_a_slow_task_without_finalizers() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let slow = calls.clone();
    // The finalizer-keeping daemon stops at once; the other one takes its time.
    let registry = add_task(Registry::builder(), Kind::Daemon, "keeper", &calls)
        .daemon(secrets(), "slow", move |kw: Kwargs| {
            let calls = slow.clone();
            async move {
                calls.push("slow", json!({"uid": kw.uid(), "name": kw.name()}));
                let stopped = kw.stopped.clone().expect("daemons get a stop flag");
                stopped.wait(PATIENCE).await;
                tokio::time::sleep(Duration::from_secs(3)).await;
                calls.push("slow:exit", json!({"uid": kw.uid()}));
                Ok::<_, Error>(())
            }
        })
        .no_finalizers()
        .cancellation_backoff(Duration::from_secs(10))
        .build()
        .expect("a valid registry");
    let (operator, api) = serve(&emulator, registry);
    let uid = create(&api, &secret("mixed", "1", &[])).await;
    first_call(&calls, "keeper", "mixed").await;
    first_call(&calls, "slow", "mixed").await;
    eventually("the finalizer", || async {
        get(&emulator, "mixed")
            .await
            .filter(|b| finalizers(b) == [FINALIZER])
    })
    .await;

    delete(&api, "mixed").await;
    eventually("the object released and gone", || async {
        get(&emulator, "mixed").await.is_none().then_some(())
    })
    .await;
    assert_eq!(calls_for(&calls, "keeper:exit", &uid).len(), 1);
    assert!(
        calls_for(&calls, "slow:exit", &uid).is_empty(),
        "released without waiting for the task that opted out of the finalizer"
    );
    calls.wait_for("slow:exit", 1).await;
    operator.stop().await;
}

// ---------------------------------------------------------------------------
// kubectl delete does not hang while the operator is down.

#[tokio::test]
async fn secret_served_without_finalizers_is_deleted_at_once_while_the_operator_is_stopped() {
    let (emulator, calls, operator, api) = setup(Kind::Timer).await;
    create(&api, &secret("free", "1", &[])).await;
    first_call(&calls, "task", "free").await;
    operator.stop().await;

    let body = get(&emulator, "free").await.expect("exists");
    assert!(finalizers(&body).is_empty(), "{body}");
    delete(&api, "free").await;
    assert!(get(&emulator, "free").await.is_none(), "deleted at once");
}

async fn restarted_operator_resumes(kind: Kind) {
    let (emulator, calls, operator, api) = setup(kind).await;
    let uid = create(&api, &secret("lasting", "1", &[])).await;
    first_call(&calls, "task", "lasting").await;
    operator.stop().await;
    let before = calls_for(&calls, "task", &uid).len();

    let operator = Running::start_with(&emulator, light(kind, &calls), settings());
    eventually("the task running again", || {
        let now = calls_for(&calls, "task", &uid).len();
        async move { (now > before).then_some(()) }
    })
    .await;
    let body = get(&emulator, "lasting").await.expect("exists");
    assert!(finalizers(&body).is_empty(), "{body}");
    let ends = ended(&operator) + 1;
    delete(&api, "lasting").await;
    assert_stopped(kind, &operator, &api, &calls, ("task", &uid), ends).await;
    operator.stop().await;
}

#[tokio::test]
async fn daemon_without_finalizers_runs_again_for_existing_objects_after_an_operator_restart() {
    restarted_operator_resumes(Kind::Daemon).await;
}

#[tokio::test]
async fn timer_without_finalizers_runs_again_for_existing_objects_after_an_operator_restart() {
    restarted_operator_resumes(Kind::Timer).await;
}

// ---------------------------------------------------------------------------
// Timer results, filters, shutdown.

#[tokio::test]
async fn timer_results_land_in_the_status_under_the_handler_id() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let registry = Registry::builder()
        .timer(secrets(), "counter", |kw: Kwargs| async move {
            Ok::<_, Error>(json!({"seen": kw.name()}))
        })
        .interval(TICK)
        .no_finalizers()
        .build()
        .expect("a valid registry");
    let (operator, api) = serve(&emulator, registry);
    create(&api, &secret("counted", "1", &[])).await;

    let body = eventually("the result in status", || async {
        get(&emulator, "counted")
            .await
            .filter(|b| b.pointer("/status/counter").is_some())
    })
    .await;
    assert_eq!(body["status"]["counter"], json!({"seen": "counted"}));
    assert!(finalizers(&body).is_empty());
    operator.stop().await;
}

/// A namespaced custom resource with a status subresource.
fn examples() -> ApiResource {
    ApiResource {
        group: "kopf.dev".into(),
        version: "v1".into(),
        api_version: "kopf.dev/v1".into(),
        kind: "KopfExample".into(),
        plural: "kopfexamples".into(),
    }
}

fn example(name: &str, mark: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": name, "namespace": "default", "annotations": {MARK: mark}},
        "spec": {},
    }))
    .expect("a valid object")
}

#[tokio::test]
async fn timer_results_go_to_the_status_subresource_and_never_to_a_replacement() {
    logs();
    let emulator = Emulator::builder()
        .crd("kopf.dev", "v1", "kopfexamples", "KopfExample", true)
        .start()
        .await
        .expect("emulator starts");
    let calls = Calls::default();
    let armed = Arc::new(AtomicBool::new(false));
    let (c, a) = (calls.clone(), Arc::clone(&armed));
    let registry = Registry::builder()
        .timer(
            ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples"),
            "task",
            move |kw: Kwargs| {
                let (calls, armed) = (c.clone(), Arc::clone(&a));
                async move {
                    calls.push("task", json!({"uid": kw.uid(), "name": kw.name()}));
                    let api: Api<DynamicObject> = Api::default_namespaced_with(
                        kw.client.clone().expect("a client"),
                        &examples(),
                    );
                    let name = kw.name().unwrap_or_default().to_owned();
                    if armed.load(Ordering::SeqCst) && mark(&kw.body) == "original" {
                        api.delete(&name, &DeleteParams::default()).await?;
                        api.create(&PostParams::default(), &example(&name, "replacement"))
                            .await?;
                        calls.push("task:replaced", json!({"uid": kw.uid()}));
                    }
                    Ok::<_, Error>(json!({"mark": mark(&kw.body)}))
                }
            },
        )
        .interval(TICK)
        .no_finalizers()
        .build()
        .expect("a valid registry");
    let operator = Running::start_with(&emulator, registry, settings());
    let api: Api<DynamicObject> = Api::default_namespaced_with(emulator.client(), &examples());
    let uid = api
        .create(&PostParams::default(), &example("crd-409", "original"))
        .await
        .expect("created")
        .metadata
        .uid
        .expect("a UID");
    let body = eventually("the result in the status", || async {
        api.get_opt("crd-409")
            .await
            .expect("get works")
            .map(|o| serde_json::to_value(o).expect("serializable"))
            .filter(|b| b.pointer("/status/task").is_some())
    })
    .await;
    assert_eq!(body["status"]["task"], json!({"mark": "original"}));

    let faults = emulator.faults();
    faults.fail_next(
        1_000_000,
        FailRule::status(500)
            .verb("watch")
            .path_contains("kopfexamples"),
    );
    faults.fail_next(
        1_000_000,
        FailRule::status(500)
            .verb("list")
            .path_contains("kopfexamples"),
    );
    faults.drop_watches();
    let stopped_before = operator.task_counters().stopped;
    armed.store(true, Ordering::SeqCst);
    calls.wait_for("task:replaced", 1).await;
    eventually("the task ended by its patch", || {
        let counters = operator.task_counters();
        async move { (counters.stopped > stopped_before).then_some(()) }
    })
    .await;
    // Its end is counted: its patch is done, and while the watch is down,
    // nothing else reaches the replacement.
    let now = api.get("crd-409").await.expect("the replacement exists");
    let now = serde_json::to_value(now).expect("serializable");
    assert_ne!(now["metadata"]["uid"], uid.as_str());
    assert!(
        now.pointer("/status/task").is_none(),
        "patched the replacement: {now}"
    );
    let warnings = captured_warnings();
    assert!(
        !warnings.lines().any(|l| l.contains("crd-409")),
        "not quiet: {warnings}"
    );
    faults.clear();
    operator.stop().await;
}

async fn filters_stop_and_restart(kind: Kind) {
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let registry = add_task(Registry::builder(), kind, "task", &calls)
        .no_finalizers()
        .label("tick", "yes")
        .build()
        .expect("a valid registry");
    let (operator, api) = serve(&emulator, registry);
    let label =
        |value: Option<&str>| Patch::Merge(json!({"metadata": {"labels": {"tick": value}}}));
    let uid = create(&api, &secret("filtered", "1", &[])).await;
    // A matching object created later runs.
    witness(&api, &calls, kind, "task").await;
    assert!(
        calls_for(&calls, "task", &uid).is_empty(),
        "nothing runs for a mismatching object"
    );
    api.patch("filtered", &PatchParams::default(), &label(Some("yes")))
        .await
        .expect("labelled");
    first_call(&calls, "task", "filtered").await;

    let ends = ended(&operator) + 1;
    api.patch("filtered", &PatchParams::default(), &label(Some("no")))
        .await
        .expect("unlabelled");
    assert_stopped(kind, &operator, &api, &calls, ("task", &uid), ends).await;
    // Its own, and the two witnesses'.
    assert_eq!(operator.task_counters().spawned, 3);

    let before = calls_for(&calls, "task", &uid).len();
    api.patch("filtered", &PatchParams::default(), &label(Some("yes")))
        .await
        .expect("labelled again");
    // A timer ticks again, a daemon starts again.
    eventually("the task running again", || {
        let now = calls_for(&calls, "task", &uid).len();
        async move { (now > before).then_some(()) }
    })
    .await;
    assert_eq!(operator.task_counters().spawned, 4, "a new task");
    let body = get(&emulator, "filtered").await.expect("exists");
    assert!(finalizers(&body).is_empty(), "{body}");
    operator.stop().await;
}

#[tokio::test]
async fn daemon_stops_when_its_filters_stop_matching_and_restarts_when_they_match_again() {
    filters_stop_and_restart(Kind::Daemon).await;
}

#[tokio::test]
async fn timer_stops_when_its_filters_stop_matching_and_restarts_when_they_match_again() {
    filters_stop_and_restart(Kind::Timer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_stops_every_task_and_stuck_ones_do_not_hold_the_exit_beyond_its_timeout() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let (stuck, blocked) = (calls.clone(), calls.clone());
    let registry = add_task(Registry::builder(), Kind::Daemon, "polite", &calls).no_finalizers();
    let registry = add_task(registry, Kind::Timer, "ticker", &calls).no_finalizers();
    let registry = registry
        .daemon(secrets(), "stuck", move |kw: Kwargs| {
            let calls = stuck.clone();
            async move {
                calls.push("stuck", json!({"uid": kw.uid(), "name": kw.name()}));
                // Never looks at its stop flag, never ends on its own.
                std::future::pending::<()>().await;
                Ok::<_, Error>(())
            }
        })
        .no_finalizers()
        .timer(secrets(), "blocked", move |kw: Kwargs| {
            let calls = blocked.clone();
            async move {
                calls.push("blocked", json!({"uid": kw.uid(), "name": kw.name()}));
                // Blocks its thread well beyond the shutdown's deadline.
                tokio::task::block_in_place(|| std::thread::sleep(BLOCKED));
                calls.push("blocked:unblocked", json!({"uid": kw.uid()}));
                Ok::<_, Error>(())
            }
        })
        .interval(TICK)
        .no_finalizers()
        .build()
        .expect("a valid registry");
    let mut settings = settings();
    // The stuck tasks would get a minute to exit, but the shutdown gives 1 s.
    settings.background.graceful_exit_limit = Duration::from_secs(60);
    settings.background.shutdown_timeout = Duration::from_secs(1);
    let shutdown_timeout = settings.background.shutdown_timeout;
    let operator = Running::start_with(&emulator, registry, settings);
    let api: Api<Secret> = Api::default_namespaced(emulator.client());
    let uid = create(&api, &secret("busy", "1", &[])).await;
    first_call(&calls, "polite", "busy").await;
    first_call(&calls, "ticker", "busy").await;
    first_call(&calls, "stuck", "busy").await;
    first_call(&calls, "blocked", "busy").await;

    let counters = operator.counters();
    assert_eq!(counters.snapshot().spawned, 4);
    let stopping = Instant::now();
    operator.stop().await;
    let took = stopping.elapsed();
    assert!(
        calls.named("blocked:unblocked").is_empty(),
        "the blocked thread did not hold the exit"
    );
    assert!(
        took < shutdown_timeout + Duration::from_secs(3),
        "the exit took {took:?}, beyond the shutdown's {shutdown_timeout:?} and some"
    );
    assert_eq!(calls_for(&calls, "polite:exit", &uid).len(), 1);
    let ended = counters.snapshot();
    assert_eq!(ended.abandoned, 2, "the stuck daemon and the blocked timer");
    // The others' ends are counted too: the ticker ticks no more.
    assert_eq!(ended.stopped, 2, "the polite daemon and the ticker");
}
