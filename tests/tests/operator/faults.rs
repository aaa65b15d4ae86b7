//! API faults from the emulator: dropped watches, forced `410 Gone`,
//! throttling, server errors and conflicts. The operator recovers, and every
//! object ends up handled exactly once.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime::{Error, Kwargs, Registry, ResourceRef};
use kopf_testing::{Emulator, FailRule, HeldRequests};
use kopf_tests::{
    Calls, DIFFBASE, Running, annotation, configmaps, eventually, get, logs, new_configmap,
    only_touched, raw_api, test_settings, touch,
};
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

fn cms() -> ResourceRef {
    ResourceRef::of::<ConfigMap>()
}

/// Create and update handlers (and a delete handler, so objects carry the
/// finalizer and every cause takes several patches), each recording the
/// object's name (an update that is only a [`touch`] as `touched`).
fn recording(calls: &Calls) -> Registry {
    let (c, u, d) = (calls.clone(), calls.clone(), calls.clone());
    Registry::builder()
        .on_create(cms(), "create_fn", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                calls.push("create", json!(kw.name()));
                Ok::<_, Error>(json!("created"))
            }
        })
        .on_update(cms(), "update_fn", move |kw: Kwargs| {
            let calls = u.clone();
            async move {
                let what = if only_touched(&kw) {
                    "touched"
                } else {
                    "update"
                };
                calls.push(what, json!(kw.name()));
                Ok::<_, Error>(())
            }
        })
        .on_delete(cms(), "delete_fn", move |kw: Kwargs| {
            let calls = d.clone();
            async move {
                calls.push("delete", json!(kw.name()));
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry")
}

/// An `on_event` handler recording `[name, type]` of every event.
fn events(calls: &Calls) -> Registry {
    let c = calls.clone();
    Registry::builder()
        .on_event(cms(), "watch_fn", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                calls.push(
                    "event",
                    json!([kw.name(), kw.event_type.map(|t| t.as_str())]),
                );
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry")
}

/// Waits until `name`'s create handler is done: result and diff-base stored.
async fn handled(emulator: &Emulator, name: &str) -> Value {
    eventually(&format!("{name} to be handled"), || async {
        get(emulator, &configmaps(), "default", name)
            .await
            .filter(|b| annotation(b, DIFFBASE).is_some() && b["status"]["create_fn"] == "created")
    })
    .await
}

/// How many calls named `what` each object got.
fn per_object(calls: &Calls, what: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for name in calls.named(what) {
        *counts
            .entry(name.as_str().unwrap_or("?").to_owned())
            .or_insert(0) += 1;
    }
    counts
}

fn once_each(names: &[&str]) -> BTreeMap<String, usize> {
    names.iter().map(|n| ((*n).to_owned(), 1)).collect()
}

/// Touches each of `names` (see [`touch`]): by then, no call that their
/// events so far would cause is still to come.
async fn touch_all(emulator: &Emulator, names: &[&str]) {
    let api = raw_api(emulator, &configmaps(), "default");
    for name in names {
        touch(&api, name).await;
    }
}

fn count_requests(emulator: &Emulator, verb: &str, status: u16) -> usize {
    emulator
        .requests()
        .iter()
        .filter(|r| r.verb == verb && r.status == status && r.path.contains("configmaps"))
        .count()
}

#[tokio::test]
async fn changes_after_a_dropped_watch_are_still_handled() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let operator = Running::start(&emulator, recording(&calls));
    new_configmap(&emulator, "before").await;
    handled(&emulator, "before").await;

    emulator.faults().drop_watches();
    new_configmap(&emulator, "after").await;
    raw_api(&emulator, &configmaps(), "default")
        .patch(
            "before",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "changed"}})),
        )
        .await
        .expect("patched");
    handled(&emulator, "after").await;
    calls.wait_for("update", 1).await;
    touch_all(&emulator, &["after", "before"]).await;
    assert_eq!(
        per_object(&calls, "create"),
        once_each(&["after", "before"])
    );
    assert_eq!(per_object(&calls, "update"), once_each(&["before"]));
    operator.stop().await;
}

