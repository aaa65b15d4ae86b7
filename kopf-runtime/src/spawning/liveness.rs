//! A task's shared state ([`TaskShared`]) and what keeps it running
//! ([`Liveness`]): the runner, the task's context and its blocking threads
//! hold a `Liveness`, and dropping the last one settles the task in its
//! spawner, which they know only as something that settles tasks
//! ([`Settle`]). A `Liveness` is a counted handle on the task's shared
//! state, not an allocation of its own: a tick touches one.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::SetOnce;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use super::alarms::Alarms;
use super::observing::Observer;
use crate::model::kwargs::{Logger, Memo};
use crate::peering::fencing::Fence;
use crate::spawning::stopping::{FlagState, HoldsFlag};

/// What settles a task once it has ended: its spawner.
pub(super) trait Settle: Send + Sync {
    /// The task of `shared` has ended (the last [`Liveness`] was dropped).
    fn settle(&self, shared: &TaskShared);
}

/// Where a task is on its way out: `Running` → `Stopping` (its flag is
/// set) → `Cancelling` (aborted after its grace period) → `Abandoned` (it
/// outlived its cancellation timeout). Changed under the spawner's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Phase {
    Running,
    Stopping,
    Cancelling,
    Abandoned,
}

/// A task's [`Phase`], read by its runner without the lock.
pub(super) struct SharedPhase(AtomicU8);

impl SharedPhase {
    pub(super) fn new() -> Self {
        Self(AtomicU8::new(Phase::Running as u8))
    }

    pub(super) fn load(&self) -> Phase {
        match self.0.load(Ordering::Acquire) {
            0 => Phase::Running,
            1 => Phase::Stopping,
            2 => Phase::Cancelling,
            _ => Phase::Abandoned,
        }
    }

    pub(super) fn store(&self, phase: Phase) {
        self.0.store(phase as u8, Ordering::Release);
    }
}

/// The state of one task shared by the spawner, its stopper and its runner.
///
/// In the order written, from what every call touches (behind the `Arc`'s
/// counts, which a call's [`Liveness`] touches too) to what only spawning
/// and stopping read: a tick then reads two or three cache lines of it,
/// not all five, which counts with hundreds of thousands of timers.
#[repr(C)]
pub(crate) struct TaskShared {
    /// How many [`Liveness`] handles are held: 0 until the first is made.
    pub(super) holders: AtomicUsize,
    pub(crate) uid: Arc<str>,
    pub(crate) id: Arc<str>,
    /// Its stop flag, here rather than in an allocation of its own: a
    /// tick reads it in a line of this state it reads anyway.
    pub(super) flag: FlagState,
    /// What its calls read: its spawner's, the same for all its tasks.
    pub(super) calling: Arc<Calling>,
    /// What its calls derive from the object, made by the first.
    pub(super) object: OnceLock<TaskObject>,
    pub(super) generation: u64,
    pub(super) grace: Duration,
    pub(super) timeout: Duration,
    /// Set once the task (and any blocking thread it started) ended; a
    /// second `set` (an abandoned task ending after all) changes nothing.
    pub(super) done: SetOnce<()>,
    /// For blocking threads; a per-task clone, so that handler calls do not
    /// all touch one shared reference count.
    pub(crate) tracker: TaskTracker,
    pub(super) spawner: Weak<dyn Settle>,
    pub(super) phase: SharedPhase,
    /// Set by a task that ended on its own: never respawn it for this object.
    pub(crate) finished_for_good: AtomicBool,
}

/// What the calls of a spawner's tasks read and never change: one for all
/// of them, which every tick finds in a cache line that the other ticks
/// keep warm, where a copy in each [`TaskShared`] was one more line to
/// fetch per tick (and 56 bytes more per task).
pub(crate) struct Calling {
    pub(crate) observer: Arc<dyn Observer>,
    /// The wall clock and Tokio's clock read once, when the spawner is
    /// made: a call's wall start time is derived from its monotonic one
    /// without another system-clock read per tick.
    pub(crate) epoch: (jiff::Timestamp, Instant),
    /// What a call must pass first, in a term of leadership.
    pub(crate) fence: Option<Fence>,
    /// Where a timer waits for its next tick.
    pub(crate) alarms: Alarms,
}

/// What a task's calls derive from its object once, for all of them: an
/// object's namespace, name and memo never change while it lives.
pub(crate) struct TaskObject {
    pub(crate) logger: Logger,
    pub(crate) memo: Memo,
}

impl HoldsFlag for TaskShared {
    fn flag(&self) -> &FlagState {
        &self.flag
    }
}

impl TaskShared {
    /// What the task's calls derive from its object, made by `init` on the
    /// first call. Kept in place: a call reads it with no allocation or
    /// reference count of its own.
    pub(crate) fn object(&self, init: impl FnOnce() -> TaskObject) -> &TaskObject {
        self.object.get_or_init(init)
    }
}

/// Keeps a task "running" while any clone lives: the runner future holds
/// one, and so does every blocking thread started by
/// `TaskContext::run_blocking` (in tests). Dropping the last one settles the task.
pub(crate) struct Liveness {
    pub(crate) shared: Arc<TaskShared>,
}

impl Liveness {
    /// The first holder of a new task's state (its runner's).
    pub(super) fn first(shared: &Arc<TaskShared>) -> Self {
        let held = shared.holders.fetch_add(1, Ordering::Relaxed);
        debug_assert_eq!(held, 0, "a task has one first holder");
        Self {
            shared: Arc::clone(shared),
        }
    }
}

impl Clone for Liveness {
    fn clone(&self) -> Self {
        // A new holder is made from a held one: the count cannot be 0 here.
        self.shared.holders.fetch_add(1, Ordering::Relaxed);
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Drop for Liveness {
    fn drop(&mut self) {
        // Release what this holder did to the last one, which settles.
        if self.shared.holders.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        if let Some(spawner) = self.shared.spawner.upgrade() {
            spawner.settle(&self.shared);
        } else {
            let _ = self.shared.done.set(());
        }
    }
}
