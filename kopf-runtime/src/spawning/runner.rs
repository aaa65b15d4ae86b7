//! One handler call of a running task ([`Run`]): builds the
//! [`TaskContext`], catches panics (with the guard of every handler call,
//! [`execution::catch_panics`](crate::processing::execution::catch_panics)), reports outcomes to the
//! [`Observer`].
//! Shared by the daemon and timer loops.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::liveness::Liveness;
use super::observing::{Observer, OutcomeReport};
use super::outcome::{TaskOutcome, Verdict};
use super::task::{TaskContext, TaskSpec};
use crate::model::kwargs::BodyReader;
use crate::peering::fencing::{Fence, Held};
use crate::spawning::stopping::StopFlag;

/// Everything a runner loop (daemon or timer) needs.
pub(crate) struct Run {
    pub(crate) spec: Arc<TaskSpec>,
    pub(crate) flag: StopFlag,
    /// The object's changes: only for timers with `idle`.
    pub(crate) changes: Option<watch::Receiver<Instant>>,
    pub(crate) body: BodyReader,
    pub(crate) observer: Arc<dyn Observer>,
    pub(crate) liveness: Liveness,
    /// The wall clock and Tokio's clock read once, at spawn: a call's wall
    /// start time is derived from its monotonic one without another
    /// system-clock read per tick.
    pub(crate) epoch: (jiff::Timestamp, Instant),
    /// What a call must pass first, in a term of leadership.
    pub(crate) fence: Option<Fence>,
}

impl Run {
    /// Whether a call of `what` is held back at `now`, and if so, how soon
    /// to try again: only in a term of leadership whose Lease has lapsed
    /// on this process's clock (see [`fencing`](crate::peering::fencing)).
    pub(crate) fn held_back(&self, what: Held, now: Instant) -> Option<Duration> {
        let fence = self.fence.as_ref()?;
        (!fence.allows(what, now)).then(|| fence.retry())
    }

    /// Call the handler once; a panic becomes [`TaskOutcome::Error`].
    pub(crate) async fn call(&self, retry: u32, started_at: Instant) -> TaskOutcome {
        let (wall, mono) = self.epoch;
        let started = wall
            .checked_add(started_at.saturating_duration_since(mono))
            .unwrap_or(wall);
        let ctx = TaskContext {
            stopped: self.flag.clone(),
            body: self.body.clone(),
            retry,
            started,
            started_at,
            liveness: self.liveness.clone(),
        };
        crate::processing::execution::catch_panics(|| (self.spec.call)(ctx))
            .await
            .unwrap_or_else(|message| TaskOutcome::Error { message })
    }

    /// Tell the observer about an outcome (the task's call logged it).
    pub(crate) fn report(&self, retry: u32, outcome: TaskOutcome, verdict: Verdict) {
        let shared = &self.liveness.shared;
        self.observer.on_outcome(OutcomeReport {
            uid: &shared.uid,
            handler_id: &shared.id,
            kind: self.spec.kind(),
            retry,
            outcome,
            verdict,
        });
    }

    /// The task ended on its own (a daemon, or a timer that runs once): do
    /// not respawn it for this object.
    pub(crate) fn finish_for_good(&self) {
        self.liveness
            .shared
            .finished_for_good
            .store(true, Ordering::Release);
    }
}