#[tokio::test]
async fn changes_during_a_watch_gap_ending_in_410_are_reported_once_deletions_as_deleted() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let operator = Running::start(&emulator, events(&calls));
    for name in ["gone", "changed", "quiet"] {
        new_configmap(&emulator, name).await;
    }
    eventually("the objects to be seen", || async {
        let seen = calls.named("event");
        let seen = |name: &str| seen.iter().any(|e| e[0] == name);
        (seen("gone") && seen("changed") && seen("quiet")).then_some(())
    })
    .await;
    let before_gap = calls.named("event").len();

    // Keep the watch down for a while (failed reconnects back off 1 s, 1 s,
    // 2 s), delete and change objects meanwhile, and forget the history it
    // could resume from: the watcher must re-list and notice both.
    let watches = FailRule::status(500)
        .verb("watch")
        .path_contains("configmaps");
    emulator.faults().fail_next(3, watches);
    emulator.faults().drop_watches();
    let api = raw_api(&emulator, &configmaps(), "default");
    api.delete("gone", &DeleteParams::default())
        .await
        .expect("deleted");
    api.patch(
        "changed",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "changed"}})),
    )
    .await
    .expect("patched");
    emulator.faults().compact();

    eventually("the deletion and the change to be reported", || async {
        let seen = calls.named("event");
        (seen.contains(&json!(["gone", "DELETED"]))
            && seen.contains(&json!(["changed", "MODIFIED"])))
        .then_some(())
    })
    .await;
    assert!(
        count_requests(&emulator, "watch", 500) >= 1,
        "the gap really happened"
    );
    let relists = emulator
        .requests()
        .iter()
        .filter(|r| r.verb == "list" && r.path.contains("configmaps"))
        .count();
    assert!(
        relists >= 2,
        "the watcher re-listed after 410: {relists} listings"
    );
    // A later object is seen: the re-listing reports nothing more.
    new_configmap(&emulator, "later").await;
    eventually("the later object to be seen", || async {
        calls
            .named("event")
            .iter()
            .any(|e| e[0] == "later")
            .then_some(())
    })
    .await;
    let mut after_gap: Vec<String> = calls
        .named("event")
        .split_off(before_gap)
        .iter()
        .map(Value::to_string)
        .collect();
    after_gap.sort();
    assert_eq!(
        after_gap,
        [
            r#"["changed","MODIFIED"]"#,
            r#"["gone","DELETED"]"#,
            r#"["later","ADDED"]"#
        ],
        "each change reported once, the unchanged object not at all"
    );
    operator.stop().await;
}

#[tokio::test]
async fn throttled_patches_are_retried_after_retry_after_and_nothing_is_lost() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let operator = Running::start(&emulator, recording(&calls));
    let throttled = FailRule {
        verb: Some("patch".into()),
        path_contains: Some("configmaps".into()),
        body_contains: None,
        status: 429,
        retry_after: Some(2),
    };
    emulator.faults().fail_next(3, throttled);
    let t0 = Instant::now();
    for name in ["t1", "t2", "t3"] {
        new_configmap(&emulator, name).await;
    }
    for name in ["t1", "t2", "t3"] {
        handled(&emulator, name).await;
    }
    assert!(
        t0.elapsed() >= Duration::from_millis(1_800),
        "Retry-After (2 s, not the 1 s default backoff) was honoured"
    );
    assert_eq!(count_requests(&emulator, "patch", 429), 3);
    touch_all(&emulator, &["t1", "t2", "t3"]).await;
    assert_eq!(per_object(&calls, "create"), once_each(&["t1", "t2", "t3"]));
    operator.stop().await;
}

#[tokio::test]
async fn throttled_listings_and_watches_are_retried_and_nothing_is_lost() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    new_configmap(&emulator, "early").await;
    let faults = emulator.faults();
    faults.fail_next(
        2,
        FailRule::status(429)
            .verb("list")
            .path_contains("configmaps"),
    );
    faults.fail_next(
        2,
        FailRule::status(429)
            .verb("watch")
            .path_contains("configmaps"),
    );
    let calls = Calls::default();
    let operator = Running::start(&emulator, recording(&calls));
    handled(&emulator, "early").await;
    new_configmap(&emulator, "late").await;
    handled(&emulator, "late").await;
    assert_eq!(count_requests(&emulator, "list", 429), 2);
    assert_eq!(count_requests(&emulator, "watch", 429), 2);
    touch_all(&emulator, &["early", "late"]).await;
    assert_eq!(per_object(&calls, "create"), once_each(&["early", "late"]));
    operator.stop().await;
}

