//! One attempt of a running task ([`Run::attempt`]): builds the
//! [`TaskContext`], calls the handler with panics caught (the guard of
//! every handler call,
//! [`execution::catch_panics`](crate::processing::execution::catch_panics)),
//! judges the outcome and reports both to the
//! [`Observer`](super::observing::Observer). Shared by the
//! daemon and timer loops.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::liveness::{Liveness, TaskShared};
use super::observing::OutcomeReport;
use super::outcome::{TaskOutcome, Verdict};
use super::task::{TaskContext, TaskSpec};
use crate::model::kwargs::BodyReader;
use crate::peering::fencing::Held;
use crate::spawning::stopping::{FlagState, HoldsFlag, StopFlag};

/// What a runner loop (daemon or timer) holds of its own; what it only
/// reads is in its task's shared state ([`TaskShared`]), which a call
/// touches anyway, so that every waiting task's future is small.
pub(crate) struct Run {
    pub(crate) spec: Arc<TaskSpec>,
    /// The object's changes: only for timers with `idle`.
    pub(crate) changes: Option<watch::Receiver<Instant>>,
    pub(crate) body: BodyReader,
    pub(crate) liveness: Liveness,
}

impl Run {
    fn shared(&self) -> &TaskShared {
        &self.liveness.shared
    }

    /// Fetches, all at once, the memory of its own that a call is about to
    /// update: the object's body cell, memo and logger (the stop flag is in
    /// the task's shared state).
    /// With hundreds of thousands of timers, each is a cache miss at every
    /// tick, and the call's reference-count increments are locked
    /// instructions, which wait for memory one after another. Plain loads
    /// first let the processor wait for all of them together, and the
    /// increments then find them in the cache. At 300,000 timers a tick
    /// took 1.7 µs instead of 1.9 without finalizers, and 2.4 instead of
    /// 3.1 with them. The values read mean nothing.
    pub(crate) fn warm(&self) {
        let shared = self.shared();
        let object = shared
            .object
            .get()
            .map(|object| (object.memo.warm(), object.logger.warm()));
        std::hint::black_box((self.body.warm(), object));
    }

    /// The task's stop flag.
    pub(crate) fn flag(&self) -> &FlagState {
        &self.shared().flag
    }

    /// Whether a call of `what` is held back at `now`, and if so, how soon
    /// to try again: only in a term of leadership whose Lease has lapsed
    /// on this process's clock (see [`fencing`](crate::peering::fencing)).
    pub(crate) fn held_back(&self, what: Held, now: Instant) -> Option<Duration> {
        let fence = self.shared().calling.fence.as_ref()?;
        (!fence.allows(what, now)).then(|| fence.retry())
    }

    /// One attempt: call the handler (retry number `retry` of an attempt
    /// series that began at `first`), judge its outcome, report both: the
    /// verdict is [`Verdict::Stopped`] if the task was stopped meanwhile.
    pub(crate) async fn attempt(&self, retry: u32, first: Instant) -> Verdict {
        let outcome = self.call(retry, first).await;
        let verdict = if self.flag().is_set() {
            Verdict::Stopped
        } else {
            self.spec.verdict_for(&outcome, retry, first.elapsed())
        };
        self.report(retry, outcome, verdict);
        verdict
    }

    /// Call the handler once; a panic becomes [`TaskOutcome::Error`].
    async fn call(&self, retry: u32, started_at: Instant) -> TaskOutcome {
        let (wall, mono) = self.shared().calling.epoch;
        let started = wall
            .checked_add(started_at.saturating_duration_since(mono))
            .unwrap_or(wall);
        let ctx = TaskContext {
            stopped: StopFlag::of(Arc::clone(&self.liveness.shared) as Arc<dyn HoldsFlag>),
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
    fn report(&self, retry: u32, outcome: TaskOutcome, verdict: Verdict) {
        let shared = self.shared();
        shared.calling.observer.on_outcome(OutcomeReport {
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
        self.shared()
            .finished_for_good
            .store(true, Ordering::Release);
    }
}
