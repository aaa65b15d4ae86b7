//! Watch streams against the emulator: event order, resume, bookmarks,
//! `timeoutSeconds`, `410 Gone`, dropped streams and restarts — and
//! kube-runtime's own `watcher`, `reflector` and `Controller`, unchanged,
//! recovering from dropped watches and re-listing after a forced 410.

use std::{convert::Infallible, sync::Arc, time::Instant};

use crate::common::{api_error, raw_request, rv_num, within};
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kopf_testing::{Emulator, FailRule};
use kube::{
    Api, ResourceExt,
    api::{
        DeleteParams, ListParams, Patch, PatchParams, PostParams, VersionMatch, WatchEvent,
        WatchParams,
    },
    runtime::{
        Controller, WatchStreamExt,
        controller::Action,
        reflector::{self, ObjectRef},
        watcher,
    },
};
use serde_json::json;

async fn emulator() -> Emulator {
    within("the emulator to start", Emulator::start())
        .await
        .expect("the emulator starts")
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}}))
        .expect("configmap")
}

async fn create(api: &Api<ConfigMap>, name: &str) -> ConfigMap {
    within("create", api.create(&PostParams::default(), &cm(name)))
        .await
        .expect("create configmap")
}

async fn delete(api: &Api<ConfigMap>, name: &str) {
    within("delete", api.delete(name, &DeleteParams::default()))
        .await
        .expect("delete configmap");
}

async fn patch(api: &Api<ConfigMap>, name: &str, value: &str) -> ConfigMap {
    within(
        "patch",
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": value}})),
        ),
    )
    .await
    .expect("patch configmap")
}

async fn current_rv(api: &Api<ConfigMap>) -> String {
    let list = within("list", api.list(&ListParams::default()))
        .await
        .expect("list");
    list.metadata
        .resource_version
        .expect("a list carries a resourceVersion")
}

/// The next event, failing the test if the stream ends or errors first.
async fn next_event<S>(events: &mut S) -> WatchEvent<ConfigMap>
where
    S: Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin,
{
    within("a watch event", events.try_next())
        .await
        .expect("the watch stream does not fail")
        .expect("the watch stream does not end")
}

/// The next non-bookmark event.
async fn next_change<S>(events: &mut S) -> WatchEvent<ConfigMap>
where
    S: Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin,
{
    loop {
        match next_event(events).await {
            WatchEvent::Bookmark(_) => continue,
            other => return other,
        }
    }
}

fn describe(ev: &WatchEvent<ConfigMap>) -> String {
    match ev {
        WatchEvent::Added(o) => format!("ADDED {}", o.name_any()),
        WatchEvent::Modified(o) => format!("MODIFIED {}", o.name_any()),
        WatchEvent::Deleted(o) => format!("DELETED {}", o.name_any()),
        WatchEvent::Bookmark(b) => format!("BOOKMARK {}", b.metadata.resource_version),
        WatchEvent::Error(s) => format!("ERROR {}", s.code),
    }
}

// ---------------------------------------------------------------- raw watch

#[tokio::test]
async fn watch_streams_added_modified_deleted_in_order() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let rv = current_rv(&api).await;
    emu.clear_requests();
    let mut events = within("watch", api.watch(&WatchParams::default(), &rv))
        .await
        .expect("watch")
        .boxed();

    let created = create(&api, "w").await;
    let patched = patch(&api, "w", "2").await;
    delete(&api, "w").await;

    let mut seen = Vec::new();
    let mut rvs = Vec::new();
    for _ in 0..3 {
        let ev = next_change(&mut events).await;
        seen.push(describe(&ev));
        if let WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) = &ev {
            rvs.push(rv_num(o.metadata.resource_version.as_ref()));
        }
    }
    assert_eq!(seen, ["ADDED w", "MODIFIED w", "DELETED w"]);
    assert_eq!(rvs[0], rv_num(created.metadata.resource_version.as_ref()));
    assert_eq!(rvs[1], rv_num(patched.metadata.resource_version.as_ref()));
    assert!(
        rvs[2] > rvs[1],
        "the deletion has its own, newer resourceVersion: {rvs:?}"
    );

    let watch = emu
        .requests()
        .into_iter()
        .find(|r| r.verb == "watch")
        .expect("the watch is recorded");
    assert_eq!((watch.method.as_str(), watch.status), ("GET", 200));
    assert!(watch.query.contains("watch=true"), "{watch:?}");
    emu.shutdown().await;
}

