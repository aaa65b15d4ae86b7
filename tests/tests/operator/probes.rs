//! The liveness and readiness probes over real HTTP: `on_probe` results,
//! failures named, results shared between requests, a silenced or failing
//! watch (the definitions' too) failing liveness, readiness after the
//! first listing.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime::settings::OperatorSettings;
use kopf_runtime::{Error, Kwargs, Registry, ResourceRef};
use kopf_testing::{Emulator, FailRule};
use kopf_tests::{Running, eventually, get_json, logs, new_configmap, test_settings};
use serde_json::json;

fn cms() -> ResourceRef {
    ResourceRef::of::<ConfigMap>()
}

/// An `on_event` handler of ConfigMaps (so that they are watched) and the
/// probe handlers `probes` adds.
fn watching(
    probes: impl FnOnce(kopf_runtime::RegistryBuilder) -> kopf_runtime::RegistryBuilder,
) -> Registry {
    let builder =
        Registry::builder().on_event(cms(), "seen", |_: Kwargs| async { Ok::<_, Error>(()) });
    probes(builder).build().expect("a valid registry")
}

/// Waits until every served resource has listed.
async fn ready(operator: &Running) {
    eventually("the operator to be ready", || async {
        (get_json(&operator.urls().readiness).await.0 == 200).then_some(())
    })
    .await;
}

#[tokio::test]
async fn liveness_answers_with_the_results_of_the_probe_handlers() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let registry = watching(|b| {
        b.on_probe("answer", |_: Kwargs| async {
            Ok::<_, Error>(json!({"value": 42}))
        })
        .on_probe("nothing", |_: Kwargs| async {})
    });
    let operator = Running::serving(&emulator, registry, test_settings()).await;
    let (status, body) = get_json(&operator.urls().liveness).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"answer": {"value": 42}, "nothing": null}));
    operator.stop().await;
}

#[tokio::test]
async fn a_failing_probe_handler_makes_liveness_fail_naming_it() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let registry = watching(|b| {
        b.on_probe("fine", |_: Kwargs| async { Ok::<_, Error>("ok") })
            .on_probe("database", |_: Kwargs| async {
                Err::<(), _>(Error::permanent("the database is unreachable"))
            })
    });
    let operator = Running::serving(&emulator, registry, test_settings()).await;
    let (status, body) = get_json(&operator.urls().liveness).await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(
        body["failed"],
        json!({"database": "permanent error: the database is unreachable"})
    );
    assert_eq!(body["results"], json!({"fine": "ok"}));
    operator.stop().await;
}

#[tokio::test]
async fn probe_results_are_kept_and_concurrent_requests_share_one_run() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let registry = watching(move |b| {
        b.on_probe("runs", move |_: Kwargs| {
            let runs = Arc::clone(&counted);
            async move {
                // Slow enough for the requests to overlap.
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok::<_, Error>(runs.fetch_add(1, Ordering::SeqCst) + 1)
            }
        })
    });
    let operator = Running::serving(&emulator, registry, test_settings()).await;
    let url = operator.urls().liveness.clone();
    let started = Instant::now();
    let asks = (0..16).map(|_| get_json(&url));
    for (status, body) in futures::future::join_all(asks).await {
        assert_eq!((status, body), (200, json!({"runs": 1})));
    }
    for _ in 0..5 {
        assert_eq!(get_json(&url).await, (200, json!({"runs": 1})));
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the test relies on the 10 s period not having passed"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    operator.stop().await;
}

/// Settings with a watch that gives up on a silent stream after 2 s, and
/// liveness failing after 4 s without a word.
fn quick_silence() -> OperatorSettings {
    let mut settings = test_settings();
    settings.watching.inactivity_timeout = Duration::from_secs(2);
    settings.watching.silence_limit = Some(Duration::from_secs(4));
    settings.watching.error_backoffs = vec![Duration::from_millis(100)];
    settings
}

#[tokio::test]
async fn a_silenced_watch_fails_liveness_within_its_limit_and_recovers() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let operator = Running::serving(&emulator, watching(|b| b), quick_silence()).await;
    ready(&operator).await;
    assert_eq!(get_json(&operator.urls().liveness).await, (200, json!({})));

    emulator.faults().silence_watches();
    let silenced = Instant::now();
    let body = eventually("liveness to fail", || async {
        let (status, body) = get_json(&operator.urls().liveness).await;
        (status == 500).then_some(body)
    })
    .await;
    let took = silenced.elapsed();
    // The last bookmark came at most a second before the silence.
    assert!(
        took >= Duration::from_secs(3) && took <= Duration::from_secs(6),
        "failed after {took:?} with a 4 s limit"
    );
    let why = body["silent"]["v1/configmaps (cluster-wide)"]
        .as_str()
        .unwrap_or_else(|| panic!("the silent watch is named: {body}"));
    assert!(
        why.starts_with("no listing, event or bookmark for "),
        "{why}"
    );
    // The watch that says when to scan the resources again is checked too.
    eventually("the definitions' watch to be named silent", || async {
        let (_, body) = get_json(&operator.urls().liveness).await;
        body["silent"]["apiextensions.k8s.io/v1/customresourcedefinitions (cluster-wide)"]
            .is_string()
            .then_some(())
    })
    .await;

    emulator.faults().resume_watches();
    eventually("liveness to recover", || async {
        (get_json(&operator.urls().liveness).await.0 == 200).then_some(())
    })
    .await;
    operator.stop().await;
}

#[tokio::test]
async fn a_watch_retrying_after_errors_says_so_in_liveness() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let operator = Running::serving(&emulator, watching(|b| b), quick_silence()).await;
    ready(&operator).await;

    emulator
        .faults()
        .fail_next(usize::MAX, FailRule::status(500).verb("watch"));
    emulator.faults().drop_watches();
    let body = eventually("liveness to fail", || async {
        let (status, body) = get_json(&operator.urls().liveness).await;
        (status == 500).then_some(body)
    })
    .await;
    let why = body["silent"]["v1/configmaps (cluster-wide)"]
        .as_str()
        .unwrap_or_else(|| panic!("the failing watch is named: {body}"));
    assert!(why.contains("retrying after errors, the last: "), "{why}");
    assert!(why.contains("500"), "{why}");

    emulator.faults().clear();
    eventually("liveness to recover", || async {
        (get_json(&operator.urls().liveness).await.0 == 200).then_some(())
    })
    .await;
    operator.stop().await;
}

#[tokio::test]
async fn readiness_waits_for_the_first_listing() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    new_configmap(&emulator, "existing").await;
    emulator.clear_requests();
    // Every request, the listing among them, takes a second.
    emulator.faults().set_latency(Duration::from_secs(1));
    let operator = Running::serving(&emulator, watching(|b| b), test_settings()).await;
    let listed = || {
        emulator
            .requests()
            .iter()
            .any(|r| r.verb == "list" && r.path.contains("configmaps") && r.status == 200)
    };
    let (status, body) = get_json(&operator.urls().readiness).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["ready"], false);
    assert!(!listed(), "not ready before the listing");

    eventually("the operator to be ready", || {
        let url = operator.urls().readiness.clone();
        async move {
            let (status, body) = get_json(&url).await;
            if status == 200 {
                assert_eq!(body, json!({"ready": true}));
                return Some(());
            }
            None
        }
    })
    .await;
    assert!(listed(), "ready only once the listing was answered");
    emulator.faults().clear();
    operator.stop().await;
}
