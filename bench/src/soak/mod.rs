//! `kopf-bench soak`: a chaos soak that checks Kopf's promises.
//!
//! ```text
//! cargo run --release -p kopf-bench -- soak --minutes 30 --seed 7
//! ```
//!
//! One `kube-emulator` process and one operator process
//! (`soak-operator`: create, update, field and delete handlers, timers and
//! daemons, with finalizers and without, on ConfigMaps in `default`). The
//! runner creates, changes and deletes objects at a steady rate
//! ([`churn`]), poisoned ones among them ([`poison`]: nested past the
//! operator's `max_depth` from their creation or after a change, or with
//! malformed Kopf annotations); meanwhile it injects faults one at a time
//! at random moments ([`chaos`]): dropped watches, 410 compaction,
//! deletions during a watch gap, 429 with Retry-After, 500 and 503,
//! latency spikes, an emulator restart that keeps its state, and the
//! operator SIGKILLed or SIGTERMed and started again. The seed fixes the
//! sequence of operations and faults, not their interleaving with the
//! operator.
//!
//! # Invariants
//!
//! Checked continuously from the operator's records ([`records`]) and the
//! objects as stored, then once more after the churn stops
//! ([`invariants`] says how a legitimate second run is told apart):
//!
//! - `create-once`: a create handler's success is recorded once per UID,
//!   even across operator kills;
//! - `update-once`: the update (and field) handler runs once per distinct
//!   state of the object it handles;
//! - `caught-up`: once the churn stops, every object's diff-base is its
//!   current state (the last change was handled);
//! - `delete-ran`: the delete handler ran for every object of its
//!   (`soak-fin=yes`) deleted while it held the operator's finalizer;
//! - `stop-bound`: no timer or daemon of a deleted object runs past the stop
//!   bound after its deletion (counted from the end of the disturbances in
//!   force then: a deletion in a watch gap counts from the gap's end);
//! - `one-copy`: no UID has two copies of one timer or daemon in one
//!   process;
//! - `deletion-blocked`: no deletion waits longer than the stop bound
//!   (same count); `finalizer-left`: no object is left after the run (they
//!   are all deleted then); `no-finalizers`: no object whose handlers are
//!   `no_finalizers` ever carries the finalizer;
//! - `baseline-tasks`, `baseline-rss`: once the churn stops and the objects
//!   are gone, the operator's alive tokio tasks and its RSS return to those
//!   of a fresh operator with no objects (tasks within
//!   [`TASK_SLACK`], RSS within [`RSS_SLACK`]);
//! - `sigterm-exit`: the operator exits within 20 s of a SIGTERM;
//!   `no-panic`: no panic text in its output;
//! - `poison-skipped`: no handler or task ever gets an object's state
//!   nested past the operator's `max_depth`; an object created so deep has
//!   no handler call and no task at all, and the operator never patches it
//!   (so it never holds the finalizer, and its deletion goes through at
//!   once); one made so deep by a change keeps its timers and daemons on
//!   its last state that decoded, and its deletion stops them
//!   (`stop-bound`);
//! - `garbage-ignored`: an object created with malformed Kopf annotations
//!   (diff-base, progress records) is handled as a fresh one: once a
//!   diff-base of the operator's is stored on it, its create handler ran.
//!
//! Poisoned objects never hold back the others: every check of the
//! others holds with them among the churn. `caught-up` passes over the
//! objects that never decode. The operator cannot release the finalizer of
//! an object it cannot decode, so the runner makes one made too deep by a
//! change decodable again before deleting it if its handlers keep
//! finalizers, as its owner would have to; without finalizers, it is
//! deleted as it is.
//!
//! It prints a summary (objects churned, poisoned ones by kind, faults by
//! kind, restarts, violations) and writes `summary.json`, `events.log`
//! (what the runner did) and `violations.txt` (each violation with the
//! records and events that led to it) to `--out`. It exits non-zero on any
//! violation.
//!
//! `--break <what>` (hidden, for the tests) sets `KOPF_SOAK_BREAK` for the
//! operator, which then breaks one promise on purpose ([`Break`]).

pub mod chaos;
pub mod churn;
pub mod client;
pub mod invariants;
pub mod poison;
pub mod records;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use k8s_openapi::api::core::v1::ConfigMap;
use serde::Serialize;

use crate::cluster::Emulator;
use crate::procfs;
use client::Soaker;
use invariants::{Checker, FINALIZER, Obj, Persisted, Violation, Window, calm_after};
use poison::Poison;
use records::{Record, now_ns};

