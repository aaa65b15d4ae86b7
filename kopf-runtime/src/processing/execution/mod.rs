//! Running the change handlers of one cause: one handler per step, with its
//! progress kept on the object in Kopf's layout.
//!
//! Each step runs the due handler with the fewest attempts (Kopf's default
//! `asap` lifecycle), records its outcome in the merge patch, and tells the
//! caller whether the cause is done and when to come back. The caller applies
//! the patch, so an operator stopped between two steps resumes from the
//! recorded progress: a handler that succeeded is never run again for the
//! same cause, and one whose success was not recorded runs again.
//!
//! # Guarantees
//! - A panicking handler is an error of that handler (handled per its
//!   `errors` mode), never a crashed operator.
//! - A handler running longer than what is left of its `timeout` is
//!   abandoned and fails permanently.
//! - `retries` counts attempts: with `retries = 3` the third failure is final.
//!   When a handler is given up is [`RetryPolicy`]'s rule, the same for
//!   every kind of handler.
//!
//! # Sub-handlers
//! Child handlers that a change handler registers while it runs (Kopf's
//! `@kopf.subhandler` and `kopf.execute()`).
//!
//! A parent takes a [`Subhandlers`] parameter and registers children on
//! it. After the parent returns successfully, its children run (or earlier,
//! where the parent awaits [`Subhandlers::execute`]), with Kopf's state
//! layout:
//! - a child's id is `parent/child`, and its progress is stored on the
//!   object as a handler's is, so each child has its own retries, backoff,
//!   timeout and errors mode;
//! - the parent's record lists its children of any depth in `subrefs`;
//! - while children are unfinished, the parent is retried (with a debug
//!   line, not an error): it runs again, registers its children again, and
//!   the finished ones are skipped. An operator restarted in between
//!   resumes the same way, without re-running finished children;
//! - children that fail for good do not fail the parent, as in Kopf;
//! - the children's results go to `status.<parent/child>`, their patches
//!   join the parent's, and every record is purged with the parent's when
//!   the cause is done.

use std::any::Any;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use smallvec::SmallVec;

use crate::fields::{ensure_field, merge_into};
use crate::model::errors::{Error, HandlerError, IntoOutcome, Outcome};
use crate::model::handlers::{Handler, HandlerKind, KindOptions};
use crate::model::kwargs::{Attempt, Diff, Indexes, Kwargs, Logger, Memo, Patch, Reason};
use crate::model::retrying::RetryPolicy;
use crate::persistence::progress::{ProgressRecord, ProgressStorage, format_timestamp};

mod invoking;
mod lifecycle;

pub(crate) use invoking::{Disposition, catch_panics, give_up, invoke, resolve, resolve_attempt};
pub use lifecycle::Lifecycle;

/// The object and its change, shared by every handler of a cause.
#[derive(Clone)]
pub(crate) struct CauseContext {
    /// Why the handlers run.
    pub reason: Reason,
    /// Whether resume handlers run too (the object was first seen at start-up).
    pub initial: bool,
    /// The object.
    pub body: Arc<Value>,
    /// The stored essence (`None` for a creation).
    pub old: Option<Arc<Value>>,
    /// The current essence.
    pub new: Option<Arc<Value>>,
    /// What changed from `old` to `new`.
    pub diff: Diff,
    /// The object's memo, shared by all its handlers.
    pub memo: Memo,
    /// The object's logger.
    pub logger: Logger,
    /// The client handlers may use.
    pub client: Option<kube::Client>,
    /// The operator's indexes, which handlers take by id.
    pub indexes: Indexes,
}

impl std::fmt::Debug for CauseContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CauseContext")
            .field("reason", &self.reason)
            .field("initial", &self.initial)
            .field("logger", &self.logger)
            .finish_non_exhaustive()
    }
}

impl CauseContext {
    /// The kwargs for `handler`: field-scoped handlers see their field's
    /// values and the diff reduced to it ([`Handler::scope_kwargs`]).
    pub(crate) fn kwargs(&self, handler: &Handler) -> Kwargs {
        let kwargs = Kwargs::of(
            Arc::clone(&self.body),
            self.memo.clone(),
            self.logger.clone(),
        )
        .with_cluster(
            self.client.as_ref().and_then(|c| handler.client_for(c)),
            self.indexes.clone(),
        )
        .with_change(
            self.reason,
            self.diff.clone(),
            self.old.clone(),
            self.new.clone(),
        );
        handler.scope_kwargs(kwargs)
    }

