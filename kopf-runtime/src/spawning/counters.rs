//! Lifetime counters of a [`Spawner`](super::Spawner), and [`TaskCounters`],
//! the handle through which an operator's owner reads them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Lifetime counters, bumped by the spawner.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) spawned: AtomicU64,
    pub(crate) finished: AtomicU64,
    pub(crate) stopped: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) abandoned: AtomicU64,
}

/// How many daemon and timer tasks an operator has spawned, and how each
/// ended, since it started: a copy taken by [`TaskCounters::snapshot`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskCounts {
    /// Tasks spawned.
    pub spawned: u64,
    /// Tasks that ended on their own, without being asked to stop.
    pub finished: u64,
    /// Tasks that ended gracefully after their stop flag was set.
    pub stopped: u64,
    /// Tasks that were cancelled (after `cancellation_backoff`) and then ended.
    pub cancelled: u64,
    /// Tasks that did not end within `cancellation_timeout` after being
    /// cancelled (or by a shutdown's deadline), and were forgotten.
    pub abandoned: u64,
}

impl Counters {
    /// Read all counters.
    #[must_use]
    pub(crate) fn snapshot(&self) -> TaskCounts {
        TaskCounts {
            spawned: self.spawned.load(Ordering::Relaxed),
            finished: self.finished.load(Ordering::Relaxed),
            stopped: self.stopped.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
            abandoned: self.abandoned.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The live task counters of one [`Operator`](crate::Operator), from
/// [`Operator::task_counters`](crate::Operator::task_counters): for metrics,
/// and for tests that wait until a daemon or timer has started or stopped.
///
/// A clone reads the same counters; they keep counting while the operator
/// runs and stay readable after it has stopped.
///
/// ```
/// use kopf_runtime::{Operator, Registry, TaskCounts};
///
/// let operator = Operator::new(Registry::builder().build()?);
/// let counters = operator.task_counters();
/// // … run the operator, e.g. `tokio::spawn(operator.run_until(stop))` …
/// assert_eq!(counters.snapshot(), TaskCounts::default());
/// # Ok::<(), kopf_runtime::RegistryError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct TaskCounters(pub(crate) Arc<Counters>);

impl TaskCounters {
    /// The counts now.
    #[must_use]
    pub fn snapshot(&self) -> TaskCounts {
        self.0.snapshot()
    }
}
