//! Daemons and timers of the served resources: their task specs, the call
//! of a handler from its task, and what the runtime does with the outcome.
//!
//! The [`spawning`](crate::spawning) module runs tasks; this module turns
//! `#[daemon]` and `#[timer]` handlers into them. Each call gets the
//! object's live body, its memo and a [`Stopped`] flag; what the handler
//! returns goes to `status.<id>` and its `patch` to the object, in one merge
//! patch that carries the object's UID as a precondition.
//!
//! # Guarantees
//! - A patch never lands on another object of the same name: a re-created
//!   object has a new UID and the server refuses the patch (409). With a
//!   status subresource, both requests of the split patch carry the UID.
//! - A task whose object is gone (404) or replaced (409) ends quietly: its
//!   stop flag is set and no error is logged or retried.
//! - An abandoned task (one that ignored its stop flag and cancellation) is
//!   reported as a warning and a Kubernetes Event, and counted.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::errors::HandlerError;
use crate::handlers::{ErrorsMode, Handler};
use crate::handling::{self, merge_into};
use crate::kwargs::{Kwargs, Logger, Memo, Stopped};
use crate::memories::Memories;
use crate::patching::{PatchError, PatchOutcome, PatchTarget, Patcher, ensure_field};
use crate::posting::{self, EventPoster, ObjectReference};
use crate::processing::{ResourceTarget, object_name};
use crate::spawning::{
    AbandonedReport, Observer, StopReason, TaskContext, TaskOutcome, TaskSpec, task_fn,
};

/// What every task of one resource shares.
#[derive(Clone)]
pub struct TaskEnvironment {
    /// The resource the objects belong to.
    pub target: ResourceTarget,
    /// The client handlers get.
    pub client: kube::Client,
    /// Applies the handlers' patches.
    pub patcher: Patcher,
    /// Posts Events (if posting is on).
    pub poster: Option<EventPoster>,
    /// What is remembered about the objects, their memos among it.
    pub memories: Memories,
}

/// The task of a `#[daemon]` or `#[timer]` handler: its options are the
/// handler's, validated by the registry.
pub fn task_spec(handler: &Handler, env: &TaskEnvironment) -> Arc<TaskSpec> {
    let handler = Arc::new(handler.clone());
    // One reference per call, not a copy of the handler and environment.
    let shared = Arc::new((Arc::clone(&handler), env.clone()));
    let call = task_fn(move |ctx| {
        let shared = Arc::clone(&shared);
        async move {
            let (handler, env) = &*shared;
            match env.poster.clone() {
                Some(poster) => posting::scope(poster, call(handler, env, ctx)).await,
                None => call(handler, env, ctx).await,
            }
        }
    });
    TaskSpec::new(handler, call)
}

/// What a task derives from its object once, for all its calls.
struct TaskObject {
    logger: Logger,
    memo: Memo,
}

/// One call of a daemon or timer handler from its task.
async fn call(handler: &Handler, env: &TaskEnvironment, ctx: TaskContext) -> TaskOutcome {
    let body = ctx.body();
    // An object's namespace, name and memo never change while it lives.
    let object = ctx.local(|| TaskObject {
        logger: Logger::new(object_name(&body)),
        memo: env.memories.memo_of(&ctx.uid),
    });
    let logger = &object.logger;
    let mut kwargs = Kwargs::of(Arc::clone(&body), object.memo.clone(), logger.clone());
    kwargs.stopped = Some(Stopped::new(ctx.stopped.token().clone()));
    kwargs.retry = ctx.retry;
    kwargs.started = Some(ctx.started);
    kwargs.runtime = ctx.runtime();
    kwargs.client = Some(env.client.clone());
    let patch = kwargs.patch.clone();

    let outcome = handling::invoke(handler, kwargs, None).await;
    let result = match &outcome {
        Ok(Some(result)) if !result.is_null() => Some(result.clone()),
        _ => None,
    };
    if (!patch.is_empty() || result.is_some()) && !ctx.stopped.is_set() {
        let mut merged = patch.take();
        if !merged.is_object() {
            merged = json!({});
        }
        if let Some(result) = result {
            ensure_field(&mut merged, &["status", handler.id.as_str()], result);
        }
        apply(env, &ctx, &body, merged, logger).await;
    }
    to_task_outcome(outcome, handler, logger)
}