    /// Whether `handler` runs for this cause (Kopf's handler matching: reason,
    /// resume rules, filters, with a `field` its old and new values in the
    /// essences and for `on_update`/`on_field` their change; see
    /// [`filters`](crate::model::filters)).
    pub(crate) fn selects(&self, handler: &Handler) -> bool {
        let reason_matches = match handler.kind() {
            HandlerKind::OnCreate => self.reason == Reason::Create,
            HandlerKind::OnUpdate => self.reason == Reason::Update,
            HandlerKind::OnDelete => self.reason == Reason::Delete,
            HandlerKind::OnField => matches!(
                self.reason,
                Reason::Create | Reason::Update | Reason::Delete
            ),
            HandlerKind::OnResume => {
                let deleted = matches!(
                    handler.kind_options(),
                    KindOptions::Resume { deleted: true }
                );
                self.initial
                    && self.reason != Reason::Create
                    && (self.reason != Reason::Delete || deleted)
            }
            _ => false,
        };
        if !reason_matches {
            return false;
        }
        // Without filters (a field is one), nothing would look at kwargs.
        handler.filters().is_empty() || handler.matches(&self.kwargs(handler))
    }
}

/// What one step achieved.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct StepOutcome {
    /// Every handler of the cause has finished (succeeded or failed for good).
    pub done: bool,
    /// Come back after this long: a handler is waiting for a retry, or more
    /// handlers are due (zero).
    pub delay: Option<Duration>,
    /// How many handlers of the cause have succeeded, failed for good.
    pub succeeded: usize,
    /// How many handlers of the cause failed for good.
    pub failed: usize,
    /// Whether a handler was invoked in this step: the patch then holds its
    /// outcome, which is lost (and the handler run again) if the patch is.
    pub ran: bool,
}

/// Where the handlers of a resource keep their progress, and how long they
/// back off by default: shared by a resource's processing and by the
/// sub-handlers its handlers register.
#[derive(Debug, Clone, Default)]
pub(crate) struct Progression {
    /// Where the records live (annotations, as Kopf keeps them).
    pub storage: Arc<ProgressStorage>,
    /// The delay of a retry for a handler without a `backoff` of its own
    /// (`settings.execution.default_backoff`).
    pub default_backoff: Duration,
}

/// Runs the due handlers that the [`Lifecycle::Asap`] plan picks (the one
/// with the fewest attempts), if any, and records their progress (and their
/// results and patches) into `patch`. `owned` are all change handlers of the
/// resource: their records, and those of their sub-handlers, are purged once
/// the cause is done.
pub(crate) async fn step(
    cause: &CauseContext,
    handlers: &[&Handler],
    owned: &[Handler],
    progression: &Progression,
    patch: &mut Value,
) -> StepOutcome {
    let storage = &*progression.storage;
    let mut records = fetch(storage, handlers, &cause.body);
    let fresh = run_planned(
        Lifecycle::Asap,
        cause,
        handlers,
        &mut records,
        progression,
        patch,
    )
    .await;
    let ran = !fresh.is_empty();

    let succeeded = records
        .iter()
        .flatten()
        .filter(|r| r.success == Some(true))
        .count();
    let failed = records
        .iter()
        .flatten()
        .filter(|r| r.failure == Some(true))
        .count();
    let done = records
        .iter()
        .all(|r| r.as_ref().is_some_and(ProgressRecord::is_finished));
    if done {
        // The records of the handlers just run would be purged by the same
        // patch that stores them, so they are not stored; the marker that
        // storing leaves on a custom annotation prefix is.
        if !fresh.is_empty() {
            storage.mark_managed(&cause.body, patch);
        }
        for handler in owned {
            storage.purge(handler.id(), &cause.body, patch);
        }
        // And those of the sub-handlers of any depth, which the parents list.
        for subref in records
            .iter()
            .flatten()
            .flat_map(|r| r.subrefs.iter().flatten())
        {
            storage.purge(subref, &cause.body, patch);
        }
        return StepOutcome {
            done,
            delay: None,
            succeeded,
            failed,
            ran,
        };
    }
    for (i, stamps) in fresh {
        if let Some(record) = &mut records[i] {
            stamps.write(record);
            storage.store(handlers[i].id(), record, &cause.body, patch);
        }
    }
    StepOutcome {
        done,
        delay: next_delay(&records),
        succeeded,
        failed,
        ran,
    }
}

/// The stored records of `handlers`, in their order.
fn fetch(
    storage: &ProgressStorage,
    handlers: &[&Handler],
    body: &Value,
) -> Vec<Option<ProgressRecord>> {
    handlers
        .iter()
        .map(|h| storage.fetch(h.id(), body))
        .collect()
}