#[tokio::test]
async fn server_errors_on_patches_and_listings_are_retried_and_nothing_is_lost() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    new_configmap(&emulator, "s1").await;
    let faults = emulator.faults();
    faults.fail_next(
        1,
        FailRule::status(500)
            .verb("list")
            .path_contains("configmaps"),
    );
    faults.fail_next(
        3,
        FailRule::status(500)
            .verb("patch")
            .path_contains("configmaps"),
    );
    let calls = Calls::default();
    let operator = Running::start(&emulator, recording(&calls));
    new_configmap(&emulator, "s2").await;
    handled(&emulator, "s1").await;
    handled(&emulator, "s2").await;
    assert_eq!(count_requests(&emulator, "patch", 500), 3);
    touch_all(&emulator, &["s1", "s2"]).await;
    assert_eq!(per_object(&calls, "create"), once_each(&["s1", "s2"]));
    operator.stop().await;
}

#[tokio::test]
async fn conflicts_on_patches_are_resolved_and_handlers_run_once() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let operator = Running::start(&emulator, recording(&calls));
    // Fail each of the first patches of a cause once: the finalizer's, then
    // the handler's result.
    for _ in 0..2 {
        emulator.faults().fail_next(
            1,
            FailRule::status(409)
                .verb("patch")
                .path_contains("configmaps"),
        );
        let before = count_requests(&emulator, "patch", 409);
        let name = format!("c{before}");
        new_configmap(&emulator, &name).await;
        handled(&emulator, &name).await;
        assert_eq!(count_requests(&emulator, "patch", 409), before + 1);
    }
    // The deletion's patch: the delete handler's outcome and the finalizer's
    // removal, guarded by a resourceVersion.
    emulator.faults().fail_next(
        1,
        FailRule::status(409)
            .verb("patch")
            .path_contains("configmaps"),
    );
    raw_api(&emulator, &configmaps(), "default")
        .delete("c0", &DeleteParams::default())
        .await
        .expect("deletion requested");
    eventually("c0 to be gone", || async {
        get(&emulator, &configmaps(), "default", "c0")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(count_requests(&emulator, "patch", 409), 3);
    // A later object is handled, and the other one touched.
    new_configmap(&emulator, "later").await;
    handled(&emulator, "later").await;
    touch_all(&emulator, &["c1"]).await;
    assert_eq!(
        per_object(&calls, "create"),
        once_each(&["c0", "c1", "later"])
    );
    assert_eq!(per_object(&calls, "delete"), once_each(&["c0"]));
    operator.stop().await;
}

#[tokio::test]
async fn a_conflict_on_the_result_patch_does_not_rerun_the_handler() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let c = calls.clone();
    // No delete handler, no finalizer: the first patch carries the result.
    let registry = Registry::builder()
        .on_create(cms(), "create_fn", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                calls.push("create", json!(kw.name()));
                Ok::<_, Error>(json!("created"))
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start_with(&emulator, registry, test_settings());
    emulator.faults().fail_next(
        1,
        FailRule::status(409)
            .verb("patch")
            .path_contains("configmaps"),
    );
    new_configmap(&emulator, "r").await;
    handled(&emulator, "r").await;
    assert_eq!(count_requests(&emulator, "patch", 409), 1);
    touch_all(&emulator, &["r"]).await;
    assert_eq!(per_object(&calls, "create"), once_each(&["r"]));
    operator.stop().await;
}

#[tokio::test]
async fn an_api_server_restart_with_its_state_repeats_nothing_and_loses_nothing() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let operator = Running::start(&emulator, recording(&calls));
    new_configmap(&emulator, "old").await;
    handled(&emulator, "old").await;

    emulator.restart(true).await;
    new_configmap(&emulator, "new").await;
    handled(&emulator, "new").await;
    touch_all(&emulator, &["new", "old"]).await;
    assert_eq!(per_object(&calls, "create"), once_each(&["new", "old"]));
    assert!(calls.named("update").is_empty(), "{:?}", calls.all());
    operator.stop().await;
}

