//! The emulator's memory stays bounded under clients that used to grow it
//! without end: large objects created and deleted over and over (the watch
//! history kept every one), and many distinct, long User-Agents (each one was
//! counted under its own key).
//!
//! A test binary of its own: it reads the resident set size of its process,
//! which other tests running alongside would disturb.

#[path = "common/mod.rs"]
mod common;

use common::raw_request;
use kopf_testing::Emulator;

const CMS: &str = "/api/v1/namespaces/default/configmaps";

/// The resident set size of this process, in bytes.
fn rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("a VmRSS line");
    let kib: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in kB");
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