#[tokio::test]
async fn watch_resumes_from_a_resource_version_replaying_only_later_events() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let a = create(&api, "a").await;
    patch(&api, "a", "2").await;
    create(&api, "b").await;
    delete(&api, "a").await;

    let from = a.resource_version().expect("rv");
    let mut events = within("watch", api.watch(&WatchParams::default(), &from))
        .await
        .expect("watch")
        .boxed();
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(describe(&next_change(&mut events).await));
    }
    assert_eq!(
        seen,
        ["MODIFIED a", "ADDED b", "DELETED a"],
        "only the changes after {from}"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn watch_without_a_resource_version_starts_with_the_existing_objects() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    create(&api, "old1").await;
    create(&api, "old2").await;
    let mut events = within("watch", api.watch(&WatchParams::default(), "0"))
        .await
        .expect("watch")
        .boxed();
    let mut first = vec![
        describe(&next_change(&mut events).await),
        describe(&next_change(&mut events).await),
    ];
    first.sort();
    assert_eq!(
        first,
        ["ADDED old1", "ADDED old2"],
        "resourceVersion=0 begins with synthetic ADDED events"
    );
    create(&api, "new").await;
    assert_eq!(describe(&next_change(&mut events).await), "ADDED new");
    emu.shutdown().await;
}

