//! The scenarios of `BENCHMARKS.md`. Each job starts a fresh emulator and a
//! fresh operator process (two in S7), so that runs do not share state.
//!
//! Readiness is always observed, never assumed: S1 and S4 create a sentinel
//! object and wait for the operator's first call for it; S2, S3 and S5 create
//! the N objects first and wait until every one has ticked.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use futures::TryStreamExt;
use kube::api::{ListParams, WatchEvent, WatchParams};
use serde::Serialize;

use crate::cluster::{Driver, Emulator, Process};
use crate::operators::{Mode, Operator, Peer, Programs};
use crate::procfs::{self, PeakRss};
use crate::signals::{self, Signals, Tail};
use crate::stats::percentile;

/// The object every scenario but S2/S3/S5 uses to see that the operator is up.
pub const SENTINEL: &str = "sentinel";

/// The names of the N benchmark objects.
pub fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("bench-{i:06}")).collect()
}

/// What one job needs to know.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The programs.
    pub programs: Programs,
    /// A fresh directory for this job's files (kubeconfig, signals, logs).
    pub dir: PathBuf,
    /// The operator under test.
    pub operator: Operator,
    /// Objects.
    pub n: usize,
    /// S2's steady window.
    pub window: Duration,
    /// S5's deletions during the gap.
    pub s5_deletions: usize,
    /// Shorter settling pauses (smoke runs: checks, not measurements).
    pub quick: bool,
}

impl Setup {
    /// A pause to let the operator settle: `secs`, or a third of it when quick.
    fn settle(&self, secs: u64) -> Duration {
        if self.quick {
            Duration::from_millis(secs * 1000 / 3)
        } else {
            Duration::from_secs(secs)
        }
    }
}

/// S5 looks for ticks of vanished objects from 5 s after the re-list…
const S5_AFTER_NS: i64 = 5_000_000_000;
/// … until 7 s after it (a leaking 1-s timer ticks at least once in between).
const S5_UNTIL_NS: i64 = 7_000_000_000;

/// One JSON line of results.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// `S1` … `S5`, `S7`.
    pub scenario: &'static str,
    /// `finalizers` / `no_finalizers` for the timer scenarios, else empty.
    pub variant: &'static str,
    /// The operator.
    pub operator: Operator,
    /// Objects.
    pub n: usize,
    /// Run number, from 1.
    pub run: usize,
    /// Whether the scenario completed.
    pub ok: bool,
    /// Why not.
    pub error: Option<String>,
    /// Figures by name (units in the names: `_s`, `_ms`, `_mib`, `_kib`).
    pub metrics: BTreeMap<String, f64>,
}

type Metrics = BTreeMap<String, f64>;

const MIB: f64 = 1024.0 * 1024.0;

/// The emulator, the driver, the signal tail and the operator of one job.
struct Env {
    setup: Setup,
    emulator: Emulator,
    driver: Driver,
    tail: Tail,
    operator: Option<Process>,
    peak: Option<PeakRss>,
}

impl Env {
    async fn start(setup: &Setup) -> anyhow::Result<Env> {
        std::fs::create_dir_all(&setup.dir)?;
        let emulator = Emulator::start(&setup.programs.emulator(), &setup.dir)?;
        let driver = Driver::new(&emulator.url)?;
        let tail = Tail::start(&setup.dir.join("signals.txt"))?;
        Ok(Env {
            setup: setup.clone(),
            emulator,
            driver,
            tail,
            operator: None,
            peak: None,
        })
    }

    /// Starts the operator; `false` if it has no such mode.
    fn start_operator(&mut self, mode: Mode) -> anyhow::Result<bool> {
        let Some(process) = self.setup.programs.start(
            self.setup.operator,
            mode,
            &self.emulator.kubeconfig,
            self.tail.path(),
            &self.setup.dir.join("operator.log"),
        )?
        else {
            return Ok(false);
        };
        self.peak = Some(PeakRss::start(process.pid()));
        self.operator = Some(process);
        Ok(true)
    }

    fn op_pid(&self) -> u32 {
        self.operator.as_ref().map_or(0, Process::pid)
    }

    fn op(&self) -> procfs::Sample {
        procfs::sample(self.op_pid()).unwrap_or_default()
    }