/// Applies a task's patch to its object, guarded by the object's UID.
async fn apply(
    env: &TaskEnvironment,
    ctx: &TaskContext,
    body: &Value,
    patch: Value,
    logger: &Logger,
) {
    let Some(target) = PatchTarget::for_body(
        body,
        Arc::clone(&env.target.api),
        env.target.status_subresource,
    ) else {
        return;
    };
    let mut guarded = json!({"metadata": {"uid": &*ctx.uid}});
    merge_into(&mut guarded, patch);
    match env
        .patcher
        .merge_as::<serde::de::IgnoredAny>(&target, &guarded)
        .await
    {
        Ok(PatchOutcome::Patched(_)) => {}
        Ok(PatchOutcome::Gone) => {
            logger.debug("The object is gone; the task ends.");
            ctx.stopped.set(StopReason::ObjectDeleted);
        }
        Err(PatchError::Conflict { .. }) => {
            logger.debug("The object was replaced by another of the same name; the task ends.");
            ctx.stopped.set(StopReason::ObjectDeleted);
        }
        Err(error) => logger.warn(format_args!("Patching the object failed: {error}")),
    }
}

/// Maps a handler outcome to the task's, logging failures as Kopf does.
fn to_task_outcome(
    outcome: crate::errors::Outcome,
    handler: &Handler,
    logger: &Logger,
) -> TaskOutcome {
    let name = &handler.id;
    match outcome {
        Ok(result) => TaskOutcome::Ok(result.filter(|r| !r.is_null())),
        Err(HandlerError::Temporary { message, delay }) => {
            logger.error(format_args!(
                "Handler '{name}' failed temporarily: {message}"
            ));
            TaskOutcome::Temporary {
                delay: delay.unwrap_or(handler.options.backoff),
                message,
            }
        }
        Err(HandlerError::Permanent { message }) => {
            logger.error(format_args!(
                "Handler '{name}' failed permanently: {message}"
            ));
            TaskOutcome::Permanent { message }
        }
        Err(error) => match handler.options.errors {
            ErrorsMode::Ignored => {
                logger.error(format_args!(
                    "Handler '{name}' failed with an exception. Will ignore: {error}"
                ));
                TaskOutcome::Ok(None)
            }
            ErrorsMode::Permanent => {
                logger.error(format_args!(
                    "Handler '{name}' failed with an exception. Will stop: {error}"
                ));
                TaskOutcome::Permanent {
                    message: error.to_string(),
                }
            }
            ErrorsMode::Temporary => {
                logger.error(format_args!(
                    "Handler '{name}' failed with an exception. Will retry: {error}"
                ));
                TaskOutcome::Error {
                    message: error.to_string(),
                }
            }
        },
    }
}

/// Hears about abandoned tasks: a warning, an Event on the object, a count
/// (the spawner's counters).
pub struct TaskObserver {
    poster: Option<EventPoster>,
}

impl TaskObserver {
    /// An observer posting through `poster`, if any.
    pub fn new(poster: Option<EventPoster>) -> Arc<Self> {
        Arc::new(Self { poster })
    }
}

impl Observer for TaskObserver {
    fn on_abandoned(&self, report: AbandonedReport) {
        let reason = report.reason.map_or("unknown", StopReason::as_str);
        let message = format!(
            "Handler '{}' did not stop within {:?} after it was asked to ({reason}); abandoned.",
            report.handler_id, report.waited
        );
        tracing::warn!(uid = %report.uid, handler = %report.handler_id, waited = ?report.waited, %reason, "{message}");
        if let (Some(poster), Some(body)) = (&self.poster, &report.body) {
            poster.warn(ObjectReference::from_body(body), "Abandoned", &message);
        }
    }
}