#[tokio::test]
async fn watch_with_bookmarks_reports_a_bookmark_before_timeout_ends_the_stream() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let rv = current_rv(&api).await;
    let mut events = within("watch", api.watch(&WatchParams::default().timeout(2), &rv))
        .await
        .expect("watch")
        .boxed();
    let last = create(&api, "bm").await;
    let mut bookmarks = Vec::new();
    let all: Vec<_> = within("the watch to end", async {
        let mut all = Vec::new();
        while let Some(ev) = events.try_next().await.expect("watch stream") {
            if let WatchEvent::Bookmark(b) = &ev {
                bookmarks.push(b.metadata.resource_version.clone());
            }
            all.push(describe(&ev));
        }
        all
    })
    .await;
    assert!(
        !bookmarks.is_empty(),
        "a bookmark was sent; events: {all:?}"
    );
    let newest = bookmarks.last().expect("bookmark");
    assert!(
        rv_num(Some(newest)) >= rv_num(last.metadata.resource_version.as_ref()),
        "the last bookmark is at or after the last change: {all:?}"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn watch_ends_when_timeout_seconds_elapse() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let rv = current_rv(&api).await;
    let started = Instant::now();
    let mut events = within(
        "watch",
        api.watch(&WatchParams::default().timeout(1).disable_bookmarks(), &rv),
    )
    .await
    .expect("watch")
    .boxed();
    within("the watch to end", async {
        while events.try_next().await.expect("watch stream").is_some() {}
    })
    .await;
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(900),
        "ended after {:?}",
        started.elapsed()
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn watch_from_before_the_kept_history_gets_a_410_error_event() {
    let emu = within(
        "the emulator to start",
        Emulator::builder().history_limit(5).start(),
    )
    .await
    .expect("the emulator starts");
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let first = create(&api, "h0").await;
    for i in 1..20 {
        create(&api, &format!("h{i}")).await;
    }
    let from = first.resource_version().expect("rv");
    let mut events = within("watch", api.watch(&WatchParams::default(), &from))
        .await
        .expect(
            "a too-old watch is accepted and answered with an ERROR event, as the API server does",
        )
        .boxed();
    match next_event(&mut events).await {
        WatchEvent::Error(status) => {
            assert_eq!(status.code, 410, "{status:?}");
            assert_eq!(status.reason, "Expired", "{status:?}");
        }
        other => panic!("expected ERROR 410, got {}", describe(&other)),
    }
    let after = within("the stream to end", events.try_next()).await;
    assert!(
        matches!(after, Ok(None) | Err(_)),
        "the stream ends after the ERROR event"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn list_at_a_resource_version_before_the_kept_history_is_410() {
    let emu = within(
        "the emulator to start",
        Emulator::builder().history_limit(5).start(),
    )
    .await
    .expect("the emulator starts");
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let first = create(&api, "l0").await;
    for i in 1..20 {
        create(&api, &format!("l{i}")).await;
    }
    let from = first.resource_version().expect("rv");
    let lp = ListParams::default()
        .at(&from)
        .matching(VersionMatch::Exact);
    let status = api_error(within("list", api.list(&lp)).await);
    assert_eq!(status.code, 410, "{status:?}");
    emu.shutdown().await;
}

/// Creates `c0`…`c{n-1}` and lists the first page of 2: its version and
/// its continue token.
async fn first_page_of(api: &Api<ConfigMap>, n: usize) -> (u64, String) {
    for i in 0..n {
        create(api, &format!("c{i}")).await;
    }
    let page = within("list", api.list(&ListParams::default().limit(2)))
        .await
        .expect("first page");
    let rv = rv_num(page.metadata.resource_version.as_ref());
    let token = page.metadata.continue_.expect("a continue token");
    (rv, token)
}

#[tokio::test]
async fn a_continue_token_from_before_compaction_is_410() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let (_, token) = first_page_of(&api, 5).await;
    create(&api, "later").await;
    emu.faults().compact();
    let lp = ListParams::default().limit(2).continue_token(&token);
    let status = api_error(within("list", api.list(&lp)).await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (410, "Expired"),
        "{status:?}"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn a_compacted_continue_token_is_answered_with_one_for_the_latest_version() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let (first_rv, token) = first_page_of(&api, 4).await;
    delete(&api, "c0").await;
    create(&api, "c9").await;
    emu.faults().compact();

    const CMS: &str = "/api/v1/namespaces/default/configmaps";
    let expired = raw_request(
        emu.addr(),
        "GET",
        &format!("{CMS}?limit=2&continue={token}"),
        &[],
        b"",
    )
    .await;
    expired.assert_status_object(410);
    let status = expired.json();
    assert_eq!(status["reason"], "Expired", "{status}");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("results in an inconsistent list")),
        "the API server's words: {status}"
    );
    let latest = status["metadata"]["continue"]
        .as_str()
        .expect("a continue token for the latest version");

    // It goes on after the last key sent, at the latest version: the new
    // object is there, the deleted one (before the key) is not seen.
    let rest = raw_request(
        emu.addr(),
        "GET",
        &format!("{CMS}?limit=10&continue={latest}"),
        &[],
        b"",
    )
    .await;
    assert_eq!(rest.status, 200, "{:?}", rest.json());
    let list = rest.json();
    let names: Vec<_> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(names, ["c2", "c3", "c9"]);
    let rv = rv_num(
        list["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_string)
            .as_ref(),
    );
    assert!(rv > first_rv, "the latest version {rv}, after {first_rv}");
    emu.shutdown().await;
}

#[tokio::test]
async fn compact_makes_the_next_resume_from_an_older_version_410_but_not_from_now() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let a = create(&api, "a").await;
    create(&api, "b").await;
    emu.faults().compact();

    let old = a.resource_version().expect("rv");
    let mut events = within("watch", api.watch(&WatchParams::default(), &old))
        .await
        .expect("watch")
        .boxed();
    match next_event(&mut events).await {
        WatchEvent::Error(status) => assert_eq!(status.code, 410, "{status:?}"),
        other => panic!(
            "expected ERROR 410 after compaction, got {}",
            describe(&other)
        ),
    }

    let now = current_rv(&api).await;
    let mut events = within("watch", api.watch(&WatchParams::default(), &now))
        .await
        .expect("watch")
        .boxed();
    create(&api, "c").await;
    assert_eq!(
        describe(&next_change(&mut events).await),
        "ADDED c",
        "a watch from the current version works"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn drop_watches_ends_every_open_watch_stream() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let rv = current_rv(&api).await;
    let mut one = within("watch", api.watch(&WatchParams::default(), &rv))
        .await
        .expect("watch")
        .boxed();
    let mut two = within("watch", api.watch(&WatchParams::default(), &rv))
        .await
        .expect("watch")
        .boxed();
    create(&api, "x").await;
    assert_eq!(describe(&next_change(&mut one).await), "ADDED x");
    assert_eq!(describe(&next_change(&mut two).await), "ADDED x");
    emu.faults().drop_watches();
    for s in [&mut one, &mut two] {
        within("the dropped stream to end", async {
            loop {
                match s.next().await {
                    None | Some(Err(_)) => break,
                    Some(Ok(WatchEvent::Bookmark(_))) => continue,
                    Some(Ok(other)) => panic!("unexpected event after drop: {}", describe(&other)),
                }
            }
        })
        .await;
    }
    emu.shutdown().await;
}

#[tokio::test]
async fn silenced_watches_send_nothing_until_they_resume() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let rv = current_rv(&api).await;
    emu.faults().silence_watches();
    let mut events = within("watch", api.watch(&WatchParams::default(), &rv))
        .await
        .expect("a silenced watch still connects")
        .boxed();
    create(&api, "during").await;
    // Bookmarks come every second on a live stream: three seconds of
    // nothing at all is a silenced one.
    let silent = tokio::time::timeout(std::time::Duration::from_secs(3), events.next()).await;
    assert!(silent.is_err(), "the stream sent {silent:?}");
    emu.faults().resume_watches();
    assert_eq!(describe(&next_change(&mut events).await), "ADDED during");
    emu.shutdown().await;
}

#[tokio::test]
async fn restart_keeping_state_closes_watches_and_a_resume_catches_up() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let rv = current_rv(&api).await;
    let mut events = within("watch", api.watch(&WatchParams::default(), &rv))
        .await
        .expect("watch")
        .boxed();
    create(&api, "before").await;
    assert_eq!(describe(&next_change(&mut events).await), "ADDED before");
    within("restart", emu.restart(true)).await;
    within("the stream to end", async {
        while let Some(Ok(_)) = events.next().await {}
    })
    .await;
    create(&api, "after").await;
    let mut resumed = within("watch", api.watch(&WatchParams::default(), &rv))
        .await
        .expect("resume")
        .boxed();
    assert_eq!(describe(&next_change(&mut resumed).await), "ADDED before");
    assert_eq!(describe(&next_change(&mut resumed).await), "ADDED after");
    emu.shutdown().await;
}