/// Runs the due `handlers` that `lifecycle` picks, one after another: their
/// records (fetched into `records`) are updated in place, their results and
/// patches merged into `patch`. Returns which ran, with the times their
/// records get when stored.
async fn run_planned(
    lifecycle: Lifecycle,
    cause: &CauseContext,
    handlers: &[&Handler],
    records: &mut [Option<ProgressRecord>],
    progression: &Progression,
    patch: &mut Value,
) -> SmallVec<[(usize, Stamps); 1]> {
    let now = jiff::Timestamp::now();
    let plan = lifecycle.plan(due(records, now), |i| attempts(&records[i]));
    let mut ran = SmallVec::new();
    for i in plan {
        let handler = handlers[i];
        let known = records[i].as_ref();
        let started = known.and_then(ProgressRecord::started_at).unwrap_or(now);
        let first = known.is_none_or(|record| record.started.is_none());
        // The record is moved into the attempt in a statement of its own,
        // so that the step does not hold a copy of it while the handler runs.
        let attempting = attempt(
            cause,
            handler,
            records[i].take().unwrap_or_default(),
            progression,
            now,
            started,
        );
        let (record, result, handler_patch) = attempting.await;
        let stamps = Stamps {
            started: first.then_some(started),
            stopped: record.is_finished().then_some(now),
        };
        if let Some(handler_patch) = handler_patch {
            merge_into(patch, handler_patch);
        }
        if let Some(result) = result {
            ensure_field(patch, &["status", handler.id()], result);
        }
        records[i] = Some(record);
        ran.push((i, stamps));
    }
    ran
}

/// The handlers (indexes into `records`) that may run at `now`: not
/// finished, and not waiting for a retry (Kopf's "awakened").
fn due(records: &[Option<ProgressRecord>], now: jiff::Timestamp) -> Vec<usize> {
    records
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.as_ref().is_some_and(ProgressRecord::is_finished))
        .filter(|(_, r)| {
            r.as_ref()
                .and_then(ProgressRecord::delayed_until)
                .is_none_or(|at| at <= now)
        })
        .map(|(i, _)| i)
        .collect()
}

fn attempts(record: &Option<ProgressRecord>) -> u32 {
    record.as_ref().and_then(|r| r.retries).unwrap_or(0)
}

/// How long until the earliest unfinished handler is due (zero if one is
/// due now); `None` if every handler has finished.
fn next_delay(records: &[Option<ProgressRecord>]) -> Option<Duration> {
    let now = jiff::Timestamp::now();
    records
        .iter()
        .filter(|r| !r.as_ref().is_some_and(ProgressRecord::is_finished))
        .map(
            |r| match r.as_ref().and_then(ProgressRecord::delayed_until) {
                Some(at) if at > now => {
                    Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO)
                }
                _ => Duration::ZERO,
            },
        )
        .min()
}

/// When an attempt started (if it was the first) and stopped (if it
/// finished the handler). They are written into the record only when the
/// record is stored: a cause done in one step purges it unseen, and
/// formatting them would be wasted.
struct Stamps {
    started: Option<jiff::Timestamp>,
    stopped: Option<jiff::Timestamp>,
}

impl Stamps {
    fn write(self, record: &mut ProgressRecord) {
        if let Some(started) = self.started {
            record
                .started
                .get_or_insert_with(|| format_timestamp(started));
        }
        if let Some(stopped) = self.stopped {
            record.stopped = Some(format_timestamp(stopped));
        }
    }
}

/// One attempt of one handler at `now` (the handler first `started` then):
/// the updated record, its result for `status.<id>`, and the patch it asked
/// for (with the progress and results of its sub-handlers). Its times are
/// left to the caller's [`Stamps`].
async fn attempt(
    cause: &CauseContext,
    handler: &Handler,
    mut record: ProgressRecord,
    progression: &Progression,
    now: jiff::Timestamp,
    started: jiff::Timestamp,
) -> (ProgressRecord, Option<Value>, Option<Value>) {
    let runtime = Duration::try_from(now.duration_since(started)).unwrap_or(Duration::ZERO);
    let retries = record.retries.unwrap_or(0);
    record.purpose = Some(cause.reason.to_string());
    let logger = &cause.logger;
    let name = handler.id();

    let policy = RetryPolicy::of(handler.options(), progression.default_backoff);
    if let Some(why) = policy.before_attempt(retries, runtime) {
        let message = give_up(handler, why, None, logger);
        return (finish(record, false, Some(message)), None, None);
    }

    let patch = Patch::new();
    let limit = policy.limit(runtime);
    let mut kwargs = cause.kwargs(handler).with_attempt(Attempt {
        retry: retries,
        started,
        runtime,
    });
    kwargs.patch = patch.clone();
    let subhandlers = Subhandlers::of_parent(handler, cause, &kwargs, progression);
    kwargs.subhandlers = subhandlers.as_ref().map(Subhandlers::erased);
    // Called in a statement of its own: the kwargs are no part of what the
    // attempt holds while the handler runs.
    let call = invoke(handler, kwargs, limit);
    let outcome = call.await;
    let unfinished = match &subhandlers {
        Some(subhandlers) if subhandlers.any() => {
            Box::pin(subhandlers.after_parent(&outcome)).await
        }
        _ => None,
    };
    if let Some(subhandlers) = &subhandlers {
        subhandlers.list_in(&mut record);
    }
    let handler_patch = (!patch.is_empty()).then(|| patch.take());
    record.retries = Some(retries + 1);

    if let Some(delay) = unfinished {
        logger.debug(format_args!(
            "Handler '{name}' has unfinished sub-handlers. Will retry soon."
        ));
        return (delay_record(record, now, delay, None), None, handler_patch);
    }
    let failed_at =
        Duration::try_from(jiff::Timestamp::now().duration_since(started)).unwrap_or(runtime);
    let attempt = (retries, failed_at);
    let (record, result) = match resolve_attempt(handler, outcome, &policy, attempt, logger) {
        Disposition::Succeeded(result) => {
            logger.info(format_args!("Handler '{name}' succeeded."));
            (finish(record, true, None), result)
        }
        Disposition::Ignored => (finish(record, true, None), None),
        Disposition::Retry { delay, message } => {
            (delay_record(record, now, delay, Some(message)), None)
        }
        Disposition::Failed { message } => (finish(record, false, Some(message)), None),
    };
    (record, result, handler_patch)
}

