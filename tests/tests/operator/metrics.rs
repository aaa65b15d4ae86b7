//! The metrics over real HTTP, parsed as a Prometheus text: they move as
//! the events did, through handler failures, an abandoned daemon and API
//! faults; and their number of series does not grow with the objects.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime::settings::OperatorSettings;
use kopf_runtime::{Error, Kwargs, Registry, ResourceRef};
use kopf_testing::{Emulator, FailRule};
use kopf_tests::{Calls, Metrics, Running, eventually, get, logs, scrape, test_settings};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

const CMS: &str = "v1/configmaps";

fn cms() -> ResourceRef {
    ResourceRef::of::<ConfigMap>()
}

/// How long the stubborn daemon blocks its thread (past its abandonment).
const BLOCKED: Duration = Duration::from_secs(3);

/// `created` succeeds; `updated` fails temporarily once per update, then
/// succeeds; `deleted` fails permanently; the daemon `stubborn` (of objects
/// labelled `daemon: yes`) blocks its thread past its cancellation, so it
/// is abandoned when its object goes.
fn registry(calls: &Calls) -> Registry {
    let calls = calls.clone();
    Registry::builder()
        .on_create(cms(), "created", |_: Kwargs| async {
            Ok::<_, Error>(json!("done"))
        })
        .on_update(cms(), "updated", |kw: Kwargs| async move {
            if kw.retry == 0 {
                return Err(Error::temporary("not yet", Duration::from_millis(100)));
            }
            Ok(())
        })
        .on_delete(cms(), "deleted", |_: Kwargs| async {
            Err::<(), _>(Error::permanent("cannot clean up"))
        })
        .daemon(cms(), "stubborn", move |kw: Kwargs| {
            let calls = calls.clone();
            async move {
                calls.push("stubborn", json!(kw.name()));
                tokio::task::block_in_place(|| std::thread::sleep(BLOCKED));
                calls.push("stubborn:unblocked", json!(kw.name()));
                Ok::<_, Error>(())
            }
        })
        .labels([("daemon", "yes")].into_iter().collect())
        .no_finalizers()
        .cancellation_backoff(Duration::from_millis(200))
        .cancellation_timeout(Duration::from_millis(300))
        .build()
        .expect("a valid registry")
}

fn settings() -> OperatorSettings {
    let mut settings = test_settings();
    settings.watching.error_backoffs = vec![Duration::from_millis(100)];
    settings.watching.reconnect_backoff = Duration::from_millis(50);
    settings
}

fn configmap(name: &str, value: &str, daemon: bool) -> ConfigMap {
    let labels = if daemon {
        json!({"daemon": "yes"})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "data": {"k": value},
    }))
    .expect("a valid ConfigMap")
}

/// Scrapes until `check` holds for the scrape; returns it.
async fn scraped(url: &str, what: &str, check: impl Fn(&Metrics) -> bool) -> Metrics {
    eventually(what, || async {
        let metrics = scrape(url).await;
        check(&metrics).then_some(metrics)
    })
    .await
}

fn invocations(metrics: &Metrics, handler: &str, outcome: &str) -> f64 {
    metrics.value(
        "kopf_handler_invocations_total",
        &[
            ("resource", CMS),
            ("handler", handler),
            ("outcome", outcome),
        ],
    )
}

/// The emulator's answers to the operator's own verbs (the test's client
/// creates, replaces, gets and deletes), by verb and code; without the
/// answers kube's client retries by itself (429, 503, 504), which the
/// operator never sees.
fn answered(emulator: &Emulator) -> BTreeMap<(String, String), f64> {
    let mut counts = BTreeMap::new();
    for request in emulator.requests() {
        if ["list", "watch", "patch"].contains(&request.verb.as_str())
            && ![429, 503, 504].contains(&request.status)
        {
            *counts
                .entry((request.verb, request.status.to_string()))
                .or_insert(0.0) += 1.0;
        }
    }
    counts
}