#[tokio::test]
async fn watch_with_a_label_selector_reports_objects_entering_and_leaving_it() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let rv = current_rv(&api).await;
    let everywhere: Api<ConfigMap> = Api::all(emu.client());
    let mut events = within(
        "watch",
        everywhere.watch(&WatchParams::default().labels("app=x"), &rv),
    )
    .await
    .expect("watch")
    .boxed();
    create(&api, "plain").await;
    let labelled = |v: &str| Patch::Merge(json!({"metadata": {"labels": {"app": v}}}));
    within(
        "patch",
        api.patch("plain", &PatchParams::default(), &labelled("x")),
    )
    .await
    .expect("label in");
    within(
        "patch",
        api.patch("plain", &PatchParams::default(), &labelled("x2")),
    )
    .await
    .expect("label out");
    assert_eq!(
        describe(&next_change(&mut events).await),
        "ADDED plain",
        "entering the selector is ADDED"
    );
    assert_eq!(
        describe(&next_change(&mut events).await),
        "DELETED plain",
        "leaving the selector is DELETED"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn deletecollection_streams_a_deleted_event_per_object() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    for n in ["d1", "d2", "d3"] {
        create(&api, n).await;
    }
    let rv = current_rv(&api).await;
    let mut events = within("watch", api.watch(&WatchParams::default(), &rv))
        .await
        .expect("watch")
        .boxed();
    within(
        "deletecollection",
        api.delete_collection(&DeleteParams::default(), &ListParams::default()),
    )
    .await
    .expect("deletecollection");
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(describe(&next_change(&mut events).await));
    }
    seen.sort();
    assert_eq!(seen, ["DELETED d1", "DELETED d2", "DELETED d3"]);
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_then_watch_under_concurrent_writes_reconstructs_the_final_state() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let mut writers = Vec::new();
    for w in 0..6 {
        let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
        writers.push(tokio::spawn(async move {
            for i in 0..40 {
                let name = format!("w{w}-{}", i % 7);
                match i % 3 {
                    0 => {
                        let _ = api.create(&PostParams::default(), &cm(&name)).await;
                    }
                    1 => {
                        let p = Patch::Merge(json!({"data": {"i": i.to_string()}}));
                        let _ = api.patch(&name, &PatchParams::default(), &p).await;
                    }
                    _ => {
                        let _ = api.delete(&name, &DeleteParams::default()).await;
                    }
                }
            }
        }));
    }
    // Take the list while writes are in flight.
    within("some writes to land", async {
        while api
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len()
            < 3
        {
            tokio::task::yield_now().await;
        }
    })
    .await;
    let listed = within("list", api.list(&ListParams::default()))
        .await
        .expect("list");
    let from = listed.metadata.resource_version.clone().expect("rv");
    let mut state: std::collections::BTreeMap<String, String> = listed
        .items
        .iter()
        .map(|o| (o.name_any(), o.resource_version().unwrap_or_default()))
        .collect();
    let mut events = within("watch", api.watch(&WatchParams::default(), &from))
        .await
        .expect("watch")
        .boxed();
    for w in writers {
        within("writers to finish", w).await.expect("writer");
    }
    let final_list = within("list", api.list(&ListParams::default()))
        .await
        .expect("final list");
    let final_rv = rv_num(final_list.metadata.resource_version.as_ref());
    let mut last = rv_num(Some(&from));
    within("the watch to catch up with the final list", async {
        while last < final_rv {
            let ev = next_change(&mut events).await;
            let (o, gone) = match ev {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => (o, false),
                WatchEvent::Deleted(o) => (o, true),
                other => panic!("unexpected {}", describe(&other)),
            };
            let rv = rv_num(o.metadata.resource_version.as_ref());
            assert!(
                rv > last,
                "events arrive in resourceVersion order: {rv} after {last}"
            );
            last = rv;
            if gone {
                state.remove(&o.name_any());
            } else {
                state.insert(o.name_any(), o.resource_version().unwrap_or_default());
            }
        }
    })
    .await;
    let expected: std::collections::BTreeMap<String, String> = final_list
        .items
        .iter()
        .map(|o| (o.name_any(), o.resource_version().unwrap_or_default()))
        .collect();
    assert_eq!(
        state, expected,
        "list at R + watch from R == list at the end"
    );
    emu.shutdown().await;
}

