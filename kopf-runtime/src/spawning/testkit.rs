//! Test helpers: a recording [`Observer`], bodies, and paused-clock helpers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::observing::{AbandonedReport, Observer, OutcomeReport};
use super::outcome::{TaskOutcome, Verdict};
use super::task::{Owner, TaskFn, TaskSpec};
use super::{Spawner, SpawnerSettings};
use crate::model::handlers::Handler;
use crate::model::kwargs::Kwargs;
use crate::model::resources::ResourceRef;
use crate::spawning::stopping::StopReason;

/// Specs built as the registry's handlers are, for the engine's tests:
/// the options are set on the handler, the call is any [`TaskFn`].
impl TaskSpec {
    fn of(handler: Handler, call: TaskFn) -> Self {
        Self {
            id: Arc::from(handler.id()),
            handler: Arc::new(handler),
            call,
            owner: Owner::default(),
        }
    }

    pub(crate) fn daemon(id: &str, call: TaskFn) -> Self {
        let resource = ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples");
        Self::of(Handler::daemon(resource, id, |_: Kwargs| async {}), call)
    }

    pub(crate) fn timer(id: &str, interval: Duration, call: TaskFn) -> Self {
        let resource = ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples");
        let handler = Handler::timer(resource, id, |_: Kwargs| async {}).interval(interval);
        Self::of(handler, call)
    }

    /// A timer without an `interval`: once per `idle` period, or once.
    pub(crate) fn timer_without_interval(id: &str, call: TaskFn) -> Self {
        let resource = ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples");
        Self::of(Handler::timer(resource, id, |_: Kwargs| async {}), call)
    }

    fn with(self, set: impl FnOnce(Handler) -> Handler) -> Self {
        let handler = set(Arc::unwrap_or_clone(self.handler));
        Self::of(handler, self.call)
    }

    pub(crate) fn retries(self, attempts: u32) -> Self {
        self.with(|h| h.retries(attempts))
    }

    pub(crate) fn backoff(self, backoff: Duration) -> Self {
        self.with(|h| h.backoff(backoff))
    }

    pub(crate) fn timeout(self, timeout: Duration) -> Self {
        self.with(|h| h.timeout(timeout))
    }

    pub(crate) fn sharp(self, sharp: bool) -> Self {
        self.with(|h| h.sharp(sharp))
    }

    pub(crate) fn idle(self, idle: Duration) -> Self {
        self.with(|h| h.idle(idle))
    }

    pub(crate) fn initial_delay(self, delay: Duration) -> Self {
        self.with(|h| h.initial_delay(delay))
    }

    pub(crate) fn cancellation_backoff(self, backoff: Duration) -> Self {
        self.with(|h| h.cancellation_backoff(backoff))
    }

    pub(crate) fn cancellation_timeout(self, timeout: Duration) -> Self {
        self.with(|h| h.cancellation_timeout(timeout))
    }

    pub(crate) fn build(self) -> Arc<Self> {
        Arc::new(self)
    }
}

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
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            epoch: Instant::now(),
            outcomes: Mutex::default(),
            abandoned: Mutex::default(),
        })
    }

    pub(crate) fn outcomes(&self) -> Vec<Seen> {
        self.outcomes.lock().expect("lock").clone()
    }

    pub(crate) fn verdicts(&self) -> Vec<(u32, Verdict)> {
        self.outcomes()
            .iter()
            .map(|s| (s.retry, s.verdict))
            .collect()
    }

    pub(crate) fn abandoned(&self) -> Vec<Abandoned> {
        self.abandoned.lock().expect("lock").clone()
    }
}

impl Observer for Recorder {
    fn on_outcome(&self, report: OutcomeReport<'_>) {
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
    pub(crate) fn new() -> Self {
        Self {
            epoch: Instant::now(),
            at: Arc::default(),
        }
    }

    pub(crate) fn hit(&self) -> usize {
        let mut at = self.at.lock().expect("lock");
        at.push(self.epoch.elapsed());
        at.len() - 1
    }

    pub(crate) fn times(&self) -> Vec<Duration> {
        self.at.lock().expect("lock").clone()
    }

    pub(crate) fn epoch(&self) -> Instant {
        self.epoch
    }

    pub(crate) fn count(&self) -> usize {
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

/// A current-thread runtime on a paused clock, for tests that count what
/// the test's thread allocates (its tasks run there).
pub(crate) fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime")
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
