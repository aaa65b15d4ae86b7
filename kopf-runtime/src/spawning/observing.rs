//! What the engine hears from the spawner: every handler call's outcome
//! ([`OutcomeReport`]) and every abandoned task ([`AbandonedReport`]),
//! through an [`Observer`].
//!
//! Reports are cheap to build: an outcome's borrows the task's ids (every
//! tick makes one), an abandoned task's counts references to them, and
//! the outcome is moved in.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::outcome::{TaskKind, TaskOutcome, Verdict};
use crate::spawning::stopping::StopReason;

/// One call's outcome, as reported to the [`Observer`]. It borrows the
/// task's ids: every tick makes one, and an observer that keeps it copies
/// what it keeps.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OutcomeReport<'a> {
    /// The object's UID.
    pub uid: &'a str,
    /// The handler id.
    pub handler_id: &'a str,
    /// Daemon or timer.
    pub kind: TaskKind,
    /// The attempt number (0 for the first).
    pub retry: u32,
    /// What the handler returned (a panic is an [`TaskOutcome::Error`]).
    pub outcome: TaskOutcome,
    /// What happens next.
    pub verdict: Verdict,
}

/// A task that did not end within its `cancellation_timeout` after being
/// cancelled (or by a shutdown's deadline), and was forgotten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AbandonedReport {
    /// The object's UID.
    pub uid: Arc<str>,
    /// The handler id.
    pub handler_id: Arc<str>,
    /// Why it was being stopped.
    pub reason: Option<StopReason>,
    /// How long it was given in total (graceful period + cancellation
    /// timeout, or the shutdown timeout).
    pub waited: Duration,
    /// The object's last body the task knew (e.g. to post an Event on it).
    pub body: Option<Arc<Value>>,
}

/// Hears about every handler outcome and every abandoned task; implemented
/// by the engine (status patches, Kubernetes Events, metrics).
///
/// # Caveats
/// Called synchronously on the task's own thread: must be quick, must not
/// block and must not panic; forward to a channel for anything slow.
pub(crate) trait Observer: Send + Sync + 'static {
    /// One handler call finished (or panicked). A call cancelled by the
    /// spawner (after `cancellation_backoff`) has no outcome and is not
    /// reported.
    fn on_outcome(&self, report: OutcomeReport<'_>) {
        let _ = report;
    }

    /// A task was abandoned.
    fn on_abandoned(&self, report: AbandonedReport) {
        let _ = report;
    }
}

/// Ignores everything.
impl Observer for () {}

/// Anything the spawner reports, for channel-based observers.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SpawnEvent {
    /// See [`Observer::on_outcome`]: the report, with its ids copied.
    Outcome {
        uid: String,
        handler_id: String,
        outcome: TaskOutcome,
        verdict: Verdict,
    },
    /// See [`Observer::on_abandoned`].
    Abandoned(AbandonedReport),
}

/// Forwards every report; reports are dropped once the receiver is gone.
#[cfg(test)]
impl Observer for tokio::sync::mpsc::UnboundedSender<SpawnEvent> {
    fn on_outcome(&self, report: OutcomeReport<'_>) {
        let _ = self.send(SpawnEvent::Outcome {
            uid: report.uid.to_owned(),
            handler_id: report.handler_id.to_owned(),
            outcome: report.outcome,
            verdict: report.verdict,
        });
    }

    fn on_abandoned(&self, report: AbandonedReport) {
        let _ = self.send(SpawnEvent::Abandoned(report));
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc;

    use super::super::testkit::{body, secs};
    use super::super::{Spawner, SpawnerSettings, TaskSpec, task_fn};
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_channel_is_an_observer() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let spawner = Spawner::new(Arc::new(tx), SpawnerSettings::default());
        let spec = TaskSpec::timer(
            "t",
            secs(1),
            task_fn(|ctx| async move { TaskOutcome::Ok(Some(serde_json::json!(ctx.retry))) }),
        )
        .build();
        spawner.ensure("u1", &spec, &body(1));
        let event = rx.recv().await.expect("an outcome");
        assert_eq!(
            event,
            SpawnEvent::Outcome {
                uid: "u1".into(),
                handler_id: "t".into(),
                outcome: TaskOutcome::Ok(Some(serde_json::json!(0))),
                verdict: Verdict::Done,
            }
        );
        spawner.shutdown(secs(1)).await.expect("clean shutdown");
    }
}
