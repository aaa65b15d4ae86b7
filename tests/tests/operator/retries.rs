//! Handler outcomes end to end: restarts mid-cause, temporary and permanent
//! errors, `retries`, `timeout`, panics, and the progress annotations Kopf
//! would read while a handler is being retried.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime::{Error, ErrorsMode, Kwargs, Registry, ResourceRef, Timestamp};
use kopf_testing::Emulator;
use kopf_tests::{
    Calls, DIFFBASE, Running, annotation, configmaps, eventually, get, logs, new_configmap,
    only_touched, raw_api,
};
use serde_json::{Value, json};

fn cms() -> ResourceRef {
    ResourceRef::of::<ConfigMap>()
}

/// Waits until `name`'s change cause is finished: the diff-base is stored.
async fn cause_done(emulator: &Emulator, name: &str) -> Value {
    eventually(&format!("the diff-base of {name}"), || async {
        get(emulator, &configmaps(), "default", name)
            .await
            .filter(|b| annotation(b, DIFFBASE).is_some())
    })
    .await
}

/// The progress record of handler `id` on `name`, once it satisfies `ready`.
async fn progress(
    emulator: &Emulator,
    name: &str,
    id: &str,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    let key = format!("kopf.zalando.org/{id}");
    eventually(&format!("the progress of {id} on {name}"), || async {
        let body = get(emulator, &configmaps(), "default", name).await?;
        let record: Value = serde_json::from_str(annotation(&body, &key)?).ok()?;
        ready(&record).then_some(record)
    })
    .await
}

/// The seconds of a timestamp as the operator writes it (Kopf's format,
/// `2020-02-14T16:58:25.396364+00:00`).
fn unix_seconds(text: &str) -> i64 {
    text.parse::<Timestamp>()
        .unwrap_or_else(|error| panic!("a Kopf timestamp: {text}: {error}"))
        .as_second()
}

/// Touches `name` (see [`kopf_tests::touch`]): by then, no call that its
/// events so far would cause is still to come.
async fn touch(emulator: &Emulator, name: &str) {
    kopf_tests::touch(&raw_api(emulator, &configmaps(), "default"), name).await;
}

