//! The admin endpoints under `/_emulator/`: faults and request counts from
//! another process, over plain HTTP.

use crate::common::{api_error, raw_request, within};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kopf_testing::{Emulator, FailRule};
use kube::Api;
use kube::api::{ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use serde_json::json;

/// The ConfigMaps' version now, and a watch from it.
async fn watch_from_now(
    api: &Api<ConfigMap>,
) -> (
    String,
    BoxStream<'static, kube::Result<WatchEvent<ConfigMap>>>,
) {
    let version = api
        .list(&ListParams::default())
        .await
        .expect("listed")
        .metadata
        .resource_version
        .expect("a list version");
    let events = api
        .watch(&WatchParams::default(), &version)
        .await
        .expect("a watch connects")
        .boxed();
    (version, events)
}

fn cm(name: &str) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm
}

#[tokio::test]
async fn counts_requests_per_agent_and_verb_without_counting_admin_requests() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let addr = emulator.addr();
    raw_request(
        addr,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        &[("User-Agent", "tool/1")],
        b"",
    )
    .await;
    raw_request(
        addr,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        &[("User-Agent", "tool/1")],
        b"",
    )
    .await;
    let counts = raw_request(addr, "GET", "/_emulator/requests/counts", &[], b"").await;
    assert_eq!(counts.status, 200);
    assert_eq!(
        counts.json(),
        json!({"counts": [{"agent": "tool/1", "verb": "list", "count": 2}]})
    );
    assert!(
        emulator
            .requests()
            .iter()
            .all(|r| !r.path.starts_with("/_emulator"))
    );
    let reset = raw_request(addr, "DELETE", "/_emulator/requests/counts", &[], b"").await;
    assert_eq!(reset.status, 200);
    let counts = raw_request(addr, "GET", "/_emulator/requests/counts", &[], b"").await;
    assert_eq!(counts.json(), json!({"counts": []}));
}

#[tokio::test]
async fn failure_rules_apply_until_cleared() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let addr = emulator.addr();
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    let body = json!({"n": 100, "status": 500, "verb": "list"}).to_string();
    let added = raw_request(addr, "POST", "/_emulator/faults/fail", &[], body.as_bytes()).await;
    assert_eq!(added.status, 200);
    let err = api
        .list(&ListParams::default())
        .await
        .expect_err("listing fails");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 500),
        "{err:?}"
    );
    raw_request(addr, "POST", "/_emulator/faults/clear", &[], b"").await;
    api.list(&ListParams::default())
        .await
        .expect("listing works again");
    let bad = raw_request(addr, "POST", "/_emulator/faults/fail", &[], b"{\"n\": 1}").await;
    assert_eq!(bad.status, 400);
    let unknown = raw_request(addr, "POST", "/_emulator/faults/nothing", &[], b"").await;
    assert_eq!(unknown.status, 404);
}

#[tokio::test]
async fn dropped_and_compacted_watches_force_a_relist() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let addr = emulator.addr();
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    within("the initial listing", async {
        while !matches!(events.try_next().await, Ok(Some(watcher::Event::InitDone))) {}
    })
    .await;
    api.create(&PostParams::default(), &cm("a"))
        .await
        .expect("created");
    for path in [
        "/_emulator/faults/compact",
        "/_emulator/faults/drop-watches",
    ] {
        assert_eq!(raw_request(addr, "POST", path, &[], b"").await.status, 200);
    }
    within("a re-list after 410 Gone", async {
        while !matches!(events.next().await, Some(Ok(watcher::Event::Init))) {}
    })
    .await;
}

#[tokio::test]
async fn fault_rules_need_an_error_status() {
    let emulator = Emulator::start().await.expect("emulator starts");
    for status in [0, 101, 200, 302, 600] {
        let body = json!({"n": 1, "status": status}).to_string();
        let resp = raw_request(
            emulator.addr(),
            "POST",
            "/_emulator/faults/fail",
            &[],
            body.as_bytes(),
        )
        .await;
        resp.assert_status_object(400);
        let message = resp.json()["message"].as_str().unwrap_or("").to_string();
        assert!(message.contains("400-599"), "{message}");
        let why = emulator
            .faults()
            .try_fail_next(1, FailRule::status(status))
            .expect_err("refused");
        assert!(why.contains("400-599"), "{why}");
    }
    // Nothing was added: requests are served.
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    api.list(&ListParams::default()).await.expect("list works");
    emulator
        .faults()
        .try_fail_next(1, FailRule::status(500))
        .expect("500 is an error status");
    assert_eq!(api_error(api.list(&ListParams::default()).await).code, 500);
}

#[tokio::test]
#[should_panic(expected = "400-599")]
async fn fail_next_panics_on_a_status_that_is_no_error() {
    let emulator = Emulator::start().await.expect("emulator starts");
    emulator.faults().fail_next(1, FailRule::status(101));
}

