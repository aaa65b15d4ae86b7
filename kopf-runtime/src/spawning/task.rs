//! What a spawned task is made of: its [`TaskSpec`] (a `daemon` or `timer`
//! [`Handler`] with the call that runs it) and the [`TaskContext`] given to
//! each call, which returns a [`TaskOutcome`].
//!
//! The call is any `Fn(TaskContext) -> BoxFuture<TaskOutcome>`: the engine
//! adapts the handler's fn (parameter injection, error mapping) into a
//! [`TaskFn`] (see [`spawning::resource`](crate::spawning::resource)); the loops read the
//! handler's options and know nothing of its fn.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::time::Instant;

use super::liveness::Liveness;
use super::outcome::{TaskKind, TaskOutcome, Verdict};
use crate::model::errors::{HandlerError, Outcome};
use crate::model::handlers::{DEFAULT_BACKOFF, Handler, KindOptions, TimerOptions};
use crate::model::kwargs::{BodyReader, Logger};
use crate::model::retrying::RetryPolicy;
use crate::posting;
use crate::processing::execution;
use crate::spawning::stopping::StopFlag;

/// The handler call of a daemon or timer.
pub(super) type TaskFn = Arc<dyn Fn(TaskContext) -> BoxFuture<'static, TaskOutcome> + Send + Sync>;

/// Wrap an async closure into a [`TaskFn`].
pub(crate) fn task_fn<F, Fut>(f: F) -> TaskFn
where
    F: Fn(TaskContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = TaskOutcome> + Send + 'static,
{
    Arc::new(move |ctx| f(ctx).boxed())
}

/// A daemon or timer handler and its call, shared by all objects it serves
/// (build once, pass the same `Arc` to every `ensure`). Its options are the
/// handler's own, read where they are needed; the registry validated them.
#[derive(Clone)]
pub(crate) struct TaskSpec {
    pub(crate) id: Arc<str>,
    pub(crate) handler: Arc<Handler>,
    pub(crate) call: TaskFn,
    /// Whose objects its tasks serve.
    pub(crate) owner: Owner,
}

/// Which [`ResourceTasks`](crate::spawning::resource::ResourceTasks) a
/// [`TaskSpec`] belongs to, so that a spawner shared by several resources
/// can tell their objects apart (see [`Spawner::objects_of`](super::Spawner::objects_of)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Owner(u32);

impl Owner {
    /// A tag that no other owner has.
    pub(crate) fn unique() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

impl std::fmt::Debug for TaskSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskSpec")
            .field("handler", &self.handler)
            .finish_non_exhaustive()
    }
}

impl TaskSpec {
    /// The task of a `daemon` or `timer` handler (any other kind runs as a
    /// daemon), calling `call` for each attempt.
    pub(crate) fn new(handler: Arc<Handler>, call: TaskFn, owner: Owner) -> Arc<Self> {
        Arc::new(Self {
            id: Arc::from(handler.id()),
            handler,
            call,
            owner,
        })
    }

    /// The handler id.
    #[must_use]
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// The handler the task runs.
    #[must_use]
    pub(crate) fn handler(&self) -> &Handler {
        &self.handler
    }

    /// Daemon or timer.
    #[must_use]
    pub(crate) fn kind(&self) -> TaskKind {
        match self.timer_options() {
            Some(_) => TaskKind::Timer,
            None => TaskKind::Daemon,
        }
    }

    /// A timer's schedule: `interval`, `sharp`, `idle`.
    pub(crate) fn timer_options(&self) -> Option<&TimerOptions> {
        match self.handler.kind_options() {
            KindOptions::Timer(timer) => Some(timer),
            _ => None,
        }
    }

    /// Kopf's `initial_delay`: how long to wait after spawning before the
    /// first call (interrupted by stopping).
    pub(crate) fn start_delay(&self) -> Option<Duration> {
        match self.handler.kind_options() {
            KindOptions::Timer(timer) => timer.initial_delay,
            KindOptions::Daemon(daemon) => daemon.initial_delay,
            _ => None,
        }
    }

    /// Kopf's `cancellation_backoff` and `cancellation_timeout` (daemons only).
    pub(crate) fn cancellation(&self) -> (Option<Duration>, Option<Duration>) {
        match self.handler.kind_options() {
            KindOptions::Daemon(daemon) => {
                (daemon.cancellation_backoff, daemon.cancellation_timeout)
            }
            _ => (None, None),
        }
    }