/// Alive tasks a drained operator may have beyond a fresh one's (pooled
/// HTTP connections, opened during faults, close on their own later).
pub const TASK_SLACK: usize = 6;

/// RSS a drained operator may have beyond a fresh one's, bytes: the
/// allocator keeps some of what the churn used.
pub const RSS_SLACK: u64 = 24 << 20;

/// The prefix of Kopf's annotations (diff-base, progress).
const KOPF_PREFIX: &str = "kopf.zalando.org/";

/// How long a SIGTERMed operator may take to exit.
const TERM_GRACE: Duration = Duration::from_secs(20);

/// A promise the soak operator breaks on purpose (`KOPF_SOAK_BREAK`), in
/// its own handlers and settings, for the tests to see the soak catch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Break {
    /// Nothing broken.
    Nothing,
    /// The create handler records its success, then fails once (`create-once`).
    CreateTwice,
    /// The update handler records its run, then fails once (`update-once`).
    UpdateTwice,
    /// The delete handler does nothing for some objects (`delete-ran`).
    DeleteSkipped,
    /// Daemons ignore their stop flag, and have no cancellation timeout (`stop-bound`).
    DaemonIgnoresStop,
    /// Each daemon starts a second copy of itself (`one-copy`).
    DaemonTwice,
    /// The delete handler fails for some objects, for ever (`finalizer-left`).
    FinalizerStuck,
    /// The timer of the `soak-fin=no` objects keeps a finalizer (`no-finalizers`).
    NoFinalizersIgnored,
    /// The create handler leaves a task behind (`baseline-tasks`).
    LeakTasks,
    /// The create handler leaks 8 MiB (`baseline-rss`).
    LeakMemory,
    /// The field handler panics on `data.f = 1` (`no-panic`).
    Panic,
    /// The operator decodes objects as deep as its default `max_depth`
    /// lets it, the poisoned ones too (`poison-skipped`).
    PoisonDecoded,
    /// The create handler does nothing for objects whose diff-base is
    /// malformed (`garbage-ignored`).
    GarbageSkipped,
}

impl Break {
    const ALL: [(&'static str, Break, &'static str); 12] = [
        ("create-twice", Break::CreateTwice, "create-once"),
        ("update-twice", Break::UpdateTwice, "update-once"),
        ("delete-skipped", Break::DeleteSkipped, "delete-ran"),
        (
            "daemon-ignores-stop",
            Break::DaemonIgnoresStop,
            "stop-bound",
        ),
        ("daemon-twice", Break::DaemonTwice, "one-copy"),
        ("finalizer-stuck", Break::FinalizerStuck, "finalizer-left"),
        (
            "no-finalizers-ignored",
            Break::NoFinalizersIgnored,
            "no-finalizers",
        ),
        ("leak-tasks", Break::LeakTasks, "baseline-tasks"),
        ("leak-memory", Break::LeakMemory, "baseline-rss"),
        ("panic", Break::Panic, "no-panic"),
        ("poison-decoded", Break::PoisonDecoded, "poison-skipped"),
        ("garbage-skipped", Break::GarbageSkipped, "garbage-ignored"),
    ];

    /// Parses a `KOPF_SOAK_BREAK` value.
    pub fn parse(name: &str) -> Option<Break> {
        Break::ALL
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, b, _)| *b)
    }

    /// Every value, comma-separated.
    pub fn names() -> String {
        Break::ALL.map(|(n, _, _)| n).join(", ")
    }

    /// The invariant the soak reports when `name` is broken.
    pub fn invariant(name: &str) -> Option<&'static str> {
        Break::ALL
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, _, i)| *i)
    }
}

/// `kopf-bench soak`.
#[derive(Debug, Clone, Parser)]
#[command(name = "kopf-bench soak")]
pub struct Config {
    /// How long the churn and the faults last (fractions allowed).
    #[arg(long, default_value_t = 2.0)]
    pub minutes: f64,
    /// Seeds the operations and the faults.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Objects kept alive, about.
    #[arg(long, default_value_t = 30)]
    pub population: usize,
    /// Object operations per second.
    #[arg(long, default_value_t = 4.0)]
    pub rate: f64,
    /// Seconds between faults, on average.
    #[arg(long, default_value_t = 5.0)]
    pub chaos_every: f64,
    /// Seconds a deleted object's timers and daemons may run on (after the
    /// disturbances in force at its deletion), and its deletion may wait.
    #[arg(long, default_value_t = 20)]
    pub stop_bound: u64,
    /// Where results go (default target/soak/<unix time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Do not build the binaries first (they must exist beside this one).
    #[arg(long)]
    pub no_build: bool,
    /// Breaks one promise in the operator on purpose (tests).
    #[arg(long = "break", hide = true)]
    pub broken: Option<String>,
}

