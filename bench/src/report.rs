//! Results: one JSON line per run, a summary table (medians, ranges and ratios
//! to the peers), and a plot of operator CPU and RSS against N.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use crate::operators::Operator;
use crate::scenarios::{RunResult, Stop};
use crate::stats::median_range;

/// One row of the summary: a figure of a scenario (and variant).
#[derive(Debug, Clone, Copy)]
pub struct Figure {
    /// Scenario.
    pub scenario: &'static str,
    /// Variant (`""` for any).
    pub variant: &'static str,
    /// The metric key.
    pub key: &'static str,
    /// What the row says.
    pub label: &'static str,
}

const fn fig(
    scenario: &'static str,
    variant: &'static str,
    key: &'static str,
    label: &'static str,
) -> Figure {
    Figure {
        scenario,
        variant,
        key,
        label,
    }
}

/// The figures of the summary, in order.
pub const FIGURES: &[Figure] = &[
    fig(
        "S1",
        "",
        "operator_cpu_s",
        "S1 operator CPU, first POST → last handler (s)",
    ),
    fig(
        "S1",
        "",
        "first_post_to_last_call_s",
        "S1 first POST → last handler (s)",
    ),
    fig(
        "S1",
        "",
        "requests_per_object",
        "S1 operator requests per object",
    ),
    fig("S1", "", "emulator_cpu_s", "S1 emulator CPU (s)"),
    fig(
        "S2",
        "finalizers",
        "ticks_ratio",
        "S2 ticks seen / expected (finalizers)",
    ),
    fig(
        "S2",
        "finalizers",
        "cpu_per_1000_ticks_s",
        "S2 operator CPU per 1,000 ticks (s) (finalizers)",
    ),
    fig(
        "S2",
        "finalizers",
        "jitter_p50_ms",
        "S2 jitter p50 (ms) (finalizers)",
    ),
    fig(
        "S2",
        "finalizers",
        "jitter_p99_ms",
        "S2 jitter p99 (ms) (finalizers)",
    ),
    fig(
        "S2",
        "finalizers",
        "jitter_max_ms",
        "S2 jitter max (ms) (finalizers)",
    ),
    fig(
        "S2",
        "finalizers",
        "rss_peak_mib",
        "S2 RSS peak (MiB) (finalizers)",
    ),
    fig(
        "S2",
        "no_finalizers",
        "ticks_ratio",
        "S2 ticks seen / expected (no_finalizers)",
    ),
    fig(
        "S2",
        "no_finalizers",
        "cpu_per_1000_ticks_s",
        "S2 operator CPU per 1,000 ticks (s) (no_finalizers)",
    ),
    fig(
        "S2",
        "no_finalizers",
        "jitter_p99_ms",
        "S2 jitter p99 (ms) (no_finalizers)",
    ),
    fig(
        "S2",
        "no_finalizers",
        "rss_peak_mib",
        "S2 RSS peak (MiB) (no_finalizers)",
    ),
    fig(
        "S3",
        "finalizers",
        "first_delete_to_last_tick_s",
        "S3 first DELETE → last tick (s) (finalizers)",
    ),
    fig(
        "S3",
        "finalizers",
        "first_delete_to_all_gone_s",
        "S3 first DELETE → all gone (s) (finalizers)",
    ),
    fig(
        "S3",
        "finalizers",
        "max_tick_after_own_deleted_ms",
        "S3 last tick − own DELETED event, max (ms) (finalizers)",
    ),
    fig(
        "S3",
        "no_finalizers",
        "first_delete_to_last_tick_s",
        "S3 first DELETE → last tick (s) (no_finalizers)",
    ),
    fig(
        "S3",
        "no_finalizers",
        "first_delete_to_all_gone_s",
        "S3 first DELETE → all gone (s) (no_finalizers)",
    ),
    fig(
        "S3",
        "no_finalizers",
        "max_tick_after_own_deleted_ms",
        "S3 last tick − own DELETED event, max (ms) (no_finalizers)",
    ),
    fig("S4", "", "rss_0_mib", "S4 RSS with 0 objects (MiB)"),
    fig("S4", "", "rss_n_mib", "S4 RSS with N objects (MiB)"),
    fig("S4", "", "rss_anon_n_mib", "S4 of which anonymous (MiB)"),
    fig("S4", "", "rss_file_n_mib", "S4 of which file pages (MiB)"),
    fig(
        "S4",
        "",
        "rss_anon_listed_mib",
        "S4 anonymous with N objects listed at the start (MiB)",
    ),
    fig("S4", "", "kib_per_object", "S4 KiB per watched object"),
    fig("S5", "", "leaked", "S5 leaked timers (must be 0)"),
    fig(
        "S5",
        "",
        "kept_ticking_ratio",
        "S5 surviving objects still ticking",
    ),
    fig(
        "S6",
        "k1",
        "busiest_replica_cpu_s",
        "S6 busiest replica's CPU in the window (s), K = 1",
    ),
    fig(
        "S6",
        "k2",
        "busiest_replica_cpu_s",
        "S6 busiest replica's CPU in the window (s), K = 2",
    ),
    fig(
        "S6",
        "k3",
        "busiest_replica_cpu_s",
        "S6 busiest replica's CPU in the window (s), K = 3",
    ),
    fig(
        "S6",
        "k3",
        "total_cpu_s",
        "S6 CPU of all replicas (s), K = 3",
    ),
    fig("S6", "k3", "ticks_ratio", "S6 ticks seen / expected, K = 3"),
    fig(
        "S6",
        "k3",
        "seconds_both_ticking",
        "S6 seconds with two replicas ticking one object, K = 3",
    ),
    fig(
        "S6",
        "k3",
        "slots_spread",
        "S6 most − fewest slots held, K = 3",
    ),
    fig(
        "S7",
        "sigkill",
        "stop_to_first_tick_s",
        "S7 SIGKILL → first tick on the new leader (s)",
    ),
    fig(
        "S7",
        "sigkill",
        "stop_to_all_ticking_s",
        "S7 SIGKILL → every object ticking on the new leader (s)",
    ),
    fig(
        "S7",
        "sigkill",
        "seconds_both_ticking",
        "S7 seconds with both replicas ticking one object (SIGKILL)",
    ),
    fig(
        "S7",
        "sigterm",
        "stop_to_first_tick_s",
        "S7 SIGTERM → first tick on the new leader (s)",
    ),
    fig(
        "S7",
        "sigterm",
        "stop_to_all_ticking_s",
        "S7 SIGTERM → every object ticking on the new leader (s)",
    ),
    fig(
        "S7",
        "sigterm",
        "last_old_tick_to_first_new_tick_s",
        "S7 last tick on the old leader → first on the new (s) (SIGTERM)",
    ),
    fig(
        "S7",
        "sigterm",
        "seconds_both_ticking",
        "S7 seconds with both replicas ticking one object (SIGTERM)",
    ),
    fig(
        "S7",
        "sigterm",
        "overlapping_ticks",
        "S7 old leader's ticks after the new one's first (SIGTERM)",
    ),
];