/// The record of a finished handler; its `stopped` time is one of the
/// attempt's [`Stamps`].
fn finish(mut record: ProgressRecord, success: bool, message: Option<String>) -> ProgressRecord {
    record.delayed = None;
    record.success = success.then_some(true);
    record.failure = (!success).then_some(true);
    record.message = message;
    record
}

fn delay_record(
    mut record: ProgressRecord,
    now: jiff::Timestamp,
    delay: Duration,
    message: Option<String>,
) -> ProgressRecord {
    let at = jiff::SignedDuration::try_from(delay)
        .ok()
        .and_then(|d| now.checked_add(d).ok())
        .unwrap_or(now);
    record.delayed = Some(format_timestamp(at));
    record.message = message;
    record
}

/// The sub-handlers of one call of a change handler (Kopf's sub-handlers).
///
/// Take it as the `subhandlers` parameter of an `on_create`, `on_update`,
/// `on_delete`, `on_resume` or `on_field` handler (builder closures:
/// [`Kwargs::subhandlers`]), and register children on it. They run after
/// the parent returns successfully, each with its own progress, retries and
/// errors, under the id `parent/child`; the parent is called again until
/// every child has finished, and only the unfinished children run again,
/// after a restart too. The parent's progress record lists its children of
/// any depth (`subrefs`), the children's results go to
/// `status.<parent/child>`, and their records are purged with the
/// parent's, all as Kopf stores them. A child that fails for good does not
/// fail its parent, as in Kopf.
///
/// ```
/// use kopf_runtime as kopf;
/// use serde_json::Value;
///
/// #[kopf::on_create("kopfexamples.kopf.dev/v1")]
/// async fn create_fn(spec: Value, subhandlers: kopf::Subhandlers) -> kopf::Result<()> {
///     let items = spec["items"].as_array().cloned().unwrap_or_default();
///     for item in items.into_iter().filter_map(|i| i.as_str().map(str::to_owned)) {
///         subhandlers.register(item.clone(), move |kw: kopf::Kwargs| {
///             let item = item.clone();
///             async move {
///                 kw.logger.info(format_args!("=== Handling creation for {item}. ==="));
///                 Ok::<_, kopf::Error>(())
///             }
///         });
///     }
///     Ok(())
/// }
/// ```
///
/// To run the children inside the parent (Kopf's `kopf.execute()`), await
/// [`execute`](Self::execute) and return its error with `?`: it says that
/// children are unfinished, and the parent is called again.
#[derive(Clone)]
pub struct Subhandlers {
    inner: Arc<Inner>,
}

struct Inner {
    /// The parent's id: the children's prefix.
    parent: String,
    /// The parent's kind, which its children take.
    kind: HandlerKind,
    /// The cause, as the parent sees it (field-scoped for field handlers).
    cause: CauseContext,
    progression: Progression,
    /// The parent's patch, which the children's records, results and
    /// patches join.
    patch: Patch,
    children: Mutex<Children>,
}

/// The children registered in one call of the parent, and how they fare.
#[derive(Default)]
struct Children {
    registered: Vec<Handler>,
    /// The children were run by [`Subhandlers::execute`]: they do not run
    /// again after the parent returns.
    executed: bool,
    /// How long until the unfinished children are due, after the last run.
    unfinished: Option<Duration>,
    /// The ids of the children of any depth (the parent's `subrefs`).
    subrefs: BTreeSet<String>,
}

