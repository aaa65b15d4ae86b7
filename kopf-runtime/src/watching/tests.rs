//! Async tests of the watch loops against the scripted mock API (paused time).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{ObjectEvent, ResourceWatcher};
use crate::fields::meta_str;
use crate::mock_api::{self, Recorded, Reply, example, list};
use crate::operator::namespaces::NamespaceSelector;
use crate::peering::sharding::SlotSet;
use crate::settings::WatchingSettings;
use crate::watching::echoes::Echoes;

/// Every wait in these tests is bounded by this (virtual) time.
const LIMIT: Duration = Duration::from_secs(3600);

fn render(event: &ObjectEvent) -> String {
    match event {
        ObjectEvent::Upserted { object, seen } => {
            format!("+{}({seen:?})", meta_str(object, "uid").unwrap_or("?"))
        }
        ObjectEvent::Deleted { object, how } => {
            format!("-{}({how:?})", meta_str(object, "uid").unwrap_or("?"))
        }
        ObjectEvent::Undecodable { object, .. } => {
            format!("!{}", meta_str(object, "uid").unwrap_or("?"))
        }
        ObjectEvent::Synced { count } => format!("synced:{count}"),
    }
}

struct Running {
    rx: mpsc::Receiver<ObjectEvent>,
    cancel: CancellationToken,
    tasks: TaskTracker,
    log: Arc<Mutex<Vec<Recorded>>>,
}

impl Running {
    fn start(
        selector: NamespaceSelector,
        handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
    ) -> Self {
        Self::start_with(selector, |watcher| watcher, handler)
    }

    fn start_with(
        selector: NamespaceSelector,
        configure: impl FnOnce(ResourceWatcher) -> ResourceWatcher,
        handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let (client, log) = mock_api::client(handler);
        let watcher = ResourceWatcher::new(
            client,
            mock_api::example_resource(),
            true,
            selector,
            WatchingSettings::default(),
        );
        let watcher = configure(watcher);
        let (tx, rx) = mpsc::channel(16);
        let cancel = CancellationToken::new();
        let tasks = TaskTracker::new();
        tasks.spawn(watcher.run(tx, cancel.clone()));
        Self {
            rx,
            cancel,
            tasks,
            log,
        }
    }

    async fn next(&mut self, n: usize) -> Vec<String> {
        let mut out = Vec::new();
        for _ in 0..n {
            let event = tokio::time::timeout(LIMIT, self.rx.recv())
                .await
                .expect("an event in time")
                .expect("open");
            out.push(render(&event));
        }
        out
    }

    fn requests(&self, filter: impl Fn(&Recorded) -> bool) -> Vec<String> {
        self.log
            .lock()
            .expect("not poisoned")
            .iter()
            .filter(|r| filter(r))
            .map(|r| r.uri.clone())
            .collect()
    }