#[tokio::test]
async fn an_api_server_restart_without_its_state_reports_every_object_deleted() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let operator = Running::start(&emulator, events(&calls));
    new_configmap(&emulator, "wiped").await;
    calls.wait_for("event", 1).await;

    emulator.restart(false).await;
    eventually("the wiped object to be reported deleted", || async {
        calls
            .named("event")
            .contains(&json!(["wiped", "DELETED"]))
            .then_some(())
    })
    .await;
    new_configmap(&emulator, "fresh").await;
    eventually("the fresh object to be seen", || async {
        calls
            .named("event")
            .iter()
            .any(|e| e[0] == "fresh")
            .then_some(())
    })
    .await;
    // A later event, of the fresh object, is seen: nothing more is reported.
    raw_api(&emulator, &configmaps(), "default")
        .patch(
            "fresh",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "changed"}})),
        )
        .await
        .expect("patched");
    eventually("the fresh object's change to be seen", || async {
        calls
            .named("event")
            .contains(&json!(["fresh", "MODIFIED"]))
            .then_some(())
    })
    .await;
    let deleted: Vec<Value> = calls
        .named("event")
        .into_iter()
        .filter(|e| e[1] == "DELETED")
        .collect();
    assert_eq!(deleted, vec![json!(["wiped", "DELETED"])]);
    operator.stop().await;
}

#[tokio::test]
async fn many_objects_under_mixed_faults_are_each_handled_exactly_once() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let operator = Running::start(&emulator, recording(&calls));
    let faults = emulator.faults();
    faults.set_latency(Duration::from_millis(20));
    let patches = |status| {
        FailRule::status(status)
            .verb("patch")
            .path_contains("configmaps")
    };
    faults.fail_next(4, patches(500));
    faults.fail_next(4, patches(409));
    faults.fail_next(
        2,
        FailRule {
            retry_after: Some(1),
            ..patches(429)
        },
    );
    let names: Vec<String> = (0..16).map(|i| format!("m{i:02}")).collect();
    for (i, name) in names.iter().enumerate() {
        new_configmap(&emulator, name).await;
        if i % 5 == 4 {
            faults.drop_watches();
        }
        if i == 8 {
            faults.fail_next(
                2,
                FailRule::status(500)
                    .verb("watch")
                    .path_contains("configmaps"),
            );
            faults.drop_watches();
        }
    }
    // Half of them change while the faults go on.
    let api = raw_api(&emulator, &configmaps(), "default");
    for name in names.iter().step_by(2) {
        handled(&emulator, name).await;
        // The injected faults may hit this client too: retry until it gets through.
        let change = Patch::Merge(json!({"data": {"k": "w"}}));
        eventually(&format!("{name} to be changed"), || async {
            api.patch(name, &PatchParams::default(), &change).await.ok()
        })
        .await;
    }
    faults.fail_next(3, patches(409));
    for name in &names {
        handled(&emulator, name).await;
    }
    eventually("every change to be handled", || async {
        (calls.named("update").len() >= names.len() / 2).then_some(())
    })
    .await;
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    touch_all(&emulator, &all).await;
    let changed: Vec<&str> = names.iter().step_by(2).map(String::as_str).collect();
    assert_eq!(per_object(&calls, "create"), once_each(&all));
    assert_eq!(per_object(&calls, "update"), once_each(&changed));
    faults.clear();
    operator.stop().await;
}

#[tokio::test]
async fn the_retry_after_of_a_throttled_listing_is_honoured() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    new_configmap(&emulator, "waits").await;
    let mut throttled = FailRule::status(429)
        .verb("list")
        .path_contains("configmaps");
    throttled.retry_after = Some(3);
    emulator.faults().fail_next(1, throttled);
    let calls = Calls::default();
    let t0 = Instant::now();
    let operator = Running::start(&emulator, recording(&calls));
    calls.wait_for("create", 1).await;
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(2_800),
        "waited the 3 s asked for, not the 1 s default backoff: {waited:?}"
    );
    handled(&emulator, "waits").await;
    operator.stop().await;
}

#[tokio::test]
async fn an_operator_whose_requests_keep_failing_can_still_be_stopped_promptly() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let operator = Running::start(&emulator, recording(&calls));
    new_configmap(&emulator, "first").await;
    handled(&emulator, "first").await;
    // Patches fail from now on: the new object's worker retries its patch.
    let failing = |verb| FailRule::status(500).verb(verb).path_contains("configmaps");
    emulator.faults().fail_next(100_000, failing("patch"));
    new_configmap(&emulator, "second").await;
    eventually("a failing patch", || async {
        (count_requests(&emulator, "patch", 500) > 0).then_some(())
    })
    .await;
    // And so do watches and listings.
    emulator.faults().fail_next(100_000, failing("watch"));
    emulator.faults().fail_next(100_000, failing("list"));
    emulator.faults().drop_watches();
    eventually("a failing watch", || async {
        (count_requests(&emulator, "watch", 500) > 0).then_some(())
    })
    .await;
    let t0 = Instant::now();
    operator.stop().await;
    let exit_timeout = test_settings().queueing.exit_timeout;
    assert!(
        t0.elapsed() < exit_timeout * 5,
        "stopped within the exit timeout ({exit_timeout:?}, and some): {:?}",
        t0.elapsed()
    );
    emulator.faults().clear();
}