// ---------------------------------------------------------------- kube-runtime

#[tokio::test]
async fn kube_watcher_initial_list_works_with_every_list_strategy() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    for i in 0..5 {
        create(&api, &format!("i{i}")).await;
    }
    for (n, (label, config)) in [
        ("default", watcher::Config::default()),
        (
            "any_semantic (resourceVersion=0)",
            watcher::Config::default().any_semantic(),
        ),
        (
            "page_size(2) (limit/continue)",
            watcher::Config::default().page_size(2),
        ),
        (
            "streaming_lists (sendInitialEvents)",
            watcher::Config::default().streaming_lists(),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let (store, writer) = reflector::store();
        let mut stream = watcher(api.clone(), config)
            .default_backoff()
            .reflect(writer)
            .boxed();
        let seen = drive_until(
            &mut stream,
            &store,
            &format!("the {label} initial list"),
            |s| (0..5).all(|i| has(s, &format!("i{i}"))),
        )
        .await;
        assert!(
            !seen.iter().any(|e| e.starts_with("Err")),
            "{label}: no errors: {seen:?}"
        );
        let name = format!("after-{n}");
        create(&api, &name).await;
        drive_until(
            &mut stream,
            &store,
            &format!("{label}: a later create"),
            |s| has(s, &name),
        )
        .await;
    }
    emu.shutdown().await;
}