    /// The verdict after attempt number `retry` (0-based), `runtime` after
    /// the first attempt started: a retry that the handler's
    /// [`RetryPolicy`] does not allow is given up
    /// ([`execution::give_up`]: logged and counted).
    pub(crate) fn verdict_for(
        &self,
        outcome: &TaskOutcome,
        retry: u32,
        runtime: Duration,
    ) -> Verdict {
        let policy = RetryPolicy::of(self.handler.options(), DEFAULT_BACKOFF);
        let (delay, message) = match outcome {
            TaskOutcome::Ok(_) => return Verdict::Done,
            TaskOutcome::Permanent { .. } => return Verdict::GaveUp,
            TaskOutcome::Temporary { delay, message } => (*delay, message),
            TaskOutcome::Error { message } => (policy.backoff, message),
        };
        match policy.after_failure(retry, runtime, delay) {
            Some(why) => {
                let logger = Logger::new(self.id());
                execution::give_up(&self.handler, why, Some(message), &logger);
                Verdict::GaveUp
            }
            None => Verdict::RetryIn(delay),
        }
    }
}

/// Everything one handler call gets from the runtime.
///
/// Cloning is cheap (reference counts only).
#[derive(Clone)]
pub(crate) struct TaskContext {
    /// The stop flag (Kopf's `stopped`).
    pub stopped: StopFlag,
    /// The live body: updated in place as the object's events arrive.
    pub body: BodyReader,
    /// 0 for the first attempt, then 1, 2, … (Kopf's `retry`).
    pub retry: u32,
    /// When the first attempt of this run started (Kopf's `started`).
    pub started: jiff::Timestamp,
    /// The same moment on Tokio's (pausable) clock, for `runtime`.
    pub started_at: Instant,
    pub(crate) liveness: Liveness,
}

impl std::fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskContext")
            .field("uid", self.uid())
            .field("handler_id", &self.liveness.shared.id)
            .field("stopped", &self.stopped)
            .field("retry", &self.retry)
            .field("started", &self.started)
            .finish_non_exhaustive()
    }
}

impl TaskContext {
    /// The object's UID (the task's own: reading it costs no reference
    /// count, which every tick would pay).
    #[must_use]
    pub(crate) fn uid(&self) -> &Arc<str> {
        &self.liveness.shared.uid
    }

    /// The latest body seen, decoded when read.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn body(&self) -> crate::model::kwargs::Body {
        crate::model::kwargs::Body::lazy(self.body.peek())
    }

    /// Time since the first attempt of this run (Kopf's `runtime`).
    #[must_use]
    pub(crate) fn runtime(&self) -> Duration {
        self.started_at.elapsed()
    }

    #[cfg(test)]
    /// Run a blocking function on a blocking thread, as part of this task
    /// (for sync daemons). The function gets the stop flag and should poll
    /// it, e.g. with [`FlagState::wait_blocking`](crate::spawning::stopping::FlagState::wait_blocking).
    ///
    /// # Guarantees
    /// The task counts as running until the function returns, even if the
    /// async part is cancelled: a thread that ignores the stop flag makes the
    /// task *abandoned* (reported) after `cancellation_timeout`, rather than
    /// silently leaked.
    ///
    /// # Errors
    /// [`BlockingError::Panicked`] if the function panics.
    pub(crate) async fn run_blocking<F, R>(&self, f: F) -> Result<R, BlockingError>
    where
        F: FnOnce(StopFlag) -> R + Send + 'static,
        R: Send + 'static,
    {
        let flag = self.stopped.clone();
        let handle = spawn_kept(self.liveness.clone(), move || f(flag));
        handle.await.map_err(|error| BlockingError::Panicked {
            message: error.to_string(),
        })
    }
}

tokio::task_local! {
    /// The task whose handler call is running, for the blocking work the
    /// call starts (see [`hosting`]).
    static HOST: Liveness;
}

/// Runs `call`, a call of a task's handler, so that what it runs with
/// [`spawn_blocking`] (the body of a plain-`fn` handler) is part of the
/// task: as with `TaskContext::run_blocking`, the task counts as running
/// until the thread returns, and is abandoned (and reported) if the thread
/// outlives the task's stop limits.
pub(crate) fn hosting<F: Future>(liveness: Liveness, call: F) -> impl Future<Output = F::Output> {
    HOST.scope(liveness, call)
}

/// Runs `f` on a blocking thread: as part of the task whose call is
/// [`hosting`] this one, if any.
pub(crate) fn spawn_blocking<F, R>(f: F) -> tokio::task::JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    match HOST.try_with(Liveness::clone) {
        Ok(liveness) => spawn_kept(liveness, f),
        Err(_) => tokio::task::spawn_blocking(f),
    }
}