    fn emu(&self) -> procfs::Sample {
        procfs::sample(self.emulator.process.pid()).unwrap_or_default()
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.setup.dir.join("operator.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().rev().take(6).collect();
        strip_ansi(&lines.into_iter().rev().collect::<Vec<_>>().join("\n    "))
    }

    /// Waits until `done` holds for the signals seen, failing early if the operator exits.
    async fn wait_until(
        &mut self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&Signals) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.tail.with(&done) {
                return Ok(());
            }
            if let Some(status) = self.operator.as_mut().and_then(Process::exited) {
                bail!(
                    "the operator exited ({status}) while waiting for {what}; its log ends:\n    {}",
                    self.log_tail()
                );
            }
            if tokio::time::Instant::now() > deadline {
                bail!("timed out after {timeout:?} waiting for {what}");
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Waits until the operator's request count stops growing (at most `max`).
    async fn wait_quiet(&self, max: Duration) -> anyhow::Result<BTreeMap<String, u64>> {
        let deadline = tokio::time::Instant::now() + max;
        let mut last = self.driver.operator_requests().await?;
        let mut still = 0;
        while still < 2 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let now = self.driver.operator_requests().await?;
            still = if now == last { still + 1 } else { 0 };
            last = now;
        }
        Ok(last)
    }

    fn stop(&mut self) {
        if let Some(mut op) = self.operator.take() {
            op.stop(Duration::from_secs(5));
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Removes terminal colour sequences (`ESC [ … m`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Generous limits: Kopf needs a few ms per object.
fn timeout_for(n: usize) -> Duration {
    Duration::from_secs(60) + Duration::from_millis(20 * n as u64)
}

fn secs(ns: i64) -> f64 {
    ns as f64 / 1e9
}

/// Lets the operators' periodic flush reach the runner.
async fn settle_signals() {
    tokio::time::sleep(signals::FLUSH_EVERY * 3).await;
}

/// S1 create burst: a no-op `on_create`; N objects created by 8 concurrent
/// requests; first POST → last handler call, operator CPU, requests per object.
pub async fn s1(setup: &Setup) -> anyhow::Result<Metrics> {
    let mut env = Env::start(setup).await?;
    let names = names(setup.n);
    env.driver.create(SENTINEL).await?;
    env.start_operator(Mode::Create)?;
    env.wait_until(
        "the sentinel's on_create call",
        Duration::from_secs(60),
        |s| {
            s.by_name
                .get(SENTINEL)
                .is_some_and(|x| !x.creates.is_empty())
        },
    )
    .await?;
    env.wait_quiet(Duration::from_secs(5)).await?;
    env.driver.reset_counts().await?;
    let (op0, emu0) = (env.op(), env.emu());
    let t0 = signals::now_ns();
    env.driver.create_all(&names).await?;
    let t_posted = signals::now_ns();
    env.wait_until("every on_create call", timeout_for(setup.n), |s| {
        s.count(&names, |x| !x.creates.is_empty()) == names.len()
    })
    .await?;
    let op_calls = env.op();
    let requests = env.wait_quiet(Duration::from_secs(20)).await?;
    let (op1, emu1) = (env.op(), env.emu());
    settle_signals().await;
    let (last_call, calls) = env.tail.with(|s| {
        let last = names
            .iter()
            .filter_map(|n| s.by_name.get(n).and_then(|x| x.creates.first().copied()))
            .max()
            .unwrap_or(t0);
        let calls: usize = names
            .iter()
            .filter_map(|n| s.by_name.get(n).map(|x| x.creates.len()))
            .sum();
        (last, calls)
    });
    let n = setup.n as f64;
    let total: u64 = requests.values().sum();
    let mut m = Metrics::new();
    m.insert("first_post_to_last_call_s".into(), secs(last_call - t0));
    m.insert("posting_s".into(), secs(t_posted - t0));
    m.insert("operator_cpu_s".into(), op_calls.cpu_s - op0.cpu_s);
    m.insert("operator_cpu_until_quiet_s".into(), op1.cpu_s - op0.cpu_s);
    m.insert("emulator_cpu_s".into(), emu1.cpu_s - emu0.cpu_s);
    m.insert("requests_per_object".into(), total as f64 / n);
    for (verb, count) in &requests {
        m.insert(format!("requests_{verb}_per_object"), *count as f64 / n);
    }
    m.insert("calls_per_object".into(), calls as f64 / n);
    m.insert("rss_mib".into(), op1.rss as f64 / MIB);
    m.insert("rss_peak_mib".into(), op1.hwm as f64 / MIB);
    Ok(m)
}

/// Records when each of `names` is deleted, watching from `rv` until
/// aborted: a stream that ends is resumed from its last version (a burst
/// of deletions with finalizers outlasts one watch request); after a
/// `410`, the names no longer listed are recorded as deleted when the
/// list shows them gone.
async fn watch_deletions(
    api: kube::Api<k8s_openapi::api::core::v1::ConfigMap>,
    mut rv: String,
    names: Vec<String>,
    deleted: Arc<Mutex<HashMap<String, i64>>>,
) {
    let record = |name: String, ts: i64| {
        deleted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name)
            .or_insert(ts);
    };
    loop {
        let params = WatchParams::default().timeout(290);
        let Ok(stream) = api.watch(&params, &rv).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut stream = std::pin::pin!(stream);
        let mut expired = false;
        while let Ok(Some(event)) = stream.try_next().await {
            match event {
                WatchEvent::Deleted(o) => {
                    let ts = signals::now_ns();
                    rv = o.metadata.resource_version.unwrap_or(rv);
                    record(o.metadata.name.unwrap_or_default(), ts);
                }
                WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                    rv = o.metadata.resource_version.unwrap_or(rv);
                }
                WatchEvent::Bookmark(b) => rv = b.metadata.resource_version,
                WatchEvent::Error(e) if e.code == 410 => {
                    expired = true;
                    break;
                }
                WatchEvent::Error(_) => {
                    // Another failure: resumed after a pause, not in a loop.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    break;
                }
            }
        }
        if expired {
            let Ok(list) = api.list_metadata(&ListParams::default()).await else {
                continue;
            };
            let ts = signals::now_ns();
            let present: std::collections::HashSet<&str> = list
                .items
                .iter()
                .filter_map(|o| o.metadata.name.as_deref())
                .collect();
            for name in names.iter().filter(|n| !present.contains(n.as_str())) {
                record(name.clone(), ts);
            }
            rv = list.metadata.resource_version.unwrap_or_default();
        }
    }
}

/// S2 timers at scale, then S3 delete burst on the same objects. `Ok(None)`
/// if the operator cannot run timers in this `mode` (Kopf without finalizers).
pub async fn s2_s3(setup: &Setup, mode: Mode) -> anyhow::Result<Option<(Metrics, Metrics)>> {
    let mut env = Env::start(setup).await?;
    let names = names(setup.n);
    env.driver.create_all(&names).await?;
    if !env.start_operator(mode)? {
        return Ok(None);
    }
    env.wait_until("every object's first tick", timeout_for(setup.n), |s| {
        s.count(&names, |x| !x.ticks.is_empty()) == names.len()
    })
    .await?;
    tokio::time::sleep(setup.settle(2)).await;

    // S2: a steady window.
    if let Some(peak) = &env.peak {
        peak.reset();
    }
    let (op0, emu0) = (env.op(), env.emu());
    let t0 = signals::now_ns();
    tokio::time::sleep(setup.window).await;
    let t1 = signals::now_ns();
    let (op1, emu1) = (env.op(), env.emu());
    let peak = env.peak.as_ref().map_or(0, PeakRss::peak);
    settle_signals().await;
    let window_s = secs(t1 - t0);
    let (seen, expected, mut gaps) = env.tail.with(|s| {
        let (mut seen, mut expected) = (0usize, 0.0);
        let mut gaps = Vec::new();
        for name in &names {
            let ticks = s.by_name.get(name).map_or(&[][..], |x| &x.ticks[..]);
            let mut prev: Option<i64> = None;
            let (mut first, mut last, mut count) = (None, 0, 0usize);
            for &ts in ticks {
                if ts >= t0 && ts < t1 {
                    count += 1;
                    first.get_or_insert(ts);
                    last = ts;
                    if let Some(p) = prev {
                        gaps.push(((ts - p) as f64 / 1e6 - 1000.0).abs());
                    }
                }
                prev = Some(ts);
            }
            // Expected ticks, independent of where the window cuts the phase
            // (objects created in a burst tick in step): one per second of the
            // span from the object's first to its last tick in the window; an
            // object that never ticked in the window missed all of them.
            expected += match first {
                Some(first) => secs(last - first).round() + 1.0,
                None => window_s.floor(),
            };
            seen += count;
        }
        (seen, expected, gaps)
    });
    gaps.sort_by(f64::total_cmp);
    let cpu = op1.cpu_s - op0.cpu_s;
    let mut s2 = Metrics::new();
    s2.insert("ticks_seen".into(), seen as f64);
    s2.insert("ticks_expected".into(), expected);
    s2.insert("ticks_ratio".into(), seen as f64 / expected.max(1.0));
    s2.insert(
        "ticks_per_object_second".into(),
        seen as f64 / setup.n as f64 / window_s,
    );
    s2.insert("operator_cpu_s".into(), cpu);
    s2.insert(
        "cpu_per_1000_ticks_s".into(),
        cpu / seen.max(1) as f64 * 1000.0,
    );
    s2.insert("emulator_cpu_s".into(), emu1.cpu_s - emu0.cpu_s);
    for (key, p) in [
        ("jitter_p50_ms", 50.0),
        ("jitter_p99_ms", 99.0),
        ("jitter_max_ms", 100.0),
    ] {
        if let Some(v) = percentile(&gaps, p) {
            s2.insert(key.into(), v);
        }
    }
    s2.insert("rss_mib".into(), op1.rss as f64 / MIB);
    s2.insert("rss_anon_mib".into(), op1.rss_anon as f64 / MIB);
    s2.insert("rss_peak_mib".into(), peak as f64 / MIB);

    // S3: delete all N; watch the DELETED events ourselves.
    let deleted: Arc<Mutex<HashMap<String, i64>>> = Arc::default();
    let rv = env
        .driver
        .api
        .list_metadata(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let watcher = tokio::spawn(watch_deletions(
        env.driver.api.clone(),
        rv,
        names.clone(),
        deleted.clone(),
    ));
    let (op0, emu0) = (env.op(), env.emu());
    let t_del = signals::now_ns();
    let result = async {
        env.driver.delete_all(&names, false).await?;
        let t_deleted = signals::now_ns();
        let deadline = tokio::time::Instant::now() + timeout_for(setup.n);
        while deleted.lock().unwrap_or_else(PoisonError::into_inner).len() < names.len() {
            if tokio::time::Instant::now() > deadline {
                bail!("timed out waiting for the DELETED events");
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        anyhow::Ok(t_deleted)
    }
    .await;
    watcher.abort();
    let t_deleted = result?;
    tokio::time::sleep(setup.settle(2)).await;
    settle_signals().await;
    let (op1, emu1) = (env.op(), env.emu());
    let deleted = deleted
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let t_gone = deleted.values().copied().max().unwrap_or(t_del);
    let (last_tick, after_own_delete, max_after_own_ms) = env.tail.with(|s| {
        let mut last = t_del;
        let mut after = 0usize;
        let mut max_after = f64::NEG_INFINITY;
        for name in &names {
            let Some(x) = s.by_name.get(name) else {
                continue;
            };
            let Some(&tick) = x.ticks.last() else {
                continue;
            };
            last = last.max(tick);
            if let Some(&gone) = deleted.get(name) {
                max_after = max_after.max((tick - gone) as f64 / 1e6);
                if tick > gone {
                    after += 1;
                }
            }
        }
        (last, after, max_after)
    });
    let mut s3 = Metrics::new();
    s3.insert(
        "first_delete_to_last_tick_s".into(),
        secs(last_tick - t_del),
    );
    s3.insert(
        "first_delete_to_last_delete_response_s".into(),
        secs(t_deleted - t_del),
    );
    s3.insert("first_delete_to_all_gone_s".into(), secs(t_gone - t_del));
    s3.insert(
        "last_deleted_event_to_last_tick_ms".into(),
        (last_tick - t_gone) as f64 / 1e6,
    );
    s3.insert(
        "objects_ticking_after_deleted".into(),
        after_own_delete as f64,
    );
    if max_after_own_ms.is_finite() {
        s3.insert("max_tick_after_own_deleted_ms".into(), max_after_own_ms);
    }
    s3.insert("operator_cpu_s".into(), op1.cpu_s - op0.cpu_s);
    s3.insert("emulator_cpu_s".into(), emu1.cpu_s - emu0.cpu_s);
    Ok(Some((s2, s3)))
}

/// S4 idle memory: a no-op `on_event`; RSS with 0 objects (the sentinel) and
/// with N, created while the operator watches; then the anonymous memory of
/// a fresh operator that lists the same N at its start, as S2's operator
/// does (what a timer costs is S2's over that, see `report`).
pub async fn s4(setup: &Setup) -> anyhow::Result<Metrics> {
    let mut env = Env::start(setup).await?;
    let names = names(setup.n);
    env.driver.create(SENTINEL).await?;
    env.start_operator(Mode::Event)?;
    env.wait_until("the sentinel's event", Duration::from_secs(60), |s| {
        s.by_name
            .get(SENTINEL)
            .is_some_and(|x| !x.events.is_empty())
    })
    .await?;
    tokio::time::sleep(setup.settle(3)).await;
    let (op0, emu0) = (env.op(), env.emu());
    env.driver.create_all(&names).await?;
    env.wait_until("every object's event", timeout_for(setup.n), |s| {
        s.count(&names, |x| !x.events.is_empty()) == names.len()
    })
    .await?;
    tokio::time::sleep(setup.settle(3)).await;
    let (op1, emu1) = (env.op(), env.emu());
    let mut m = Metrics::new();
    m.insert("emulator_cpu_s".into(), emu1.cpu_s - emu0.cpu_s);
    m.insert("rss_0_mib".into(), op0.rss as f64 / MIB);
    m.insert("rss_n_mib".into(), op1.rss as f64 / MIB);
    // Where the RSS is: heap and stacks, or the program's own pages.
    m.insert("rss_anon_n_mib".into(), op1.rss_anon as f64 / MIB);
    m.insert("rss_file_n_mib".into(), op1.rss_file as f64 / MIB);
    m.insert(
        "kib_per_object".into(),
        (op1.rss as f64 - op0.rss as f64) / 1024.0 / setup.n.max(1) as f64,
    );
    m.insert("operator_cpu_s".into(), op1.cpu_s - op0.cpu_s);

    // Listing N objects at the start leaves the heap larger than watching
    // them arrive one by one: S2's objects are listed, so its timers are
    // counted over this.
    env.stop();
    env.start_operator(Mode::Event)?;
    env.wait_until(
        "every object's event from the listing",
        timeout_for(setup.n),
        |s| s.count(&names, |x| x.events.len() >= 2) == names.len(),
    )
    .await?;
    tokio::time::sleep(setup.settle(3)).await;
    m.insert("rss_anon_listed_mib".into(), env.op().rss_anon as f64 / MIB);
    Ok(m)
}

/// S5 deletions in a watch gap: timers on N objects (without finalizers where
/// the operator can; Kopf keeps its finalizers and the runner removes them,
/// so the objects vanish anyway); watch and list requests fail, every watch
/// is dropped, K objects vanish, the history is compacted (410), the failures
/// stop; count the vanished objects still ticking 5–7 s after the operator's re-list.
pub async fn s5(setup: &Setup) -> anyhow::Result<Metrics> {
    let mode = if setup.operator == Operator::Kopf {
        Mode::Timer
    } else {
        Mode::TimerNoFinalizers
    };
    let mut env = Env::start(setup).await?;
    let names = names(setup.n);
    env.driver.create_all(&names).await?;
    env.start_operator(mode)?;
    env.wait_until("every object's first tick", timeout_for(setup.n), |s| {
        s.count(&names, |x| !x.ticks.is_empty()) == names.len()
    })
    .await?;
    tokio::time::sleep(setup.settle(2)).await;
    let k = setup.s5_deletions.clamp(1, setup.n);
    let (gone, kept) = names.split_at(k);
    let driver = &env.driver;
    driver.fail("watch", 1_000_000, 500).await?;
    driver.fail("list", 1_000_000, 500).await?;
    driver.drop_watches().await?;
    driver.delete_all(gone, true).await?;
    driver.compact().await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let lists = |r: &BTreeMap<String, u64>| r.get("list").copied().unwrap_or(0);
    let before = lists(&driver.operator_requests().await?);
    driver.clear_faults().await?;
    let t_clear = signals::now_ns();
    if driver.count("bench-").await? != kept.len() {
        bail!("the {k} objects did not vanish during the gap");
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut relisted = false;
    while tokio::time::Instant::now() < deadline {
        if lists(&driver.operator_requests().await?) > before {
            relisted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let t_relist = signals::now_ns();
    if !relisted {
        return Err(anyhow!(
            "the operator did not re-list within 30 s after the gap"
        ))
        .context(env.log_tail());
    }
    tokio::time::sleep(Duration::from_nanos(S5_UNTIL_NS as u64)).await;
    settle_signals().await;
    let (from, to) = (t_relist + S5_AFTER_NS, t_relist + S5_UNTIL_NS);
    let in_window = |x: &signals::Seen| x.ticks.iter().any(|&t| t >= from && t < to);
    let (leaked, kept_ticking) = env
        .tail
        .with(|s| (s.count(gone, in_window), s.count(kept, in_window)));
    let mut m = Metrics::new();
    m.insert("leaked".into(), leaked as f64);
    m.insert("deleted_in_gap".into(), k as f64);
    m.insert(
        "kept_ticking_ratio".into(),
        kept_ticking as f64 / kept.len().max(1) as f64,
    );
    m.insert("relist_after_gap_s".into(), secs(t_relist - t_clear));
    Ok(m)
}

/// Starts a replica of the operator (`timer-nofin`) for each of
/// `identities`, electing on `lease` (and sharding over `shards` slots),
/// each signalling to a file of its own and logging to `<identity>.log`;
/// `Ok(None)` for operators without an election.
fn start_replicas(
    setup: &Setup,
    emulator: &Emulator,
    lease: &str,
    identities: &[String],
    shards: Option<u32>,
) -> anyhow::Result<Option<Vec<(String, Process, Tail)>>> {
    let mut replicas = Vec::new();
    for identity in identities {
        let tail = Tail::start(&setup.dir.join(format!("signals-{identity}.txt")))?;
        let peer = Peer {
            lease: lease.into(),
            identity: identity.clone(),
            shards,
        };
        let log = setup.dir.join(format!("{identity}.log"));
        let Some(process) = setup.programs.start_replica(
            setup.operator,
            Mode::TimerNoFinalizers,
            &emulator.kubeconfig,
            tail.path(),
            &log,
            &peer,
        )?
        else {
            return Ok(None);
        };
        replicas.push((identity.clone(), process, tail));
    }
    Ok(Some(replicas))
}

/// The Lease S6's replicas shard the objects by.
pub const S6_LEASE: &str = "kopf-bench-shards";

/// The slots S6 spreads the objects over.
pub const S6_SHARDS: u32 = 8;

/// S6 sharded timers: `replicas` processes of the operator with
/// `--peering` and [`S6_SHARDS`] slots, the same no-op timers
/// (`timer-nofin`) on N objects. Once every slot is held, the slots are
/// balanced within one, and every object ticks, a steady window as S2's
/// measures each replica's CPU, the ticks seen against those expected (over
/// every replica), and the seconds (of the Unix clock) in which two
/// replicas ticked one object. `Ok(None)` for operators without an
/// election.
pub async fn s6(setup: &Setup, replicas: usize) -> anyhow::Result<Option<Metrics>> {
    if !setup.operator.elects() {
        return Ok(None);
    }
    std::fs::create_dir_all(&setup.dir)?;
    let emulator = Emulator::start(&setup.programs.emulator(), &setup.dir)?;
    let driver = Driver::new(&emulator.url)?;
    let names = names(setup.n);
    driver.create_all(&names).await?;
    let identities: Vec<String> = (0..replicas).map(|r| format!("replica-{r}")).collect();
    let Some(mut running) =
        start_replicas(setup, &emulator, S6_LEASE, &identities, Some(S6_SHARDS))?
    else {
        return Ok(None);
    };

    // Settled: every slot held by a replica, balanced, every object ticking.
    let deadline = tokio::time::Instant::now() + timeout_for(setup.n) + Duration::from_secs(60);
    let held = loop {
        for (identity, process, _) in &mut running {
            if let Some(status) = process.exited() {
                bail!("{identity} exited ({status}) while the slots spread");
            }
        }
        let mut held = vec![0_u32; replicas];
        for slot in 0..S6_SHARDS {
            let lease = format!("{S6_LEASE}-shard-{slot}-of-{S6_SHARDS}");
            let holder = driver.lease_holder(&lease).await?;
            if let Some(at) = running
                .iter()
                .position(|(identity, ..)| holder.as_deref() == Some(identity.as_str()))
            {
                held[at] += 1;
            }
        }
        let spread = held.iter().sum::<u32>() == S6_SHARDS
            && held.iter().max().unwrap_or(&0) - held.iter().min().unwrap_or(&0) <= 1;
        let ticking = names
            .iter()
            .filter(|name| {
                running.iter().any(|(.., tail)| {
                    tail.with(|s| s.by_name.get(*name).is_some_and(|x| !x.ticks.is_empty()))
                })
            })
            .count();
        if spread && ticking == names.len() {
            break held;
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "the slots did not spread ({held:?}) or {ticking} of {} objects tick",
                names.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tokio::time::sleep(setup.settle(2)).await;

    let sample = |running: &[(String, Process, Tail)]| -> Vec<f64> {
        running
            .iter()
            .map(|(_, process, _)| procfs::sample(process.pid()).unwrap_or_default().cpu_s)
            .collect()
    };
    let cpu0 = sample(&running);
    let t0 = signals::now_ns();
    tokio::time::sleep(setup.window).await;
    let t1 = signals::now_ns();
    let cpu1 = sample(&running);
    settle_signals().await;
    let window_s = secs(t1 - t0);

    let (mut seen, mut expected, mut both) = (0usize, 0.0, 0usize);
    for name in &names {
        // Each replica's ticks of the object in the window.
        let ticks: Vec<Vec<i64>> = running
            .iter()
            .map(|(.., tail)| {
                tail.with(|s| {
                    s.by_name.get(name).map_or_else(Vec::new, |x| {
                        x.ticks
                            .iter()
                            .copied()
                            .filter(|&t| t >= t0 && t < t1)
                            .collect()
                    })
                })
            })
            .collect();
        let mut all: Vec<i64> = ticks.iter().flatten().copied().collect();
        all.sort_unstable();
        seen += all.len();
        // As S2: one expected per second from the first tick to the last.
        expected += match (all.first(), all.last()) {
            (Some(first), Some(last)) => secs(last - first).round() + 1.0,
            _ => window_s.floor(),
        };
        let seconds: Vec<std::collections::BTreeSet<i64>> = ticks
            .iter()
            .map(|t| t.iter().map(|t| t.div_euclid(1_000_000_000)).collect())
            .collect();
        for (i, a) in seconds.iter().enumerate() {
            for b in &seconds[i + 1..] {
                both += a.intersection(b).count();
            }
        }
    }
    let cpus: Vec<f64> = cpu0.iter().zip(&cpu1).map(|(a, b)| b - a).collect();
    let mut m = Metrics::new();
    m.insert("replicas".into(), replicas as f64);
    m.insert(
        "busiest_replica_cpu_s".into(),
        cpus.iter().copied().fold(0.0, f64::max),
    );
    m.insert("total_cpu_s".into(), cpus.iter().sum());
    m.insert("ticks_ratio".into(), seen as f64 / expected.max(1.0));
    m.insert("seconds_both_ticking".into(), both as f64);
    m.insert(
        "slots_spread".into(),
        f64::from(held.iter().max().unwrap_or(&0) - held.iter().min().unwrap_or(&0)),
    );
    Ok(Some(m))
}

/// How S7 stops the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGKILL: the Lease is not released, and expires.
    Kill,
    /// SIGTERM: the leader stops its timers and releases the Lease.
    Term,
}

impl Stop {
    /// The variant's name in the results.
    pub fn variant(self) -> &'static str {
        match self {
            Stop::Kill => "sigkill",
            Stop::Term => "sigterm",
        }
    }

    fn signal(self) -> &'static str {
        match self {
            Stop::Kill => "KILL",
            Stop::Term => "TERM",
        }
    }

    /// The target of `BENCHMARKS.md` for the time from the stop to the
    /// first tick on the new leader, with the default `settings.peering`
    /// (lease duration 15 s, retry period 2 s): the lease duration and a
    /// retry period after SIGKILL, a retry period and a second after SIGTERM.
    pub const fn target_s(self) -> f64 {
        match self {
            Stop::Kill => 15.0 + 2.0,
            Stop::Term => 2.0 + 1.0,
        }
    }
}

/// The Lease S7's replicas elect on.
pub const S7_LEASE: &str = "kopf-bench";

/// The identities of S7's two replicas.
const S7_REPLICAS: [&str; 2] = ["replica-a", "replica-b"];

/// S7 failover: two replicas of the operator with `--peering` and the same
/// timers (`timer-nofin`) on N objects; once the leader ticks every object
/// and the other has watched it renew the Lease for a few retry periods,
/// the leader is stopped (`stop`); the time from the signal to the first
/// tick (and to every object's first tick) on the new leader, the seconds
/// (of the Unix clock) in which both replicas ticked one object, and the
/// ticks of the old leader on an object from the new leader's first tick
/// of it on (each replica signals to a file of its own). A handover faster
/// than the timers' second puts the old leader's last tick and the new
/// one's first in one second without any overlap: the overlapping ticks
/// are what says whether both served an object at once. `Ok(None)` for
/// operators without an election.
pub async fn s7(setup: &Setup, stop: Stop) -> anyhow::Result<Option<Metrics>> {
    if !setup.operator.elects() {
        return Ok(None);
    }
    std::fs::create_dir_all(&setup.dir)?;
    let emulator = Emulator::start(&setup.programs.emulator(), &setup.dir)?;
    let driver = Driver::new(&emulator.url)?;
    let names = names(setup.n);
    driver.create_all(&names).await?;
    let identities = S7_REPLICAS.map(String::from);
    let Some(mut replicas) = start_replicas(setup, &emulator, S7_LEASE, &identities, None)? else {
        return Ok(None);
    };
    let log_of = |identity: &str| {
        let log =
            std::fs::read_to_string(setup.dir.join(format!("{identity}.log"))).unwrap_or_default();
        let lines: Vec<&str> = log.lines().rev().take(6).collect();
        strip_ansi(&lines.into_iter().rev().collect::<Vec<_>>().join("\n    "))
    };

    // The leader: the Lease's holder, once it ticks every object.
    let deadline = tokio::time::Instant::now() + timeout_for(setup.n) + Duration::from_secs(20);
    let leader = loop {
        for (identity, process, _) in &mut replicas {
            if let Some(status) = process.exited() {
                bail!(
                    "{identity} exited ({status}) before the failover; its log ends:\n    {}",
                    log_of(identity)
                );
            }
        }
        let holder = driver.lease_holder(S7_LEASE).await?;
        let leading = replicas.iter().position(|(identity, _, tail)| {
            holder.as_deref() == Some(identity.as_str())
                && tail.with(|s| s.count(&names, |x| !x.ticks.is_empty())) == names.len()
        });
        if let Some(leading) = leading {
            break leading;
        }
        if tokio::time::Instant::now() > deadline {
            bail!("no replica led and ticked every object (the Lease's holder: {holder:?})");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let follower = 1 - leader;
    // The follower looks at the Lease every retry period (2 s): let it see
    // the leader renew it a few times.
    tokio::time::sleep(setup.settle(6)).await;

    let t_stop = signals::now_ns();
    replicas[leader].1.signal(stop.signal());
    let deadline = tokio::time::Instant::now() + timeout_for(setup.n) + Duration::from_secs(30);
    loop {
        let ticking = replicas[follower]
            .2
            .with(|s| s.count(&names, |x| x.ticks.iter().any(|&t| t >= t_stop)));
        if ticking == names.len() {
            break;
        }
        if let Some(status) = replicas[follower].1.exited() {
            bail!(
                "the follower exited ({status}); its log ends:\n    {}",
                log_of(&replicas[follower].0)
            );
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "the follower ticked {ticking} of {} objects after the stop",
                names.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // A terminated leader exits once its timers are stopped and the Lease
    // released.
    let exit_code = match stop {
        Stop::Kill => None,
        Stop::Term => {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            loop {
                if let Some(status) = replicas[leader].1.exited() {
                    break Some(f64::from(status.code().unwrap_or(-1)));
                }
                if tokio::time::Instant::now() > deadline {
                    bail!("the terminated leader did not exit within 60 s");
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
    };
    settle_signals().await;

    let firsts: Vec<i64> = replicas[follower].2.with(|s| {
        names
            .iter()
            .filter_map(|n| {
                s.by_name
                    .get(n)?
                    .ticks
                    .iter()
                    .copied()
                    .find(|&t| t >= t_stop)
            })
            .collect()
    });
    let first = firsts.iter().copied().min().unwrap_or(t_stop);
    let all = firsts.iter().copied().max().unwrap_or(t_stop);
    // The seconds (of the Unix clock) in which both replicas ticked one object.
    let seconds_of = |tail: &Tail, name: &str| -> std::collections::BTreeSet<i64> {
        tail.with(|s| {
            s.by_name
                .get(name)
                .map(|x| {
                    x.ticks
                        .iter()
                        .map(|t| t.div_euclid(1_000_000_000))
                        .collect()
                })
                .unwrap_or_default()
        })
    };
    let both: usize = names
        .iter()
        .map(|name| {
            let old = seconds_of(&replicas[leader].2, name);
            let new = seconds_of(&replicas[follower].2, name);
            old.intersection(&new).count()
        })
        .sum();
    // The old leader's ticks of an object from the new leader's first tick
    // of it on: both serving it at once.
    let overlapping: usize = replicas[follower].2.with(|new| {
        replicas[leader].2.with(|old| {
            names
                .iter()
                .filter_map(|n| {
                    let first = new.by_name.get(n)?.ticks.iter().find(|&&t| t >= t_stop)?;
                    Some(
                        old.by_name
                            .get(n)?
                            .ticks
                            .iter()
                            .filter(|&t| t >= first)
                            .count(),
                    )
                })
                .sum()
        })
    });
    let last_old = replicas[leader].2.with(|s| {
        names
            .iter()
            .filter_map(|n| s.by_name.get(n)?.ticks.last().copied())
            .max()
            .unwrap_or(t_stop)
    });

    let took = secs(first - t_stop);
    let mut m = Metrics::new();
    m.insert("stop_to_first_tick_s".into(), took);
    m.insert("stop_to_all_ticking_s".into(), secs(all - t_stop));
    m.insert(
        "last_old_tick_to_first_new_tick_s".into(),
        secs(first - last_old),
    );
    m.insert("seconds_both_ticking".into(), both as f64);
    m.insert("overlapping_ticks".into(), overlapping as f64);
    m.insert("target_s".into(), stop.target_s());
    m.insert(
        "within_target".into(),
        if took <= stop.target_s() { 1.0 } else { 0.0 },
    );
    if let Some(code) = exit_code {
        m.insert("old_leader_exit_code".into(), code);
    }
    Ok(Some(m))
}
