//! `kopf-bench`: runs the scenarios of `BENCHMARKS.md` against kopf-rs, Kopf
//! and a bare kube-runtime watcher, each as its own process on its own
//! `kube-emulator` process, and prints one JSON line per run plus a summary.
//!
//! ```text
//! cargo run --release -p kopf-bench -- --n 100,1000 --runs 3
//! cargo run -p kopf-bench -- --smoke          # seconds; no Kopf, tiny N
//! cargo run --release -p kopf-bench -- soak --minutes 30 --seed 7   # see kopf_bench::soak
//! ```
//! Results go to `target/bench/<time>/`: `results.jsonl`, `summary.md`,
//! `plot.svg`, and each job's logs and signal files.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use kopf_bench::operators::{self, Mode, Operator, Programs};
use kopf_bench::scenarios::{self, RunResult, Setup, Stop};
use kopf_bench::{building, report};

/// Benchmarks kopf-rs against Kopf 1.45 and a bare kube-runtime watcher (BENCHMARKS.md).
#[derive(Debug, Parser)]
#[command(name = "kopf-bench")]
struct Args {
    /// Object counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    n: Vec<usize>,
    /// Runs of every figure (medians and ranges are over these).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Scenarios, comma-separated (S2 and S3 run together). S6 (sharded
    /// timers over K = 1, 2, 3 replicas) and S7 (failover: about 40 s a
    /// run), kopf-rs only, run only when named.
    #[arg(long, value_delimiter = ',', default_value = "s1,s2,s3,s4,s5")]
    scenarios: Vec<String>,
    /// Operators, comma-separated: kopf-rs, bare, controller
    /// (kube-runtime's `Controller`), kopf, kopf-rs-metrics (kopf-rs
    /// serving its probes and metrics), and baseline, which `--baseline`
    /// adds by itself.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kopf-rs,bare,controller,kopf"
    )]
    operators: Vec<String>,
    /// Another build of `kopf-rs-operator` (e.g. of the commit before a
    /// change, built with `cargo build --release -p kopf-bench` in its own
    /// checkout) to measure in the same run as the peer `baseline`.
    #[arg(long, value_name = "PROGRAM")]
    baseline: Option<PathBuf>,
    /// S2's steady window, seconds.
    #[arg(long, default_value_t = 30)]
    window: u64,
    /// S5's deletions during the watch gap (default N/10).
    #[arg(long)]
    s5_deletions: Option<usize>,
    /// Skip the Kopf peer (no Python, no pip).
    #[arg(long)]
    no_kopf: bool,
    /// A quick check that everything works: N=20, 1 run, 2 s window, no Kopf
    /// (unless --operators names it).
    #[arg(long)]
    smoke: bool,
    /// Where results go (default target/bench/<unix time>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The Python for Kopf's virtual environment.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Kopf's virtual environment (default target/bench-venv).
    #[arg(long)]
    venv: Option<PathBuf>,
    /// Do not build the binaries first (they must exist beside this one).
    #[arg(long)]
    no_build: bool,
}