#[tokio::test]
async fn a_restart_mid_cause_reruns_only_the_handler_whose_success_was_not_recorded() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let (c1, c2) = (calls.clone(), calls.clone());
    let registry = Registry::builder()
        .on_create(cms(), "first", move |kw: Kwargs| {
            let calls = c1.clone();
            async move {
                calls.push("first", json!(kw.name()));
                Ok::<_, Error>(json!("one"))
            }
        })
        .on_create(cms(), "second", move |kw: Kwargs| {
            let calls = c2.clone();
            async move {
                calls.push("second", json!(kw.name()));
                // Blocked until the operator is stopped (and cancelled then).
                std::future::pending::<()>().await;
                Ok::<_, Error>(json!("never"))
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    new_configmap(&emulator, "mid").await;
    calls.wait_for("second", 1).await;
    let first = progress(&emulator, "mid", "first", |r| r["success"] == true).await;
    assert_eq!(first["purpose"], "create");
    operator.stop().await;
    assert_eq!(calls.named("first").len(), 1);

    let calls2 = Calls::default();
    let (c1, c2) = (calls2.clone(), calls2.clone());
    let registry = Registry::builder()
        .on_create(cms(), "first", move |kw: Kwargs| {
            let calls = c1.clone();
            async move {
                calls.push("first", json!(kw.name()));
                Ok::<_, Error>(json!("one again"))
            }
        })
        .on_create(cms(), "second", move |kw: Kwargs| {
            let calls = c2.clone();
            async move {
                calls.push(
                    "second",
                    json!({"name": kw.name(), "reason": kw.reason.map(|r| r.to_string())}),
                );
                Ok::<_, Error>(json!("two"))
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    let second = calls2.wait_for("second", 1).await;
    assert_eq!(second[0], json!({"name": "mid", "reason": "create"}));
    let body = cause_done(&emulator, "mid").await;
    touch(&emulator, "mid").await;
    assert!(
        calls2.named("first").is_empty(),
        "a recorded success is not re-run: {:?}",
        calls2.all()
    );
    assert_eq!(calls2.named("second").len(), 1);
    assert_eq!(body["status"]["first"], "one", "the first result stays");
    assert_eq!(body["status"]["second"], "two");
    let leftovers: Vec<&String> = body["metadata"]["annotations"]
        .as_object()
        .map(|a| {
            a.keys()
                .filter(|k| k.ends_with("first") || k.ends_with("second"))
                .collect()
        })
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "progress is purged: {leftovers:?}");
    operator.stop().await;
}

#[tokio::test]
async fn temporary_errors_are_retried_after_their_delay_until_success() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let c = calls.clone();
    let t0 = Instant::now();
    let registry = Registry::builder()
        .on_create(cms(), "flaky", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                let ms = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
                calls.push("flaky", json!({"retry": kw.retry, "ms": ms}));
                if kw.retry < 2 {
                    Err(Error::temporary("not yet", Duration::from_secs(1)))
                } else {
                    Ok(json!("done"))
                }
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    new_configmap(&emulator, "t").await;
    let body = cause_done(&emulator, "t").await;
    assert_eq!(body["status"]["flaky"], "done");
    touch(&emulator, "t").await;
    let attempts = calls.named("flaky");
    assert_eq!(
        attempts
            .iter()
            .map(|a| a["retry"].clone())
            .collect::<Vec<_>>(),
        vec![json!(0), json!(1), json!(2)],
        "three attempts, numbered from 0"
    );
    for pair in attempts.windows(2) {
        let gap = pair[1]["ms"].as_u64().unwrap_or(0) - pair[0]["ms"].as_u64().unwrap_or(0);
        assert!(
            (900..5_000).contains(&gap),
            "retried after the requested 1 s, not {gap} ms"
        );
    }
    operator.stop().await;
}

#[tokio::test]
async fn a_retried_handler_keeps_its_progress_in_kopfs_annotation_layout() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let registry = Registry::builder()
        .on_create(cms(), "slow_fn", |_kw: Kwargs| async {
            Err::<(), _>(Error::temporary(
                "waiting for godot",
                Duration::from_secs(30),
            ))
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    new_configmap(&emulator, "p").await;
    let record = progress(&emulator, "p", "slow_fn", |r| r["retries"] == 1).await;

    let started = record["started"].as_str().expect("`started` is a string");
    let delayed = record["delayed"].as_str().expect("`delayed` is a string");
    for stamp in [started, delayed] {
        assert!(
            stamp.len() == "2020-02-14T16:58:25.396364+00:00".len() && stamp.ends_with("+00:00"),
            "Kopf's timestamp format: {stamp}"
        );
    }
    let now = i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs(),
    )
    .expect("fits");
    assert!((now - unix_seconds(started)).abs() < 60, "started recently");
    let wait = unix_seconds(delayed) - unix_seconds(started);
    assert!(
        (25..=35).contains(&wait),
        "delayed by the requested 30 s, not {wait} s"
    );
    assert_eq!(record["purpose"], "create");
    assert_eq!(record["retries"], 1);
    assert!(
        record["message"]
            .as_str()
            .is_some_and(|m| m.contains("waiting for godot")),
        "{record}"
    );
    assert!(
        record.get("success").is_none()
            && record.get("failure").is_none()
            && record.get("stopped").is_none(),
        "not finished: {record}"
    );
    let body = get(&emulator, &configmaps(), "default", "p")
        .await
        .expect("exists");
    assert!(
        annotation(&body, DIFFBASE).is_none(),
        "the cause is not done yet"
    );
    operator.stop().await;
}

#[tokio::test]
async fn permanent_errors_are_not_retried() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let c = calls.clone();
    let registry = Registry::builder()
        .on_create(cms(), "doomed", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                calls.push("doomed", json!(kw.retry));
                Err::<Value, _>(Error::permanent("cannot ever work"))
            }
        })
        .backoff(Duration::from_millis(100))
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    new_configmap(&emulator, "perm").await;
    let body = cause_done(&emulator, "perm").await;
    touch(&emulator, "perm").await;
    assert_eq!(calls.named("doomed"), vec![json!(0)], "called once");
    assert!(body["status"].get("doomed").is_none(), "no result stored");
    operator.stop().await;
}

#[tokio::test]
async fn retries_limit_the_attempts_of_a_failing_handler() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let c = calls.clone();
    let registry = Registry::builder()
        .on_create(cms(), "limited", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                calls.push("limited", json!(kw.retry));
                Err::<(), _>(Error::regular("still broken"))
            }
        })
        .retries(3)
        .backoff(Duration::from_millis(200))
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    new_configmap(&emulator, "lim").await;
    cause_done(&emulator, "lim").await;
    touch(&emulator, "lim").await;
    assert_eq!(
        calls.named("limited"),
        vec![json!(0), json!(1), json!(2)],
        "exactly `retries` attempts"
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_handler_running_past_its_timeout_is_abandoned_and_not_retried() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let c = calls.clone();
    let registry = Registry::builder()
        .on_create(cms(), "stuck", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                calls.push("stuck", json!(kw.retry));
                std::future::pending::<()>().await;
                Ok::<_, Error>(())
            }
        })
        .timeout(Duration::from_millis(500))
        .backoff(Duration::from_millis(100))
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    let t0 = Instant::now();
    new_configmap(&emulator, "stuck").await;
    cause_done(&emulator, "stuck").await;
    assert!(
        t0.elapsed() >= Duration::from_millis(450),
        "not before the timeout"
    );
    touch(&emulator, "stuck").await;
    assert_eq!(calls.named("stuck"), vec![json!(0)], "called once");
    operator.stop().await;
}

