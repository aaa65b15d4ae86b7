//! A small-N run of every scenario: checks that the runner works end to end
//! and that S5 leaks nothing. Not a measurement (debug build, N = 20, one run)
//! and without the Kopf peer (no Python or pip needed).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The emulator binary beside this package's binaries, built (or brought up
/// to date) first: a stale binary from an older checkout would test old code.
fn emulator_binary(bin_dir: &Path) -> PathBuf {
    kopf_bench::building::build(false, &["kopf-rs-operator"]).expect("kube-emulator builds");
    bin_dir.join("kube-emulator")
}

#[test]
fn every_scenario_runs_at_small_n_and_s5_leaks_nothing() {
    let runner = PathBuf::from(env!("CARGO_BIN_EXE_kopf-bench"));
    let bin_dir = runner.parent().expect("a directory").to_path_buf();
    assert!(emulator_binary(&bin_dir).exists());
    let out = std::env::temp_dir().join(format!("kopf-bench-smoke-{}", std::process::id()));
    let started = Instant::now();
    let output = Command::new(&runner)
        .args(["--smoke", "--no-build", "--out"])
        .arg(&out)
        .output()
        .expect("the runner starts");
    let elapsed = started.elapsed();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}\n{stderr}\nsmoke run took {elapsed:?}");
    assert!(output.status.success(), "the runner failed: {stderr}");
    assert!(
        stdout.contains("the Kopf peer is skipped (--smoke)"),
        "says that Kopf is skipped"
    );
    // Three operators in a debug build (kopf-rs, the bare watcher and the
    // Controller), beside the other tests of this binary: 135 s were seen
    // on a loaded 2-core machine.
    assert!(
        elapsed < Duration::from_secs(200),
        "the smoke run took {elapsed:?}"
    );

    let results: Vec<Value> = std::fs::read_to_string(out.join("results.jsonl"))
        .expect("results.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let find = |scenario: &str, variant: &str, op: &str| {
        results
            .iter()
            .find(|r| r["scenario"] == scenario && r["variant"] == variant && r["operator"] == op)
            .unwrap_or_else(|| panic!("no {scenario} {variant} result for {op}"))
    };
    let scenarios = [
        ("S1", ""),
        ("S2", "finalizers"),
        ("S2", "no_finalizers"),
        ("S3", "finalizers"),
        ("S3", "no_finalizers"),
        ("S4", ""),
        ("S5", ""),
    ];
    for (scenario, variant) in scenarios {
        for peer in ["bare", "controller"] {
            let result = find(scenario, variant, peer);
            assert_eq!(result["ok"], true, "{peer} {scenario} {variant}: {result}");
        }
        let ours = find(scenario, variant, "kopf-rs");
        let timers_pending = ours["error"]
            .as_str()
            .is_some_and(|e| e.contains("does not run yet"));
        assert!(
            ours["ok"] == true || (scenario != "S1" && scenario != "S4" && timers_pending),
            "kopf-rs {scenario} {variant}: {ours}"
        );
    }
    for r in results
        .iter()
        .filter(|r| r["scenario"] == "S5" && r["ok"] == true)
    {
        assert_eq!(r["metrics"]["leaked"], 0.0, "S5 leaked timers: {r}");
        let kept = r["metrics"]["kept_ticking_ratio"].as_f64().unwrap_or(0.0);
        assert!(kept > 0.5, "S5: the surviving objects' timers tick on: {r}");
    }
    let s1 = find("S1", "", "bare");
    assert_eq!(s1["metrics"]["calls_per_object"], 1.0, "{s1}");
    assert!(out.join("summary.md").exists() && out.join("plot.svg").exists());
    let _ = std::fs::remove_dir_all(&out);
}

/// A `--smoke` run of `scenario` alone: its results and what the runner
/// printed.
fn smoke_of(scenario: &str) -> (Vec<Value>, String) {
    let runner = PathBuf::from(env!("CARGO_BIN_EXE_kopf-bench"));
    let bin_dir = runner.parent().expect("a directory").to_path_buf();
    assert!(emulator_binary(&bin_dir).exists());
    let out = std::env::temp_dir().join(format!(
        "kopf-bench-smoke-{scenario}-{}",
        std::process::id()
    ));
    let output = Command::new(&runner)
        .args(["--smoke", "--scenarios", scenario, "--no-build", "--out"])
        .arg(&out)
        .output()
        .expect("the runner starts");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}\n{stderr}");
    assert!(output.status.success(), "the runner failed: {stderr}");
    let results = std::fs::read_to_string(out.join("results.jsonl"))
        .expect("results.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let _ = std::fs::remove_dir_all(&out);
    (results, stdout)
}

#[test]
fn s7_fails_over_after_sigkill_and_sigterm_without_overlap() {
    let (results, stdout) = smoke_of("s7");
    // The bare watcher has no election: only kopf-rs runs S7.
    assert_eq!(results.len(), 2, "{stdout}");
    for r in &results {
        assert_eq!(r["scenario"], "S7", "{r}");
        assert_eq!(r["operator"], "kopf-rs", "{r}");
        assert_eq!(r["ok"], true, "{r}");
        // A quick handover may share a second with the old leader's last
        // tick; what must not happen is a tick of it after the new one's.
        assert_eq!(r["metrics"]["overlapping_ticks"], 0.0, "{r}");
        let took = r["metrics"]["stop_to_first_tick_s"]
            .as_f64()
            .unwrap_or(f64::MAX);
        // The default timings: a Lease of 15 s after SIGKILL (from the
        // follower's sight of the last renewal, up to two retry periods
        // later); a retry period after SIGTERM.
        let bound = if r["variant"] == "sigkill" { 20.0 } else { 5.0 };
        assert!(took <= bound, "{r}");
    }
    let term = results
        .iter()
        .find(|r| r["variant"] == "sigterm")
        .expect("SIGTERM");
    assert_eq!(term["metrics"]["old_leader_exit_code"], 0.0, "{term}");
}

#[test]
fn s6_spreads_the_timers_over_the_replicas_each_object_in_one() {
    let (results, stdout) = smoke_of("s6");
    // The bare watcher has no election: only kopf-rs runs S6, K = 1, 2, 3.
    let variants: Vec<&str> = results
        .iter()
        .filter_map(|r| r["variant"].as_str())
        .collect();
    assert_eq!(variants, ["k1", "k2", "k3"], "{stdout}");
    for r in &results {
        assert_eq!(r["scenario"], "S6", "{r}");
        assert_eq!(r["ok"], true, "{r}");
        assert_eq!(r["metrics"]["seconds_both_ticking"], 0.0, "{r}");
        assert!(r["metrics"]["slots_spread"].as_f64() <= Some(1.0), "{r}");
    }
}