/// Objects created, changed and deleted.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Churned {
    /// Created.
    pub created: u64,
    /// Changes (`data.v` or `data.f`).
    pub updated: u64,
    /// Deleted.
    pub deleted: u64,
    /// Poisoned, by kind.
    pub poisoned: Poisoned,
}

/// Poisoned objects churned ([`poison`]), by kind.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Poisoned {
    /// Created nested past the operator's `max_depth`.
    pub deep: u64,
    /// Created with malformed Kopf annotations.
    pub garbled: u64,
    /// Made too deep by a change (and later decodable again).
    pub deepened: u64,
}

/// A line of `events.log`.
#[derive(Debug, Clone)]
pub struct Event {
    /// Unix ns.
    pub ts: i64,
    /// The object, if about one.
    pub uid: Option<String>,
    /// What happened.
    pub text: String,
}

/// Everything the runner knows, shared by its tasks.
#[derive(Debug, Default)]
pub struct State {
    /// Names handed out.
    pub serial: u64,
    /// Every object created, by UID.
    pub objects: HashMap<String, Obj>,
    /// Objects not deleted yet: name → (UID, data.v, data.f).
    pub live: HashMap<String, (String, u64, u64)>,
    /// Disturbances.
    pub windows: Vec<Window>,
    /// The objects as stored right after each SIGKILL, by killed process.
    pub kills: HashMap<u32, HashMap<String, Persisted>>,
    /// The runner's timeline.
    pub events: Vec<Event>,
    /// Faults by kind.
    pub faults: BTreeMap<String, u64>,
    /// Churn counts.
    pub churned: Churned,
    /// The records' checker.
    pub checker: Checker,
    /// Violations found, in order.
    pub violations: Vec<Violation>,
    reported: HashSet<(&'static str, String)>,
}

impl State {
    /// Adds to the timeline.
    pub fn event(&mut self, uid: Option<&str>, text: String) {
        self.events.push(Event {
            ts: now_ns(),
            uid: uid.map(str::to_string),
            text,
        });
    }

    /// Reports a violation (once per invariant and object).
    pub fn violate(&mut self, v: Violation) {
        if self.reported.insert((v.invariant, v.uid.clone())) {
            eprintln!("soak: VIOLATION {} {}: {}", v.invariant, v.uid, v.message);
            self.violations.push(v);
        }
    }

