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

use crate::handlers::Handler;
use crate::handling::{self, Resolution, merge_into};
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
    let resolution = handling::resolve(handler, outcome, handler.options.backoff, logger);
    let result = match &resolution {
        Resolution::Succeeded(Some(result)) => Some(result.clone()),
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
    match resolution {
        Resolution::Succeeded(result) => TaskOutcome::Ok(result),
        Resolution::Ignored => TaskOutcome::Ok(None),
        Resolution::Retry { delay, message } => TaskOutcome::Temporary { delay, message },
        Resolution::Failed { message } => TaskOutcome::Permanent { message },
    }
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::errors::Error;
    use crate::mock_api::{self, Reply, example};
    use crate::resources::ResourceRef;
    use crate::settings::NetworkingSettings;
    use crate::spawning::testkit::Recorder;
    use crate::spawning::{Spawner, SpawnerSettings};

    /// Every log line written while it is the default subscriber.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Lines {
        fn mentioning(&self, text: &str) -> Vec<String> {
            let bytes = self.0.lock().expect("lock").clone();
            String::from_utf8_lossy(&bytes)
                .lines()
                .filter(|line| line.contains(text))
                .map(str::to_owned)
                .collect()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_timer_tick_is_logged_once() {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);

        let (client, requests) =
            mock_api::client(|_| Reply::Json(200, example("ns", "a", "u1", "2")));
        let env = TaskEnvironment {
            target: ResourceTarget {
                api: Arc::new(mock_api::example_resource()),
                namespaced: true,
                status_subresource: false,
            },
            patcher: Patcher::new(client.clone(), &NetworkingSettings::default()),
            client,
            poster: None,
            memories: Memories::default(),
        };
        let resource = ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples");
        let handler = Handler::timer(resource, "tick", |_: Kwargs| async {
            Err::<(), _>(Error::regular("no luck"))
        })
        .interval(Duration::from_secs(60));
        let recorder = Recorder::new();
        let spawner = Spawner::new(recorder.clone(), SpawnerSettings::default());
        let body = Arc::new(example("ns", "a", "u1", "1"));
        spawner.ensure("u1", &task_spec(&handler, &env), &body);
        tokio::time::timeout(Duration::from_secs(30), async {
            while recorder.outcomes().is_empty() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the timer ticks");

        let logged = lines.mentioning("no luck");
        assert_eq!(logged.len(), 1, "{logged:#?}");
        assert!(
            logged[0].contains("Handler 'tick' failed with an exception. Will retry: no luck"),
            "{logged:#?}"
        );
        assert!(
            requests.lock().expect("lock").is_empty(),
            "nothing to patch"
        );
        spawner.stop_object("u1", StopReason::ObjectDeleted);
        spawner.wait_stopped("u1").await;
    }
}
