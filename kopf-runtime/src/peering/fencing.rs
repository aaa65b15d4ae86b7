//! Fencing: a replica acts only while its Lease is valid on its own
//! monotonic clock.
//!
//! An elector that renews its Lease at `t` may lead until `t +
//! renew_deadline`: it steps down by then unless a later renewal succeeded,
//! and the other replicas count the Lease from their sight of the same
//! renewal, so they take it over no sooner than `t + lease_duration`. The
//! elector keeps that bound in a [`Tenure`]; a term of leadership reads
//! the tenures of the Leases it serves through a [`Fence`], at every place
//! where work starts: before a queued event is processed, before a timer
//! ticks or a daemon is called, and before the term's client writes.
//!
//! The elector's own step-down is not enough on its own: a process that is
//! paused (`SIGSTOP`, a frozen VM, a starved node) for longer than the
//! lease finds, when it resumes, its overdue timers and its elector's
//! renewal due at the same moment, in no particular order, while another
//! replica already leads. The fence is read with the clock at that moment,
//! so the work finds the Lease lapsed before it begins.
//!
//! # Guarantees
//! - With a Lease, nothing starts after `last successful renewal +
//!   renew_deadline` on this process's monotonic clock, for every Lease of
//!   the term (every shard slot held): no event is processed, no timer
//!   ticks, no daemon is called, and the term's client refuses every
//!   write.
//! - What is held back is counted (`kopf_fenced_total{what}`) and reported
//!   in one warning per term.
//!
//! # Caveats
//! - A handler already running when the pause began goes on when the
//!   process resumes: it cannot be fenced, but its writes through the
//!   operator (results, patches, its `client`) are refused.
//! - The bound rests on the replicas' clocks running at the same rate, not
//!   on them agreeing on the time, as client-go's election does.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::time::Instant;

use crate::operations::metrics::Metrics;

/// Until when a replica may act on what one Lease covers.
#[derive(Debug)]
pub(crate) struct Tenure {
    /// The moment the nanoseconds below count from.
    base: Instant,
    /// Nanoseconds after `base` until which the Lease is held; 0 when not.
    until: AtomicU64,
}

impl Default for Tenure {
    fn default() -> Self {
        Self {
            base: Instant::now(),
            until: AtomicU64::new(0),
        }
    }
}

impl Tenure {
    /// The Lease is held until `until`.
    pub(crate) fn grant(&self, until: Instant) {
        let nanos = until.saturating_duration_since(self.base).as_nanos();
        let nanos = u64::try_from(nanos).unwrap_or(u64::MAX).max(1);
        self.until.store(nanos, Ordering::Release);
    }

    /// The Lease is not held.
    pub(crate) fn revoke(&self) {
        self.until.store(0, Ordering::Release);
    }

    /// Whether the Lease is held at `now`.
    pub(crate) fn holds_at(&self, now: Instant) -> bool {
        let until = self.until.load(Ordering::Acquire);
        let elapsed = now.saturating_duration_since(self.base).as_nanos();
        until != 0 && u128::from(until) > elapsed
    }
}

/// What a fence holds back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Held {
    /// A queued event of an object, before its handlers run.
    Event,
    /// A timer's tick.
    Timer,
    /// A daemon's call.
    Daemon,
    /// A write through the term's client.
    Write,
}

impl Held {
    const ALL: [Held; 4] = [Held::Event, Held::Timer, Held::Daemon, Held::Write];