    fn violation(&mut self, invariant: &'static str, uid: &str, message: String) {
        self.violate(Violation {
            invariant,
            uid: uid.to_string(),
            at: now_ns(),
            message,
        });
    }
}

/// The operator processes, one at a time.
#[derive(Debug)]
struct Operators {
    program: PathBuf,
    kubeconfig: PathBuf,
    records: PathBuf,
    dir: PathBuf,
    broken: Option<String>,
    started: usize,
    current: Option<Child>,
    logs: Vec<PathBuf>,
}

impl Operators {
    fn start(&mut self) -> anyhow::Result<u32> {
        self.started += 1;
        let log_path = self.dir.join(format!("operator-{:03}.log", self.started));
        let log = std::fs::File::create(&log_path)?;
        let mut cmd = Command::new(&self.program);
        cmd.args(["--standalone", "-n", "default", "--kubeconfig"])
            .arg(&self.kubeconfig)
            .env(records::ENV, &self.records)
            .stdout(log.try_clone()?)
            .stderr(log)
            .stdin(Stdio::null());
        if let Some(b) = &self.broken {
            cmd.env("KOPF_SOAK_BREAK", b);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", self.program.display()))?;
        let pid = child.id();
        self.current = Some(child);
        self.logs.push(log_path);
        Ok(pid)
    }

    fn pid(&self) -> Option<u32> {
        self.current.as_ref().map(Child::id)
    }

    /// Sends `signal` and waits up to `grace` for the exit; whether it exited.
    async fn signal(&mut self, signal: nix::sys::signal::Signal, grace: Duration) -> bool {
        let Some(child) = self.current.as_mut() else {
            return true;
        };
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
        }
        let deadline = Instant::now() + grace;
        loop {
            if child.try_wait().ok().flatten().is_some() {
                self.current = None;
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One soak run: its settings, client, state and operator.
pub struct Soak {
    /// The settings.
    pub config: Config,
    /// The runner's client.
    pub client: Soaker,
    state: Mutex<State>,
    operators: tokio::sync::Mutex<Operators>,
    /// Held while an object is deleted or its nesting changed: a deletion
    /// must know whether its object is too deep to decode.
    nesting: tokio::sync::Mutex<()>,
}

impl Soak {
    /// The shared state.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stops the operator (SIGKILL, or SIGTERM and up to 20 s to exit),
    /// snapshots the objects after a kill, and starts a new one after a
    /// moment.
    ///
    /// # Errors
    /// If the operator cannot be started again or the emulator read.
    pub async fn restart_operator(
        &self,
        kill: bool,
        rng: &mut fastrand::Rng,
    ) -> anyhow::Result<()> {
        use nix::sys::signal::Signal;
        let mut ops = self.operators.lock().await;
        let pid = ops.pid().unwrap_or(0);
        let mut killed = kill;
        if kill {
            ops.signal(Signal::SIGKILL, Duration::from_secs(10)).await;
        } else if !ops.signal(Signal::SIGTERM, TERM_GRACE).await {
            self.lock().violation(
                "sigterm-exit",
                "-",
                format!("operator {pid} did not exit within {TERM_GRACE:?} of SIGTERM; killed"),
            );
            ops.signal(Signal::SIGKILL, Duration::from_secs(10)).await;
            killed = true;
        }
        if killed {
            // What the killed process had stored, before another can store more.
            let stored: HashMap<String, Persisted> = self
                .client
                .list()
                .await?
                .iter()
                .filter_map(|cm| Some((cm.metadata.uid.clone()?, Persisted::of(cm))))
                .collect();
            self.lock().kills.insert(pid, stored);
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(0..2000))).await;
        let new = ops.start()?;
        self.lock().event(
            None,
            format!(
                "operator {pid} {}, {new} started",
                if killed { "killed" } else { "stopped" }
            ),
        );
        Ok(())
    }

    /// Reads the records written since the last call and checks them.
    fn check_records(&self, file: &mut std::fs::File, offset: &mut u64, pending: &mut Vec<u8>) {
        let _ = file.seek(SeekFrom::Start(*offset));
        let mut buf = Vec::new();
        let n = file.read_to_end(&mut buf).unwrap_or(0);
        *offset += n as u64;
        pending.extend_from_slice(&buf);
        let Some(end) = pending.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        let text = String::from_utf8_lossy(&pending[..end]).into_owned();
        pending.drain(..=end);
        let mut state = self.lock();
        let state = &mut *state;
        let bound = i64::try_from(self.config.stop_bound).unwrap_or(60) * 1_000_000_000;
        let mut found = Vec::new();
        for line in text.lines() {
            let Some(record) = Record::parse(line) else {
                continue;
            };
            let cx = invariants::Context {
                objects: &state.objects,
                windows: &state.windows,
                kills: &state.kills,
                bound,
            };
            found.extend(state.checker.add(record, &cx));
        }
        for v in found {
            state.violate(v);
        }
    }

    /// Looks at the objects as stored: deletions held, blocked, finalizers
    /// where none belong.
    async fn observe(&self) -> anyhow::Result<()> {
        let stored = self.client.list().await?;
        let now = now_ns();
        let bound = i64::try_from(self.config.stop_bound).unwrap_or(60) * 1_000_000_000;
        let mut state = self.lock();
        let state = &mut *state;
        let present: HashSet<String> = stored
            .iter()
            .filter_map(|cm| cm.metadata.uid.clone())
            .collect();
        let mut found = Vec::new();
        for cm in &stored {
            let Some(uid) = cm.metadata.uid.as_deref() else {
                continue;
            };
            let Some(obj) = state.objects.get_mut(uid) else {
                continue;
            };
            let finalized = cm
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == FINALIZER);
            if obj.poison == Some(Poison::Deep)
                && (finalized
                    || cm
                        .metadata
                        .annotations
                        .iter()
                        .flatten()
                        .any(|(k, _)| k.starts_with(KOPF_PREFIX)))
            {
                found.push((
                    "poison-skipped",
                    uid.to_string(),
                    format!(
                        "{} never decoded, yet the operator patched it: finalizers {:?}, annotations {:?}",
                        obj.name,
                        cm.metadata.finalizers.clone().unwrap_or_default(),
                        cm.metadata.annotations.clone().unwrap_or_default().keys().collect::<Vec<_>>()
                    ),
                ));
            }
            obj.handled |= Persisted::of(cm).diff_base.is_some();
            if !obj.fin && finalized {
                found.push((
                    "no-finalizers",
                    uid.to_string(),
                    format!(
                        "{} carries {FINALIZER}, though its handlers keep none",
                        obj.name
                    ),
                ));
            }
            if cm.metadata.deletion_timestamp.is_some() {
                obj.held |= finalized;
                if let Some(deleted) = obj.delete_at {
                    let deadline = calm_after(&state.windows, deleted).saturating_add(bound);
                    if now > deadline && !obj.blocked {
                        obj.blocked = true;
                        found.push((
                            "deletion-blocked",
                            uid.to_string(),
                            format!(
                                "{} still there {:.1} s after its deletion, finalizers {:?}",
                                obj.name,
                                (now - deleted) as f64 / 1e9,
                                cm.metadata.finalizers.clone().unwrap_or_default()
                            ),
                        ));
                    }
                }
            }
        }
        for (uid, obj) in &mut state.objects {
            if obj.delete_at.is_some() && !present.contains(uid) {
                obj.gone = true;
            }
        }
        for (invariant, uid, message) in found {
            state.violation(invariant, &uid, message);
        }
        Ok(())
    }
}

/// The summary of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The seed.
    pub seed: u64,
    /// Minutes of churn and faults.
    pub minutes: f64,
    /// The broken promise, if any.
    #[serde(rename = "break")]
    pub broken: Option<String>,
    /// Objects churned.
    pub churned: Churned,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, u64>,
    /// Operator processes started.
    pub operator_processes: usize,
    /// The operator's records, by kind.
    pub records: BTreeMap<String, u64>,
    /// Second runs of a handler excused by a SIGKILL before the first was
    /// stored (at least once).
    pub excused: u64,
    /// A fresh operator's alive tasks and RSS (MiB), with no objects.
    pub baseline: (usize, f64),
    /// The last operator's, once the churn stopped and the objects were gone.
    pub end: (usize, f64),
    /// How many violations.
    pub violations: usize,
    /// Violations by invariant.
    pub by_invariant: BTreeMap<String, usize>,
    /// The violations (first 100).
    pub first: Vec<Violation>,
}

impl Summary {
    /// The human-readable summary.
    pub fn text(&self) -> String {
        let mut s = format!(
            "soak: {:.1} min, seed {}{}\n",
            self.minutes,
            self.seed,
            self.broken
                .as_deref()
                .map(|b| format!(", broken on purpose: {b}"))
                .unwrap_or_default()
        );
        s.push_str(&format!(
            "objects: {} created, {} changes, {} deleted\n",
            self.churned.created, self.churned.updated, self.churned.deleted
        ));
        let p = &self.churned.poisoned;
        s.push_str(&format!(
            "poisoned: {} nested too deep, {} with malformed Kopf annotations, {} made too deep by a change\n",
            p.deep, p.garbled, p.deepened
        ));
        let total: u64 = self.faults.values().sum();
        s.push_str(&format!("faults: {total}"));
        for (k, n) in &self.faults {
            s.push_str(&format!(", {k} {n}"));
        }
        s.push_str(&format!(
            "\noperator processes: {} ({} SIGKILL, {} SIGTERM)\n",
            self.operator_processes,
            self.faults.get("operator-sigkill").unwrap_or(&0),
            self.faults.get("operator-sigterm").unwrap_or(&0)
        ));
        s.push_str("handler records:");
        for (k, n) in &self.records {
            s.push_str(&format!(" {k} {n}"));
        }
        s.push_str(&format!(
            "\nsecond runs excused by a SIGKILL before the first was stored: {}",
            self.excused
        ));
        s.push_str(&format!(
            "\ntasks/RSS: fresh {} / {:.1} MiB, after the churn {} / {:.1} MiB\n",
            self.baseline.0, self.baseline.1, self.end.0, self.end.1
        ));
        s.push_str(&format!("violations: {}", self.violations));
        for (k, n) in &self.by_invariant {
            s.push_str(&format!(", {k} {n}"));
        }
        s.push('\n');
        s
    }
}

/// Polls `f` every 100 ms until it is `Some`, up to `limit`.
async fn wait_for<T>(limit: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(t) = f().await {
            return Some(t);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs a soak with `config`; its summary.
///
/// # Errors
/// If the emulator or the operator cannot be run (a violation is no error).
pub async fn run(config: Config) -> anyhow::Result<Summary> {
    let release = !cfg!(debug_assertions);
    if !config.no_build {
        crate::building::build(release, &["soak-operator"])?;
    }
    if let Some(b) = &config.broken
        && Break::parse(b).is_none()
    {
        bail!("unknown --break {b:?}: expected one of {}", Break::names());
    }
    let exe = std::env::current_exe()?;
    let bin_dir = exe.parent().context("no directory")?.to_path_buf();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let out = config.out.clone().unwrap_or_else(|| {
        crate::building::workspace_root()
            .join("target")
            .join("soak")
            .join(stamp.to_string())
    });
    std::fs::create_dir_all(&out)?;
    let records_path = out.join("records.txt");
    std::fs::File::create(&records_path)?;
    let emulator = Emulator::start(&bin_dir.join("kube-emulator"), &out)?;
    let client = Soaker::new(&emulator.url)?;
    let operators = Operators {
        program: bin_dir.join("soak-operator"),
        kubeconfig: emulator.kubeconfig.clone(),
        records: records_path.clone(),
        dir: out.clone(),
        broken: config.broken.clone(),
        started: 0,
        current: None,
        logs: Vec::new(),
    };
    let soak = Soak {
        config: config.clone(),
        client,
        state: Mutex::new(State::default()),
        operators: tokio::sync::Mutex::new(operators),
        nesting: tokio::sync::Mutex::new(()),
    };
    let result = soak_with(&soak, &records_path).await;
    // Stop whatever still runs, even after an error.
    soak.operators
        .lock()
        .await
        .signal(nix::sys::signal::Signal::SIGKILL, Duration::from_secs(5))
        .await;
    drop(emulator);
    let (baseline, end) = result?;
    let logs = soak.operators.lock().await.logs.clone();
    let state = soak.lock();
    let mut by_invariant = BTreeMap::new();
    for v in &state.violations {
        *by_invariant.entry(v.invariant.to_string()).or_default() += 1;
    }
    let summary = Summary {
        seed: config.seed,
        minutes: config.minutes,
        broken: config.broken.clone(),
        churned: state.churned.clone(),
        faults: state.faults.clone(),
        operator_processes: logs.len(),
        records: state.checker.counts.clone(),
        excused: state.checker.excused,
        baseline,
        end,
        violations: state.violations.len(),
        by_invariant,
        first: state.violations.iter().take(100).cloned().collect(),
    };
    write_reports(&state, &summary, &out)?;
    Ok(summary)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// The run itself; the baseline and end (tasks, RSS MiB).
async fn soak_with(
    soak: &Soak,
    records_path: &Path,
) -> anyhow::Result<((usize, f64), (usize, f64))> {
    let pid = soak.operators.lock().await.start()?;
    soak.lock().event(None, format!("operator {pid} started"));

    // The checker and the observer, until the run ends.
    let stop = Stop::default();
    let checking = {
        let stop = stop.clone();
        let mut file = std::fs::File::open(records_path)?;
        async move {
            let (mut offset, mut pending) = (0u64, Vec::new());
            while !stop.is_set() {
                soak.check_records(&mut file, &mut offset, &mut pending);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            soak.check_records(&mut file, &mut offset, &mut pending);
        }
    };
    let observing = {
        let stop = stop.clone();
        async move {
            while !stop.is_set() {
                if let Err(e) = soak.observe().await {
                    eprintln!("soak: cannot observe the objects: {e:#}");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    let main = async {
        let r = main_phase(soak, pid).await;
        stop.set();
        r
    };
    // The checker reads every record once more after the stop.
    let (result, (), ()) = tokio::join!(main, checking, observing);
    let ends = result?;
    final_checks(soak).await;
    Ok(ends)
}

/// What is checked once every record is in: the delete handlers, the
/// create handlers of the garbled objects, and the operators' output.
async fn final_checks(soak: &Soak) {
    let logs = soak.operators.lock().await.logs.clone();
    let mut state = soak.lock();
    let missed: Vec<(String, String)> = state
        .objects
        .iter()
        .filter(|(uid, obj)| obj.fin && obj.held && !state.checker.deletes.contains(*uid))
        .map(|(uid, obj)| (uid.clone(), obj.name.clone()))
        .collect();
    for (uid, name) in missed {
        state.violation(
            "delete-ran",
            &uid,
            format!("{name} was deleted holding the finalizer, and its delete handler never ran"),
        );
    }
    let trusted: Vec<(String, String)> = state
        .objects
        .iter()
        .filter(|(uid, obj)| {
            obj.poison == Some(Poison::Garbled) && obj.handled && !state.checker.created(uid)
        })
        .map(|(uid, obj)| (uid.clone(), obj.name.clone()))
        .collect();
    for (uid, name) in trusted {
        state.violation(
            "garbage-ignored",
            &uid,
            format!(
                "{name} was created with malformed Kopf annotations and handled, but its create handler never ran"
            ),
        );
    }
    for log in logs {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains("panicked at")) {
            state.violation("no-panic", "-", format!("{}: {line}", log.display()));
        }
    }
}

/// A stop flag for the loops.
#[derive(Debug, Clone, Default)]
struct Stop(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Stop {
    fn set(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn is_set(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

fn ts(ns: i64) -> String {
    format!("{:.3}", ns as f64 / 1e9)
}

/// `events.log`, `violations.txt` and `summary.json`.
fn write_reports(state: &State, summary: &Summary, out: &Path) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    let mut events = String::new();
    for e in &state.events {
        let _ = writeln!(
            events,
            "{} {} {}",
            ts(e.ts),
            e.uid.as_deref().unwrap_or("-"),
            e.text
        );
    }
    std::fs::write(out.join("events.log"), events)?;
    let mut report = String::new();
    for v in &state.violations {
        let _ = writeln!(
            report,
            "== {} {} at {}: {}",
            v.invariant,
            v.uid,
            ts(v.at),
            v.message
        );
        // The object's own story, then the faults and restarts around it.
        let first = if v.uid == "-" {
            v.at - 60_000_000_000
        } else {
            state
                .events
                .iter()
                .find(|e| e.uid.as_deref() == Some(v.uid.as_str()))
                .map_or(v.at - 60_000_000_000, |e| e.ts)
        };
        let mut lines: Vec<(i64, String)> = Vec::new();
        for e in &state.events {
            let about = e.uid.as_deref() == Some(v.uid.as_str());
            if about || (e.uid.is_none() && e.ts >= first - 5_000_000_000 && e.ts <= v.at) {
                lines.push((e.ts, format!("runner   {}", e.text)));
            }
        }
        for r in state.checker.records.iter().filter(|r| r.uid == v.uid) {
            lines.push((r.ts, format!("operator {}", r.line())));
        }
        lines.sort();
        for (t, line) in lines {
            let _ = writeln!(report, "  {} {line}", ts(t));
        }
    }
    std::fs::write(out.join("violations.txt"), report)?;
    std::fs::write(
        out.join("summary.json"),
        serde_json::to_string_pretty(summary)?,
    )?;
    Ok(())
}

/// `kopf-bench soak …`: runs, prints the summary; failure on a violation.
pub async fn main(argv: Vec<String>) -> std::process::ExitCode {
    let config = Config::parse_from(argv);
    match run(config).await {
        Ok(summary) => {
            println!("{}", summary.text());
            if summary.violations == 0 {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("kopf-bench soak: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn main_phase(soak: &Soak, first: u32) -> anyhow::Result<((usize, f64), (usize, f64))> {
    let config = &soak.config;
    // The baseline: a fresh operator watching an empty namespace, two
    // stats after its first watch.
    let watching = wait_for(Duration::from_secs(60), async || {
        (soak.client.operator_watches().await.ok()? > 0).then(now_ns)
    })
    .await
    .context("the operator never started watching")?;
    let baseline_tasks = wait_for(Duration::from_secs(30), async || {
        let state = soak.lock();
        state
            .checker
            .stats
            .get(&first)
            .filter(|(ts, _)| *ts > watching + 1_500_000_000)
            .map(|(_, tasks)| *tasks)
    })
    .await
    .context("the operator records no stats")?;
    let baseline_rss = procfs::sample(first).map_or(0, |s| s.rss);
    soak.lock().event(
        None,
        format!(
            "baseline: {baseline_tasks} tasks, {:.1} MiB",
            mib(baseline_rss)
        ),
    );

    let until = Instant::now() + Duration::from_secs_f64(config.minutes * 60.0);
    let churn_rng = fastrand::Rng::with_seed(config.seed);
    let chaos_rng = fastrand::Rng::with_seed(config.seed ^ 0x5eed_c4a0_5eed_c4a0);
    let (churned, chaos) = tokio::join!(
        churn::run(soak, until, churn_rng),
        chaos::run(soak, until, chaos_rng)
    );
    churned?;
    chaos?;
    soak.client
        .admin("faults/clear", serde_json::json!({}))
        .await?;
    soak.lock().event(None, "churn and faults stopped".into());
    churn::cure_all(soak).await?;

    // Caught up: every live object's diff-base is its state now (but for
    // those that never decode).
    let never: HashSet<String> = soak
        .lock()
        .objects
        .iter()
        .filter(|(_, obj)| obj.poison == Some(Poison::Deep))
        .map(|(uid, _)| uid.clone())
        .collect();
    let behind = |cm: &ConfigMap| {
        let p = Persisted::of(cm);
        cm.metadata.deletion_timestamp.is_none()
            && !cm
                .metadata
                .uid
                .as_ref()
                .is_some_and(|uid| never.contains(uid))
            && p.diff_base.as_ref() != Some(&p.current)
    };
    let limit = Duration::from_secs(config.stop_bound * 3);
    let caught_up = wait_for(limit, async || {
        let stored = soak.client.list().await.ok()?;
        (!stored.iter().any(behind)).then_some(())
    })
    .await;
    if caught_up.is_none() {
        let stored = soak.client.list().await?;
        let mut state = soak.lock();
        for cm in &stored {
            let p = Persisted::of(cm);
            if behind(cm) {
                let uid = cm.metadata.uid.clone().unwrap_or_default();
                state.violation(
                    "caught-up",
                    &uid,
                    format!(
                        "{} is at v,f={:?}, its diff-base at {:?}, {limit:?} after the churn stopped",
                        cm.metadata.name.clone().unwrap_or_default(),
                        p.current,
                        p.diff_base
                    ),
                );
            }
        }
    }

    // Everything deleted, and gone.
    let names: Vec<String> = soak.lock().live.keys().cloned().collect();
    for name in names {
        churn::delete(soak, &name).await?;
    }
    let gone = wait_for(limit, async || {
        soak.client.list().await.ok()?.is_empty().then_some(())
    })
    .await;
    if gone.is_none() {
        let left = soak.client.list().await?;
        let mut state = soak.lock();
        for cm in &left {
            state.violation(
                "finalizer-left",
                &cm.metadata.uid.clone().unwrap_or_default(),
                format!(
                    "{} left after the run with finalizers {:?}",
                    cm.metadata.name.clone().unwrap_or_default(),
                    cm.metadata.finalizers.clone().unwrap_or_default()
                ),
            );
        }
    }

    // Tasks and memory back to a fresh operator's.
    let pid = soak.operators.lock().await.pid().unwrap_or(0);
    let settled = now_ns();
    let tasks_ok = wait_for(limit, async || {
        let state = soak.lock();
        state
            .checker
            .stats
            .get(&pid)
            .filter(|(ts, tasks)| *ts > settled && *tasks <= baseline_tasks + TASK_SLACK)
            .map(|_| ())
    })
    .await;
    let end_tasks = soak.lock().checker.stats.get(&pid).map_or(0, |s| s.1);
    let end_rss = procfs::sample(pid).map_or(0, |s| s.rss);
    {
        let mut state = soak.lock();
        if tasks_ok.is_none() {
            state.violation(
                "baseline-tasks",
                "-",
                format!(
                    "operator {pid} has {end_tasks} alive tasks once its objects are gone; a fresh one had {baseline_tasks}"
                ),
            );
        }
        if end_rss > baseline_rss + RSS_SLACK {
            state.violation(
                "baseline-rss",
                "-",
                format!(
                    "operator {pid} has {:.1} MiB RSS once its objects are gone; a fresh one had {:.1} MiB",
                    mib(end_rss),
                    mib(baseline_rss)
                ),
            );
        }
    }

    // A last graceful stop.
    let exited = soak
        .operators
        .lock()
        .await
        .signal(nix::sys::signal::Signal::SIGTERM, TERM_GRACE)
        .await;
    if !exited {
        soak.lock().violation(
            "sigterm-exit",
            "-",
            format!("operator {pid} did not exit within {TERM_GRACE:?} of SIGTERM"),
        );
    }
    // The delete handler ran for every object deleted with the finalizer
    // (read once the checker has seen every record: see the caller).
    Ok((
        (baseline_tasks, mib(baseline_rss)),
        (end_tasks, mib(end_rss)),
    ))
}
