//! The [`Spawner`]: owns every daemon and timer task, keyed by
//! `(object UID, handler id)`, and stops them (gracefully, then by force,
//! then by abandoning them).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::runtime::Handle;
use tokio::sync::{Notify, SetOnce};
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use super::alarms::Alarms;
use super::counters::Counters;
use super::liveness::{Calling, Liveness, Phase, Settle, SharedPhase, TaskShared};
use super::observing::{AbandonedReport, Observer};
use super::outcome::TaskKind;
use super::runner::Run;
use super::slots::{Entry, ObjectSlot, SlotState};
use super::table::ObjectTable;
use super::task::{Owner, TaskSpec};
use super::{daemons, timers};
use crate::model::kwargs::EncodedBody;
use crate::peering::fencing::Fence;
use crate::spawning::stopping::{FlagState, StopReason};

/// Limits that replace Kopf's "wait forever" when a handler sets neither
/// `cancellation_backoff` nor `cancellation_timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SpawnerSettings {
    /// Graceful period (after the stop flag is set, before cancelling) for
    /// handlers with neither `cancellation_backoff` nor `cancellation_timeout`
    /// (Kopf would wait for them forever).
    pub graceful_exit_limit: Duration,
    /// After cancelling, how long to wait before abandoning a task whose
    /// handler has no `cancellation_timeout`.
    pub default_cancellation_timeout: Duration,
}

impl Default for SpawnerSettings {
    fn default() -> Self {
        Self {
            graceful_exit_limit: Duration::from_secs(60),
            default_cancellation_timeout: Duration::from_secs(10),
        }
    }
}

/// What [`Spawner::ensure_encoded`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ensured {
    /// A new task was spawned.
    Spawned,
    /// A task for this key is already running.
    AlreadyRunning,
    /// A task for this key is still being stopped; call again later (there
    /// are never two tasks for one key).
    Stopping,
    /// The daemon (or a timer with neither `interval` nor `idle`) ended on
    /// its own earlier (success, permanent failure or retries exhausted) and
    /// is not spawned again for this object.
    Finished,
    /// The object was stopped as gone (deleted, vanished) or as being deleted
    /// (`deletionTimestamp`): nothing is spawned for it any more.
    ObjectGone,
    /// [`Spawner::shutdown_for`] was called.
    ShuttingDown,
}

/// A failed [`Spawner::shutdown_for`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ShutdownError {
    /// Some tasks did not end in time and were abandoned (each was reported
    /// to the [`Observer`] and logged).
    #[error("{count} task(s) did not stop in time and were abandoned")]
    Abandoned {
        /// How many tasks were abandoned during the shutdown.
        count: u64,
    },
}

/// Every task of the spawner, by object, and how many there are;
/// changed under the spawner's lock.
#[derive(Default)]
struct TaskTable {
    objects: ObjectTable,
    tasks: usize,
}

struct Victim {
    shared: Arc<TaskShared>,
    abort: AbortHandle,
}

struct Inner {
    state: Mutex<TaskTable>,
    tracker: TaskTracker,
    handle: Handle,
    counters: Arc<Counters>,
    settings: SpawnerSettings,
    settled: Notify,
    generations: AtomicU64,
    /// What its tasks' calls read: where they report, when they may call
    /// (in a term of leadership), where timers wait for their ticks.
    calling: Arc<Calling>,
}

