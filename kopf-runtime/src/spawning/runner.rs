//! One handler call of a running task ([`Run`]): builds the
//! [`TaskContext`], catches panics, reports outcomes to the [`Observer`].
//! Shared by the daemon and timer loops.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::FutureExt;
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use super::observing::{Observer, OutcomeReport};
use super::registry::Liveness;
use super::stopping::StopFlag;
use super::task::{TaskContext, TaskOutcome, TaskSpec, Verdict};

/// Everything a runner loop (daemon or timer) needs.
pub(crate) struct Run {
    pub(crate) spec: Arc<TaskSpec>,
    pub(crate) flag: StopFlag,
    /// The object's changes: only for timers with `idle`.
    pub(crate) changes: Option<watch::Receiver<Instant>>,
    pub(crate) body: watch::Receiver<Arc<Value>>,
    pub(crate) observer: Arc<dyn Observer>,
    pub(crate) liveness: Arc<Liveness>,
    /// The wall clock and Tokio's clock read once, at spawn: a call's wall
    /// start time is derived from its monotonic one without another
    /// system-clock read per tick.
    pub(crate) epoch: (jiff::Timestamp, Instant),
}

impl Run {
    /// Call the handler once; a panic becomes [`TaskOutcome::Error`].
    pub(crate) async fn call(&self, retry: u32, started_at: Instant) -> TaskOutcome {
        let (wall, mono) = self.epoch;
        let started = wall
            .checked_add(started_at.saturating_duration_since(mono))
            .unwrap_or(wall);
        let ctx = TaskContext {
            uid: Arc::clone(&self.liveness.shared.uid),
            handler_id: Arc::clone(&self.liveness.shared.id),
            stopped: self.flag.clone(),
            body: self.body.clone(),
            retry,
            started,
            started_at,
            liveness: Arc::clone(&self.liveness),
        };
        let handler = &self.spec.call;
        let result = match std::panic::catch_unwind(AssertUnwindSafe(|| handler(ctx))) {
            Ok(future) => AssertUnwindSafe(future).catch_unwind().await,
            Err(panic) => Err(panic),
        };
        result.unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_owned());
            TaskOutcome::Error {
                message: format!("handler panicked: {message}"),
            }
        })
    }

    /// Tell the observer (and the log) about an outcome.
    pub(crate) fn report(&self, retry: u32, outcome: TaskOutcome, verdict: Verdict) {
        let shared = &self.liveness.shared;
        match &outcome {
            TaskOutcome::Ok(_) => {
                tracing::debug!(uid = %shared.uid, handler = %shared.id, retry, "handler succeeded");
            }
            TaskOutcome::Temporary { message, .. }
            | TaskOutcome::Permanent { message }
            | TaskOutcome::Error { message } => {
                tracing::warn!(uid = %shared.uid, handler = %shared.id, retry, ?verdict, "handler failed: {message}");
            }
        }
        self.observer.on_outcome(OutcomeReport {
            uid: Arc::clone(&shared.uid),
            handler_id: Arc::clone(&shared.id),
            kind: self.spec.kind(),
            retry,
            outcome,
            verdict,
        });
    }

    /// The daemon exited on its own: do not respawn it for this object.
    pub(crate) fn finish_for_good(&self) {
        self.liveness
            .shared
            .finished_for_good
            .store(true, Ordering::Release);
    }
}
