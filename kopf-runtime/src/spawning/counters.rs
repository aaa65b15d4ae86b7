//! Lifetime counters of a [`Spawner`](super::Spawner), for metrics.

use std::sync::atomic::{AtomicU64, Ordering};

/// Lifetime counters, for metrics.
#[derive(Debug, Default)]
pub struct Counters {
    pub(crate) spawned: AtomicU64,
    pub(crate) finished: AtomicU64,
    pub(crate) stopped: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) abandoned: AtomicU64,
}

/// A point-in-time copy of [`Counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountersSnapshot {
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
    pub fn snapshot(&self) -> CountersSnapshot {
        CountersSnapshot {
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