#[tokio::test]
async fn a_timeout_ends_the_retries_of_a_temporarily_failing_handler() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let c = calls.clone();
    let registry = Registry::builder()
        .on_create(cms(), "impatient", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                calls.push(
                    "impatient",
                    json!({"retry": kw.retry, "runtime": kw.runtime.as_secs_f64()}),
                );
                Err::<(), _>(Error::temporary("again", Duration::from_millis(300)))
            }
        })
        .timeout(Duration::from_secs(1))
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    new_configmap(&emulator, "imp").await;
    cause_done(&emulator, "imp").await;
    touch(&emulator, "imp").await;
    let attempts = calls.named("impatient");
    assert!(
        (2..=5).contains(&attempts.len()),
        "retried every 0.3 s for 1 s: {attempts:?}"
    );
    assert!(
        attempts
            .iter()
            .all(|a| a["runtime"].as_f64().unwrap_or(9.0) < 1.0),
        "never called past the timeout: {attempts:?}"
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_panicking_handler_is_contained_and_other_objects_are_still_served() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let c = calls.clone();
    let registry = Registry::builder()
        .on_create(cms(), "fragile", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                let name = kw.name().unwrap_or_default().to_owned();
                calls.push("fragile", json!(name));
                assert!(name != "boom", "the handler panics for boom");
                Ok::<_, Error>(json!({"ok": name}))
            }
        })
        .retries(2)
        .backoff(Duration::from_millis(200))
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    new_configmap(&emulator, "boom").await;
    new_configmap(&emulator, "fine").await;
    cause_done(&emulator, "boom").await;
    let fine = cause_done(&emulator, "fine").await;
    assert_eq!(fine["status"]["fragile"], json!({"ok": "fine"}));

    new_configmap(&emulator, "later").await;
    let later = cause_done(&emulator, "later").await;
    assert_eq!(later["status"]["fragile"], json!({"ok": "later"}));
    assert!(operator.is_running(), "the operator survives the panics");
    let per_object = |name: &str| calls.named("fragile").iter().filter(|n| *n == name).count();
    assert_eq!(per_object("boom"), 2, "the panics count as failed attempts");
    assert_eq!((per_object("fine"), per_object("later")), (1, 1));
    operator.stop().await;
}