/// Polls a reflected watcher until `done(store)` holds, returning the events seen.
async fn drive_until<S>(
    stream: &mut S,
    store: &reflector::Store<ConfigMap>,
    what: &str,
    done: impl Fn(&reflector::Store<ConfigMap>) -> bool,
) -> Vec<String>
where
    S: Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>> + Unpin,
{
    let mut seen = Vec::new();
    within(what, async {
        while !done(store) {
            match stream.next().await {
                Some(Ok(watcher::Event::Init)) => seen.push("Init".to_string()),
                Some(Ok(watcher::Event::InitDone)) => seen.push("InitDone".to_string()),
                Some(Ok(watcher::Event::InitApply(o))) => {
                    seen.push(format!("InitApply {}", o.name_any()))
                }
                Some(Ok(watcher::Event::Apply(o))) => seen.push(format!("Apply {}", o.name_any())),
                Some(Ok(watcher::Event::Delete(o))) => {
                    seen.push(format!("Delete {}", o.name_any()))
                }
                Some(Err(watcher::Error::WatchError(status))) => {
                    seen.push(format!("Err WatchError {}", status.code))
                }
                Some(Err(e)) => seen.push(format!("Err {e}")),
                None => panic!("the watcher stream ended; seen {seen:?}"),
            }
        }
    })
    .await;
    seen
}

fn has(store: &reflector::Store<ConfigMap>, name: &str) -> bool {
    store.get(&ObjectRef::new(name).within("default")).is_some()
}

fn count(emu: &Emulator, verb: &str) -> usize {
    emu.requests()
        .iter()
        .filter(|r| r.verb == verb && r.path.contains("/configmaps"))
        .count()
}

