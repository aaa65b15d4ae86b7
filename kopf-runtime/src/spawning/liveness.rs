//! A task's shared state ([`TaskShared`]) and what keeps it running
//! ([`Liveness`]): the runner, the task's context and its blocking threads
//! hold a `Liveness`, and dropping the last one settles the task in its
//! spawner, which they know only as something that settles tasks
//! ([`Settle`]).

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::SetOnce;
use tokio_util::task::TaskTracker;

use crate::spawning::stopping::StopFlag;

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
pub(crate) struct TaskShared {
    pub(crate) uid: Arc<str>,
    pub(crate) id: Arc<str>,
    pub(super) generation: u64,
    pub(super) flag: StopFlag,
    pub(super) grace: Duration,
    pub(super) timeout: Duration,
    /// Set once the task (and any blocking thread it started) ended; a
    /// second `set` (an abandoned task ending after all) changes nothing.
    pub(super) done: SetOnce<()>,
    pub(super) phase: SharedPhase,
    /// Set by a task that ended on its own: never respawn it for this object.
    pub(crate) finished_for_good: AtomicBool,
    /// What the task's function keeps between its calls (see [`TaskContext::local`](super::TaskContext::local)).
    pub(crate) local: OnceLock<Arc<dyn Any + Send + Sync>>,
}

/// Keeps a task "running" while any clone lives: the runner future holds
/// one, and so does every blocking thread started by
/// `TaskContext::run_blocking` (in tests). Dropping the last one settles the task.
pub(crate) struct Liveness {
    pub(crate) shared: Arc<TaskShared>,
    /// For blocking threads; a per-task clone, so that handler calls do not
    /// all touch one shared reference count.
    pub(crate) tracker: TaskTracker,
    pub(super) spawner: Weak<dyn Settle>,
}

impl Drop for Liveness {
    fn drop(&mut self) {
        if let Some(spawner) = self.spawner.upgrade() {
            spawner.settle(&self.shared);
        } else {
            let _ = self.shared.done.set(());
        }
    }
}