/// The operator's counts of the same verbs.
fn counted(metrics: &Metrics) -> BTreeMap<(String, String), f64> {
    let mut counts = BTreeMap::new();
    for sample in &metrics.scrape.samples {
        let verb = sample.labels.get("verb").unwrap_or_default();
        if sample.metric == "kopf_api_requests_total" && ["list", "watch", "patch"].contains(&verb)
        {
            let code = sample.labels.get("code").unwrap_or_default().to_owned();
            let value = metrics.value(
                "kopf_api_requests_total",
                &[("verb", verb), ("code", code.as_str())],
            );
            counts.insert((verb.to_owned(), code), value);
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_move_as_the_events_did() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let operator = Running::serving(&emulator, registry(&calls), settings()).await;
    let url = operator.urls().metrics.clone();
    eventually("the first listing", || async {
        (kopf_tests::get_json(&operator.urls().readiness).await.0 == 200).then_some(())
    })
    .await;
    let start = scraped(&url, "the watch to start", |m| {
        m.value(
            "kopf_api_requests_total",
            &[("verb", "watch"), ("code", "200")],
        ) >= 1.0
    })
    .await;
    for family in [
        "kopf_handler_invocations",
        "kopf_handler_duration_seconds",
        "kopf_handlers_in_flight",
        "kopf_queue_depth",
        "kopf_queue_latency_seconds",
        "kopf_watch_events",
        "kopf_watch_restarts",
        "kopf_watch_last_event_timestamp_seconds",
        "kopf_objects_tracked",
        "kopf_tasks_running",
        "kopf_task_exits",
        "kopf_api_requests",
        "kopf_api_request_duration_seconds",
        "kopf_leader",
        "kopf_shard_slots_held",
    ] {
        let help = start.scrape.docs.get(family);
        assert!(
            help.is_some_and(|h| !h.is_empty()),
            "{family} has a help text"
        );
    }

    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    for (name, daemon) in [("a", false), ("b", false), ("c", true)] {
        api.create(&PostParams::default(), &configmap(name, "1", daemon))
            .await
            .expect("created");
    }
    let created = scraped(&url, "three creations handled", |m| {
        invocations(m, "created", "success") == 3.0
            && m.value("kopf_objects_tracked", &[("resource", CMS)]) == 3.0
    })
    .await;
    assert_eq!(
        created.value(
            "kopf_watch_events_total",
            &[("resource", CMS), ("type", "ADDED")]
        ),
        3.0
    );
    calls.wait_for("stubborn", 1).await;
    assert_eq!(created.value("kopf_tasks_running", &[]), 1.0);

    for name in ["a", "b"] {
        let mut object = api.get(name).await.expect("exists");
        object.data = Some([("k".to_owned(), "2".to_owned())].into());
        api.replace(name, &PostParams::default(), &object)
            .await
            .expect("replaced");
    }
    scraped(&url, "two updates handled", |m| {
        invocations(m, "updated", "success") == 2.0
    })
    .await;

    // A dropped watch, and its reconnection throttled once: kube's client
    // retries a 429 after its Retry-After by itself, so the operator sees
    // the watch closed and opened again.
    emulator.faults().fail_next(
        1,
        FailRule {
            retry_after: Some(1),
            ..FailRule::status(429).verb("watch")
        },
    );
    emulator.faults().drop_watches();
    let watches = created.value(
        "kopf_api_requests_total",
        &[("verb", "watch"), ("code", "200")],
    );
    scraped(&url, "the watch closed and back", |m| {
        m.value(
            "kopf_watch_restarts_total",
            &[("resource", CMS), ("reason", "closed")],
        ) >= 1.0
            && m.value(
                "kopf_api_requests_total",
                &[("verb", "watch"), ("code", "200")],
            ) > watches
    })
    .await;
    assert!(
        emulator
            .requests()
            .iter()
            .any(|r| r.verb == "watch" && r.status == 429),
        "the 429 was answered"
    );

    for name in ["a", "b", "c"] {
        api.delete(name, &DeleteParams::default())
            .await
            .expect("deleted");
    }
    for name in ["a", "b", "c"] {
        eventually(&format!("{name} gone"), || async {
            get(&emulator, &kopf_tests::configmaps(), "default", name)
                .await
                .is_none()
                .then_some(())
        })
        .await;
    }
    calls.wait_for("stubborn:unblocked", 1).await;
    let end = scraped(&url, "everything settled", |m| {
        m.value("kopf_objects_tracked", &[("resource", CMS)]) == 0.0
            && m.value("kopf_task_exits_total", &[("reason", "abandoned")]) == 1.0
            && invocations(m, "deleted", "permanent") == 3.0
            && invocations(m, "stubborn", "success") == 1.0
            && m.value("kopf_queue_depth", &[("resource", CMS)]) == 0.0
    })
    .await;

    let expected = [
        ("created", "success", 3.0),
        ("updated", "temporary", 2.0),
        ("updated", "success", 2.0),
        ("deleted", "permanent", 3.0),
        ("stubborn", "success", 1.0),
    ];
    for handler in ["created", "updated", "deleted", "stubborn"] {
        let mut calls = 0.0;
        for outcome in [
            "success",
            "temporary",
            "permanent",
            "timeout",
            "retries_exhausted",
            "ignored",
        ] {
            let want = expected
                .iter()
                .find(|(h, o, _)| *h == handler && *o == outcome)
                .map_or(0.0, |(_, _, n)| *n);
            assert_eq!(
                invocations(&end, handler, outcome),
                want,
                "{handler} {outcome}"
            );
            calls += want;
        }
        let labels = [("resource", CMS), ("handler", handler)];
        assert_eq!(
            end.value("kopf_handler_duration_seconds_count", &labels),
            calls,
            "{handler}"
        );
        assert_eq!(
            end.value("kopf_handlers_in_flight", &labels),
            0.0,
            "{handler}"
        );
    }
    let events = |kind| {
        end.value(
            "kopf_watch_events_total",
            &[("resource", CMS), ("type", kind)],
        )
    };
    assert_eq!(
        (events("ADDED"), events("DELETED"), events("ERROR")),
        (3.0, 3.0, 0.0)
    );
    assert!(
        events("MODIFIED") >= 5.0,
        "the updates and the operator's patches"
    );
    assert!(events("BOOKMARK") >= 1.0);
    assert_eq!(end.value("kopf_tasks_running", &[]), 0.0);
    assert_eq!(
        end.value("kopf_task_exits_total", &[("reason", "cancelled")])
            + end.value("kopf_task_exits_total", &[("reason", "stopped")])
            + end.value("kopf_task_exits_total", &[("reason", "finished")]),
        0.0,
        "the one daemon was abandoned"
    );
    let last = end
        .get(
            "kopf_watch_last_event_timestamp_seconds",
            &[("resource", CMS)],
        )
        .expect("a last event");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64();
    assert!(
        (now - 60.0..=now + 1.0).contains(&last),
        "{last} against {now}"
    );
    assert!(end.value("kopf_queue_latency_seconds_count", &[("resource", CMS)]) >= 8.0);
    assert_eq!(end.value("kopf_leader", &[]), 1.0);

    // Every list, watch and patch the emulator answered, counted by code.
    eventually("the API counts to match the emulator's", || async {
        let metrics = scrape(&url).await;
        let (ours, theirs) = (counted(&metrics), answered(&emulator));
        (ours == theirs).then_some(())
    })
    .await;
    let metrics = scrape(&url).await;
    assert!(
        metrics.value(
            "kopf_api_requests_total",
            &[("verb", "patch"), ("code", "200")]
        ) >= 6.0
    );
    assert!(
        metrics.value(
            "kopf_api_request_duration_seconds_count",
            &[("verb", "patch")]
        ) >= 6.0
    );
    operator.stop().await;
}

/// The series of a scrape: each sample's name and labels.
fn series(metrics: &Metrics) -> BTreeSet<String> {
    metrics
        .text
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| {
            line.rsplit_once(' ')
                .map_or(line, |(series, _)| series)
                .to_owned()
        })
        .collect()
}

/// The series an operator serves once it has seen `n` ConfigMaps.
async fn series_with(n: usize) -> BTreeSet<String> {
    let objects: Vec<String> = (0..n)
        .map(|i| {
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{i}"), "namespace": "default"},
                "data": {"k": "v"},
            })
            .to_string()
        })
        .collect();
    let emulator = Emulator::builder()
        .preload_yaml(&objects.join("\n---\n"))
        .start()
        .await
        .expect("emulator starts");
    let registry = Registry::builder()
        .on_event(cms(), "seen", |_: Kwargs| async { Ok::<_, Error>(()) })
        .build()
        .expect("a valid registry");
    let operator = Running::serving(&emulator, registry, settings()).await;
    let metrics = scraped(&operator.urls().metrics, "every object seen", |m| {
        m.value("kopf_objects_tracked", &[("resource", CMS)]) == n as f64
            && invocations(m, "seen", "success") == n as f64
            && m.value(
                "kopf_api_requests_total",
                &[("verb", "watch"), ("code", "200")],
            ) >= 1.0
    })
    .await;
    operator.stop().await;
    series(&metrics)
}

#[tokio::test]
async fn the_number_of_series_does_not_grow_with_the_objects() {
    logs();
    let few = series_with(10).await;
    let many = series_with(10_000).await;
    assert_eq!(
        few,
        many,
        "only with 10: {:#?}\nonly with 10,000: {:#?}",
        few.difference(&many).collect::<Vec<_>>(),
        many.difference(&few).collect::<Vec<_>>()
    );
    assert!(few.len() < 400, "{} series", few.len());
}