impl Settle for Inner {
    fn settle(&self, shared: &TaskShared) {
        let mut state = self.lock();
        let phase = shared.phase.load();
        if phase == Phase::Abandoned {
            drop(state);
            let _ = shared.done.set(());
            tracing::info!(uid = %shared.uid, handler = %shared.id, "abandoned task has ended after all");
            return;
        }
        let for_good = shared.finished_for_good.load(Ordering::Acquire) && !shared.flag.is_set();
        if for_good && let Some(slot) = state.objects.get_mut(&shared.uid) {
            slot.finish(&shared.id);
        }
        Self::remove_entry(&mut state, shared);
        drop(state);
        let counter = match phase {
            Phase::Running if !shared.flag.is_set() => &self.counters.finished,
            Phase::Cancelling => &self.counters.cancelled,
            _ => &self.counters.stopped,
        };
        Counters::bump(counter);
        let _ = shared.done.set(());
        self.settled.notify_waiters();
        tracing::debug!(uid = %shared.uid, handler = %shared.id, "task ended");
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, TaskTable> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forget an entry (if it is still this generation's) and drop the
    /// object's slot if nothing is left to remember.
    fn remove_entry(state: &mut TaskTable, shared: &TaskShared) -> bool {
        let Some(slot) = state.objects.get_mut(&shared.uid) else {
            return false;
        };
        let ours = slot
            .tasks
            .get(&shared.id)
            .is_some_and(|entry| entry.shared.generation == shared.generation);
        if ours {
            slot.tasks.remove(&shared.id);
            state.tasks -= 1;
            if slot.tasks.is_empty() && slot.state == SlotState::Forgotten {
                state.objects.remove(&shared.uid);
            }
        }
        ours
    }

    /// Mark entries as stopping, set their flags, and collect them for a stopper.
    fn mark_stopping(entry: &mut Entry, reason: StopReason, victims: &mut Vec<Victim>) {
        if entry.stopping {
            return;
        }
        entry.stopping = true;
        entry.shared.flag.set(reason);
        entry.shared.phase.store(Phase::Stopping);
        victims.push(Victim {
            shared: Arc::clone(&entry.shared),
            abort: entry.abort.clone(),
        });
    }

    fn spawn_stopper(self: &Arc<Self>, victims: Vec<Victim>) {
        if victims.is_empty() {
            return;
        }
        let inner = Arc::clone(self);
        self.tracker.spawn_on(
            async move {
                let mut stoppers: FuturesUnordered<_> = victims
                    .into_iter()
                    .map(|victim| inner.stop_one(victim))
                    .collect();
                while stoppers.next().await.is_some() {}
            },
            &self.handle,
        );
    }

    /// Graceful period, then cancel, then abandon.
    async fn stop_one(&self, victim: Victim) {
        let Victim { shared, abort } = victim;
        if tokio::time::timeout(shared.grace, shared.done.wait())
            .await
            .is_ok()
        {
            return;
        }
        {
            let _state = self.lock();
            if shared.phase.load() != Phase::Stopping || shared.done.initialized() {
                return;
            }
            shared.phase.store(Phase::Cancelling);
        }
        tracing::debug!(uid = %shared.uid, handler = %shared.id, "task did not exit gracefully; cancelling it");
        abort.abort();
        if tokio::time::timeout(shared.timeout, shared.done.wait())
            .await
            .is_ok()
        {
            return;
        }
        self.abandon(&shared, shared.grace + shared.timeout);
    }

    fn abandon(&self, shared: &TaskShared, waited: Duration) {
        let body = {
            let mut state = self.lock();
            let body = state
                .objects
                .get(&shared.uid)
                .map(|slot| Arc::new(slot.body.get().decode()));
            // Only a task still registered can be abandoned: one that settled
            // meanwhile (its entry is gone) is counted there, not here.
            if !Self::remove_entry(&mut state, shared) {
                return;
            }
            shared.phase.store(Phase::Abandoned);
            body
        };
        Counters::bump(&self.counters.abandoned);
        let reason = shared.flag.reason();
        tracing::warn!(
            uid = %shared.uid,
            handler = %shared.id,
            reason = reason.map(StopReason::as_str),
            waited = ?waited,
            "task did not exit in time after cancellation; abandoning it",
        );
        self.calling.observer.on_abandoned(AbandonedReport {
            uid: Arc::clone(&shared.uid),
            handler_id: Arc::clone(&shared.id),
            reason,
            waited,
            body,
        });
        self.settled.notify_waiters();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        for slot in state.objects.values() {
            for entry in slot.tasks.values() {
                // Set first: a blocking thread cannot be aborted, only asked.
                entry.shared.flag.set(StopReason::OperatorExiting);
                entry.abort.abort();
            }
        }
    }
}

/// Owns all daemon and timer tasks of an operator, keyed by
/// `(object UID, handler id)`.
///
/// Cloning gives another handle to the same registry.
///
/// # Guarantees
/// - At most one task per key; tasks are keyed by UID, never by name, so an
///   object re-created with the same name gets fresh tasks.
/// - Stopping sets the task's [`FlagState`]; after the graceful period
///   (`cancellation_backoff`) the task is cancelled (its future is dropped
///   at its next `.await`); if it still runs `cancellation_timeout` later it
///   is *abandoned*: logged with `warn!`, reported to
///   [`Observer::on_abandoned`], counted, and forgotten. Nothing waits on a
///   task forever, and [`Spawner::shutdown_for`] returns within its timeout.
/// - A daemon (or a timer with neither `interval` nor `idle`) that ends on
///   its own (success, permanent failure, retries exhausted) is not
///   spawned again for that object until the object is
///   gone or [`Spawner::forget`] is called. One stopped from outside (e.g.
///   [`StopReason::FilterMismatch`]) can be spawned again.
/// - Every task lives in this spawner's `TaskTracker`; dropping the last
///   handle sets all stop flags and cancels all tasks.
///
/// # Caveats
/// - Defaults differ from Kopf where Kopf would wait forever: a handler with
///   neither `cancellation_backoff` nor `cancellation_timeout` gets
///   [`SpawnerSettings::graceful_exit_limit`] to exit, then
///   [`SpawnerSettings::default_cancellation_timeout`] after cancelling.
///   With only `cancellation_timeout` set, the task is cancelled at once
///   (as in Kopf).
/// - A blocking function cannot be cancelled. Plain-`fn` daemons and timers
///   run on a thread of their task, so that the spawner sees them still
///   running and abandons them visibly; a bare `spawn_blocking` is
///   invisible here.
/// - A handler that keeps a clone of its [`TaskContext`](super::TaskContext) beyond its own
///   future (e.g. in a task of its own) keeps the task "running".
/// - An abandoned task is forgotten, not killed: a new task for the same key
///   may be spawned while the abandoned one still runs somewhere.
/// - An object stopped as gone spawns nothing more, however late an
///   [`Spawner::ensure_encoded`] for its UID comes, until [`Spawner::forget`]; once
///   forgotten and its tasks ended, its memory is dropped, and an `ensure`
///   for that UID after that starts afresh (the engine forgets a UID only
///   after its deletion was processed, and never sees it again).
#[derive(Clone)]
pub(crate) struct Spawner {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Spawner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spawner")
            .field("tasks", &self.len())
            .field("counters", &self.counters().snapshot())
            .finish_non_exhaustive()
    }
}

impl Spawner {
    #[cfg(test)]
    /// A spawner on the current Tokio runtime.
    ///
    /// # Panics
    /// Outside a Tokio runtime (use [`Spawner::with_handle`] there).
    #[must_use]
    pub(crate) fn new(observer: Arc<dyn Observer>, settings: SpawnerSettings) -> Self {
        Self::with_handle(Handle::current(), observer, settings)
    }

    #[cfg(test)]
    /// A spawner whose tasks run on the given runtime.
    #[must_use]
    pub(crate) fn with_handle(
        handle: Handle,
        observer: Arc<dyn Observer>,
        settings: SpawnerSettings,
    ) -> Self {
        Self::with_counters(handle, observer, settings, Arc::default())
    }