/// Records "dropped" when the handler's future is dropped (cancelled).
struct DropGuard(Calls);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.push("dropped", Value::Null);
    }
}

#[tokio::test]
async fn a_handler_still_running_after_the_exit_timeout_is_cancelled_and_writes_nothing() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let (c, g) = (calls.clone(), gate.clone());
    let registry = Registry::builder()
        .on_create(cms(), "lingering", move |_kw: Kwargs| {
            let (calls, gate) = (c.clone(), g.clone());
            async move {
                let _guard = DropGuard(calls.clone());
                calls.push("started", Value::Null);
                gate.notified().await;
                calls.push("finished", Value::Null);
                Ok::<_, Error>(json!("late"))
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    new_configmap(&emulator, "linger").await;
    calls.wait_for("started", 1).await;
    operator.stop().await;
    calls.wait_for("dropped", 1).await;

    // Every run of it was dropped, and the operator has exited: nothing of
    // it can finish and patch the object, even once let go.
    assert_eq!(
        calls.named("dropped").len(),
        calls.named("started").len(),
        "{:?}",
        calls.all()
    );
    gate.notify_waiters();
    assert!(calls.named("finished").is_empty(), "{:?}", calls.all());
    let body = get(&emulator, &configmaps(), "default", "linger")
        .await
        .expect("exists");
    assert!(
        body["status"].get("lingering").is_none() && annotation(&body, DIFFBASE).is_none(),
        "the stopped operator wrote nothing: {body}"
    );
}

#[tokio::test]
async fn an_object_deleted_while_its_create_handler_awaits_a_retry_runs_its_delete_handler_and_goes()
 {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let (c, d) = (calls.clone(), calls.clone());
    let registry = Registry::builder()
        .on_create(cms(), "create_fn", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                calls.push("create", json!(kw.name()));
                Err::<(), _>(Error::temporary("later", Duration::from_secs(60)))
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
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    new_configmap(&emulator, "doomed").await;
    progress(&emulator, "doomed", "create_fn", |r| r["retries"] == 1).await;
    kopf_tests::raw_api(&emulator, &configmaps(), "default")
        .delete("doomed", &kube::api::DeleteParams::default())
        .await
        .expect("deletion requested");
    calls.wait_for("delete", 1).await;
    eventually("the object to be gone", || async {
        get(&emulator, &configmaps(), "default", "doomed")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    // A later object's create handler is tried and its failure recorded.
    new_configmap(&emulator, "later").await;
    progress(&emulator, "later", "create_fn", |r| r["retries"] == 1).await;
    assert_eq!(
        calls.named("create"),
        vec![json!("doomed"), json!("later")],
        "not retried once deleting"
    );
    assert_eq!(calls.named("delete"), vec![json!("doomed")]);
    operator.stop().await;
}

#[tokio::test]
async fn errors_without_a_delay_are_retried_after_the_handlers_backoff() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let (c, r) = (calls.clone(), calls.clone());
    let t0 = Instant::now();
    let attempt = move |calls: Calls, name: &'static str, retry: u32| {
        let ms = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
        calls.push(name, json!(ms));
        retry
    };
    let registry = Registry::builder()
        .on_create(cms(), "retry_fn", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                match attempt(calls, "retry_fn", kw.retry) {
                    0 => Err(Error::retry("no delay of its own")),
                    _ => Ok(()),
                }
            }
        })
        .backoff(Duration::from_secs(1))
        .on_create(cms(), "regular_fn", move |kw: Kwargs| {
            let calls = r.clone();
            async move {
                match attempt(calls, "regular_fn", kw.retry) {
                    0 => Err(Error::regular("an arbitrary error")),
                    _ => Ok(()),
                }
            }
        })
        .backoff(Duration::from_secs(1))
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    new_configmap(&emulator, "b").await;
    cause_done(&emulator, "b").await;
    touch(&emulator, "b").await;
    for name in ["retry_fn", "regular_fn"] {
        let at: Vec<u64> = calls
            .named(name)
            .iter()
            .map(|v| v.as_u64().unwrap_or(0))
            .collect();
        assert_eq!(at.len(), 2, "{name}: failed once, then succeeded");
        let gap = at[1] - at[0];
        assert!(
            (900..5_000).contains(&gap),
            "{name}: retried after the 1 s backoff, not {gap} ms"
        );
    }
    operator.stop().await;
}

#[tokio::test]
async fn handlers_without_a_backoff_retry_after_the_settings_default_backoff() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let (c, t) = (calls.clone(), calls.clone());
    let t0 = Instant::now();
    let attempt = move |calls: Calls, name: &'static str, retry: u32| {
        let ms = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
        calls.push(name, json!(ms));
        retry
    };
    // Neither handler sets `backoff`: Kopf's 60 s would outlast the test.
    let registry = Registry::builder()
        .on_create(cms(), "create_fn", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                match attempt(calls, "create_fn", kw.retry) {
                    0 => Err(Error::regular("an arbitrary error")),
                    _ => Ok(()),
                }
            }
        })
        .timer(cms(), "timer_fn", move |kw: Kwargs| {
            let calls = t.clone();
            async move {
                match attempt(calls, "timer_fn", kw.retry) {
                    0 => Err(Error::regular("an arbitrary error")),
                    _ => Ok(()),
                }
            }
        })
        .interval(Duration::from_secs(3600))
        .build()
        .expect("a valid registry");
    let mut settings = kopf_tests::test_settings();
    settings.execution.default_backoff = Duration::from_secs(1);
    let operator = Running::start_with(&emulator, registry, settings);
    new_configmap(&emulator, "unset").await;
    for name in ["create_fn", "timer_fn"] {
        let at: Vec<u64> = calls
            .wait_for(name, 2)
            .await
            .iter()
            .map(|v| v.as_u64().unwrap_or(0))
            .collect();
        let gap = at[1] - at[0];
        assert!(
            (900..5_000).contains(&gap),
            "{name}: retried after the 1 s default backoff, not {gap} ms"
        );
    }
    operator.stop().await;
}