/// The values of one figure for one operator and N.
fn values(results: &[RunResult], f: &Figure, op: Operator, n: usize) -> Vec<f64> {
    results
        .iter()
        .filter(|r| {
            r.ok && r.scenario == f.scenario
                && (f.variant.is_empty() || r.variant == f.variant)
                && r.operator == op
                && r.n == n
        })
        .filter_map(|r| r.metrics.get(f.key).copied())
        .collect()
}

fn num(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// The memory a timer costs, by S2's variant: the anonymous memory (heap,
/// stacks) at the end of S2's window over that of S4's operator with as
/// many idle objects listed at its start (both medians), per object. Listed,
/// as S2's objects are: a listing leaves the heap larger than objects that
/// arrive while the operator watches. Anonymous, because the code a
/// scenario runs is file pages, counted in RSS once however many objects
/// there are.
const PER_TIMER: [(&str, &str); 2] = [
    (
        "finalizers",
        "S2 KiB per timer, anonymous over S4's listed idle objects (finalizers)",
    ),
    (
        "no_finalizers",
        "S2 KiB per timer, anonymous over S4's listed idle objects (no_finalizers)",
    ),
];

fn kib_per_timer(
    results: &[RunResult],
    op: Operator,
    n: usize,
    variant: &'static str,
) -> Option<f64> {
    let median = |scenario, variant, key| {
        let f = Figure {
            scenario,
            variant,
            key,
            label: "",
        };
        median_range(&values(results, &f, op, n)).map(|c| c.0)
    };
    let timers = median("S2", variant, "rss_anon_mib")?;
    let idle = median("S4", "", "rss_anon_listed_mib")?;
    Some((timers - idle) * 1024.0 / n.max(1) as f64)
}

/// One row of the summary: the operators' cells, then kopf-rs's median
/// over each peer's; nothing when no operator has the figure.
fn row(
    out: &mut String,
    label: &str,
    n: usize,
    cells: &[Option<(f64, f64, f64)>],
    operators: &[Operator],
) {
    if cells.iter().all(Option::is_none) {
        return;
    }
    let _ = write!(out, "| {label} | {n} |");
    for cell in cells {
        match cell {
            Some((m, lo, hi)) if lo == hi => {
                let _ = write!(out, " {} |", num(*m));
            }
            Some((m, lo, hi)) => {
                let _ = write!(out, " {} [{}–{}] |", num(*m), num(*lo), num(*hi));
            }
            None => out.push_str(" – |"),
        }
    }
    let ours = operators
        .iter()
        .position(|op| *op == Operator::KopfRs)
        .and_then(|at| cells[at])
        .map(|c| c.0);
    for (at, op) in operators.iter().enumerate() {
        if *op == Operator::KopfRs {
            continue;
        }
        match (ours, cells[at].map(|c| c.0)) {
            (Some(a), Some(b)) if b != 0.0 => {
                let _ = write!(out, " {:.2}× |", a / b);
            }
            _ => out.push_str(" – |"),
        }
    }
    out.push('\n');
}

/// The summary as a Markdown table: median [min–max] per operator, and the
/// ratios of kopf-rs's median to each peer's.
pub fn summary(results: &[RunResult], operators: &[Operator]) -> String {
    let ns: BTreeSet<usize> = results.iter().map(|r| r.n).collect();
    let peers: Vec<Operator> = operators
        .iter()
        .copied()
        .filter(|o| *o != Operator::KopfRs)
        .collect();
    let mut out = String::from("| figure | N |");
    for op in operators {
        let _ = write!(out, " {} |", op.name());
    }
    for peer in &peers {
        let _ = write!(out, " kopf-rs / {} |", peer.name());
    }
    out.push_str("\n|---|---|");
    out.push_str(&"---|".repeat(operators.len() + peers.len()));
    out.push('\n');
    for f in FIGURES {
        for &n in &ns {
            let cells: Vec<Option<(f64, f64, f64)>> = operators
                .iter()
                .map(|&op| median_range(&values(results, f, op, n)))
                .collect();
            row(&mut out, f.label, n, &cells, operators);
        }
    }
    for (variant, label) in PER_TIMER {
        for &n in &ns {
            let cells: Vec<Option<(f64, f64, f64)>> = operators
                .iter()
                .map(|&op| kib_per_timer(results, op, n, variant).map(|kib| (kib, kib, kib)))
                .collect();
            row(&mut out, label, n, &cells, operators);
        }
    }
    let failed: Vec<&RunResult> = results.iter().filter(|r| !r.ok).collect();
    if !failed.is_empty() {
        out.push_str("\nRuns that did not complete:\n");
        for r in failed {
            let text = r.error.as_deref().unwrap_or("");
            let (first, last) = (
                text.lines().next().unwrap_or(""),
                text.lines().last().unwrap_or(""),
            );
            let error = if first == last {
                first.to_string()
            } else {
                format!("{first} … {}", last.trim())
            };
            let _ = writeln!(
                out,
                "- {} {} {} N={} run {}: {error}",
                r.scenario,
                r.variant,
                r.operator.name(),
                r.n,
                r.run
            );
        }
    }
    out
}

/// How a target is checked: kopf-rs's median compared with a bound, or with
/// a peer's median times a factor.
enum Bound {
    Max(f64),
    Min(f64),
    TimesPeer(Operator, f64),
    /// At most this times the same figure of kopf-rs in another variant.
    TimesVariant(&'static str, f64),
}

/// The targets of BENCHMARKS.md that one run can check.
const TARGETS: &[(&str, Figure, Bound)] = &[
    (
        "S1 operator CPU ≤ 1/10 of Kopf's",
        fig("S1", "", "operator_cpu_s", ""),
        Bound::TimesPeer(Operator::Kopf, 0.1),
    ),
    (
        "S1 operator CPU ≤ 1.5× the bare watcher's",
        fig("S1", "", "operator_cpu_s", ""),
        Bound::TimesPeer(Operator::Bare, 1.5),
    ),
    (
        "S1 requests per object ≤ Kopf's",
        fig("S1", "", "requests_per_object", ""),
        Bound::TimesPeer(Operator::Kopf, 1.0),
    ),
    (
        "S2 ticks seen / expected ≥ 99.9 % (no_finalizers)",
        fig("S2", "no_finalizers", "ticks_ratio", ""),
        Bound::Min(0.999),
    ),
    (
        "S2 jitter p99 ≤ 5 ms (no_finalizers)",
        fig("S2", "no_finalizers", "jitter_p99_ms", ""),
        Bound::Max(5.0),
    ),
    (
        "S2 CPU per 1,000 ticks ≤ 1/20 of Kopf's (finalizers)",
        fig("S2", "finalizers", "cpu_per_1000_ticks_s", ""),
        Bound::TimesPeer(Operator::Kopf, 0.05),
    ),
    (
        "S3 timers stopped ≤ 100 ms after the last DELETED (no_finalizers)",
        fig(
            "S3",
            "no_finalizers",
            "last_deleted_event_to_last_tick_ms",
            "",
        ),
        Bound::Max(100.0),
    ),
    (
        "S3 timers stopped ≤ 100 ms after the last DELETED (finalizers)",
        fig("S3", "finalizers", "last_deleted_event_to_last_tick_ms", ""),
        Bound::Max(100.0),
    ),
    (
        "S4 RSS with N objects ≤ 1/5 of Kopf's",
        fig("S4", "", "rss_n_mib", ""),
        Bound::TimesPeer(Operator::Kopf, 0.2),
    ),
    (
        "S4 RSS with N objects ≤ 1.5× the bare watcher's",
        fig("S4", "", "rss_n_mib", ""),
        Bound::TimesPeer(Operator::Bare, 1.5),
    ),
    (
        "S5 leaked timers = 0",
        fig("S5", "", "leaked", ""),
        Bound::Max(0.0),
    ),
    (
        "S6 busiest replica's CPU ≤ 1.3 × single-replica CPU / 2, K = 2",
        fig("S6", "k2", "busiest_replica_cpu_s", ""),
        Bound::TimesVariant("k1", 1.3 / 2.0),
    ),
    (
        "S6 busiest replica's CPU ≤ 1.3 × single-replica CPU / 3, K = 3",
        fig("S6", "k3", "busiest_replica_cpu_s", ""),
        Bound::TimesVariant("k1", 1.3 / 3.0),
    ),
    (
        "S6 ticks seen / expected ≥ 99.9 %, K = 3",
        fig("S6", "k3", "ticks_ratio", ""),
        Bound::Min(0.999),
    ),
    (
        "S6 no second with two replicas ticking one object, K = 3",
        fig("S6", "k3", "seconds_both_ticking", ""),
        Bound::Max(0.0),
    ),
    (
        "S6 slots balanced within one, K = 3",
        fig("S6", "k3", "slots_spread", ""),
        Bound::Max(1.0),
    ),
    (
        "S7 SIGKILL → first tick ≤ lease duration + retry period",
        fig("S7", "sigkill", "stop_to_first_tick_s", ""),
        Bound::Max(Stop::Kill.target_s()),
    ),
    (
        "S7 SIGTERM → first tick ≤ retry period + 1 s",
        fig("S7", "sigterm", "stop_to_first_tick_s", ""),
        Bound::Max(Stop::Term.target_s()),
    ),
    (
        "S7 no second with both replicas ticking one object (SIGKILL)",
        fig("S7", "sigkill", "seconds_both_ticking", ""),
        Bound::Max(0.0),
    ),
    (
        "S7 no tick of the old leader after the new one's first (SIGTERM)",
        fig("S7", "sigterm", "overlapping_ticks", ""),
        Bound::Max(0.0),
    ),
];

/// The targets kopf-rs meets or misses, per N, as a Markdown table (medians).
pub fn targets(results: &[RunResult]) -> String {
    let ns: BTreeSet<usize> = results.iter().map(|r| r.n).collect();
    let mut out = String::from("| target | N | kopf-rs | bound | met |\n|---|---|---|---|---|\n");
    for (label, f, bound) in TARGETS {
        for &n in &ns {
            let Some((ours, _, _)) = median_range(&values(results, f, Operator::KopfRs, n)) else {
                continue;
            };
            let (limit, met) = match bound {
                Bound::Max(b) => (num(*b), ours <= *b),
                Bound::Min(b) => (format!("≥ {}", num(*b)), ours >= *b),
                Bound::TimesPeer(peer, k) => {
                    let Some((theirs, _, _)) = median_range(&values(results, f, *peer, n)) else {
                        continue;
                    };
                    (
                        format!("{} ({} × {})", num(theirs * k), peer.name(), num(*k)),
                        ours <= theirs * k,
                    )
                }
                Bound::TimesVariant(variant, k) => {
                    let of = Figure { variant, ..*f };
                    let Some((theirs, _, _)) =
                        median_range(&values(results, &of, Operator::KopfRs, n))
                    else {
                        continue;
                    };
                    (
                        format!("{} ({variant} × {})", num(theirs * k), num(*k)),
                        ours <= theirs * k,
                    )
                }
            };
            let _ = writeln!(
                out,
                "| {label} | {n} | {} | {limit} | {} |",
                num(ours),
                if met { "yes" } else { "**no**" }
            );
        }
    }
    out
}

/// The panels of the plot: scenario, variant, metric key, title.
const PANELS: [(&str, &str, &str, &str); 4] = [
    ("S1", "", "operator_cpu_s", "S1 operator CPU (s)"),
    (
        "S2",
        "finalizers",
        "cpu_per_1000_ticks_s",
        "S2 CPU per 1,000 ticks (s)",
    ),
    ("S2", "finalizers", "rss_peak_mib", "S2 RSS peak (MiB)"),
    ("S4", "", "rss_n_mib", "S4 RSS with N objects (MiB)"),
];

/// Draws operator CPU and RSS (medians) against N, one line per operator, as SVG.
///
/// # Errors
/// If the file cannot be written.
pub fn plot(results: &[RunResult], operators: &[Operator], path: &Path) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (1200, 800)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let areas = root.split_evenly((2, 2));
    let colors = [
        RGBColor(200, 60, 20),
        RGBColor(40, 110, 200),
        RGBColor(40, 150, 60),
    ];
    for (area, (scenario, variant, key, title)) in areas.iter().zip(PANELS) {
        let f = fig(scenario, variant, key, title);
        let series: Vec<(Operator, Vec<(f64, f64)>)> = operators
            .iter()
            .map(|&op| {
                let ns: BTreeSet<usize> = results.iter().map(|r| r.n).collect();
                let points = ns
                    .into_iter()
                    .filter_map(|n| {
                        median_range(&values(results, &f, op, n)).map(|m| (n as f64, m.0))
                    })
                    .collect();
                (op, points)
            })
            .collect();
        let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.1.iter().copied()).collect();
        if all.is_empty() {
            area.titled(&format!("{title}: no data"), ("sans-serif", 18))
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            continue;
        }
        let x_min = all.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
        let x_max = all.iter().map(|p| p.0).fold(0.0, f64::max);
        let y_max = all.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-6) * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d((x_min * 0.8..x_max * 1.25).log_scale(), 0.0..y_max)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .configure_mesh()
            .x_desc("N (objects)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        for (i, (op, points)) in series.iter().enumerate() {
            let color = colors[i % colors.len()];
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .label(op.name())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

/// Draws S6 and S7 of kopf-rs, if they ran, to `path`: the CPU of the
/// busiest replica and of all of them against K, beside the single
/// replica's CPU divided by K; and the time from the leader's stop to
/// the first tick on the new leader, after SIGKILL and SIGTERM, beside
/// their targets. `Ok(false)` when neither ran.
pub fn plot_replicas(results: &[RunResult], path: &Path) -> anyhow::Result<bool> {
    let median = |scenario: &'static str, variant: &'static str, key: &'static str| {
        let f = fig(scenario, variant, key, "");
        let ns: BTreeSet<usize> = results.iter().map(|r| r.n).collect();
        let n = ns.into_iter().next_back()?;
        median_range(&values(results, &f, Operator::KopfRs, n)).map(|m| m.0)
    };
    let ks = [(1.0, "k1"), (2.0, "k2"), (3.0, "k3")];
    let busiest: Vec<(f64, f64)> = ks
        .iter()
        .filter_map(|&(k, v)| Some((k, median("S6", v, "busiest_replica_cpu_s")?)))
        .collect();
    let total: Vec<(f64, f64)> = ks
        .iter()
        .filter_map(|&(k, v)| Some((k, median("S6", v, "total_cpu_s")?)))
        .collect();
    let stops: Vec<(&str, f64, f64)> = [(Stop::Kill, "SIGKILL"), (Stop::Term, "SIGTERM")]
        .into_iter()
        .filter_map(|(stop, label)| {
            let took = median("S7", stop.variant(), "stop_to_first_tick_s")?;
            Some((label, took, stop.target_s()))
        })
        .collect();
    if busiest.is_empty() && stops.is_empty() {
        return Ok(false);
    }
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("{e}");
    let root = SVGBackend::new(path, (1200, 450)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (left, right) = root.split_horizontally(600);

    let single = busiest.first().map_or(0.0, |p| p.1);
    let ideal: Vec<(f64, f64)> = ks.iter().map(|&(k, _)| (k, single / k)).collect();
    let y_max = busiest
        .iter()
        .chain(&total)
        .map(|p| p.1)
        .fold(1e-6, f64::max)
        * 1.2;
    let mut chart = ChartBuilder::on(&left)
        .caption(
            "S6: operator CPU in the window against K",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0.5..3.5, 0.0..y_max)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("K (replicas)")
        .y_desc("CPU (s)")
        .x_labels(3)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()
        .map_err(|e| err(&e))?;
    for (points, label, color) in [
        (&busiest, "busiest replica", RGBColor(200, 60, 20)),
        (&total, "all replicas", RGBColor(40, 110, 200)),
        (&ideal, "single replica / K", RGBColor(140, 140, 140)),
    ] {
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| err(&e))?;

    let y_max = stops.iter().map(|s| s.1.max(s.2)).fold(1.0, f64::max) * 1.2;
    let mut chart = ChartBuilder::on(&right)
        .caption(
            "S7: stop → first tick on the new leader",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..2.0, 0.0..y_max)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("seconds")
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (label, took, target)) in stops.iter().enumerate() {
        let x = i as f64;
        let color = RGBColor(40, 150, 60);
        chart
            .draw_series([Rectangle::new(
                [(x + 0.25, 0.0), (x + 0.75, *took)],
                color.filled(),
            )])
            .map_err(|e| err(&e))?;
        chart
            .draw_series([PathElement::new(
                vec![(x + 0.15, *target), (x + 0.85, *target)],
                RGBColor(200, 60, 20).stroke_width(2),
            )])
            .map_err(|e| err(&e))?;
        chart
            .draw_series([Text::new(
                format!("{label}: {took:.2} s (target {target:.0} s)"),
                (x + 0.1, took + y_max * 0.04),
                ("sans-serif", 14),
            )])
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(op: Operator, run: usize, cpu: f64, leaked: Option<f64>) -> RunResult {
        let (scenario, key, value) = match leaked {
            Some(v) => ("S5", "leaked", v),
            None => ("S1", "operator_cpu_s", cpu),
        };
        RunResult {
            scenario,
            variant: "",
            operator: op,
            n: 1000,
            run,
            ok: true,
            error: None,
            metrics: [(key.to_string(), value)].into(),
        }
    }

    #[test]
    fn a_timer_costs_the_anonymous_memory_of_s2_over_that_of_s4_listed_per_object() {
        let figure = |op, scenario, variant, key: &str, value| RunResult {
            scenario,
            variant,
            operator: op,
            n: 1024,
            run: 1,
            ok: true,
            error: None,
            metrics: [(key.to_string(), value)].into(),
        };
        let results = vec![
            figure(
                Operator::KopfRs,
                "S2",
                "no_finalizers",
                "rss_anon_mib",
                12.0,
            ),
            figure(Operator::KopfRs, "S4", "", "rss_anon_listed_mib", 10.0),
            // Watched, not listed: not what S2's timers are counted over.
            figure(Operator::KopfRs, "S4", "", "rss_anon_n_mib", 9.0),
            figure(
                Operator::Controller,
                "S2",
                "no_finalizers",
                "rss_anon_mib",
                11.0,
            ),
            figure(Operator::Controller, "S4", "", "rss_anon_listed_mib", 10.0),
            figure(Operator::Bare, "S4", "", "rss_anon_listed_mib", 10.0),
        ];
        let table = summary(
            &results,
            &[Operator::KopfRs, Operator::Controller, Operator::Bare],
        );
        let row = "| S2 KiB per timer, anonymous over S4's listed idle objects (no_finalizers) | 1024 | 2.00 | 1.00 | – | 2.00× | – |";
        assert!(table.contains(row), "{table}");
        assert!(
            !table.contains("(finalizers) | 1024"),
            "no S2 with finalizers: no row"
        );
    }

    #[test]
    fn summary_has_medians_ranges_and_ratios_and_targets_are_checked() {
        let results = vec![
            result(Operator::KopfRs, 1, 0.2, None),
            result(Operator::KopfRs, 2, 0.4, None),
            result(Operator::KopfRs, 3, 0.3, None),
            result(Operator::Kopf, 1, 3.0, None),
            result(Operator::Bare, 1, 0.25, None),
            result(Operator::KopfRs, 1, 0.0, Some(0.0)),
        ];
        let table = summary(
            &results,
            &[Operator::KopfRs, Operator::Bare, Operator::Kopf],
        );
        assert!(
            table.contains(
                "| S1 operator CPU, first POST → last handler (s) | 1000 | 0.30 [0.20–0.40] | 0.25 | 3.00 | 1.20× | 0.10× |"
            ),
            "{table}"
        );
        let checked = targets(&results);
        assert!(
            checked.contains(
                "| S1 operator CPU ≤ 1/10 of Kopf's | 1000 | 0.30 | 0.30 (kopf × 0.10) | yes |"
            ),
            "{checked}"
        );
        assert!(checked.contains("| S1 operator CPU ≤ 1.5× the bare watcher's | 1000 | 0.30 | 0.38 (bare × 1.50) | yes |"), "{checked}");
        assert!(
            checked.contains("| S5 leaked timers = 0 | 1000 | 0 | 0 | yes |"),
            "{checked}"
        );
    }

    fn s6(variant: &'static str, busiest: f64) -> RunResult {
        RunResult {
            scenario: "S6",
            variant,
            operator: Operator::KopfRs,
            n: 30_000,
            run: 1,
            ok: true,
            error: None,
            metrics: [
                ("busiest_replica_cpu_s".to_string(), busiest),
                ("total_cpu_s".to_string(), busiest * 2.5),
            ]
            .into(),
        }
    }

    #[test]
    fn s6_is_checked_against_the_single_replica_and_drawn() {
        let results = vec![s6("k1", 3.0), s6("k2", 1.5), s6("k3", 1.4)];
        let checked = targets(&results);
        assert!(
            checked.contains("| S6 busiest replica's CPU ≤ 1.3 × single-replica CPU / 2, K = 2 | 30000 | 1.50 | 1.95 (k1 × 0.65) | yes |"),
            "{checked}"
        );
        assert!(
            checked.contains("| S6 busiest replica's CPU ≤ 1.3 × single-replica CPU / 3, K = 3 | 30000 | 1.40 | 1.30 (k1 × 0.43) | **no** |"),
            "{checked}"
        );
        let path = std::env::temp_dir().join(format!("replicas-{}.svg", std::process::id()));
        assert!(plot_replicas(&results, &path).expect("drawn"));
        let svg = std::fs::read_to_string(&path).expect("an SVG");
        assert!(
            svg.contains("operator CPU in the window against K"),
            "{svg}"
        );
        let _ = std::fs::remove_file(&path);
        assert!(!plot_replicas(&[], &path).expect("nothing to draw"));
    }
}