async fn run(args: Args) -> anyhow::Result<bool> {
    let release = !cfg!(debug_assertions);
    let mut operators: Vec<Operator> = Vec::new();
    for name in &args.operators {
        let op = Operator::parse(name).with_context(|| {
            format!(
                "unknown operator {name:?}: expected kopf-rs, bare, controller, kopf, baseline or kopf-rs-metrics"
            )
        })?;
        operators.push(op);
    }
    match (&args.baseline, operators.contains(&Operator::Baseline)) {
        (Some(_), false) => operators.push(Operator::Baseline),
        (None, true) => bail!("the baseline operator needs --baseline PROGRAM"),
        _ => {}
    }
    let operators_given = std::env::args().any(|a| a.starts_with("--operators"));
    let (ns, runs, window) = if args.smoke {
        (vec![20], 1, 2)
    } else {
        (args.n.clone(), args.runs, args.window)
    };
    if args.no_kopf || (args.smoke && !operators_given) {
        operators.retain(|o| *o != Operator::Kopf);
        println!(
            "# the Kopf peer is skipped ({})",
            if args.no_kopf { "--no-kopf" } else { "--smoke" }
        );
    }
    if !release {
        println!("# debug build: figures are not representative; use --release");
    }
    if !args.no_build {
        building::build(release, &[])?;
    }
    let exe = std::env::current_exe()?;
    let bin_dir = exe.parent().context("no directory")?.to_path_buf();
    let root = building::workspace_root();
    let venv = if operators.contains(&Operator::Kopf) {
        let venv = args
            .venv
            .clone()
            .unwrap_or_else(|| root.join("target").join("bench-venv"));
        operators::ensure_kopf(&args.python, &venv)?;
        Some(venv)
    } else {
        None
    };
    let programs = Programs {
        bin_dir,
        venv,
        kopf_dir: root.join("bench").join("kopf"),
        baseline: args.baseline.clone(),
    };
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| root.join("target").join("bench").join(stamp.to_string()));
    std::fs::create_dir_all(&out)?;
    let mut jsonl = std::fs::File::create(out.join("results.jsonl"))?;
    let want = |s: &str| args.scenarios.iter().any(|x| x.eq_ignore_ascii_case(s));
    let mut results: Vec<RunResult> = Vec::new();
    let mut record = |result: RunResult| -> anyhow::Result<()> {
        let line = serde_json::to_string(&result)?;
        println!("{line}");
        writeln!(jsonl, "{line}")?;
        results.push(result);
        Ok(())
    };
    for &n in &ns {
        for run in 1..=runs {
            for &operator in &operators {
                let setup = |job: &str| Setup {
                    programs: programs.clone(),
                    dir: out.join(format!("n{n}-run{run}-{}-{job}", operator.name())),
                    operator,
                    n,
                    window: Duration::from_secs(window),
                    s5_deletions: args.s5_deletions.unwrap_or(n / 10).max(1),
                    quick: args.smoke,
                };
                let base = |scenario, variant| RunResult {
                    scenario,
                    variant,
                    operator,
                    n,
                    run,
                    ok: true,
                    error: None,
                    metrics: Default::default(),
                };
                let done = |mut r: RunResult, m: anyhow::Result<_>| {
                    match m {
                        Ok(m) => r.metrics = m,
                        Err(e) => {
                            r.ok = false;
                            r.error = Some(format!("{e:#}"));
                        }
                    }
                    r
                };
                if want("s1") {
                    record(done(base("S1", ""), scenarios::s1(&setup("s1")).await))?;
                }
                if want("s2") || want("s3") {
                    for (mode, variant) in [
                        (Mode::Timer, "finalizers"),
                        (Mode::TimerNoFinalizers, "no_finalizers"),
                    ] {
                        match scenarios::s2_s3(&setup(&format!("s2s3-{variant}")), mode).await {
                            Ok(None) => {}
                            Ok(Some((s2, s3))) => {
                                record(done(base("S2", variant), Ok(s2)))?;
                                record(done(base("S3", variant), Ok(s3)))?;
                            }
                            Err(e) => {
                                let e = format!("{e:#}");
                                record(done(base("S2", variant), Err(anyhow::anyhow!(e.clone()))))?;
                                record(done(base("S3", variant), Err(anyhow::anyhow!(e))))?;
                            }
                        }
                    }
                }
                if want("s4") {
                    record(done(base("S4", ""), scenarios::s4(&setup("s4")).await))?;
                }
                if want("s5") {
                    record(done(base("S5", ""), scenarios::s5(&setup("s5")).await))?;
                }
                if want("s6") {
                    for (replicas, variant) in [(1, "k1"), (2, "k2"), (3, "k3")] {
                        let job = setup(&format!("s6-{variant}"));
                        match scenarios::s6(&job, replicas).await {
                            Ok(None) => {}
                            Ok(Some(m)) => record(done(base("S6", variant), Ok(m)))?,
                            Err(e) => record(done(base("S6", variant), Err(e)))?,
                        }
                    }
                }
                if want("s7") {
                    for stop in [Stop::Kill, Stop::Term] {
                        let job = setup(&format!("s7-{}", stop.variant()));
                        match scenarios::s7(&job, stop).await {
                            Ok(None) => {}
                            Ok(Some(m)) => record(done(base("S7", stop.variant()), Ok(m)))?,
                            Err(e) => record(done(base("S7", stop.variant()), Err(e)))?,
                        }
                    }
                }
            }
        }
    }
    let summary = format!(
        "{}\nTargets (BENCHMARKS.md) at the N of this run:\n\n{}",
        report::summary(&results, &operators),
        report::targets(&results)
    );
    let command = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
    let header = format!(
        "kopf-bench {command} ({} build, {} cores)\n\n",
        if release { "release" } else { "debug" },
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    std::fs::write(out.join("summary.md"), format!("{header}{summary}"))?;
    report::plot(&results, &operators, &out.join("plot.svg"))?;
    report::plot_replicas(&results, &out.join("replicas.svg"))?;
    println!("\n{header}{summary}");
    println!("results: {}", out.display());
    let s5_clean = results
        .iter()
        .filter(|r| r.scenario == "S5" && r.operator != Operator::Kopf && r.ok)
        .all(|r| r.metrics.get("leaked").copied() == Some(0.0));
    Ok(s5_clean)
}

#[tokio::main]
async fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("soak") {
        return kopf_bench::soak::main(argv.into_iter().skip(1).collect()).await;
    }
    match run(Args::parse()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("kopf-bench: a Rust operator leaked timers in S5");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("kopf-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