#[tokio::test]
async fn the_errors_mode_decides_whether_regular_errors_are_retried() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let failing = |calls: &Calls, id: &'static str| {
        let calls = calls.clone();
        move |_kw: Kwargs| {
            let calls = calls.clone();
            async move {
                calls.push(id, Value::Null);
                Err::<Value, _>(Error::regular("broken"))
            }
        }
    };
    let registry = Registry::builder()
        .on_create(cms(), "permanent_fn", failing(&calls, "permanent_fn"))
        .errors(ErrorsMode::Permanent)
        .backoff(Duration::from_millis(100))
        .on_create(cms(), "ignored_fn", failing(&calls, "ignored_fn"))
        .errors(ErrorsMode::Ignored)
        .backoff(Duration::from_millis(100))
        .on_create(cms(), "temporary_fn", failing(&calls, "temporary_fn"))
        .errors(ErrorsMode::Temporary)
        .retries(3)
        .backoff(Duration::from_millis(100))
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    new_configmap(&emulator, "modes").await;
    cause_done(&emulator, "modes").await;
    touch(&emulator, "modes").await;
    assert_eq!(calls.named("permanent_fn").len(), 1);
    assert_eq!(calls.named("ignored_fn").len(), 1);
    assert_eq!(calls.named("temporary_fn").len(), 3);
    operator.stop().await;
}

