//! The emulator's memory stays bounded under clients that used to grow it
//! without end: large objects created and deleted over and over (the watch
//! history kept every one), many distinct, long User-Agents (each one was
//! counted under its own key), a watcher that never reads (it kept every
//! event sent since it stalled), many CRDs (each preallocated a queue of
//! events), and lists and watches that are never read (each was
//! serialized whole up front).
//!
//! And a hostile admission webhook cannot grow it either: patches of
//! doubling copies, and answers of many megabytes.
//!
//! A test binary of its own: it reads the resident set size of its process,
//! which other tests running alongside would disturb; its tests take turns.

#[path = "common/mod.rs"]
mod common;

use base64::Engine;
use common::webhooks::{Hook, Pki, Reply, configuration, review, webhook};
use common::{raw_request, within};
use kopf_testing::Emulator;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const MIB: usize = 1024 * 1024;

/// Held by each test while it runs: the tests measure one process.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The resident set size of this process, in bytes.
fn rss() -> usize {
    status_kib("VmRSS:")
}

/// The most this process was resident since the last [`reset_peak_rss`],
/// in bytes.
fn peak_rss() -> usize {
    status_kib("VmHWM:")
}

/// Starts [`peak_rss`] afresh from the current RSS, so that an earlier
/// test's peak does not hide this one's.
fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5").expect("/proc/self/clear_refs resets the peak");
}

fn status_kib(field: &str) -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .expect("a VmRSS or VmHWM line");
    let kib: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a size in kB");
    kib * 1024
}

async fn cycle(em: &Emulator, name: &str, value: &str) {
    let body = format!(r#"{{"metadata":{{"name":"{name}"}},"data":{{"v":"{value}"}}}}"#);
    let json = [("Content-Type", "application/json")];
    let created = raw_request(em.addr(), "POST", CMS, &json, body.as_bytes()).await;
    assert_eq!(
        created.status,
        201,
        "{:?}",
        String::from_utf8_lossy(&created.body)
    );
    let deleted = raw_request(em.addr(), "DELETE", &format!("{CMS}/{name}"), &[], b"").await;
    assert_eq!(deleted.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stays_bounded_under_big_objects_and_many_user_agents() {
    let _turn = ONE_AT_A_TIME.lock().await;
    // A history bound below the defaults keeps the test fast in debug builds:
    // 30 cycles of 1 MiB objects make 120 MiB of events, four times the bound.
    let em = Emulator::builder()
        .history_bytes(32 * MIB)
        .start()
        .await
        .expect("the emulator starts");
    let value = "x".repeat(MIB);
    cycle(&em, "warm-up", &value).await;
    let before = rss();

    for i in 0..30 {
        cycle(&em, &format!("big{i}"), &value).await;
    }
    let agent_tail = "a".repeat(100 * 1024);
    let query = format!("labelSelector=x%3D{}", "y".repeat(8 * 1024));
    for i in 0..1000 {
        let agent = format!("agent-{i}-{agent_tail}");
        let resp = raw_request(
            em.addr(),
            "GET",
            &format!("{CMS}?{query}"),
            &[("User-Agent", &agent)],
            b"",
        )
        .await;
        assert!(resp.status < 500, "status {}", resp.status);
    }
    let after = rss();

    // Unbounded, the history held 120 MiB and the counts 100 MiB; bounded,
    // the history holds 32 MiB, the log 8 MiB and the counts 1 MiB.
    let growth = after.saturating_sub(before);
    assert!(
        growth < 100 * MIB,
        "the process grew by {} MiB (from {} MiB to {} MiB)",
        growth / MIB,
        before / MIB,
        after / MIB
    );
    // And the emulator still answers.
    let resp = raw_request(em.addr(), "GET", "/version", &[], b"").await;
    assert_eq!(resp.status, 200);
}

/// Creates a ConfigMap through a mutating webhook and returns the status.
async fn create_through(em: &Emulator, name: &str) -> u16 {
    let body = format!(
        r#"{{"metadata":{{"name":"{name}"}},"data":{{"v":"{}"}}}}"#,
        "x".repeat(1700)
    );
    let json = [("Content-Type", "application/json")];
    raw_request(em.addr(), "POST", CMS, &json, body.as_bytes())
        .await
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stays_bounded_under_hostile_mutating_webhooks() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let em = Emulator::start().await.expect("the emulator starts");
    let pki = Pki::new(&["127.0.0.1"]);
    // 20 copies of the whole object into itself: 1.7 KiB doubled 20 times
    // is 1.7 GiB.
    let ops: Vec<Value> = (0..20)
        .map(|i| json!({"op": "copy", "from": "/data", "path": format!("/data/c{i}")}))
        .collect();
    let patch = base64::engine::general_purpose::STANDARD.encode(Value::Array(ops).to_string());
    let doubling = Hook::start(&pki, move |r: &Value| {
        Reply::Json(review(
            r,
            json!({"allowed": true, "patchType": "JSONPatch", "patch": patch}),
        ))
    })
    .await;
    // An answer of 5 MiB of small numbers beside the verdict: as a whole
    // JSON value, about 16 times that.
    let junk = format!("[{}0]", "0,".repeat(5 * MIB / 2));
    let flood: &'static str = Box::leak(
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{{"uid":"","allowed":true,"junk":{junk}}}}}"#
        )
        .into_boxed_str(),
    );
    drop(junk);
    let flooding = Hook::start(&pki, move |_: &Value| Reply::Raw(200, flood)).await;
    let client = em.client();
    for (name, hook) in [("double", &doubling), ("flood", &flooding)] {
        let config = configuration(
            "MutatingWebhookConfiguration",
            name,
            vec![webhook(
                &format!("{name}.example.com"),
                &hook.url("/m"),
                &pki,
            )],
        );
        let api: kube::Api<
            k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration,
        > = kube::Api::all(client.clone());
        api.create(
            &Default::default(),
            &serde_json::from_value(config).unwrap(),
        )
        .await
        .expect("create the configuration");
        reset_peak_rss();
        let before = peak_rss();
        for i in 0..3 {
            assert_eq!(create_through(&em, &format!("{name}{i}")).await, 500);
        }
        let growth = peak_rss().saturating_sub(before);
        assert!(
            growth < 64 * MIB,
            "{name}: the peak grew by {} MiB",
            growth / MIB
        );
        api.delete(name, &Default::default())
            .await
            .expect("delete it");
    }
    let resp = raw_request(em.addr(), "GET", "/version", &[], b"").await;
    assert_eq!(resp.status, 200);
}

