//! Test helpers: a recording [`Observer`], bodies, and paused-clock helpers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::observing::{AbandonedReport, Observer, OutcomeReport};
use super::task::{TaskOutcome, Verdict};
use super::{Spawner, SpawnerSettings, StopReason};

/// One recorded outcome.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Seen {
    pub uid: String,
    pub id: String,
    pub retry: u32,
    pub outcome: TaskOutcome,
    pub verdict: Verdict,
    /// Since the recorder was created.
    pub at: Duration,
}

/// One recorded abandonment: UID, handler id, reason, time waited, and the
/// body the report carried.
pub(crate) type Abandoned = (
    String,
    String,
    Option<StopReason>,
    Duration,
    Option<Arc<Value>>,
);

/// Records everything the spawner reports.
pub(crate) struct Recorder {
    epoch: Instant,
    pub outcomes: Mutex<Vec<Seen>>,
    pub abandoned: Mutex<Vec<Abandoned>>,
}

impl Recorder {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            epoch: Instant::now(),
            outcomes: Mutex::default(),
            abandoned: Mutex::default(),
        })
    }

    pub fn outcomes(&self) -> Vec<Seen> {
        self.outcomes.lock().expect("lock").clone()
    }

    pub fn verdicts(&self) -> Vec<(u32, Verdict)> {
        self.outcomes()
            .iter()
            .map(|s| (s.retry, s.verdict))
            .collect()
    }

    pub fn abandoned(&self) -> Vec<Abandoned> {
        self.abandoned.lock().expect("lock").clone()
    }
}

impl Observer for Recorder {
    fn on_outcome(&self, report: OutcomeReport) {
        self.outcomes.lock().expect("lock").push(Seen {
            uid: report.uid.to_string(),
            id: report.handler_id.to_string(),
            retry: report.retry,
            outcome: report.outcome,
            verdict: report.verdict,
            at: self.epoch.elapsed(),
        });
    }

    fn on_abandoned(&self, report: AbandonedReport) {
        self.abandoned.lock().expect("lock").push((
            report.uid.to_string(),
            report.handler_id.to_string(),
            report.reason,
            report.waited,
            report.body,
        ));
    }
}

/// A spawner reporting to a fresh recorder.
pub(crate) fn spawner() -> (Spawner, Arc<Recorder>) {
    let recorder = Recorder::new();
    let spawner = Spawner::new(recorder.clone(), SpawnerSettings::default());
    (spawner, recorder)
}

/// A body with a distinguishing field.
pub(crate) fn body(n: i64) -> Arc<Value> {
    Arc::new(json!({"metadata": {"uid": "u"}, "spec": {"n": n}}))
}

/// Shared log of moments (since `epoch`) at which a handler was called.
#[derive(Clone)]
pub(crate) struct Calls {
    epoch: Instant,
    at: Arc<Mutex<Vec<Duration>>>,
}

impl Calls {
    pub fn new() -> Self {
        Self {
            epoch: Instant::now(),
            at: Arc::default(),
        }
    }

    pub fn hit(&self) -> usize {
        let mut at = self.at.lock().expect("lock");
        at.push(self.epoch.elapsed());
        at.len() - 1
    }

    pub fn times(&self) -> Vec<Duration> {
        self.at.lock().expect("lock").clone()
    }

    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    pub fn count(&self) -> usize {
        self.at.lock().expect("lock").len()
    }
}

/// Seconds as a `Duration`.
pub(crate) fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Milliseconds as a `Duration`.
pub(crate) fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// Let spawned tasks run without moving the clock.
pub(crate) async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// Move the paused clock to `epoch + at` (auto-advance does this too; this
/// is explicit and works while a blocking thread inhibits auto-advance).
pub(crate) async fn advance_to(epoch: Instant, at: Duration) {
    settle().await;
    let target = epoch + at;
    let now = Instant::now();
    if target > now {
        tokio::time::advance(target - now).await;
    }
    settle().await;
}