#[tokio::test]
async fn kube_watcher_resumes_after_dropped_watches_without_relisting() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    create(&api, "a").await;
    emu.clear_requests();
    let (store, writer) = reflector::store();
    let mut stream = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .boxed();
    drive_until(&mut stream, &store, "the initial list", |s| has(s, "a")).await;
    create(&api, "live").await;
    drive_until(&mut stream, &store, "the watch to be live", |s| {
        has(s, "live")
    })
    .await;

    emu.faults().drop_watches();
    create(&api, "b").await;
    let seen = drive_until(&mut stream, &store, "the watcher to recover", |s| {
        has(s, "b")
    })
    .await;
    assert!(
        !seen.iter().any(|e| e == "Init"),
        "a dropped stream resumes rather than re-lists: {seen:?}"
    );
    assert_eq!(
        count(&emu, "list"),
        1,
        "no second list: {:?}",
        emu.requests()
    );
    assert!(
        count(&emu, "watch") >= 2,
        "the watch was re-opened: {:?}",
        emu.requests()
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn kube_watcher_recovers_across_restarts_keeping_and_wiping_state() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    create(&api, "a").await;
    let (store, writer) = reflector::store();
    let mut stream = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .boxed();
    drive_until(&mut stream, &store, "the initial list", |s| has(s, "a")).await;

    within("restart", emu.restart(true)).await;
    create(&api, "b").await;
    drive_until(
        &mut stream,
        &store,
        "the watcher to resume after a restart keeping state",
        |s| has(s, "a") && has(s, "b"),
    )
    .await;

    within("restart", emu.restart(false)).await;
    create(&api, "fresh").await;
    let seen = drive_until(
        &mut stream,
        &store,
        "the watcher to re-list after a restart wiping state",
        |s| !has(s, "a") && !has(s, "b") && has(s, "fresh"),
    )
    .await;
    assert!(
        seen.iter().any(|e| e == "Init"),
        "the wiped state is learnt through a re-list: {seen:?}"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn kube_watcher_relists_after_a_forced_410_and_forgets_objects_deleted_in_the_gap() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    create(&api, "a").await;
    create(&api, "b").await;
    emu.clear_requests();
    let (store, writer) = reflector::store();
    let mut stream = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .boxed();
    drive_until(&mut stream, &store, "the initial list", |s| {
        has(s, "a") && has(s, "b")
    })
    .await;
    create(&api, "live").await;
    drive_until(&mut stream, &store, "the watch to be live", |s| {
        has(s, "live")
    })
    .await;

    // The watcher is not polled now: it cannot see what happens in this gap.
    emu.faults().drop_watches();
    delete(&api, "b").await;
    create(&api, "c").await;
    emu.faults().compact();

    let seen = drive_until(&mut stream, &store, "the watcher to re-list", |s| {
        !has(s, "b") && has(s, "c")
    })
    .await;
    assert!(
        seen.iter().any(|e| e == "Err WatchError 410"),
        "the resume was answered with 410: {seen:?}"
    );
    assert!(
        seen.iter().any(|e| e == "Init"),
        "the watcher re-listed: {seen:?}"
    );
    assert!(
        !seen.iter().any(|e| e == "Delete b"),
        "b's deletion was never streamed, only re-listed away: {seen:?}"
    );
    assert!(has(&store, "a"), "a survives the re-list");
    assert_eq!(
        count(&emu, "list"),
        2,
        "exactly one re-list: {:?}",
        emu.requests()
    );
    emu.shutdown().await;
}

/// Waits until the controller reports having reconciled `name`.
async fn wait_for(reconciled: &mut tokio::sync::mpsc::UnboundedReceiver<String>, name: &str) {
    within(&format!("{name} to be reconciled"), async {
        while let Some(n) = reconciled.recv().await {
            if n == name {
                return;
            }
        }
        panic!("the controller stopped");
    })
    .await
}

#[tokio::test]
async fn kube_controller_reconciles_and_relists_after_a_forced_410() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    create(&api, "a").await;
    emu.clear_requests();

    let (tx, mut reconciled) = tokio::sync::mpsc::unbounded_channel::<String>();
    let controller = Controller::new(api.clone(), watcher::Config::default());
    let store = controller.store();
    let running =
        tokio::spawn(
            controller
                .run(
                    move |obj: Arc<ConfigMap>,
                          tx: Arc<tokio::sync::mpsc::UnboundedSender<String>>| async move {
                        let _ = tx.send(obj.name_any());
                        Ok::<_, Infallible>(Action::await_change())
                    },
                    |_obj, _err: &Infallible, _ctx| Action::await_change(),
                    Arc::new(tx),
                )
                .for_each(|_| async {}),
        );
    wait_for(&mut reconciled, "a").await;
    create(&api, "live").await;
    wait_for(&mut reconciled, "live").await;

    // Keep the watch down while `a` is deleted and `c` created, then compact.
    emu.faults().fail_next(
        usize::MAX / 2,
        FailRule {
            verb: Some("watch".into()),
            path_contains: None,
            body_contains: None,
            status: 500,
            retry_after: None,
        },
    );
    emu.faults().drop_watches();
    delete(&api, "a").await;
    create(&api, "c").await;
    emu.faults().compact();
    within("a failed watch attempt", async {
        while !emu
            .requests()
            .iter()
            .any(|r| r.verb == "watch" && r.status == 500)
        {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    emu.faults().clear();

    wait_for(&mut reconciled, "c").await;
    within("the store to forget a", async {
        while store.get(&ObjectRef::new("a").within("default")).is_some() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(
        count(&emu, "list") >= 2,
        "the controller re-listed: {:?}",
        emu.requests()
    );
    running.abort();
    let _ = running.await;
    emu.shutdown().await;
}