/// Sends a GET of `path` over a socket with a small receive buffer, and
/// never reads the answer.
async fn stalled_get(em: &Emulator, path: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket.set_recv_buffer_size(4096).expect("a small buffer");
    let mut stream = socket.connect(em.addr()).await.expect("connects");
    let head = format!("GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n", em.addr());
    stream.write_all(head.as_bytes()).await.expect("sent");
    stream
}

/// Opens a watch of the ConfigMaps that is never read.
async fn stalled_watch(em: &Emulator) -> tokio::net::TcpStream {
    stalled_get(em, &format!("{CMS}?watch=true")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_never_reads_keeps_no_more_than_the_history_bound() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let em = Emulator::builder()
        .history_bytes(32 * MIB)
        .start()
        .await
        .expect("the emulator starts");
    let value = "x".repeat(MIB);
    cycle(&em, "warm-up", &value).await;
    let mut stalled = stalled_watch(&em).await;
    let before = rss();
    // 240 events of 1 MiB objects: a stalled watcher used to keep all of
    // them, with their lines, about 480 MiB.
    for i in 0..120 {
        cycle(&em, &format!("big{i}"), &value).await;
    }
    let after = rss();
    let growth = after.saturating_sub(before);
    assert!(
        growth < 160 * MIB,
        "the process grew by {} MiB (from {} MiB to {} MiB)",
        growth / MIB,
        before / MIB,
        after / MIB
    );
    // The stalled watch was closed, as the API server closes a watcher
    // that cannot keep up: its client resumes from its resourceVersion.
    within("the stalled watch to be closed", async {
        let mut sink = vec![0; 64 * 1024];
        while matches!(stalled.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_cost_no_memory_before_they_have_objects_or_watchers() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let em = Emulator::start().await.expect("the emulator starts");
    let json = [("Content-Type", "application/json")];
    let crd = |i: usize| {
        serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("things{i}.example.com")},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": format!("things{i}"), "singular": format!("thing{i}"), "kind": format!("Thing{i}")},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
            },
        })
        .to_string()
    };
    const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let created = raw_request(em.addr(), "POST", CRDS, &json, crd(0).as_bytes()).await;
    assert_eq!(
        created.status,
        201,
        "{:?}",
        String::from_utf8_lossy(&created.body)
    );
    let before = rss();
    for i in 1..=400 {
        let created = raw_request(em.addr(), "POST", CRDS, &json, crd(i).as_bytes()).await;
        assert_eq!(created.status, 201);
    }
    let after = rss();
    // Each used to preallocate 16,384 slots of events, half a MiB.
    let growth = after.saturating_sub(before);
    assert!(
        growth < 64 * MIB,
        "400 CRDs grew the process by {} MiB (from {} MiB to {} MiB)",
        growth / MIB,
        before / MIB,
        after / MIB
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_and_watches_that_are_never_read_hold_no_serialized_collection() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let em = Emulator::start().await.expect("the emulator starts");
    let json = [("Content-Type", "application/json")];
    let value = "x".repeat(MIB - 1024);
    for i in 0..40 {
        let body = format!(r#"{{"metadata":{{"name":"big{i}"}},"data":{{"v":"{value}"}}}}"#);
        let created = raw_request(em.addr(), "POST", CMS, &json, body.as_bytes()).await;
        assert_eq!(created.status, 201);
    }
    em.clear_requests();
    let before = rss();
    // 40 MiB of ConfigMaps, listed and watched five times each by clients
    // that do not read: serialized up front, that was 400 MiB.
    let mut stalled = Vec::new();
    for _ in 0..5 {
        stalled.push(stalled_watch(&em).await);
        stalled.push(stalled_get(&em, CMS).await);
    }
    within("the lists and watches to be answered", async {
        while em.requests().len() < 10 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let after = rss();
    let growth = after.saturating_sub(before);
    assert!(
        growth < 100 * MIB,
        "the process grew by {} MiB (from {} MiB to {} MiB)",
        growth / MIB,
        before / MIB,
        after / MIB
    );
    drop(stalled);
}
