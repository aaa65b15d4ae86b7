//! The faults: the emulator's fault injection, its restarts, and the
//! operator SIGKILLed or SIGTERMed and started again, one at a time, at
//! random moments.

use std::time::{Duration, Instant};

use serde_json::json;

use super::Soak;
use super::invariants::Window;
use super::records::now_ns;

/// The kinds of faults, as the summary counts them.
pub const KINDS: [&str; 10] = [
    "drop-watches",
    "compaction-410",
    "watch-gap-deletions",
    "429-retry-after",
    "500",
    "503",
    "latency-spike",
    "emulator-restart",
    "operator-sigkill",
    "operator-sigterm",
];

/// The verbs a failure rule hits.
const VERBS: [&str; 5] = ["list", "watch", "patch", "get", "create"];

/// Opens a disturbance window; returns its index.
fn open(soak: &Soak, kind: &str, detail: String) -> usize {
    let mut state = soak.lock();
    *state.faults.entry(kind.to_string()).or_default() += 1;
    state.event(None, format!("fault {kind}: {detail}"));
    state.windows.push(Window {
        start: now_ns(),
        end: None,
    });
    state.windows.len() - 1
}

fn close(soak: &Soak, window: usize, kind: &str) {
    let mut state = soak.lock();
    if let Some(w) = state.windows.get_mut(window) {
        w.end = Some(now_ns());
    }
    state.event(None, format!("fault {kind} over"));
}

/// Injects one fault of `kind`.
///
/// # Errors
/// If the emulator or the operator cannot be driven.
pub async fn inject(soak: &Soak, kind: &str, rng: &mut fastrand::Rng) -> anyhow::Result<()> {
    let c = &soak.client;
    match kind {
        "drop-watches" => {
            let w = open(soak, kind, String::new());
            c.admin("faults/drop-watches", json!({})).await?;
            close(soak, w, kind);
        }
        "compaction-410" => {
            let w = open(soak, kind, String::new());
            c.admin("faults/compact", json!({})).await?;
            c.admin("faults/drop-watches", json!({})).await?;
            close(soak, w, kind);
        }
        "watch-gap-deletions" => {
            let w = open(
                soak,
                kind,
                "watches and lists fail (500) while objects are deleted".into(),
            );
            for verb in ["watch", "list"] {
                c.admin(
                    "faults/fail",
                    json!({"n": 1_000_000, "status": 500, "verb": verb}),
                )
                .await?;
            }
            c.admin("faults/drop-watches", json!({})).await?;
            let victims: Vec<String> = {
                let state = soak.lock();
                let mut names: Vec<String> = state.live.keys().cloned().collect();
                names.sort();
                let n = rng.usize(1..=3).min(names.len());
                (0..n)
                    .map(|_| names.swap_remove(rng.usize(..names.len())))
                    .collect()
            };
            for name in victims {
                super::churn::delete(soak, &name).await?;
            }
            c.admin("faults/compact", json!({})).await?;
            tokio::time::sleep(Duration::from_millis(rng.u64(500..3000))).await;
            c.admin("faults/clear", json!({})).await?;
            close(soak, w, kind);
        }
        "429-retry-after" | "500" | "503" => {
            let status: u16 = match kind {
                "429-retry-after" => 429,
                "500" => 500,
                _ => 503,
            };
            let verb = VERBS[rng.usize(..VERBS.len())];
            let n = rng.usize(1..=3);
            let w = open(soak, kind, format!("the next {n} {verb} requests"));
            c.admin(
                "faults/fail",
                json!({"n": n, "status": status, "verb": verb, "retry_after": 1}),
            )
            .await?;
            tokio::time::sleep(Duration::from_millis(rng.u64(1000..3000))).await;
            c.admin("faults/clear", json!({})).await?;
            close(soak, w, kind);
        }
        "latency-spike" => {
            let ms = rng.u64(100..1000);
            let w = open(soak, kind, format!("{ms} ms per request"));
            c.admin("faults/latency", json!({"ms": ms})).await?;
            tokio::time::sleep(Duration::from_millis(rng.u64(1000..4000))).await;
            c.admin("faults/latency", json!({"ms": 0})).await?;
            close(soak, w, kind);
        }
        "emulator-restart" => {
            let down = Duration::from_millis(rng.u64(200..1500));
            let w = open(soak, kind, format!("down for {down:?}"));
            c.restart_emulator(down).await?;
            close(soak, w, kind);
        }
        "operator-sigkill" | "operator-sigterm" => {
            let w = open(soak, kind, String::new());
            soak.restart_operator(kind == "operator-sigkill", rng)
                .await?;
            close(soak, w, kind);
        }
        other => anyhow::bail!("unknown fault {other:?}"),
    }
    Ok(())
}

/// Injects faults until `until`, one every `chaos_every` seconds on average.
///
/// # Errors
/// If the emulator or the operator cannot be driven.
pub async fn run(soak: &Soak, until: Instant, mut rng: fastrand::Rng) -> anyhow::Result<()> {
    let mean = soak.config.chaos_every.max(0.1);
    loop {
        let gap = Duration::from_secs_f64(mean * (0.5 + rng.f64()));
        if Instant::now() + gap >= until {
            return Ok(());
        }
        tokio::time::sleep(gap).await;
        let kind = KINDS[rng.usize(..KINDS.len())];
        inject(soak, kind, &mut rng).await?;
    }
}
