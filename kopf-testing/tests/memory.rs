//! The emulator's memory stays bounded under clients that used to grow it
//! without end: large objects created and deleted over and over (the watch
//! history kept every one), and many distinct, long User-Agents (each one was
//! counted under its own key).
//!
//! And a hostile admission webhook cannot grow it either: patches of
//! doubling copies, and answers of many megabytes.
//!
//! A test binary of its own: it reads the resident set size of its process,
//! which other tests running alongside would disturb.

#[path = "common/mod.rs"]
mod common;

use base64::Engine;
use common::raw_request;
use common::webhooks::{Hook, Pki, Reply, configuration, review, webhook};
use kopf_testing::Emulator;
use serde_json::{Value, json};

const CMS: &str = "/api/v1/namespaces/default/configmaps";

/// Held by each test: the tests measure the whole process, so they take
/// turns.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The resident set size of this process, in bytes.
fn rss() -> usize {
    status_kib("VmRSS:")
}

/// The most this process was ever resident, in bytes.
fn peak_rss() -> usize {
    status_kib("VmHWM:")
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
    let _turn = SERIAL.lock().await;
    const MIB: usize = 1024 * 1024;
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
    let _turn = SERIAL.lock().await;
    const MIB: usize = 1024 * 1024;
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