    /// The `what` label of `kopf_fenced_total`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Held::Event => "event",
            Held::Timer => "timer",
            Held::Daemon => "daemon",
            Held::Write => "write",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The counters of `kopf_fenced_total`, one per [`Held`], resolved once.
pub(crate) type FencedCounters = [Counter; 4];

/// The operator's `kopf_fenced_total` counters.
pub(crate) fn counters(metrics: &Metrics) -> FencedCounters {
    metrics.fenced(Held::ALL.map(Held::label))
}

/// What one term of leadership may do: see the [module](self) notes.
/// Cheap to clone; every clone reads the same tenures and counts into the
/// same term.
#[derive(Debug, Clone)]
pub(crate) struct Fence {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The Leases the term serves: every one must be held.
    tenures: Vec<Arc<Tenure>>,
    /// What was held back in this term, per [`Held`].
    held: [AtomicU64; 4],
    /// The operator's counters, when it serves metrics.
    metrics: Option<FencedCounters>,
    /// How soon work held back is tried again (the elector's retry
    /// period): by then the term has ended, or a renewal let it go on.
    retry: Duration,
}

impl Fence {
    /// A fence for a term that serves the Leases of `tenures`, whose work
    /// held back is tried again after `retry`.
    pub(crate) fn new(
        tenures: Vec<Arc<Tenure>>,
        metrics: Option<FencedCounters>,
        retry: Duration,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                tenures,
                held: Default::default(),
                metrics,
                retry,
            }),
        }
    }

    /// How soon work held back is tried again.
    pub(crate) fn retry(&self) -> Duration {
        self.inner.retry
    }

    /// Whether `what` may start at `now`; if not, it is counted as held back.
    pub(crate) fn allows(&self, what: Held, now: Instant) -> bool {
        let inner = &*self.inner;
        if inner.tenures.iter().all(|tenure| tenure.holds_at(now)) {
            return true;
        }
        inner.held[what.index()].fetch_add(1, Ordering::Relaxed);
        if let Some(counters) = &inner.metrics {
            counters[what.index()].inc();
        }
        false
    }

    /// Whether `what` may start now.
    pub(crate) fn allows_now(&self, what: Held) -> bool {
        self.allows(what, Instant::now())
    }

    /// What was held back in this term, per kind, those with none left out.
    pub(crate) fn held_back(&self) -> Vec<(Held, u64)> {
        Held::ALL
            .into_iter()
            .map(|what| (what, self.inner.held[what.index()].load(Ordering::Relaxed)))
            .filter(|(_, count)| *count > 0)
            .collect()
    }

    /// Warns once, at the end of the term, if anything was held back.
    pub(crate) fn report(&self, lease: &str) {
        let held = self.held_back();
        if held.is_empty() {
            return;
        }
        let held = held
            .iter()
            .map(|(what, count)| format!("{count} {}", what.label()))
            .collect::<Vec<_>>()
            .join(", ");
        tracing::warn!(
            %lease,
            %held,
            "the Lease lapsed on this replica's clock before its elector stepped down \
             (was the process paused or starved?): the work that would have started \
             since was held back, so that no two replicas act on one object",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RENEW_DEADLINE: Duration = Duration::from_secs(10);
    const RETRY: Duration = Duration::from_secs(2);

    #[tokio::test(start_paused = true)]
    async fn a_tenure_holds_until_its_deadline_and_not_after() {
        let tenure = Tenure::default();
        assert!(!tenure.holds_at(Instant::now()), "not held before a grant");
        tenure.grant(Instant::now() + RENEW_DEADLINE);
        assert!(tenure.holds_at(Instant::now()));
        tokio::time::advance(RENEW_DEADLINE - Duration::from_millis(1)).await;
        assert!(tenure.holds_at(Instant::now()));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!tenure.holds_at(Instant::now()), "lapsed at the deadline");
        tenure.grant(Instant::now() + RENEW_DEADLINE);
        assert!(tenure.holds_at(Instant::now()), "held again once renewed");
        tenure.revoke();
        assert!(!tenure.holds_at(Instant::now()), "not held once revoked");
    }

    /// A process paused past its renew deadline finds its Lease lapsed when
    /// it resumes, whatever runs first: the clock, not the elector, decides.
    #[tokio::test(start_paused = true)]
    async fn work_due_after_a_pause_past_the_renew_deadline_is_held_back() {
        let tenure = Arc::new(Tenure::default());
        tenure.grant(Instant::now() + RENEW_DEADLINE);
        let fence = Fence::new(vec![Arc::clone(&tenure)], None, RETRY);
        assert!(fence.allows_now(Held::Timer));
        // The pause: the timers and the elector all come due at once.
        tokio::time::advance(RENEW_DEADLINE * 2).await;
        assert!(!fence.allows_now(Held::Timer));
        assert!(!fence.allows_now(Held::Timer));
        assert!(!fence.allows_now(Held::Event));
        assert!(!fence.allows_now(Held::Write));
        assert_eq!(
            fence.held_back(),
            vec![(Held::Event, 1), (Held::Timer, 2), (Held::Write, 1)]
        );
    }

    /// With shards, a term serves several slots: one lapsed slot holds back
    /// the whole term, which ends as the slots held change.
    #[tokio::test(start_paused = true)]
    async fn every_slot_of_a_term_must_be_held() {
        let (a, b) = (Arc::new(Tenure::default()), Arc::new(Tenure::default()));
        a.grant(Instant::now() + RENEW_DEADLINE);
        b.grant(Instant::now() + RENEW_DEADLINE / 2);
        let fence = Fence::new(vec![a, Arc::clone(&b)], None, RETRY);
        assert!(fence.allows_now(Held::Daemon));
        tokio::time::advance(RENEW_DEADLINE / 2).await;
        assert!(!fence.allows_now(Held::Daemon));
        b.grant(Instant::now() + RENEW_DEADLINE);
        assert!(fence.allows_now(Held::Daemon));
    }

    #[test]
    fn held_back_work_is_counted_into_the_metric() {
        let counters: FencedCounters = Default::default();
        let fence = Fence::new(
            vec![Arc::new(Tenure::default())],
            Some(counters.clone()),
            RETRY,
        );
        assert!(!fence.allows_now(Held::Write));
        assert_eq!(counters[Held::Write.index()].get(), 1);
        assert_eq!(counters[Held::Timer.index()].get(), 0);
    }
}