    async fn wait_for_requests(&self, n: usize, filter: impl Fn(&Recorded) -> bool) -> Vec<String> {
        tokio::time::timeout(LIMIT, async {
            loop {
                let found = self.requests(&filter);
                if found.len() >= n {
                    return found;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .expect("requests in time")
    }

    async fn stop(self) {
        self.cancel.cancel();
        self.tasks.close();
        tokio::time::timeout(LIMIT, self.tasks.wait())
            .await
            .expect("the watcher stops");
    }
}

fn is_watch(r: &Recorded) -> bool {
    r.uri.contains("watch=true")
}

/// A mock that answers the `n`th watch with the `n`th of `watches`' events,
/// then ends it (and keeps the watches after them open and silent), and the
/// `n`th list with the `n`th of `lists`' items and version (the last again
/// after them).
fn scripted(
    watches: Vec<Vec<Value>>,
    lists: Vec<(Vec<Value>, &'static str)>,
) -> impl Fn(&Recorded) -> Reply + Send + Sync + 'static {
    let (watched, listed) = (AtomicUsize::new(0), AtomicUsize::new(0));
    move |r| {
        if is_watch(r) {
            match watches.get(watched.fetch_add(1, Ordering::SeqCst)) {
                Some(events) => Reply::Events(events.clone()),
                None => Reply::EventsThenHang(vec![]),
            }
        } else {
            let n = listed.fetch_add(1, Ordering::SeqCst).min(lists.len() - 1);
            let (items, version) = &lists[n];
            list(items.clone(), version)
        }
    }
}

/// The first listing of the re-list tests: "a" (u1) and "b" (u2) at 10.
fn first_listing() -> (Vec<Value>, &'static str) {
    (
        vec![
            example("ns", "a", "u1", "10"),
            example("ns", "b", "u2", "10"),
        ],
        "10",
    )
}

fn expired() -> Value {
    json!({"type": "ERROR", "object": mock_api::status(410, "Expired", 0)})
}

#[tokio::test(start_paused = true)]
async fn relist_after_gone_reports_vanished_objects() {
    let mut running = Running::start(
        NamespaceSelector::all(),
        scripted(
            vec![
                vec![
                    mock_api::event("MODIFIED", example("ns", "a", "u1", "11")),
                    json!({"type": "BOOKMARK", "object": {"kind": "KopfExample", "apiVersion": "kopf.dev/v1", "metadata": {"resourceVersion": "12"}}}),
                ],
                vec![expired()],
            ],
            vec![
                first_listing(),
                (vec![example("ns", "a", "u1", "11")], "20"),
            ],
        ),
    );
    assert_eq!(running.next(3).await, ["+u1(New)", "+u2(New)", "synced:2"]);
    assert_eq!(running.next(1).await, ["+u1(Changed)"]);
    assert_eq!(
        running.next(2).await,
        ["-u2(Vanished)", "synced:1"],
        "u1 is unchanged since its event"
    );
    let watches = running.wait_for_requests(3, is_watch).await;
    assert!(watches[0].contains("resourceVersion=10"), "{watches:?}");
    assert!(
        watches[1].contains("resourceVersion=12"),
        "resumed after the bookmark: {watches:?}"
    );
    assert!(
        watches[2].contains("resourceVersion=20"),
        "watched from the re-list: {watches:?}"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn expected_echoes_are_skipped_and_their_versions_count_as_seen() {
    let echoes = Echoes::default();
    echoes.expect(&"u1".into(), "13");
    echoes.expect(&"u2".into(), "30");
    let mut running = Running::start_with(
        NamespaceSelector::all(),
        |w| w.with_echoes(echoes.clone()),
        scripted(
            vec![
                vec![
                    // Expected at another version: not the echo.
                    mock_api::event("MODIFIED", example("ns", "b", "u2", "12")),
                    mock_api::event("MODIFIED", example("ns", "a", "u1", "13")),
                ],
                vec![expired()],
            ],
            vec![
                first_listing(),
                (
                    vec![
                        example("ns", "a", "u1", "13"),
                        example("ns", "b", "u2", "12"),
                    ],
                    "20",
                ),
            ],
        ),
    );
    assert_eq!(running.next(3).await, ["+u1(New)", "+u2(New)", "synced:2"]);
    assert_eq!(
        running.next(1).await,
        ["+u2(Changed)"],
        "u1's echo is not sent"
    );
    assert_eq!(
        running.next(1).await,
        ["synced:2"],
        "the skipped version counts as seen: u1 is unchanged in the re-list"
    );
    let watches = running.wait_for_requests(2, is_watch).await;
    assert!(
        watches[1].contains("resourceVersion=13"),
        "resumed after the skipped event: {watches:?}"
    );
    assert!(echoes.is_empty(), "both expectations are used up");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_relist_reports_only_what_the_consumer_lacks() {
    // The operator's patches of u3 and u4, whose events never come: the
    // watch is too late for them.
    let echoes = Echoes::default();
    echoes.expect(&"u3".into(), "31");
    echoes.expect(&"u4".into(), "41");
    let first = ["u1", "u2", "u3", "u4", "u5"].map(|uid| example("ns", uid, uid, "10"));
    let mut running = Running::start_with(
        NamespaceSelector::all(),
        |w| w.with_echoes(echoes.clone()),
        scripted(
            vec![vec![expired()]],
            vec![
                (first.to_vec(), "10"),
                (
                    vec![
                        example("ns", "u1", "u1", "10"),
                        // Changed by another client.
                        example("ns", "u2", "u2", "22"),
                        // The operator's patch.
                        example("ns", "u3", "u3", "31"),
                        // Changed again after the operator's patch.
                        example("ns", "u4", "u4", "42"),
                        example("ns", "u6", "u6", "60"),
                    ],
                    "60",
                ),
            ],
        ),
    );
    assert_eq!(
        running.next(6).await,
        [
            "+u1(New)", "+u2(New)", "+u3(New)", "+u4(New)", "+u5(New)", "synced:5"
        ]
    );
    assert_eq!(
        running.next(5).await,
        [
            "+u2(Changed)",
            "+u4(Changed)",
            "+u6(New)",
            "-u5(Vanished)",
            "synced:5"
        ],
        "u1 (unchanged) and u3 (the operator's patch) are known"
    );
    assert!(echoes.is_empty(), "both expectations are used up");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn objects_of_other_slots_are_skipped_and_their_versions_followed() {
    // Of two slots, "ours" is in the one served and "theirs" in the other.
    let slots = SlotSet::none(2).with(1);
    assert!(slots.serve("ours") && !slots.serve("theirs"));
    let watches = AtomicUsize::new(0);
    let mut running = Running::start_with(
        NamespaceSelector::all(),
        |w| w.with_slots(slots),
        move |r| {
            if !is_watch(r) {
                return list(
                    vec![
                        example("ns", "a", "ours", "10"),
                        example("ns", "b", "theirs", "10"),
                    ],
                    "10",
                );
            }
            match watches.fetch_add(1, Ordering::SeqCst) {
                0 => Reply::Events(vec![
                    mock_api::event("MODIFIED", example("ns", "a", "ours", "11")),
                    mock_api::event("ADDED", example("ns", "c", "theirs", "12")),
                    mock_api::event("MODIFIED", example("ns", "c", "theirs", "13")),
                    mock_api::event("DELETED", example("ns", "c", "theirs", "14")),
                ]),
                _ => Reply::EventsThenHang(vec![mock_api::event(
                    "DELETED",
                    example("ns", "a", "ours", "15"),
                )]),
            }
        },
    );
    assert_eq!(
        running.next(4).await,
        ["+ours(New)", "synced:1", "+ours(Changed)", "-ours(Event)"],
        "nothing of the other slot is sent"
    );
    let watches = running.requests(is_watch);
    assert!(
        watches[1].contains("resourceVersion=14"),
        "resumed after the skipped events: {watches:?}"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn silent_stream_is_resumed_without_relisting() {
    let watches = AtomicUsize::new(0);
    let mut running = Running::start(NamespaceSelector::all(), move |r| {
        if is_watch(r) {
            match watches.fetch_add(1, Ordering::SeqCst) {
                0 => Reply::EventsThenHang(vec![mock_api::event(
                    "ADDED",
                    example("ns", "c", "u3", "6"),
                )]),
                _ => Reply::EventsThenHang(vec![]),
            }
        } else {
            list(vec![], "5")
        }
    });
    let started = tokio::time::Instant::now();
    assert_eq!(running.next(2).await, ["synced:0", "+u3(New)"]);
    let watches = running.wait_for_requests(2, is_watch).await;
    assert!(started.elapsed() >= WatchingSettings::default().inactivity_timeout);
    assert!(watches[1].contains("resourceVersion=6"), "{watches:?}");
    assert_eq!(running.requests(|r| !is_watch(r)).len(), 1, "no re-list");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn throttled_listing_honours_retry_after() {
    let lists = AtomicUsize::new(0);
    let mut running = Running::start(NamespaceSelector::all(), move |r| {
        if is_watch(r) {
            Reply::EventsThenHang(vec![])
        } else {
            match lists.fetch_add(1, Ordering::SeqCst) {
                0 => Reply::Json(429, mock_api::status(429, "TooManyRequests", 7)),
                1 => Reply::Json(503, mock_api::status(503, "ServiceUnavailable", 0)),
                _ => list(vec![example("ns", "a", "u1", "1")], "1"),
            }
        }
    });
    let started = tokio::time::Instant::now();
    assert_eq!(running.next(2).await, ["+u1(New)", "synced:1"]);
    let elapsed = started.elapsed();
    // 7 s from the server's hint, then 1 s (the second configured backoff).
    assert!(
        elapsed >= Duration::from_secs(8) && elapsed < Duration::from_secs(9),
        "{elapsed:?}"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn broken_stream_resumes_from_the_last_version() {
    let watches = AtomicUsize::new(0);
    let mut running = Running::start(NamespaceSelector::all(), move |r| {
        if is_watch(r) {
            match watches.fetch_add(1, Ordering::SeqCst) {
                0 => Reply::Events(vec![
                    mock_api::event("ADDED", example("ns", "a", "u1", "2")),
                    mock_api::event("DELETED", example("ns", "a", "u1", "3")),
                    json!({"type": "ERROR", "object": mock_api::status(500, "InternalError", 0)}),
                ]),
                _ => Reply::EventsThenHang(vec![]),
            }
        } else {
            list(vec![], "1")
        }
    });
    assert_eq!(
        running.next(3).await,
        ["synced:0", "+u1(New)", "-u1(Event)"]
    );
    let watches = running.wait_for_requests(2, is_watch).await;
    assert!(watches[1].contains("resourceVersion=3"), "{watches:?}");
    assert_eq!(
        running.requests(|r| !is_watch(r)).len(),
        1,
        "a 500 does not re-list"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn exact_namespaces_get_one_watch_each() {
    let selector = NamespaceSelector::new(["ns1", "ns2"], false).expect("valid");
    let mut running = Running::start(selector, |r| {
        if is_watch(r) {
            Reply::EventsThenHang(vec![])
        } else if r.uri.contains("/namespaces/ns1/") {
            list(vec![example("ns1", "a", "u1", "1")], "1")
        } else {
            list(vec![example("ns2", "a", "u2", "1")], "1")
        }
    });
    let mut events = running.next(4).await;
    events.sort();
    assert_eq!(events, ["+u1(New)", "+u2(New)", "synced:1", "synced:1"]);
    let requests = running.wait_for_requests(4, |_| true).await;
    assert!(
        requests
            .iter()
            .all(|u| u.contains("/namespaces/ns1/") || u.contains("/namespaces/ns2/")),
        "{requests:?}"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn cluster_wide_exclusions_filter_objects() {
    let selector = NamespaceSelector::new(["!kube-*"], true).expect("valid");
    let mut running = Running::start(selector, |r| {
        if is_watch(r) {
            Reply::EventsThenHang(vec![mock_api::event(
                "ADDED",
                example("kube-system", "x", "u9", "3"),
            )])
        } else {
            list(
                vec![
                    example("kube-system", "a", "u1", "1"),
                    example("team", "b", "u2", "1"),
                ],
                "2",
            )
        }
    });
    assert_eq!(running.next(2).await, ["+u2(New)", "synced:1"]);
    let requests = running.wait_for_requests(2, |_| true).await;
    assert!(
        requests[0].starts_with("/apis/kopf.dev/v1/kopfexamples?"),
        "{requests:?}"
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(5), running.rx.recv())
            .await
            .is_err(),
        "u9 is filtered out"
    );
    running.stop().await;
}

fn namespace(name: &str, uid: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "uid": uid, "resourceVersion": "1"}})
}

#[tokio::test(start_paused = true)]
async fn globbed_namespaces_start_and_stop_watches() {
    let (ns_events, ns_stream) = mpsc::unbounded_channel::<Value>();
    let ns_stream = Mutex::new(Some(ns_stream));
    let selector = NamespaceSelector::new(["dev-*"], false).expect("valid");
    let mut running = Running::start(selector, move |r| {
        let is_ns = r.uri.starts_with("/api/v1/namespaces?");
        match (is_ns, is_watch(r)) {
            (true, false) => list(vec![namespace("dev-1", "n1"), namespace("prod", "n2")], "1"),
            (true, true) => match ns_stream.lock().expect("not poisoned").take() {
                Some(rx) => Reply::Channel(rx),
                None => Reply::EventsThenHang(vec![]),
            },
            (false, true) => Reply::EventsThenHang(vec![]),
            (false, false) if r.uri.contains("/namespaces/dev-1/") => {
                list(vec![example("dev-1", "a", "u1", "1")], "1")
            }
            (false, false) => list(vec![example("dev-2", "b", "u2", "1")], "1"),
        }
    });
    assert_eq!(running.next(2).await, ["+u1(New)", "synced:1"]);

    ns_events
        .send(mock_api::event("ADDED", namespace("dev-2", "n3")))
        .expect("stream open");
    assert_eq!(running.next(2).await, ["+u2(New)", "synced:1"]);

    ns_events
        .send(mock_api::event("DELETED", namespace("dev-1", "n1")))
        .expect("stream open");
    assert_eq!(running.next(1).await, ["-u1(Vanished)"]);

    let requests = running.requests(|r| !r.uri.starts_with("/api/v1/namespaces?"));
    assert!(
        requests.iter().all(|u| !u.contains("/namespaces/prod/")),
        "prod is not served: {requests:?}"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn listed_items_get_their_kind_and_api_version() {
    let mut bare = example("ns", "a", "u1", "1");
    let map = bare.as_object_mut().expect("an object");
    map.remove("kind");
    map.remove("apiVersion");
    let mut running = Running::start(NamespaceSelector::all(), move |r| {
        if is_watch(r) {
            Reply::EventsThenHang(vec![])
        } else {
            list(vec![bare.clone()], "1")
        }
    });
    let event = tokio::time::timeout(LIMIT, running.rx.recv())
        .await
        .expect("in time")
        .expect("open");
    let object = event.object().expect("an object");
    assert_eq!(
        (&object["apiVersion"], &object["kind"]),
        (&json!("kopf.dev/v1"), &json!("KopfExample"))
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn forbidden_namespaces_fall_back_to_plain_names() {
    let selector = NamespaceSelector::new(["dev-*", "ops"], false).expect("valid");
    let mut running = Running::start(selector, |r| {
        if r.uri.starts_with("/api/v1/namespaces?") {
            Reply::Json(403, mock_api::status(403, "Forbidden", 0))
        } else if is_watch(r) {
            Reply::EventsThenHang(vec![])
        } else {
            list(vec![example("ops", "a", "u1", "1")], "1")
        }
    });
    assert_eq!(running.next(2).await, ["+u1(New)", "synced:1"]);
    let requests = running.requests(|r| !r.uri.starts_with("/api/v1/namespaces?"));
    assert!(
        requests.iter().all(|u| u.contains("/namespaces/ops/")),
        "{requests:?}"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn dropping_the_receiver_stops_the_watcher() {
    let running = Running::start(NamespaceSelector::all(), |r| {
        if is_watch(r) {
            Reply::EventsThenHang(vec![])
        } else {
            list(vec![example("ns", "a", "u1", "1")], "1")
        }
    });
    let Running { rx, tasks, .. } = running;
    drop(rx);
    tasks.close();
    tokio::time::timeout(LIMIT, tasks.wait())
        .await
        .expect("stops without cancellation");
}