#[tokio::test]
async fn watches_are_silenced_and_resumed_from_another_process() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let addr = emulator.addr();
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    let silence = raw_request(addr, "POST", "/_emulator/faults/silence-watches", &[], b"").await;
    assert_eq!(silence.status, 200);
    let (_, mut events) = watch_from_now(&api).await;
    api.create(&PostParams::default(), &cm("during"))
        .await
        .expect("created");
    // Bookmarks come every second on a live stream: three seconds of
    // nothing at all is a silenced one.
    let quiet = tokio::time::timeout(std::time::Duration::from_secs(3), events.next()).await;
    assert!(quiet.is_err(), "the stream sent {quiet:?}");
    let resume = raw_request(addr, "POST", "/_emulator/faults/resume-watches", &[], b"").await;
    assert_eq!(resume.status, 200);
    within("the object after the watches resume", async {
        while !matches!(events.next().await, Some(Ok(WatchEvent::Added(_)))) {}
    })
    .await;
}

#[tokio::test]
async fn latency_is_set_and_removed_from_another_process() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let addr = emulator.addr();
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    let set = raw_request(
        addr,
        "POST",
        "/_emulator/faults/latency",
        &[],
        b"{\"ms\": 400}",
    )
    .await;
    assert_eq!(set.status, 200);
    let started = std::time::Instant::now();
    api.list(&ListParams::default()).await.expect("listed");
    let slow = started.elapsed();
    assert!(slow >= std::time::Duration::from_millis(400), "{slow:?}");
    let removed = raw_request(
        addr,
        "POST",
        "/_emulator/faults/latency",
        &[],
        b"{\"ms\": 0}",
    )
    .await;
    assert_eq!(removed.status, 200);
    let bad = raw_request(
        addr,
        "POST",
        "/_emulator/faults/latency",
        &[],
        b"{\"s\": 1}",
    )
    .await;
    bad.assert_status_object(400);
}

#[tokio::test]
async fn a_restart_from_another_process_keeps_the_state_and_refuses_connections_meanwhile() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let addr = emulator.addr();
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    let before = api
        .create(&PostParams::default(), &cm("kept"))
        .await
        .expect("created");
    let (version, mut events) = watch_from_now(&api).await;
    let restart = raw_request(
        addr,
        "POST",
        "/_emulator/restart",
        &[],
        b"{\"down_ms\": 3000}",
    )
    .await;
    assert_eq!(restart.status, 200, "the answer comes before the restart");
    within("the watch closed by the restart", async {
        loop {
            match events.next().await {
                None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    let refused = tokio::net::TcpStream::connect(addr).await;
    assert!(refused.is_err(), "connections are refused while down");
    within("the server back on the same port", async {
        while api.list(&ListParams::default()).await.is_err() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    let after = api.get("kept").await.expect("the object is kept");
    assert_eq!(after.metadata.uid, before.metadata.uid);
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    // The history is kept: a watch resumes from before the restart and
    // sees what happened since, without 410 Gone.
    api.create(&PostParams::default(), &cm("later"))
        .await
        .expect("created after the restart");
    let mut resumed = api
        .watch(&WatchParams::default(), &version)
        .await
        .expect("a watch from before the restart")
        .boxed();
    within("the newer object on the resumed watch", async {
        loop {
            match resumed.try_next().await {
                Ok(Some(WatchEvent::Added(cm))) if cm.metadata.name.as_deref() == Some("later") => {
                    break;
                }
                Ok(Some(WatchEvent::Error(e))) => panic!("the watch failed: {e:?}"),
                Ok(Some(_)) => {}
                other => panic!("the watch ended: {other:?}"),
            }
        }
    })
    .await;
    let bad = raw_request(addr, "POST", "/_emulator/restart", &[], b"{\"down\": 1}").await;
    bad.assert_status_object(400);
}

#[tokio::test]
async fn fault_rules_are_bounded_in_number_and_fragment_size() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let addr = emulator.addr();
    for i in 0..kopf_testing::MAX_FAULT_RULES {
        let rule = FailRule::status(500).path_contains(&format!("/never-{i}"));
        emulator
            .faults()
            .try_fail_next(1, rule)
            .expect("a rule under the bound");
    }
    let one_more = json!({"n": 1, "status": 500, "path_contains": "/never"}).to_string();
    let refused = raw_request(
        addr,
        "POST",
        "/_emulator/faults/fail",
        &[],
        one_more.as_bytes(),
    )
    .await;
    refused.assert_status_object(400);
    let message = refused.json()["message"].as_str().unwrap_or("").to_string();
    assert!(message.contains("at most 1000 fault rules"), "{message}");
    let why = emulator
        .faults()
        .try_fail_next(1, FailRule::status(500))
        .expect_err("refused in the Rust API too");
    assert!(why.contains("at most 1000 fault rules"), "{why}");
    // Cleared, they may be set again.
    raw_request(addr, "POST", "/_emulator/faults/clear", &[], b"").await;
    let added = raw_request(
        addr,
        "POST",
        "/_emulator/faults/fail",
        &[],
        one_more.as_bytes(),
    )
    .await;
    assert_eq!(added.status, 200);

    let long = "x".repeat(kopf_testing::MAX_FRAGMENT_BYTES + 1);
    let body = json!({"n": 1, "status": 500, "body_contains": long}).to_string();
    let refused = raw_request(addr, "POST", "/_emulator/faults/fail", &[], body.as_bytes()).await;
    refused.assert_status_object(400);
    let message = refused.json()["message"].as_str().unwrap_or("").to_string();
    assert!(
        message.contains("body_contains may be at most"),
        "{message}"
    );
}