#[tokio::test]
async fn a_change_during_a_pending_retry_is_handled_by_that_retry_with_the_newest_body() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let c = calls.clone();
    let registry = Registry::builder()
        .on_update(cms(), "update_fn", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                if only_touched(&kw) {
                    calls.push("touched", Value::Null);
                    return Ok(());
                }
                let diff = serde_json::to_value(&kw.diff).unwrap_or_default();
                calls.push("update", json!({"retry": kw.retry, "diff": diff}));
                if kw.retry == 0 {
                    return Err(Error::temporary("once more", Duration::from_secs(1)));
                }
                Ok(())
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    new_configmap(&emulator, "u").await;
    cause_done(&emulator, "u").await;
    let api = kopf_tests::raw_api(&emulator, &configmaps(), "default");
    let change = |v: &str| kube::api::Patch::Merge(json!({"data": {"k": v}}));
    let params = kube::api::PatchParams::default();
    api.patch("u", &params, &change("v2"))
        .await
        .expect("patched");
    calls.wait_for("update", 1).await;
    api.patch("u", &params, &change("v3"))
        .await
        .expect("patched");
    calls.wait_for("update", 2).await;
    eventually("the newest essence to be stored", || async {
        let body = get(&emulator, &configmaps(), "default", "u").await?;
        let essence: Value = serde_json::from_str(annotation(&body, DIFFBASE)?).ok()?;
        (essence["data"]["k"] == "v3").then_some(())
    })
    .await;
    touch(&emulator, "u").await;
    let updates = calls.named("update");
    assert_eq!(
        updates.len(),
        2,
        "the retry covers both changes: {updates:?}"
    );
    assert_eq!(
        updates[1]["diff"],
        json!([["change", ["data", "k"], "v", "v3"]]),
        "the retry sees the newest body against the last handled one"
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_handler_with_a_long_id_keeps_and_purges_its_progress_under_hashed_keys() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let id =
        "a_handler_with_a_rather_long_identifier/that_goes_past_the_sixty_three_character_limit";
    let calls = Calls::default();
    let c = calls.clone();
    let registry = Registry::builder()
        .on_create(cms(), id, move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                calls.push("long", json!(kw.retry));
                if kw.retry < 2 {
                    return Err(Error::temporary("again", Duration::from_millis(300)));
                }
                Ok(json!("done"))
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    new_configmap(&emulator, "long").await;
    let pending = eventually("a progress record under a hashed key", || async {
        let body = get(&emulator, &configmaps(), "default", "long").await?;
        let keys: Vec<String> = body["metadata"]["annotations"]
            .as_object()?
            .keys()
            .filter(|k| k.starts_with("kopf.zalando.org/") && k.as_str() != DIFFBASE)
            .cloned()
            .collect();
        (!keys.is_empty()).then_some(keys)
    })
    .await;
    for key in &pending {
        let name = key.split_once('/').map_or("", |(_, n)| n);
        assert!(name.len() <= 63, "a valid annotation name: {key}");
        assert!(!name.contains('/'), "a valid annotation name: {key}");
    }
    let body = cause_done(&emulator, "long").await;
    touch(&emulator, "long").await;
    assert_eq!(
        calls.named("long"),
        vec![json!(0), json!(1), json!(2)],
        "the record is found again on every retry"
    );
    assert_eq!(body["status"][id], "done");
    let leftovers: Vec<&String> = body["metadata"]["annotations"]
        .as_object()
        .map(|a| a.keys().filter(|k| pending.contains(k)).collect())
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "purged: {leftovers:?}");
    operator.stop().await;
}

#[tokio::test]
async fn a_restart_mid_deletion_runs_the_unfinished_delete_handler_and_releases_the_object() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let deleting = |calls: &Calls, block: bool| {
        let c = calls.clone();
        Registry::builder()
            .on_delete(cms(), "delete_fn", move |_kw: Kwargs| {
                let calls = c.clone();
                async move {
                    calls.push("delete", Value::Null);
                    if block {
                        std::future::pending::<()>().await;
                    }
                    Ok::<_, Error>(())
                }
            })
            .build()
            .expect("a valid registry")
    };
    let calls = Calls::default();
    let operator = Running::start(&emulator, deleting(&calls, true));
    new_configmap(&emulator, "del").await;
    cause_done(&emulator, "del").await;
    kopf_tests::raw_api(&emulator, &configmaps(), "default")
        .delete("del", &kube::api::DeleteParams::default())
        .await
        .expect("deletion requested");
    calls.wait_for("delete", 1).await;
    operator.stop().await;
    let body = get(&emulator, &configmaps(), "default", "del").await;
    assert!(body.is_some(), "the finalizer holds the object");

    let calls2 = Calls::default();
    let operator = Running::start(&emulator, deleting(&calls2, false));
    calls2.wait_for("delete", 1).await;
    eventually("the object to be gone", || async {
        get(&emulator, &configmaps(), "default", "del")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    // A later object is handled: the deletion is not handled again meanwhile.
    new_configmap(&emulator, "later").await;
    cause_done(&emulator, "later").await;
    assert_eq!(calls2.named("delete").len(), 1);
    operator.stop().await;
}

#[tokio::test]
async fn a_restarted_operator_keeps_the_recorded_delay_and_retry_count() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let t0 = Instant::now();
    let failing = |calls: &Calls| {
        let c = calls.clone();
        Registry::builder()
            .on_create(cms(), "flaky", move |kw: Kwargs| {
                let calls = c.clone();
                async move {
                    let ms = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
                    calls.push("flaky", json!({"retry": kw.retry, "ms": ms}));
                    Err::<(), _>(Error::temporary("not yet", Duration::from_secs(2)))
                }
            })
            .retries(3)
            .build()
            .expect("a valid registry")
    };
    let calls = Calls::default();
    let operator = Running::start(&emulator, failing(&calls));
    new_configmap(&emulator, "kept").await;
    progress(&emulator, "kept", "flaky", |r| r["retries"] == 1).await;
    operator.stop().await;

    let calls2 = Calls::default();
    let operator = Running::start(&emulator, failing(&calls2));
    cause_done(&emulator, "kept").await;
    touch(&emulator, "kept").await;
    let first = calls.named("flaky");
    let later = calls2.named("flaky");
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(
        later.iter().map(|c| c["retry"].clone()).collect::<Vec<_>>(),
        vec![json!(1), json!(2)],
        "the count goes on from the recorded one, up to `retries`"
    );
    let gap = later[0]["ms"].as_u64().unwrap_or(0) - first[0]["ms"].as_u64().unwrap_or(0);
    assert!(
        gap >= 1_800,
        "the recorded delay is honoured after the restart, not {gap} ms"
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_change_while_the_create_handler_runs_is_handled_as_an_update_afterwards() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let (c, u, g) = (calls.clone(), calls.clone(), gate.clone());
    let registry = Registry::builder()
        .on_create(cms(), "create_fn", move |kw: Kwargs| {
            let (calls, gate) = (c.clone(), g.clone());
            async move {
                calls.push("create", kw.body["data"].clone());
                gate.notified().await;
                Ok::<_, Error>(())
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
                calls.push(what, serde_json::to_value(&kw.diff).unwrap_or_default());
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    new_configmap(&emulator, "busy").await;
    calls.wait_for("create", 1).await;
    kopf_tests::raw_api(&emulator, &configmaps(), "default")
        .patch(
            "busy",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"data": {"k": "v2"}})),
        )
        .await
        .expect("patched");
    gate.notify_one();
    let updates = calls.wait_for("update", 1).await;
    assert_eq!(updates[0], json!([["change", ["data", "k"], "v", "v2"]]));
    touch(&emulator, "busy").await;
    assert_eq!(calls.named("create"), vec![json!({"k": "v"})]);
    assert_eq!(calls.named("update").len(), 1);
    operator.stop().await;
}