    /// A spawner whose tasks run on the given runtime and which counts into
    /// `counters` (so that its owner can read them, e.g. for metrics, without
    /// holding the spawner).
    #[must_use]
    pub(crate) fn with_counters(
        handle: Handle,
        observer: Arc<dyn Observer>,
        settings: SpawnerSettings,
        counters: Arc<Counters>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::default(),
                tracker: TaskTracker::new(),
                calling: Arc::new(Calling {
                    observer,
                    epoch: (jiff::Timestamp::now(), Instant::now()),
                    fence: None,
                    alarms: Alarms::new(handle.clone()),
                }),
                handle,
                counters,
                settings,
                settled: Notify::new(),
                generations: AtomicU64::new(0),
            }),
        }
    }

    /// Its tasks call their handlers only while `fence` allows (see
    /// [`fencing`](crate::peering::fencing)).
    #[must_use]
    pub(crate) fn fenced(mut self, fence: Fence) -> Self {
        let inner = Arc::get_mut(&mut self.inner)
            .expect("invariant: a spawner is fenced before it is shared");
        Arc::get_mut(&mut inner.calling)
            .expect("invariant: a spawner is fenced before its tasks share its calling")
            .fence = Some(fence);
        self
    }

    /// [`Spawner::ensure_encoded`] with `body` encoded first.
    #[cfg(test)]
    pub(crate) fn ensure(
        &self,
        uid: &str,
        spec: &Arc<TaskSpec>,
        body: &serde_json::Value,
    ) -> Ensured {
        self.ensure_encoded(&Arc::from(uid), spec, &EncodedBody::new(body))
    }

    /// Spawn the task of `spec` for object `uid` unless it is running, being
    /// stopped, or finished for good. `body` is the object's latest body, as
    /// its tasks keep it (encoded once for all the object's handlers): it
    /// also updates the live body of the object's running tasks.
    pub(crate) fn ensure_encoded(
        &self,
        uid: &Arc<str>,
        spec: &Arc<TaskSpec>,
        body: &EncodedBody,
    ) -> Ensured {
        let inner = &self.inner;
        let mut state = inner.lock();
        if inner.tracker.is_closed() {
            return Ensured::ShuttingDown;
        }
        // The caller's UID (the object's memory holds it) or the table's,
        // not a copy: one allocation per object.
        let state = &mut *state;
        let (key, slot, new) = state
            .objects
            .get_or_insert_with(uid, || ObjectSlot::new(body.clone(), spec.owner));
        let key = Arc::clone(key);
        if !new {
            if slot.state >= SlotState::Closed {
                return Ensured::ObjectGone;
            }
            slot.update_body(body);
        }
        if let Some(entry) = slot.tasks.get(spec.id()) {
            return if entry.stopping {
                Ensured::Stopping
            } else {
                Ensured::AlreadyRunning
            };
        }
        if slot.is_finished(spec.id()) {
            return Ensured::Finished;
        }

        let (grace, timeout) = self.stop_policy(spec);
        let shared = Arc::new(TaskShared {
            uid: key,
            // The handler's own: a call only reads it, so the tasks of a
            // handler contend for no reference count.
            id: Arc::clone(&spec.id),
            generation: inner.generations.fetch_add(1, Ordering::Relaxed),
            // Each task's own flag: stopping the object (or everything, see
            // `stop_all`) sets the flags of its tasks one by one.
            flag: FlagState::new(),
            grace,
            timeout,
            done: SetOnce::new(),
            phase: SharedPhase::new(),
            finished_for_good: AtomicBool::new(false),
            object: OnceLock::new(),
            holders: AtomicUsize::new(0),
            tracker: inner.tracker.clone(),
            spawner: Arc::downgrade(inner) as Weak<dyn Settle>,
            calling: Arc::clone(&inner.calling),
        });
        let run = Run {
            spec: Arc::clone(spec),
            changes: spec
                .timer_options()
                .and_then(|timer| timer.idle)
                .map(|_| slot.changed.subscribe()),
            body: slot.body.reader(),
            liveness: Liveness::first(&shared),
        };
        // Spawned under the lock: if the task ends at once on another worker,
        // its settling waits for the lock and finds its entry.
        let join = match spec.kind() {
            TaskKind::Daemon => inner.tracker.spawn_on(daemons::run(run), &inner.handle),
            TaskKind::Timer => inner.tracker.spawn_on(timers::run(run), &inner.handle),
        };
        tracing::debug!(uid = %shared.uid, handler = %spec.id, "task spawned");
        slot.tasks.insert(Entry {
            shared,
            abort: join.abort_handle(),
            stopping: false,
        });
        state.tasks += 1;
        Counters::bump(&inner.counters.spawned);
        Ensured::Spawned
    }

    /// How long stopping a task of `spec` can take at most: its graceful
    /// period plus its cancellation timeout (the handler's own options, else
    /// the settings'). By then it has ended or been abandoned (and reported).
    #[must_use]
    pub(crate) fn stop_limit(&self, spec: &TaskSpec) -> Duration {
        let (grace, timeout) = self.stop_policy(spec);
        grace.saturating_add(timeout)
    }

    fn stop_policy(&self, spec: &TaskSpec) -> (Duration, Duration) {
        let settings = &self.inner.settings;
        let (backoff, timeout) = spec.cancellation();
        let grace = backoff.unwrap_or(if timeout.is_some() {
            Duration::ZERO
        } else {
            settings.graceful_exit_limit
        });
        let timeout = timeout.unwrap_or(settings.default_cancellation_timeout);
        (grace, timeout)
    }

    #[cfg(test)]
    /// The object's body changed: running tasks see it in their live body,
    /// and idle timers start waiting afresh. An identical body is not a
    /// change. Returns whether anything changed (`false` for unknown UIDs and
    /// for objects already stopped as gone).
    pub(crate) fn update_body(&self, uid: &str, body: Arc<serde_json::Value>) -> bool {
        self.inner.lock().objects.get_mut(uid).is_some_and(|slot| {
            slot.state < SlotState::Gone && slot.update_body(&EncodedBody::new(&body))
        })
    }

    #[cfg(test)]
    /// The object changed in a way not visible in its body (e.g. an event
    /// was seen): idle timers start waiting afresh.
    pub(crate) fn touched(&self, uid: &str) {
        if let Some(slot) = self.inner.lock().objects.get_mut(uid)
            && slot.state < SlotState::Gone
        {
            slot.changed.bump();
        }
    }

    /// Stop one task. Returns `false` if there is no such task or it is
    /// already being stopped.
    pub(crate) fn stop(&self, uid: &str, handler_id: &str, reason: StopReason) -> bool {
        let mut victims = Vec::new();
        if let Some(entry) = self
            .inner
            .lock()
            .objects
            .get_mut(uid)
            .and_then(|slot| slot.tasks.get_mut(handler_id))
        {
            Inner::mark_stopping(entry, reason, &mut victims);
        }
        let stopping = !victims.is_empty();
        self.inner.spawn_stopper(victims);
        stopping
    }

    /// Stop all tasks of an object. If `reason` says the object is gone or
    /// being deleted ([`StopReason::ends_spawning`]), nothing is spawned for
    /// it any more; if it is gone ([`StopReason::object_is_gone`]), its
    /// memory (finished daemons, body) is dropped once its tasks have ended.
    /// Returns how many tasks started stopping.
    pub(crate) fn stop_object(&self, uid: &str, reason: StopReason) -> usize {
        let mut victims = Vec::new();
        {
            let mut state = self.inner.lock();
            Self::stop_slot(&mut state, uid, reason, &mut victims);
        }
        let count = victims.len();
        self.inner.spawn_stopper(victims);
        count
    }

    fn stop_slot(state: &mut TaskTable, uid: &str, reason: StopReason, victims: &mut Vec<Victim>) {
        let Some(slot) = state.objects.get_mut(uid) else {
            return;
        };
        slot.state = slot.state.after(reason);
        if slot.state >= SlotState::Gone {
            slot.finished.clear();
        }
        for entry in slot.tasks.values_mut() {
            Inner::mark_stopping(entry, reason, victims);
        }
        if slot.state == SlotState::Forgotten && slot.tasks.is_empty() {
            state.objects.remove(uid);
        }
    }

    #[cfg(test)]
    /// Stop the tasks of one handler on all objects (e.g. with
    /// [`StopReason::HandlerRemoved`]). Returns how many started stopping.
    pub(crate) fn stop_handler(&self, handler_id: &str, reason: StopReason) -> usize {
        let mut victims = Vec::new();
        {
            let mut state = self.inner.lock();
            for slot in state.objects.values_mut() {
                if let Some(entry) = slot.tasks.get_mut(handler_id) {
                    Inner::mark_stopping(entry, reason, &mut victims);
                }
            }
        }
        let count = victims.len();
        self.inner.spawn_stopper(victims);
        count
    }

    /// Stop all tasks of all objects. Returns how many started stopping.
    pub(crate) fn stop_all(&self, reason: StopReason) -> usize {
        let mut victims = Vec::new();
        {
            let mut state = self.inner.lock();
            let uids: Vec<Arc<str>> = state.objects.keys().cloned().collect();
            for uid in uids {
                Self::stop_slot(&mut state, &uid, reason, &mut victims);
            }
        }
        let count = victims.len();
        self.inner.spawn_stopper(victims);
        count
    }

    /// The objects with tasks (running, stopping or finished) of `owner`'s
    /// specs.
    pub(crate) fn objects_of(&self, owner: Owner) -> Vec<Arc<str>> {
        let state = self.inner.lock();
        state
            .objects
            .iter()
            .filter(|(_, slot)| slot.owner == owner)
            .map(|(uid, _)| Arc::clone(uid))
            .collect()
    }

    /// Forget what is remembered about an object (finished daemons, live
    /// body). Running tasks are not stopped; the memory goes once they end.
    pub(crate) fn forget(&self, uid: &str) {
        let mut state = self.inner.lock();
        if let Some(slot) = state.objects.get_mut(uid) {
            slot.finished.clear();
            slot.state = SlotState::Forgotten;
            if slot.tasks.is_empty() {
                state.objects.remove(uid);
            }
        }
    }

    /// [`Spawner::shutdown_for`] the operator's exit.
    #[cfg(test)]
    pub(crate) async fn shutdown(&self, timeout: Duration) -> Result<(), ShutdownError> {
        self.shutdown_for(StopReason::OperatorExiting, timeout)
            .await
    }

    /// Stop everything, telling the tasks `reason` (the operator exits, or
    /// [`StopReason::LeadershipLost`]), and wait until every task has ended
    /// or been abandoned, for at most `timeout`; at the deadline, the
    /// remaining tasks are cancelled and abandoned. Later
    /// [`Spawner::ensure_encoded`] calls spawn nothing.
    ///
    /// # Errors
    /// [`ShutdownError::Abandoned`] if any task was abandoned meanwhile.
    pub(crate) async fn shutdown_for(
        &self,
        reason: StopReason,
        timeout: Duration,
    ) -> Result<(), ShutdownError> {
        let deadline = crate::spawning::stopping::deadline_after(Instant::now(), timeout);
        let abandoned_before = self.counters().snapshot().abandoned;
        {
            let _state = self.inner.lock();
            self.inner.tracker.close();
        }
        self.stop_all(reason);
        loop {
            let settled = self.inner.settled.notified();
            let mut settled = std::pin::pin!(settled);
            settled.as_mut().enable();
            if self.is_empty() {
                break;
            }
            tokio::select! {
                () = settled => {}
                () = tokio::time::sleep_until(deadline) => {
                    self.abandon_all(timeout);
                    break;
                }
            }
        }
        let count = self.counters().snapshot().abandoned - abandoned_before;
        if count == 0 {
            Ok(())
        } else {
            Err(ShutdownError::Abandoned { count })
        }
    }

    fn abandon_all(&self, waited: Duration) {
        let remaining: Vec<(Arc<TaskShared>, AbortHandle)> = {
            let state = self.inner.lock();
            state
                .objects
                .values()
                .flat_map(|slot| slot.tasks.values())
                .map(|entry| (Arc::clone(&entry.shared), entry.abort.clone()))
                .collect()
        };
        for (shared, abort) in remaining {
            abort.abort();
            self.inner.abandon(&shared, waited);
        }
    }

    #[cfg(test)]
    /// The handler ids with a live task (running or being stopped) for this
    /// object, sorted.
    #[must_use]
    pub(crate) fn running(&self, uid: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .inner
            .lock()
            .objects
            .get(uid)
            .map(|slot| slot.tasks.keys().map(str::to_owned).collect())
            .unwrap_or_default();
        ids.sort();
        ids
    }

    #[cfg(test)]
    /// Whether the daemon exited on its own for this object (and so is not
    /// spawned again).
    #[must_use]
    pub(crate) fn is_finished(&self, uid: &str, handler_id: &str) -> bool {
        self.inner
            .lock()
            .objects
            .get(uid)
            .is_some_and(|slot| slot.is_finished(handler_id))
    }

    /// Wait until the object has no live tasks (all ended or abandoned).
    /// Use [`Spawner::stop_object`] first; this does not stop anything.
    pub(crate) async fn wait_stopped(&self, uid: &str) {
        self.wait_stopped_of(uid, |_| true).await;
    }

    /// Wait until no live task of the object runs a handler that `of`
    /// selects (by id); the others may go on. Use [`Spawner::stop_object`]
    /// first; this does not stop anything.
    pub(crate) async fn wait_stopped_of(&self, uid: &str, of: impl Fn(&str) -> bool) {
        loop {
            let settled = self.inner.settled.notified();
            let mut settled = std::pin::pin!(settled);
            settled.as_mut().enable();
            if !self.is_running(uid, &of) {
                return;
            }
            settled.await;
        }
    }

    /// Whether the object has a live task (running or being stopped) of a
    /// handler that `of` selects (by id).
    #[must_use]
    pub(crate) fn is_running(&self, uid: &str, of: impl Fn(&str) -> bool) -> bool {
        self.inner
            .lock()
            .objects
            .get(uid)
            .is_some_and(|slot| slot.tasks.keys().any(&of))
    }

    /// How many tasks are live (running or being stopped).
    #[must_use]
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().tasks
    }

    /// Whether no task is live.
    #[must_use]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The lifetime counters.
    #[must_use]
    pub(crate) fn counters(&self) -> &Counters {
        &self.inner.counters
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tokio::time::Instant;

    use super::super::testkit::{
        Calls, advance_to, body, millis, paused_runtime, secs, settle, spawner,
    };
    use super::super::{Ensured, Spawner, SpawnerSettings, TaskOutcome, TaskSpec, task_fn};
    use super::ShutdownError;
    use crate::spawning::stopping::StopReason;

    #[tokio::test(start_paused = true)]
    async fn only_timers_with_idle_make_an_object_keep_a_channel_of_its_changes() {
        let (spawner, _) = spawner();
        let watched = |uid: &str| {
            let state = spawner.inner.lock();
            let slot = state.objects.get(uid).expect("the object has a slot");
            slot.changed.watched.is_some()
        };
        let noop = || task_fn(|_ctx| async { TaskOutcome::ok() });
        let plain = TaskSpec::timer("plain", secs(1), noop()).build();
        let idle = TaskSpec::timer("idle", secs(1), noop())
            .idle(secs(5))
            .build();
        assert_eq!(spawner.ensure("u1", &plain, &body(1)), Ensured::Spawned);
        spawner.touched("u1");
        assert!(!watched("u1"));
        assert_eq!(spawner.ensure("u1", &idle, &body(1)), Ensured::Spawned);
        assert!(watched("u1"));
    }

    /// What the spawner holds for an object with one timer waiting for its
    /// next tick: the task and its future, its flag, its alarm, the
    /// object's slot in the table, its body (as text) and the live-body
    /// channel. Counted on the test's thread (a current-thread runtime runs
    /// the tasks there), for 1,000 ConfigMaps as the API server returns
    /// them, spawned at once or `apart` by a millisecond each (so that each
    /// alarm is alone in its slot).
    fn held_per_waiting_timer(apart: bool) -> i64 {
        const OBJECTS: usize = 1_000;
        let runtime = paused_runtime();
        let (spawner, _) = runtime.block_on(async { spawner() });
        let spec =
            TaskSpec::timer("t", secs(60), task_fn(|_ctx| async { TaskOutcome::ok() })).build();
        let configmap = |n: usize| {
            let uid = format!("{n:08x}-0000-4000-8000-000000000000");
            let body = serde_json::json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": format!("cm-{n}"),
                    "namespace": "ns",
                    "uid": uid,
                    "resourceVersion": (1000 + n).to_string(),
                    "creationTimestamp": "2026-12-03T17:12:43Z",
                },
                "data": {"k": "v"},
            });
            (uid, Arc::new(body))
        };
        // One object first, so that what is made once (the tracker, the
        // table's first allocation, the ringer) is not counted per object.
        runtime.block_on(async {
            let (uid, body) = configmap(OBJECTS);
            assert_eq!(spawner.ensure(&uid, &spec, &body), Ensured::Spawned);
            settle().await;
        });
        let held = allocation_counter::measure(|| {
            runtime.block_on(async {
                for n in 0..OBJECTS {
                    let (uid, body) = configmap(n);
                    assert_eq!(spawner.ensure(&uid, &spec, &body), Ensured::Spawned);
                    if apart {
                        settle().await;
                        tokio::time::advance(millis(1)).await;
                    }
                }
                settle().await;
            });
        });
        runtime.block_on(async { spawner.shutdown(secs(1)).await.expect("stops") });
        held.bytes_current / OBJECTS as i64
    }

    // About 1,267 bytes (1,366 with each alarm alone in its slot): the
    // task (256 of them: Tokio's task cell is a multiple of 128 bytes, and
    // the timer's future is kept within the 144 that fit in 256), its
    // shared state with its stop flag inline (and a pointer to its
    // spawner's `Calling`), its alarm's waker (and slot), the body's text,
    // the object's entry in the table (96 bytes, and its place, at a table
    // half full: see `table`). A
    // future that grows past 144 bytes costs 128 more per timer, a copy of
    // `Calling` in each task 56 more, entries kept in a `HashMap` 90 more, a
    // stop flag in an allocation of its own 24 more: each fails this test.
    const TIMER_CEILING: i64 = 1_380;

    #[test]
    fn a_waiting_timer_holds_at_most_1_380_bytes() {
        for (apart, how) in [(false, "in one slot"), (true, "each alone in its slot")] {
            let held = held_per_waiting_timer(apart);
            assert!(
                held <= TIMER_CEILING,
                "a waiting timer holds {held} bytes (at most {TIMER_CEILING}), {how}"
            );
        }
    }

    /// Records when its future is dropped (i.e. cancelled or finished).
    struct DropClock(Calls);

    impl Drop for DropClock {
        fn drop(&mut self) {
            self.0.hit();
        }
    }

    /// A daemon that runs until stopped and remembers the reason it saw.
    fn cooperative(id: &str, reasons: &Arc<Mutex<Vec<Option<StopReason>>>>) -> Arc<TaskSpec> {
        let reasons = Arc::clone(reasons);
        TaskSpec::daemon(
            id,
            task_fn(move |ctx| {
                let reasons = Arc::clone(&reasons);
                async move {
                    ctx.stopped.cancelled().await;
                    reasons.lock().expect("lock").push(ctx.stopped.reason());
                    TaskOutcome::ok()
                }
            }),
        )
        .build()
    }

    /// A daemon that ignores its stop flag; `dropped` records when it is cancelled.
    fn stubborn(id: &str, dropped: &Calls) -> TaskSpec {
        let dropped = dropped.clone();
        TaskSpec::daemon(
            id,
            task_fn(move |_ctx| {
                let guard = DropClock(dropped.clone());
                async move {
                    let _guard = guard;
                    loop {
                        tokio::time::sleep(secs(1)).await;
                    }
                }
            }),
        )
    }

    /// A sync daemon whose blocking thread ignores the stop flag until the
    /// test releases it.
    fn stuck(id: &str, entered: &Calls) -> (TaskSpec, std::sync::mpsc::Sender<()>) {
        let (release, released) = std::sync::mpsc::channel::<()>();
        let released = Arc::new(Mutex::new(released));
        let entered = entered.clone();
        let spec = TaskSpec::daemon(
            id,
            task_fn(move |ctx| {
                let released = Arc::clone(&released);
                let entered = entered.clone();
                async move {
                    let result = ctx
                        .run_blocking(move |_stopped| {
                            entered.hit();
                            let _ = released.lock().expect("lock").recv();
                            entered.hit();
                        })
                        .await;
                    match result {
                        Ok(()) => TaskOutcome::ok(),
                        Err(error) => TaskOutcome::Error {
                            message: error.to_string(),
                        },
                    }
                }
            }),
        );
        (spec, release)
    }

    #[tokio::test(start_paused = true)]
    async fn stop_sets_the_flag_and_a_cooperative_task_exits_gracefully() {
        let (spawner, _) = spawner();
        let reasons = Arc::default();
        let spec = cooperative("d", &reasons);
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(secs(10)).await;
        assert_eq!(spawner.running("u1"), ["d"]);
        let start = Instant::now();
        assert!(spawner.stop("u1", "d", StopReason::FilterMismatch));
        assert!(
            !spawner.stop("u1", "d", StopReason::ObjectDeleted),
            "already stopping"
        );
        spawner.wait_stopped("u1").await;
        assert_eq!(start.elapsed(), secs(0));
        assert_eq!(
            *reasons.lock().expect("lock"),
            [Some(StopReason::FilterMismatch)]
        );
        let counters = spawner.counters().snapshot();
        assert_eq!(
            (counters.spawned, counters.stopped, counters.cancelled),
            (1, 1, 0)
        );
        assert!(spawner.running("u1").is_empty());
        assert!(
            !spawner.stop("u1", "d", StopReason::FilterMismatch),
            "no such task"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn task_ignoring_the_flag_is_cancelled_after_cancellation_backoff() {
        let (spawner, recorder) = spawner();
        let dropped = Calls::new();
        let spec = stubborn("d", &dropped)
            .cancellation_backoff(secs(5))
            .cancellation_timeout(secs(3))
            .build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(secs(10)).await;
        spawner.stop_object("u1", StopReason::ObjectDeleted);
        assert_eq!(spawner.ensure("u1", &spec, &body(1)), Ensured::ObjectGone);
        spawner.wait_stopped("u1").await;
        assert_eq!(dropped.times(), [secs(15)]);
        let counters = spawner.counters().snapshot();
        assert_eq!(
            (counters.stopped, counters.cancelled, counters.abandoned),
            (0, 1, 0)
        );
        assert!(recorder.abandoned().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn only_cancellation_timeout_cancels_at_once_as_in_kopf() {
        let (spawner, _) = spawner();
        let dropped = Calls::new();
        let spec = stubborn("d", &dropped)
            .cancellation_timeout(secs(3))
            .build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(secs(10)).await;
        spawner.stop("u1", "d", StopReason::FilterMismatch);
        spawner.wait_stopped("u1").await;
        assert_eq!(dropped.times(), [secs(10)]);
    }

    #[tokio::test(start_paused = true)]
    async fn without_cancellation_options_the_settings_bound_the_wait() {
        let recorder = super::super::testkit::Recorder::new();
        let settings = SpawnerSettings {
            graceful_exit_limit: secs(20),
            default_cancellation_timeout: secs(4),
        };
        let spawner = Spawner::new(recorder, settings);
        let dropped = Calls::new();
        let spec = stubborn("d", &dropped).build();
        spawner.ensure("u1", &spec, &body(1));
        spawner.stop("u1", "d", StopReason::FilterMismatch);
        spawner.wait_stopped("u1").await;
        assert_eq!(dropped.times(), [secs(20)]);
    }

    #[tokio::test(start_paused = true)]
    async fn stop_limit_is_the_handlers_own_grace_and_timeout_else_the_settings() {
        let spawner = Spawner::new(
            Arc::new(()),
            SpawnerSettings {
                graceful_exit_limit: secs(1),
                default_cancellation_timeout: secs(2),
            },
        );
        let noop = || task_fn(|_ctx| async { TaskOutcome::ok() });
        let plain = TaskSpec::daemon("plain", noop()).build();
        assert_eq!(spawner.stop_limit(&plain), secs(3));
        let timer = TaskSpec::timer("timer", secs(1), noop()).build();
        assert_eq!(spawner.stop_limit(&timer), secs(3));
        // Longer than the settings: the handler's own options count.
        let patient = TaskSpec::daemon("patient", noop())
            .cancellation_backoff(secs(5))
            .cancellation_timeout(secs(7))
            .build();
        assert_eq!(spawner.stop_limit(&patient), secs(12));
        // A timeout alone means no graceful period (as in Kopf).
        let hasty = TaskSpec::daemon("hasty", noop())
            .cancellation_timeout(secs(7))
            .build();
        assert_eq!(spawner.stop_limit(&hasty), secs(7));
    }

    #[tokio::test(start_paused = true)]
    async fn task_that_never_yields_is_abandoned_after_cancellation_timeout_and_reported() {
        // A blocking thread inhibits the paused clock's auto-advance, so this
        // test moves the clock by hand.
        let epoch = Instant::now();
        let (spawner, recorder) = spawner();
        let entered = Calls::new();
        let (spec, release) = stuck("sync", &entered);
        let spec = spec
            .cancellation_backoff(secs(2))
            .cancellation_timeout(secs(3))
            .build();
        spawner.ensure("u1", &spec, &body(1));
        while entered.count() == 0 {
            settle().await;
            tokio::task::yield_now().await;
        }
        spawner.stop_object("u1", StopReason::ObjectVanished);
        advance_to(epoch, secs(2)).await;
        assert_eq!(
            spawner.running("u1"),
            ["sync"],
            "cancelled, but the thread still runs"
        );
        assert_eq!(spawner.ensure("u1", &spec, &body(1)), Ensured::ObjectGone);
        assert!(recorder.abandoned().is_empty());
        advance_to(epoch, secs(5)).await;
        assert_eq!(
            recorder.abandoned(),
            [(
                "u1".to_owned(),
                "sync".to_owned(),
                Some(StopReason::ObjectVanished),
                secs(5),
                // The object's body, for an Event on it.
                Some(body(1)),
            )]
        );
        assert!(spawner.running("u1").is_empty());
        spawner.wait_stopped("u1").await;
        let counters = spawner.counters().snapshot();
        assert_eq!((counters.cancelled, counters.abandoned), (0, 1));

        // Shutdown does not wait for the abandoned thread.
        let start = Instant::now();
        spawner
            .shutdown(secs(30))
            .await
            .expect("nothing left to abandon");
        assert_eq!(start.elapsed(), secs(0));

        // When the thread ends at last, nothing is counted twice.
        release.send(()).expect("release");
        while entered.count() < 2 {
            tokio::task::yield_now().await;
        }
        settle().await;
        let counters = spawner.counters().snapshot();
        assert_eq!(
            (counters.stopped, counters.cancelled, counters.abandoned),
            (0, 0, 1)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_returns_within_its_timeout_despite_a_stuck_task() {
        let epoch = Instant::now();
        let (spawner, recorder) = spawner();
        let entered = Calls::new();
        let (spec, release) = stuck("sync", &entered);
        let spec = spec
            .cancellation_backoff(secs(100))
            .cancellation_timeout(secs(100))
            .build();
        spawner.ensure("u1", &spec, &body(1));
        while entered.count() == 0 {
            settle().await;
        }
        let shutting = tokio::spawn({
            let spawner = spawner.clone();
            async move { spawner.shutdown(secs(10)).await }
        });
        advance_to(epoch, secs(9)).await;
        assert!(!shutting.is_finished());
        advance_to(epoch, secs(10)).await;
        assert!(shutting.is_finished());
        let result = shutting.await.expect("shutdown task");
        assert_eq!(result, Err(ShutdownError::Abandoned { count: 1 }));
        assert_eq!(recorder.abandoned().len(), 1);
        assert_eq!(spawner.ensure("u2", &spec, &body(1)), Ensured::ShuttingDown);
        release.send(()).expect("release");
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_stops_everything_within_the_timeouts() {
        let (spawner, recorder) = spawner();
        let reasons = Arc::default();
        let dropped = Calls::new();
        let polite = cooperative("polite", &reasons);
        let rude = stubborn("rude", &dropped)
            .cancellation_backoff(secs(5))
            .cancellation_timeout(secs(5))
            .build();
        let timer =
            TaskSpec::timer("tick", secs(1), task_fn(|_| async { TaskOutcome::ok() })).build();
        for uid in ["u1", "u2", "u3"] {
            for spec in [&polite, &rude, &timer] {
                assert_eq!(spawner.ensure(uid, spec, &body(1)), Ensured::Spawned);
            }
        }
        tokio::time::sleep(secs(30)).await;
        assert_eq!(spawner.len(), 9);
        let start = Instant::now();
        spawner.shutdown(secs(60)).await.expect("clean shutdown");
        assert_eq!(start.elapsed(), secs(5));
        assert!(spawner.is_empty());
        assert_eq!(
            *reasons.lock().expect("lock"),
            [Some(StopReason::OperatorExiting); 3]
        );
        assert_eq!(dropped.times(), [secs(35); 3]);
        let counters = spawner.counters().snapshot();
        assert_eq!(
            (
                counters.spawned,
                counters.stopped,
                counters.cancelled,
                counters.abandoned
            ),
            (9, 6, 3, 0)
        );
        assert!(recorder.abandoned().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn tasks_are_keyed_by_uid_and_stopping_one_object_leaves_the_other() {
        let (spawner, _) = spawner();
        let calls = Calls::new();
        let counting = calls.clone();
        let timer = TaskSpec::timer(
            "tick",
            secs(1),
            task_fn(move |ctx| {
                assert!(ctx.uid().as_ref() == "u2" || ctx.uid().as_ref() == "u1");
                counting.hit();
                async { TaskOutcome::ok() }
            }),
        )
        .build();
        let reasons = Arc::default();
        let daemon = cooperative("d", &reasons);
        for uid in ["u1", "u2"] {
            spawner.ensure(uid, &timer, &body(1));
            spawner.ensure(uid, &daemon, &body(1));
        }
        assert_eq!(spawner.running("u1"), ["d", "tick"]);
        tokio::time::sleep(millis(2500)).await; // t=0, 1, 2 for both
        assert_eq!(calls.count(), 6);
        assert_eq!(spawner.stop_object("u1", StopReason::ObjectDeleted), 2);
        spawner.wait_stopped("u1").await;
        assert!(spawner.running("u1").is_empty());
        assert_eq!(spawner.running("u2"), ["d", "tick"]);
        tokio::time::sleep(secs(3)).await;
        assert_eq!(calls.count(), 9, "only u2 ticks on");
        assert_eq!(
            *reasons.lock().expect("lock"),
            [Some(StopReason::ObjectDeleted)]
        );
        // A new object with the same handler (e.g. re-created, new UID) is independent.
        assert_eq!(spawner.ensure("u3", &daemon, &body(1)), Ensured::Spawned);
        assert_eq!(spawner.len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn ensure_is_idempotent_and_never_runs_two_tasks_per_key() {
        let (spawner, _) = spawner();
        let dropped = Calls::new();
        let spec = stubborn("d", &dropped)
            .cancellation_backoff(secs(5))
            .build();
        assert_eq!(spawner.ensure("u1", &spec, &body(1)), Ensured::Spawned);
        assert_eq!(
            spawner.ensure("u1", &spec, &body(1)),
            Ensured::AlreadyRunning
        );
        spawner.stop("u1", "d", StopReason::FilterMismatch);
        assert_eq!(spawner.ensure("u1", &spec, &body(1)), Ensured::Stopping);
        tokio::time::sleep(secs(4)).await;
        assert_eq!(spawner.ensure("u1", &spec, &body(1)), Ensured::Stopping);
        spawner.wait_stopped("u1").await;
        assert_eq!(spawner.ensure("u1", &spec, &body(1)), Ensured::Spawned);
        assert_eq!(spawner.len(), 1);
        assert_eq!(spawner.counters().snapshot().spawned, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn object_stopped_as_gone_forgets_its_finished_daemons() {
        let (spawner, _) = spawner();
        let spec = TaskSpec::daemon("d", task_fn(|_| async { TaskOutcome::ok() })).build();
        spawner.ensure("u1", &spec, &body(1));
        spawner.wait_stopped("u1").await;
        assert!(spawner.is_finished("u1", "d"));
        assert_eq!(spawner.stop_object("u1", StopReason::DeletionRequested), 0);
        assert!(
            spawner.is_finished("u1", "d"),
            "still exists: still remembered"
        );
        assert_eq!(spawner.stop_object("u1", StopReason::ObjectDeleted), 0);
        assert!(!spawner.is_finished("u1", "d"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_ensure_for_an_object_stopped_as_gone_spawns_nothing_until_forgotten() {
        let (spawner, _) = spawner();
        let reasons = Arc::default();
        let spec = cooperative("d", &reasons);
        assert_eq!(spawner.ensure("u1", &spec, &body(1)), Ensured::Spawned);
        spawner.stop_object("u1", StopReason::ObjectDeleted);
        spawner.wait_stopped("u1").await;
        assert_eq!(
            spawner.ensure("u1", &spec, &body(1)),
            Ensured::ObjectGone,
            "processing still under way must not revive a deleted object's task"
        );
        spawner.forget("u1");
        assert_eq!(spawner.len(), 0);
        assert_eq!(spawner.ensure("u1", &spec, &body(1)), Ensured::Spawned);
    }

    #[tokio::test(start_paused = true)]
    async fn stop_all_for_pausing_allows_spawning_again() {
        let (spawner, _) = spawner();
        let reasons = Arc::default();
        let spec = cooperative("d", &reasons);
        spawner.ensure("u1", &spec, &body(1));
        spawner.ensure("u2", &spec, &body(1));
        settle().await;
        assert_eq!(spawner.stop_all(StopReason::OperatorPausing), 2);
        spawner.wait_stopped("u1").await;
        spawner.wait_stopped("u2").await;
        assert_eq!(spawner.ensure("u1", &spec, &body(1)), Ensured::Spawned);
        settle().await;
        assert_eq!(
            spawner.running("u1"),
            ["d"],
            "the fresh task is not born stopped"
        );
        assert_eq!(
            *reasons.lock().expect("lock"),
            [Some(StopReason::OperatorPausing); 2]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_spawner_stops_and_cancels_its_tasks() {
        let (spawner, _) = spawner();
        let dropped = Calls::new();
        let spec = stubborn("d", &dropped).build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(secs(1)).await;
        drop(spawner);
        settle().await;
        assert_eq!(dropped.times(), [secs(1)]);
    }

    #[tokio::test(start_paused = true)]
    async fn sync_daemon_polling_the_flag_exits_gracefully() {
        let (spawner, _) = spawner();
        let entered = Calls::new();
        let inside = entered.clone();
        let spec = TaskSpec::daemon(
            "sync",
            task_fn(move |ctx| {
                let inside = inside.clone();
                async move {
                    let result = ctx
                        .run_blocking(move |stopped| {
                            inside.hit();
                            while !stopped.wait_blocking(secs(3600)) {}
                            stopped.reason()
                        })
                        .await;
                    assert_eq!(result, Ok(Some(StopReason::ObjectDeleted)));
                    TaskOutcome::ok()
                }
            }),
        )
        .build();
        spawner.ensure("u1", &spec, &body(1));
        while entered.count() == 0 {
            settle().await;
        }
        spawner.stop_object("u1", StopReason::ObjectDeleted);
        spawner.wait_stopped("u1").await;
        let counters = spawner.counters().snapshot();
        assert_eq!((counters.stopped, counters.cancelled), (1, 0));
    }

    /// Real time on purpose: a future that never yields blocks a paused
    /// current-thread runtime entirely; on a multi-threaded runtime the
    /// stopper runs on another worker and abandons it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn async_task_that_never_yields_is_abandoned_on_a_multi_threaded_runtime() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let recorder = super::super::testkit::Recorder::new();
        let spawner = Spawner::new(recorder.clone(), SpawnerSettings::default());
        let release = Arc::new(AtomicBool::new(false));
        let entered = Arc::new(AtomicBool::new(false));
        let (spin_release, spin_entered) = (Arc::clone(&release), Arc::clone(&entered));
        let spec = TaskSpec::daemon(
            "spin",
            task_fn(move |_ctx| {
                let (release, entered) = (Arc::clone(&spin_release), Arc::clone(&spin_entered));
                async move {
                    entered.store(true, Ordering::SeqCst);
                    while !release.load(Ordering::SeqCst) {
                        std::hint::spin_loop();
                    }
                    TaskOutcome::ok()
                }
            }),
        )
        .cancellation_backoff(millis(0))
        .cancellation_timeout(millis(50))
        .build();
        spawner.ensure("u1", &spec, &body(1));
        while !entered.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
        spawner.stop_object("u1", StopReason::ObjectDeleted);
        let waited = tokio::time::timeout(secs(30), spawner.wait_stopped("u1")).await;
        release.store(true, Ordering::SeqCst);
        assert!(waited.is_ok(), "wait_stopped must not hang on a stuck task");
        assert_eq!(recorder.abandoned().len(), 1);
        assert_eq!(spawner.counters().snapshot().abandoned, 1);
        spawner.shutdown(secs(5)).await.expect("nothing left");
    }

    #[tokio::test(start_paused = true)]
    async fn stop_handler_stops_that_handler_on_every_object_only() {
        let (spawner, _) = spawner();
        let reasons = Arc::default();
        let a = cooperative("a", &reasons);
        let b = cooperative("b", &reasons);
        for uid in ["u1", "u2"] {
            spawner.ensure(uid, &a, &body(1));
            spawner.ensure(uid, &b, &body(1));
        }
        settle().await;
        assert_eq!(spawner.stop_handler("a", StopReason::HandlerRemoved), 2);
        spawner.stop_handler("a", StopReason::HandlerRemoved);
        while spawner.len() > 2 {
            settle().await;
        }
        assert_eq!(spawner.running("u1"), ["b"]);
        assert_eq!(spawner.running("u2"), ["b"]);
        assert_eq!(
            *reasons.lock().expect("lock"),
            [Some(StopReason::HandlerRemoved); 2]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn counters_count_each_way_a_task_ends() {
        let epoch = Instant::now();
        let (spawner, _) = spawner();
        let reasons = Arc::default();
        let dropped = Calls::new();
        let entered = Calls::new();
        let finishing =
            TaskSpec::daemon("finishing", task_fn(|_| async { TaskOutcome::ok() })).build();
        let polite = cooperative("polite", &reasons);
        let rude = stubborn("rude", &dropped)
            .cancellation_backoff(secs(1))
            .cancellation_timeout(secs(1))
            .build();
        let (stuck, release) = stuck("stuck", &entered);
        let stuck = stuck
            .cancellation_backoff(secs(1))
            .cancellation_timeout(secs(1))
            .build();
        for spec in [&finishing, &polite, &rude, &stuck] {
            assert_eq!(spawner.ensure("u1", spec, &body(1)), Ensured::Spawned);
        }
        while entered.count() == 0 {
            settle().await;
        }
        assert_eq!(spawner.counters().snapshot().finished, 1);
        spawner.stop_object("u1", StopReason::ObjectDeleted);
        advance_to(epoch, secs(1)).await;
        advance_to(epoch, secs(2)).await;
        spawner.wait_stopped("u1").await;
        assert_eq!(
            spawner.counters().snapshot(),
            super::super::TaskCounts {
                spawned: 4,
                finished: 1,
                stopped: 1,
                cancelled: 1,
                abandoned: 1,
            }
        );
        release.send(()).expect("release");
    }

    #[tokio::test(start_paused = true)]
    async fn recreated_object_gets_fresh_tasks_and_the_old_task_never_sees_its_body() {
        let (spawner, _) = spawner();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        // Ignores its stop flag for a while, watching the body meanwhile.
        let spec = TaskSpec::daemon(
            "d",
            task_fn(move |mut ctx| {
                let log = Arc::clone(&log);
                async move {
                    loop {
                        let n = ctx.body()["spec"]["n"].clone();
                        log.lock().expect("lock").push((ctx.uid().to_string(), n));
                        ctx.body.changed().await;
                    }
                }
            }),
        )
        .cancellation_backoff(secs(10))
        .build();
        spawner.ensure("old-uid", &spec, &body(1));
        settle().await;
        spawner.stop_object("old-uid", StopReason::ObjectDeleted);
        // Same name, new UID: a fresh task, while the old one still winds down.
        assert_eq!(spawner.ensure("new-uid", &spec, &body(2)), Ensured::Spawned);
        settle().await;
        assert!(spawner.update_body("new-uid", body(3)));
        assert!(
            !spawner.update_body("old-uid", body(4)),
            "the old object is gone"
        );
        spawner.wait_stopped("old-uid").await;
        let seen = seen.lock().expect("lock").clone();
        let old: Vec<_> = seen
            .iter()
            .filter(|(uid, _)| uid == "old-uid")
            .map(|(_, n)| n.clone())
            .collect();
        let new: Vec<_> = seen
            .iter()
            .filter(|(uid, _)| uid == "new-uid")
            .map(|(_, n)| n.clone())
            .collect();
        assert_eq!(old, [serde_json::json!(1)]);
        assert_eq!(new, [serde_json::json!(2), serde_json::json!(3)]);
    }
}
