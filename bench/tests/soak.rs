//! Short seeded soaks (`kopf-bench soak`): a clean one, poisoned objects
//! among its churn, reports no violation, and each promise the soak
//! operator breaks on purpose (`KOPF_SOAK_BREAK`) is reported as the
//! violation of its invariant.
//! Debug builds, a small population; the clean soak is the CI soak.
//!
//! They take minutes, so they are not part of the test command: they run
//! with `cargo test --workspace --all-features --test soak -- --ignored`,
//! a step of their own in `.ci/run`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

/// The emulator binary beside this package's binaries, built (or brought up
/// to date) first: a stale binary from an older checkout would test old code.
fn emulator_binary(bin_dir: &Path) -> PathBuf {
    kopf_bench::building::build(false, &["soak-operator"]).expect("kube-emulator builds");
    bin_dir.join("kube-emulator")
}

/// Runs a soak; its summary.
fn soak(label: &str, args: &[&str]) -> Value {
    let runner = PathBuf::from(env!("CARGO_BIN_EXE_kopf-bench"));
    let bin_dir = runner.parent().expect("a directory").to_path_buf();
    assert!(emulator_binary(&bin_dir).exists());
    // The soak finds its operator beside itself.
    assert_eq!(
        Path::new(env!("CARGO_BIN_EXE_soak-operator")).parent(),
        Some(bin_dir.as_path())
    );
    let out = std::env::temp_dir().join(format!("kopf-soak-{label}-{}", std::process::id()));
    let started = Instant::now();
    let output = Command::new(&runner)
        .args(["soak", "--no-build", "--seed", "3", "--out"])
        .arg(&out)
        .args(args)
        .output()
        .expect("the runner starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}\n{stderr}\n{label}: took {:?}", started.elapsed());
    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("summary.json"))
            .unwrap_or_else(|e| panic!("{label}: no summary.json ({e}): {stderr}")),
    )
    .expect("summary.json is JSON");
    let violations = summary["violations"].as_u64().expect("a count");
    assert_eq!(
        output.status.success(),
        violations == 0,
        "{label}: the exit status says whether there were violations"
    );
    if violations > 0 {
        let report = std::fs::read_to_string(out.join("violations.txt")).expect("violations.txt");
        assert!(
            report.starts_with("== "),
            "{label}: each violation is written with what led to it"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
    summary
}

#[test]
#[ignore = "soak: cargo test --workspace --all-features --test soak -- --ignored"]
fn a_clean_soak_under_every_fault_keeps_every_promise() {
    let summary = soak(
        "clean",
        &[
            "--minutes",
            "1",
            "--population",
            "12",
            "--chaos-every",
            "2.5",
        ],
    );
    assert_eq!(summary["violations"], 0, "{summary:#}");
    assert!(
        summary["churned"]["deleted"].as_u64().unwrap_or(0) > 20,
        "{summary:#}"
    );
    let faults: u64 = summary["faults"]
        .as_object()
        .expect("faults by kind")
        .values()
        .filter_map(Value::as_u64)
        .sum();
    assert!(faults >= 10, "{summary:#}");
    assert!(summary["operator_processes"].as_u64().unwrap_or(0) >= 1);
    for kind in ["create", "update", "field", "delete", "tick", "dbeat"] {
        assert!(
            summary["records"][kind].as_u64().unwrap_or(0) > 0,
            "no {kind} records: {summary:#}"
        );
    }
    for kind in ["deep", "garbled", "deepened"] {
        assert!(
            summary["churned"]["poisoned"][kind].as_u64().unwrap_or(0) > 0,
            "no {kind} poisoned objects among the churn: {summary:#}"
        );
    }
}

/// A short soak of an operator broken on purpose reports the invariant.
fn caught(broken: &str, invariant: &str) {
    assert_eq!(kopf_bench::soak::Break::invariant(broken), Some(invariant));
    let summary = soak(
        broken,
        &[
            "--minutes",
            "0.3",
            "--population",
            "8",
            "--chaos-every",
            "4",
            "--stop-bound",
            "8",
            "--break",
            broken,
        ],
    );
    assert!(
        summary["by_invariant"][invariant].as_u64().unwrap_or(0) > 0,
        "breaking {broken} must be reported as {invariant}: {summary:#}"
    );
}

/// Each promise broken on purpose, and the invariant that must report it.
const BROKEN: [(&str, &str); 12] = [
    ("create-twice", "create-once"),
    ("update-twice", "update-once"),
    ("delete-skipped", "delete-ran"),
    ("daemon-ignores-stop", "stop-bound"),
    ("daemon-twice", "one-copy"),
    ("finalizer-stuck", "finalizer-left"),
    ("no-finalizers-ignored", "no-finalizers"),
    ("leak-tasks", "baseline-tasks"),
    ("leak-memory", "baseline-rss"),
    ("panic", "no-panic"),
    ("poison-decoded", "poison-skipped"),
    ("garbage-skipped", "garbage-ignored"),
];

/// The broken soaks run at once: each mostly waits (its churn, faults and
/// bounds are timed), so together they take as long as the longest.
#[test]
#[ignore = "soak: cargo test --workspace --all-features --test soak -- --ignored"]
fn each_promise_broken_on_purpose_is_caught() {
    std::thread::scope(|scope| {
        let soaks: Vec<_> = BROKEN
            .iter()
            .map(|&(broken, invariant)| (broken, scope.spawn(move || caught(broken, invariant))))
            .collect();
        let failed: Vec<&str> = soaks
            .into_iter()
            .filter_map(|(broken, soak)| soak.join().is_err().then_some(broken))
            .collect();
        assert!(
            failed.is_empty(),
            "not caught: {failed:?} (see their output above)"
        );
    });
}