/// Runs the body of a plain-`fn` handler on a blocking thread (the macros'
/// invokers call this). On that thread, [`posting`](crate::posting)'s free
/// functions post with the Event poster of the calling task; called from a
/// daemon or timer, the thread is part of its task (see
/// [`hosting`]), so that stopping the task waits for it,
/// and abandons and reports a thread that ignores its stop flag.
#[doc(hidden)]
pub fn run_blocking<F>(f: F) -> BoxFuture<'static, Outcome>
where
    F: FnOnce() -> Outcome + Send + 'static,
{
    Box::pin(async move {
        let poster = posting::current();
        let thread = spawn_blocking(move || posting::on_thread(poster, f));
        match thread.await {
            Ok(outcome) => outcome,
            Err(error) => Err(HandlerError::Blocking(error.to_string())),
        }
    })
}

/// Runs `f` on a blocking thread that keeps the task alive until it returns.
fn spawn_kept<F, R>(liveness: Liveness, f: F) -> tokio::task::JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let tracker = liveness.shared.tracker.clone();
    tracker.spawn_blocking(move || {
        let _keepalive = liveness;
        f()
    })
}

#[cfg(test)]
/// A failed [`TaskContext::run_blocking`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum BlockingError {
    /// The blocking function panicked (or its thread was cancelled).
    #[error("blocking function failed: {message}")]
    Panicked {
        /// The panic or cancellation message.
        message: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop() -> TaskFn {
        task_fn(|_| async { TaskOutcome::ok() })
    }

    #[test]
    fn retries_count_attempts() {
        let spec = TaskSpec::daemon("d", noop())
            .retries(3)
            .backoff(Duration::from_secs(7));
        let error = TaskOutcome::Error {
            message: "x".into(),
        };
        assert_eq!(
            spec.verdict_for(&error, 0, Duration::ZERO),
            Verdict::RetryIn(Duration::from_secs(7))
        );
        assert_eq!(
            spec.verdict_for(&error, 1, Duration::ZERO),
            Verdict::RetryIn(Duration::from_secs(7))
        );
        assert_eq!(spec.verdict_for(&error, 2, Duration::ZERO), Verdict::GaveUp);
        let temporary = TaskOutcome::Temporary {
            delay: Duration::from_secs(2),
            message: "x".into(),
        };
        assert_eq!(
            spec.verdict_for(&temporary, 0, Duration::ZERO),
            Verdict::RetryIn(Duration::from_secs(2))
        );
        assert_eq!(
            spec.verdict_for(&TaskOutcome::ok(), 5, Duration::ZERO),
            Verdict::Done
        );
        let permanent = TaskOutcome::Permanent {
            message: "x".into(),
        };
        assert_eq!(
            spec.verdict_for(&permanent, 0, Duration::ZERO),
            Verdict::GaveUp
        );
    }

    #[test]
    fn timeout_gives_up_instead_of_retrying_too_late() {
        let spec = TaskSpec::daemon("d", noop())
            .timeout(Duration::from_secs(10))
            .backoff(Duration::from_secs(4));
        let error = TaskOutcome::Error {
            message: "x".into(),
        };
        let s = Duration::from_secs;
        assert_eq!(spec.verdict_for(&error, 0, s(0)), Verdict::RetryIn(s(4)));
        assert_eq!(spec.verdict_for(&error, 1, s(5)), Verdict::RetryIn(s(4)));
        assert_eq!(
            spec.verdict_for(&error, 2, s(6)),
            Verdict::GaveUp,
            "the next attempt would start exactly at the timeout"
        );
        assert_eq!(
            spec.verdict_for(&TaskOutcome::ok(), 9, s(99)),
            Verdict::Done
        );
    }

    #[test]
    fn a_timers_schedule_is_its_handlers_options() {
        let spec = TaskSpec::daemon("d", noop());
        assert_eq!(spec.kind(), TaskKind::Daemon);
        assert!(spec.timer_options().is_none());
        let spec = TaskSpec::timer("t", Duration::from_secs(1), noop())
            .sharp(true)
            .idle(Duration::from_secs(3));
        assert_eq!(spec.kind(), TaskKind::Timer);
        assert_eq!(
            spec.timer_options(),
            Some(&TimerOptions {
                interval: Some(Duration::from_secs(1)),
                initial_delay: None,
                sharp: true,
                idle: Some(Duration::from_secs(3)),
            })
        );
    }
}