impl std::fmt::Debug for Subhandlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("Subhandlers")
            .field("parent", &self.inner.parent)
            .field(
                "registered",
                &state.registered.iter().map(|h| h.id()).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Subhandlers {
    /// The sub-handlers of one call of `parent`, a change handler (`None`
    /// for handlers of other kinds, which have none). `kwargs` are the
    /// parent's.
    pub(crate) fn of_parent(
        parent: &Handler,
        cause: &CauseContext,
        kwargs: &Kwargs,
        progression: &Progression,
    ) -> Option<Self> {
        if !parent.kind().is_changing() {
            return None;
        }
        let cause = CauseContext {
            old: kwargs.old.clone(),
            new: kwargs.new.clone(),
            diff: kwargs.diff.clone(),
            ..cause.clone()
        };
        Some(Subhandlers {
            inner: Arc::new(Inner {
                parent: parent.id().to_owned(),
                kind: parent.kind(),
                cause,
                progression: progression.clone(),
                patch: kwargs.patch.clone(),
                children: Mutex::new(Children::default()),
            }),
        })
    }

    /// The form [`Kwargs`] carry.
    pub(crate) fn erased(&self) -> Arc<dyn Any + Send + Sync> {
        Arc::new(self.clone())
    }

    fn state(&self) -> MutexGuard<'_, Children> {
        self.inner
            .children
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a child `id` with Kopf's default options (retried after
    /// the default backoff on any error); it is stored as `parent/id`.
    pub fn register<F, Fut, R>(&self, id: impl Into<String>, f: F)
    where
        F: Fn(Kwargs) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: IntoOutcome,
    {
        self.add(Handler::subhandler(id, f));
    }

    /// Registers a child made with [`Handler::subhandler`], with its own
    /// options (`retries`, `backoff`, `timeout`, `errors`, `param`) and
    /// filters (`label`, `annotation`, `when`, `field`, `value`). A second
    /// child with the same id replaces the first.
    pub fn add(&self, child: Handler) {
        let child = child.child_of(&self.inner.parent, self.inner.kind);
        let mut state = self.state();
        match state.registered.iter_mut().find(|h| h.id() == child.id()) {
            Some(known) => *known = child,
            None => state.registered.push(child),
        }
    }

    /// Runs the registered children now, one per call as Kopf's default
    /// lifecycle does (see [`execute_with`](Self::execute_with)).
    pub async fn execute(&self) -> crate::Result<()> {
        self.execute_with(Lifecycle::Asap).await
    }

    /// Runs the registered children now (Kopf's `kopf.execute()`), as many
    /// and in the order `lifecycle` says, and records their progress. The
    /// children then do not run again after the parent returns.
    ///
    /// # Errors
    /// A temporary error while some children are unfinished: return it from
    /// the parent (with `?`), which is then called again once they are due.
    pub async fn execute_with(&self, lifecycle: Lifecycle) -> crate::Result<()> {
        self.state().executed = true;
        match Box::pin(self.run(lifecycle)).await {
            None => Ok(()),
            Some(delay) => Err(Error::temporary(
                "some sub-handlers are not finished yet",
                delay,
            )),
        }
    }

    /// Whether the parent registered any child: without one, there is
    /// nothing to run or wait for after its call.
    pub(crate) fn any(&self) -> bool {
        !self.state().registered.is_empty()
    }

    /// After the parent's call: runs the children unless the parent did,
    /// and says how long until the unfinished ones are due, if any are.
    /// Children unfinished after [`execute`](Self::execute) count only if
    /// the parent returned the error that says so.
    pub(crate) async fn after_parent(&self, outcome: &Outcome) -> Option<Duration> {
        let (executed, unfinished) = {
            let state = self.state();
            (state.executed, state.unfinished)
        };
        match outcome {
            Ok(_) if !executed => self.run(Lifecycle::Asap).await,
            Err(HandlerError::Temporary { .. }) if executed => unfinished,
            _ => None,
        }
    }

    /// Adds the children of any depth to the parent's `subrefs`.
    pub(crate) fn list_in(&self, record: &mut ProgressRecord) {
        let state = self.state();
        if state.subrefs.is_empty() {
            return;
        }
        let mut subrefs: BTreeSet<String> = record.subrefs.take().into_iter().flatten().collect();
        subrefs.extend(state.subrefs.iter().cloned());
        record.subrefs = Some(subrefs.into_iter().collect());
    }

    /// Runs the due children that `lifecycle` picks; how long until the
    /// unfinished ones are due, if any are.
    async fn run(&self, lifecycle: Lifecycle) -> Option<Duration> {
        let inner = &*self.inner;
        let registered = self.state().registered.clone();
        let cause = &inner.cause;
        let children: Vec<&Handler> = registered
            .iter()
            .filter(|h| h.filters().is_empty() || h.matches(&cause.kwargs(h)))
            .collect();
        let storage = &*inner.progression.storage;
        let mut records = fetch(storage, &children, &cause.body);
        let mut stored = json!({});
        let ran = run_planned(
            lifecycle,
            cause,
            &children,
            &mut records,
            &inner.progression,
            &mut stored,
        )
        .await;
        // Unlike a top-level cause's, the children's records are stored even
        // when finished: their parent is not yet, and runs them again.
        for (i, stamps) in ran {
            if let Some(record) = &mut records[i] {
                stamps.write(record);
                storage.store(children[i].id(), record, &cause.body, &mut stored);
            }
        }
        if stored.as_object().is_some_and(|s| !s.is_empty()) {
            inner.patch.merge(stored);
        }
        let unfinished = next_delay(&records);
        let mut state = self.state();
        state.unfinished = unfinished;
        for (child, record) in children.iter().zip(&records) {
            state.subrefs.insert(child.id().to_owned());
            let grandchildren = record.as_ref().and_then(|r| r.subrefs.as_ref());
            state
                .subrefs
                .extend(grandchildren.into_iter().flatten().cloned());
        }
        unfinished
    }
}

impl Kwargs {
    /// The sub-handlers of this call of a change handler (`None` for other
    /// kinds): the `subhandlers` parameter, for builder closures.
    pub fn subhandlers(&self) -> Option<Subhandlers> {
        self.subhandlers
            .as_ref()
            .and_then(|erased| erased.downcast_ref::<Subhandlers>())
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::errors::Error;
    use crate::model::handlers::ErrorsMode;
    use crate::model::resources::ResourceRef;
    use serde_json::json;
    use std::sync::atomic::{AtomicU32, Ordering};

    mod subhandlers;

    pub(super) fn resource() -> ResourceRef {
        ResourceRef::of::<k8s_openapi::api::core::v1::ConfigMap>()
    }

    /// One step of the change handler `handler` alone, on `body`, with the
    /// default backoff: its outcome and the patch it recorded.
    async fn step_one(handler: &Handler, body: Value) -> (StepOutcome, Value) {
        let mut patch = json!({});
        let out = step(
            &cause(body),
            &[handler],
            std::slice::from_ref(handler),
            &progression(storage(), Duration::from_secs(60)),
            &mut patch,
        )
        .await;
        (out, patch)
    }

    pub(super) fn cause(body: Value) -> CauseContext {
        CauseContext {
            reason: Reason::Create,
            initial: false,
            body: Arc::new(body),
            old: None,
            new: Some(Arc::new(json!({"spec": {"a": 1}}))),
            diff: Diff::default(),
            memo: Memo::new(),
            logger: Logger::new("ns/name"),
            client: None,
            indexes: Indexes::default(),
        }
    }

    pub(super) fn storage() -> ProgressStorage {
        ProgressStorage::default()
    }

    pub(super) fn progression(storage: ProgressStorage, default_backoff: Duration) -> Progression {
        Progression {
            storage: Arc::new(storage),
            default_backoff,
        }
    }

    /// Applies a merge patch to the body, as the API server would.
    pub(super) fn apply(body: &mut Value, patch: Value) {
        fn merge(dst: &mut Value, src: Value) {
            match (dst, src) {
                (Value::Object(d), Value::Object(s)) => {
                    for (k, v) in s {
                        if v.is_null() {
                            d.remove(&k);
                        } else {
                            merge(d.entry(k).or_insert(Value::Null), v);
                        }
                    }
                }
                (d, s) => *d = s,
            }
        }
        merge(body, patch);
    }

    #[tokio::test]
    async fn a_successful_handler_stores_its_result_and_the_cause_is_done_in_one_step() {
        let handler = Handler::on_create(resource(), "create_fn", |_kw: Kwargs| async {
            Ok::<_, Error>(json!({"x": 1}))
        });
        let (out, patch) = step_one(&handler, json!({"metadata": {}})).await;
        assert!(out.done);
        assert_eq!(out.succeeded, 1);
        assert_eq!(patch["status"]["create_fn"], json!({"x": 1}));
        let annotations = patch
            .pointer("/metadata/annotations")
            .cloned()
            .unwrap_or(json!({}));
        assert!(
            annotations
                .as_object()
                .is_none_or(|a| a.keys().all(|k| !k.ends_with("create_fn"))),
            "the progress record is purged once the cause is done: {patch}"
        );
    }

    #[tokio::test]
    async fn a_cause_done_in_one_step_stores_no_record_but_marks_a_custom_prefix() {
        let handler = Handler::on_create(resource(), "create_fn", |_kw: Kwargs| async {
            Ok::<_, Error>(Value::Null)
        });
        let storage = ProgressStorage::from_settings(&crate::settings::PersistenceSettings {
            progress_prefix: "my-op.example.com".into(),
            ..Default::default()
        });
        let mut patch = json!({});
        let out = step(
            &cause(json!({"metadata": {}})),
            &[&handler],
            std::slice::from_ref(&handler),
            &progression(storage, Duration::from_secs(60)),
            &mut patch,
        )
        .await;
        assert!(out.done && out.ran);
        // As storing and then purging the record would leave it: the marker only.
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {"my-op.example.com/kopf-managed": "yes"}}})
        );
    }

    #[tokio::test]
    async fn handlers_run_one_per_step_and_a_recorded_success_is_never_rerun() {
        let calls = Arc::new(AtomicU32::new(0));
        let (c1, c2) = (Arc::clone(&calls), Arc::clone(&calls));
        let first = Handler::on_create(resource(), "first", move |_kw: Kwargs| {
            let c = Arc::clone(&c1);
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Error>(())
            }
        });
        let second = Handler::on_create(resource(), "second", move |_kw: Kwargs| {
            let c = Arc::clone(&c2);
            async move {
                c.fetch_add(10, Ordering::SeqCst);
                Ok::<_, Error>(())
            }
        });
        let mut body = json!({"metadata": {}});
        let owned = [first.clone(), second.clone()];
        let handlers = [&first, &second];
        let mut patch = json!({});
        let out = step(
            &cause(body.clone()),
            &handlers,
            &owned,
            &progression(storage(), Duration::from_secs(60)),
            &mut patch,
        )
        .await;
        assert!(!out.done);
        assert_eq!(
            out.delay,
            Some(Duration::ZERO),
            "more handlers are due at once"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        apply(&mut body, patch);
        let mut patch = json!({});
        let out = step(
            &cause(body.clone()),
            &handlers,
            &owned,
            &progression(storage(), Duration::from_secs(60)),
            &mut patch,
        )
        .await;
        assert!(out.done);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            11,
            "the first handler did not run again"
        );
        apply(&mut body, patch);
        assert!(
            body.pointer("/metadata/annotations")
                .and_then(Value::as_object)
                .is_none_or(|a| a.is_empty()),
            "all records purged: {body}"
        );
    }

    #[tokio::test]
    async fn temporary_errors_are_delayed_and_permanent_ones_are_final() {
        let temporary = Handler::on_create(resource(), "t", |_kw: Kwargs| async {
            Err::<(), _>(Error::temporary("later", Duration::from_secs(30)))
        });
        let permanent = Handler::on_create(resource(), "p", |_kw: Kwargs| async {
            Err::<(), _>(Error::permanent("never"))
        });
        let (out, _) = step_one(&temporary, json!({})).await;
        assert!(!out.done);
        let delay = out.delay.expect("a retry is scheduled");
        assert!(
            delay > Duration::from_secs(25) && delay <= Duration::from_secs(30),
            "{delay:?}"
        );
        let (out, _) = step_one(&permanent, json!({})).await;
        assert!(out.done);
        assert_eq!(out.failed, 1);
    }

    #[tokio::test]
    async fn a_step_tells_whether_a_handler_ran_so_its_outcome_is_in_the_patch() {
        let temporary = Handler::on_create(resource(), "t", |_kw: Kwargs| async {
            Err::<(), _>(Error::temporary("later", Duration::from_secs(30)))
        });
        let mut body = json!({"metadata": {}});
        let (out, patch) = step_one(&temporary, body.clone()).await;
        assert!(out.ran, "the handler was due");
        apply(&mut body, patch);
        let (out, _) = step_one(&temporary, body.clone()).await;
        assert!(!out.ran, "the handler waits for its retry");
        assert!(!out.done);
    }

    #[tokio::test]
    async fn a_panicking_handler_is_an_error_of_that_handler() {
        let handler = Handler::on_create(resource(), "boom", |_kw: Kwargs| async {
            if true {
                panic!("kaboom");
            }
            Ok::<_, Error>(())
        })
        .errors(ErrorsMode::Permanent);
        let (out, _) = step_one(&handler, json!({})).await;
        assert!(out.done);
        assert_eq!(out.failed, 1);
    }

    #[tokio::test]
    async fn a_panic_is_reported_with_its_message() {
        let handler = Handler::on_create(resource(), "boom", |_kw: Kwargs| async {
            if true {
                panic!("kaboom");
            }
            Ok::<_, Error>(())
        });
        let outcome = invoke(&handler, Kwargs::new(json!({})), None).await;
        assert_eq!(
            outcome.err().map(|e| e.to_string()),
            Some("the handler panicked: kaboom".to_owned())
        );
    }

    #[tokio::test]
    async fn the_retry_limit_counts_attempts_and_the_last_failure_is_final() {
        let calls = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&calls);
        let handler = Handler::on_create(resource(), "r", move |_kw: Kwargs| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Err::<(), _>(Error::regular("nope")) }
        })
        .retries(2)
        .backoff(Duration::from_millis(1));
        let mut body = json!({"metadata": {}});
        let (out, patch) = step_one(&handler, body.clone()).await;
        assert!(!out.done, "the first failure is retried");
        apply(&mut body, patch);
        tokio::time::sleep(Duration::from_millis(5)).await;
        let (out, _) = step_one(&handler, body.clone()).await;
        assert!(
            out.done,
            "the second failure is final, no step without a call"
        );
        assert_eq!(out.failed, 1);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_handler_is_given_up_before_an_attempt_past_its_limits() {
        let calls = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&calls);
        let handler = Handler::on_create(resource(), "r", move |_kw: Kwargs| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Err::<(), _>(Error::regular("nope")) }
        })
        .retries(2);
        // As an older operator (or one with other options) left it.
        let storage = storage();
        let mut body = json!({"metadata": {}});
        let mut patch = json!({});
        let record = ProgressRecord {
            retries: Some(2),
            ..ProgressRecord::default()
        };
        storage.store("r", &record, &body, &mut patch);
        apply(&mut body, patch);
        let mut patch = json!({});
        let out = step(
            &cause(body),
            &[&handler],
            std::slice::from_ref(&handler),
            &progression(storage, Duration::from_secs(60)),
            &mut patch,
        )
        .await;
        assert!(out.done);
        assert_eq!(out.failed, 1);
        assert_eq!(calls.load(Ordering::SeqCst), 0, "not called again");
    }

    #[tokio::test]
    async fn a_handler_over_its_timeout_fails_permanently() {
        let handler = Handler::on_create(resource(), "slow", |_kw: Kwargs| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, Error>(())
        })
        .timeout(Duration::from_millis(50));
        let (out, _) = step_one(&handler, json!({})).await;
        assert!(out.done);
        assert_eq!(out.failed, 1);
    }

    /// The delay of the retry after one regular error of `handler`, with
    /// `default_backoff` as the operator's setting.
    async fn first_retry_delay(handler: &Handler, default_backoff: Duration) -> Duration {
        let mut patch = json!({});
        let out = step(
            &cause(json!({})),
            &[handler],
            std::slice::from_ref(handler),
            &progression(storage(), default_backoff),
            &mut patch,
        )
        .await;
        out.delay.expect("a retry is due")
    }

    #[tokio::test]
    async fn an_unset_backoff_is_the_settings_default_and_a_set_one_wins() {
        let failing = |id| {
            Handler::on_create(resource(), id, |_kw: Kwargs| async {
                Err::<(), _>(Error::regular("nope"))
            })
        };
        let s = Duration::from_secs;
        let unset = first_retry_delay(&failing("unset"), s(7)).await;
        assert!(unset > s(6) && unset <= s(7), "{unset:?}");
        let set = first_retry_delay(&failing("set").backoff(s(2)), s(7)).await;
        assert!(set > s(1) && set <= s(2), "{set:?}");
        let zero = first_retry_delay(&failing("zero").backoff(s(0)), s(7)).await;
        assert_eq!(zero, s(0), "an explicit zero is a value, as in Kopf");
    }

    #[test]
    fn field_handlers_see_their_field_and_run_only_when_it_changes() {
        let handler = Handler::on_field(resource(), "f", "spec.a", |_kw: Kwargs| async {
            Ok::<_, Error>(())
        });
        let mut cause = cause(json!({}));
        cause.reason = Reason::Update;
        cause.old = Some(Arc::new(json!({"spec": {"a": 1, "b": 1}})));
        cause.new = Some(Arc::new(json!({"spec": {"a": 2, "b": 1}})));
        cause.diff = Diff::between(cause.old.as_deref(), cause.new.as_deref());
        assert!(cause.selects(&handler));
        let kwargs = cause.kwargs(&handler);
        assert_eq!(kwargs.old.as_deref(), Some(&json!(1)));
        assert_eq!(kwargs.new.as_deref(), Some(&json!(2)));
        cause.new = Some(Arc::new(json!({"spec": {"a": 1, "b": 2}})));
        cause.diff = Diff::between(cause.old.as_deref(), cause.new.as_deref());
        assert!(!cause.selects(&handler), "spec.a did not change");
    }

    #[test]
    fn merge_patches_compose_with_the_later_winning() {
        let mut dst = json!({"metadata": {"annotations": {"a": "1"}}, "status": {"x": 1}});
        merge_into(
            &mut dst,
            json!({"metadata": {"annotations": {"b": "2"}}, "status": 5}),
        );
        assert_eq!(
            dst,
            json!({"metadata": {"annotations": {"a": "1", "b": "2"}}, "status": 5})
        );
    }
}