/// Creates `count` ConfigMaps named `prefix0`, `prefix1`, …; their names.
async fn new_configmaps(emulator: &Emulator, prefix: &str, count: usize) -> Vec<String> {
    let names: Vec<String> = (0..count).map(|i| format!("{prefix}{i}")).collect();
    for name in &names {
        new_configmap(emulator, name).await;
    }
    names
}

/// Waits until `count` requests are held, then checks that no more are
/// held for `span`.
async fn held_steadily(held: &HeldRequests, count: usize, span: Duration, what: &str) {
    eventually(what, || async { (held.waiting() >= count).then_some(()) }).await;
    let since = Instant::now();
    while since.elapsed() < span {
        assert_eq!(held.waiting(), count, "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// At most `queueing.listing_backlog_limit` objects of the initial listing
/// are in their first processing at once: with finalizers, each holds its
/// finalizer patch, so the emulator holds that many patches and no more.
/// Objects created later are not held to it.
#[tokio::test]
async fn listed_objects_beyond_the_listing_backlog_wait_for_room() {
    logs();
    const LISTED: usize = 12;
    const CREATED: usize = 6;
    const LIMIT: usize = 3;
    let emulator = Emulator::start().await.expect("emulator starts");
    let listed = new_configmaps(&emulator, "listed", LISTED).await;
    let held = emulator.faults().hold(Some("patch"), Some("/configmaps/"));
    let calls = Calls::default();
    let mut settings = test_settings();
    settings.queueing.listing_backlog_limit = LIMIT;
    let operator = Running::start_with(&emulator, recording(&calls), settings);

    // Every listed object is new at once. Without the limit, all twelve
    // patches are held within milliseconds. (A first processing that takes
    // over a second gives its place up: more are held after that.)
    let span = Duration::from_millis(500);
    held_steadily(
        &held,
        LIMIT,
        span,
        "listed objects in their first processing",
    )
    .await;
    held.release();
    for name in &listed {
        handled(&emulator, name).await;
    }

    // Created after the listing: every one is in its first processing at once.
    let held = emulator.faults().hold(Some("patch"), Some("/configmaps/"));
    let created = new_configmaps(&emulator, "created", CREATED).await;
    eventually("every created object's patch held", || async {
        (held.waiting() == CREATED).then_some(())
    })
    .await;
    held.release();
    for name in &created {
        handled(&emulator, name).await;
    }
    let all: Vec<&str> = listed.iter().chain(&created).map(String::as_str).collect();
    assert_eq!(per_object(&calls, "create"), once_each(&all));
    operator.stop().await;
}

/// At most `networking.patch_limit` patches are in flight at once: the
/// others wait for a turn, and every object is handled once the held ones
/// are answered.
#[tokio::test]
async fn patches_beyond_the_patch_limit_wait_for_a_turn() {
    logs();
    const OBJECTS: usize = 12;
    const LIMIT: usize = 3;
    let emulator = Emulator::start().await.expect("emulator starts");
    let names = new_configmaps(&emulator, "cm", OBJECTS).await;
    let held = emulator.faults().hold(Some("patch"), Some("/configmaps/"));
    let calls = Calls::default();
    let mut settings = test_settings();
    settings.networking.patch_limit = LIMIT.try_into().ok();
    let operator = Running::start_with(&emulator, recording(&calls), settings);

    // Every listed object needs its finalizer patch at once. Without the
    // limit, all twelve are held within milliseconds.
    let span = Duration::from_secs(1);
    held_steadily(&held, LIMIT, span, "patches in flight at once").await;
    held.release();
    for name in &names {
        handled(&emulator, name).await;
    }
    let counts = per_object(&calls, "create");
    assert_eq!(
        counts,
        once_each(&names.iter().map(String::as_str).collect::<Vec<_>>())
    );
    operator.stop().await;
}
