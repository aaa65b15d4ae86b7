//! Daemons and timers of the served resources: [`ResourceTasks`], the tasks
//! of one resource, which the processor starts, refreshes and stops as it
//! sees the objects; the call of a handler from its task; and what the
//! runtime does with the outcome.
//!
//! The [`spawning`] module runs tasks; this module turns
//! `#[daemon]` and `#[timer]` handlers into them. Each call gets the
//! object's latest body (as `body`, `spec`, …, fixed for the call), the
//! [`LiveBody`] that follows it (as `live`), its memo and a [`Stopped`]
//! flag; what the handler returns goes to `status.<id>` and its `patch` to
//! the object, in one merge patch that carries the object's UID as a
//! precondition. The blocking thread of a plain-`fn` handler is part of
//! its task.
//!
//! # Guarantees
//! - A patch never lands on another object of the same name: a re-created
//!   object has a new UID and the server refuses the patch (409). With a
//!   status subresource, both requests of the split patch carry the UID.
//! - A task whose object is gone (404) or replaced (409) ends quietly: its
//!   stop flag is set and no error is logged or retried.
//! - An abandoned task (one that ignored its stop flag and cancellation) is
//!   reported as a warning and a Kubernetes Event, and counted.
//! - A deletion waits only for the tasks of handlers that hold the
//!   finalizer, and within their stop limits; `no_finalizers` tasks are
//!   stopped, never waited for.

use std::sync::Arc;
use std::time::Duration;

use futures::future::Either;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::liveness::{TaskObject, TaskShared};
use crate::fields::ensure_field;
use crate::fields::{merge_into, qualified_name};
use crate::model::handlers::Handler;
use crate::model::kwargs::{
    Attempt, Body, EncodedBody, Indexes, Kwargs, LiveBody, Logger, Stopped,
};
use crate::persistence::patching::ResourceTarget;
use crate::persistence::patching::{PatchError, PatchOutcome, PatchTarget, Patcher};
use crate::posting::{self, EventPoster, ObjectReference};
use crate::processing::execution::{self, Disposition};
use crate::processing::memories::Memories;
use crate::spawning::stopping::{StopFlag, StopReason};
use crate::spawning::{
    self, AbandonedReport, Ensured, Observer, Owner, Spawner, TaskContext, TaskOutcome, TaskSpec,
    task_fn,
};
use crate::watching::DeletedBy;

/// When an object whose tasks are still stopping is looked at again (to
/// spawn them afresh, or, at the operator's exit, to release it).
pub(crate) const RECHECK: Duration = Duration::from_millis(500);

/// How much longer than the longest stop of its tasks a deleted object's
/// identity is kept for reports about them.
const STOP_LIMIT_MARGIN: Duration = Duration::from_secs(1);

/// The daemons and timers of one resource, as tasks in the operator's
/// [`Spawner`].
pub(crate) struct ResourceTasks {
    specs: Vec<Arc<TaskSpec>>,
    spawner: Arc<Spawner>,
    /// Cancelled when the operator exits: nothing waits for tasks then.
    exiting: CancellationToken,
    /// The tag of the specs, by which the spawner (shared by every served
    /// resource) tells this resource's objects from the others': so that
    /// their tasks are paused if the resource stops being served.
    owner: Owner,
}

impl ResourceTasks {
    /// The tasks of `handlers` (the resource's daemons and timers), run in
    /// `spawner`; `exiting` (the operator's exit) cuts a deletion's wait
    /// for them short, so that the queues drain promptly.
    pub(crate) fn new(
        handlers: &[Handler],
        env: &TaskEnvironment,
        spawner: Arc<Spawner>,
        exiting: CancellationToken,
    ) -> Self {
        let owner = Owner::unique();
        let specs = handlers.iter().map(|h| task_spec(h, env, owner)).collect();
        Self {
            specs,
            spawner,
            exiting,
            owner,
        }
    }

    /// Whether the resource has no daemons or timers.
    pub(crate) fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// The daemons and timers, in the order [`serve`](Self::serve) takes
    /// whether each matches.
    pub(crate) fn handlers(&self) -> impl Iterator<Item = &Handler> {
        self.specs.iter().map(|spec| spec.handler())
    }

    /// Whether the object has a live task (running or being stopped).
    pub(crate) fn any_running(&self, uid: &str) -> bool {
        self.spawner.is_running(uid, |_| true)
    }

    /// Starts (or refreshes with `body`) the tasks of the handlers that
    /// match the object (`matching`, in the order of
    /// [`handlers`](Self::handlers)) and stops the others. Returns when to
    /// look again if a task is still stopping and must be spawned afresh.
    pub(crate) fn serve(
        &self,
        uid: &Arc<str>,
        body: &Arc<Value>,
        matching: &[bool],
    ) -> Option<Duration> {
        let mut recheck = None;
        // Encoded once for all the handlers (and only if one matches).
        let mut encoded = None;
        for (spec, matches) in self.specs.iter().zip(matching) {
            if !*matches {
                self.spawner
                    .stop(uid, spec.id(), StopReason::FilterMismatch);
                continue;
            }
            let encoded = encoded.get_or_insert_with(|| EncodedBody::new(body));
            if self.spawner.ensure_encoded(uid, spec, encoded) == Ensured::Stopping {
                recheck = Some(RECHECK);
            }
        }
        recheck
    }

    /// Stops the object's tasks for its deletion; returns whether tasks of
    /// handlers that hold the finalizer still run.
    pub(crate) fn stop_for_deletion(&self, uid: &str) -> bool {
        self.spawner.stop_object(uid, StopReason::DeletionRequested);
        self.spawner.is_running(uid, |id| self.holds_finalizer(id))
    }

    /// Waits until the object's tasks that hold its finalizer have ended
    /// (they were asked to stop); returns whether they have. The spawner
    /// ends or abandons each within its stop limit, which bounds the wait;
    /// the operator's exit cuts it short.
    pub(crate) async fn wait_for_deletion(&self, uid: &str) -> bool {
        let wait = self
            .spawner
            .wait_stopped_of(uid, |id| self.holds_finalizer(id));
        tokio::select! {
            stopped = tokio::time::timeout(self.stop_limit(), wait) => stopped.is_ok(),
            () = self.exiting.cancelled() => false,
        }
    }

    /// Stops the tasks of an object that is gone, at once.
    pub(crate) fn stop_gone(&self, uid: &str, how: DeletedBy) {
        if self.is_empty() {
            return;
        }
        let reason = match how {
            DeletedBy::Event => StopReason::ObjectDeleted,
            DeletedBy::Vanished => StopReason::ObjectVanished,
        };
        if self.spawner.stop_object(uid, reason) > 0 {
            tracing::debug!(%uid, reason = reason.as_str(), "stopping the object's daemons and timers");
        }
    }

    /// Forgets an object that is gone (its tasks were stopped by
    /// [`stop_gone`](Self::stop_gone)).
    pub(crate) fn forget(&self, uid: &str) {
        self.spawner.forget(uid);
    }

    /// Returns once the tasks of a forgotten object have ended or were
    /// abandoned (and reported on the object, whose identity is kept until
    /// then); the spawner bounds the wait, the timeout is a safety net.
    pub(crate) async fn wait_forgotten(&self, uid: &str) {
        let _ = tokio::time::timeout(self.stop_limit(), self.spawner.wait_stopped(uid)).await;
    }

    /// Stops the tasks of the objects of a resource that is no longer
    /// served as on the operator's exit, but so that they may be spawned
    /// again when it is back ([`StopReason::OperatorPausing`]); once they
    /// have ended (each within its stop limit) or the operator exits
    /// (`exiting`), the objects are forgotten (with the handlers that
    /// finished for good on them). A gone object's tasks were stopped as
    /// gone already.
    pub(crate) async fn pause(&self, exiting: &CancellationToken) {
        let uids = self.spawner.objects_of(self.owner);
        if uids.is_empty() || exiting.is_cancelled() {
            return;
        }
        let stopping: usize = uids
            .iter()
            .map(|uid| self.spawner.stop_object(uid, StopReason::OperatorPausing))
            .sum();
        if stopping > 0 {
            tracing::debug!(
                tasks = stopping,
                reason = %StopReason::OperatorPausing,
                "stopping the daemons and timers of a resource no longer served"
            );
        }
        let ended = futures::future::join_all(uids.iter().map(|uid| self.wait_forgotten(uid)));
        tokio::select! {
            _ = ended => {}
            () = exiting.cancelled() => return,
        }
        for uid in &uids {
            self.forget(uid);
        }
    }

    /// Whether the handler `id` is a daemon or timer whose tasks hold its
    /// object's finalizer.
    fn holds_finalizer(&self, id: &str) -> bool {
        self.handlers()
            .any(|h| h.id() == id && h.requires_finalizer())
    }

    /// Longer than any of the resource's tasks can take to stop.
    fn stop_limit(&self) -> Duration {
        self.specs
            .iter()
            .map(|spec| self.spawner.stop_limit(spec))
            .max()
            .unwrap_or_default()
            .saturating_add(STOP_LIMIT_MARGIN)
    }
}

/// What every task of one resource shares.
#[derive(Clone)]
pub(crate) struct TaskEnvironment {
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
    /// The operator's indexes, which handlers take by id.
    pub indexes: Indexes,
    /// The retry delay of handlers without a `backoff` of their own
    /// (`settings.execution.default_backoff`).
    pub default_backoff: Duration,
}

/// The task of a `#[daemon]` or `#[timer]` handler: its options are the
/// handler's, validated by the registry; without a `backoff` of its own, it
/// retries after the environment's `default_backoff`.
pub(crate) fn task_spec(handler: &Handler, env: &TaskEnvironment, owner: Owner) -> Arc<TaskSpec> {
    let mut handler = handler.clone();
    if handler.options().backoff.is_none() {
        handler = handler.backoff(env.default_backoff);
    }
    let handler = Arc::new(handler);
    // One reference per call, not a copy of the handler and environment.
    let shared = Arc::new((Arc::clone(&handler), env.clone()));
    // No async block around the call: it would keep the context twice, as
    // its capture and in the call's future, and every tick allocates it.
    let call = task_fn(move |ctx| {
        let poster = shared.1.poster.clone();
        let call = call(Arc::clone(&shared), ctx);
        match poster {
            Some(poster) => Either::Left(posting::scope(poster, call)),
            None => Either::Right(call),
        }
    });
    TaskSpec::new(handler, call, owner)
}

/// One call of a daemon or timer handler from its task.
///
/// What every tick allocates is this future: it keeps across the handler's
/// call only what it needs afterwards. The context's fields are used in
/// place (the future keeps its argument for the whole call anyway), and the
/// call's `Kwargs` are made by a plain fn, whose locals are not kept.
async fn call(shared: Arc<(Arc<Handler>, TaskEnvironment)>, mut ctx: TaskContext) -> TaskOutcome {
    let (handler, env) = &*shared;
    // The call's body is the live body's last seen one: `live` waits for
    // the next.
    let encoded = ctx.body.read();
    let attempt = Attempt {
        retry: ctx.retry,
        started: ctx.started,
        runtime: ctx.runtime(),
    };
    let stopped = &ctx.stopped;
    let liveness = &ctx.liveness;
    let task = &*liveness.shared;
    // In a block: a local that was borrowed is kept in the future until its
    // scope ends, and the `Kwargs` are moved into the call.
    let (invoking, patch, object) = {
        let (kwargs, object) = kwargs_of(
            (handler, env),
            task,
            Body::lazy(encoded.clone()),
            attempt,
            // The call's receiver itself becomes `live`.
            (Stopped::of(stopped), LiveBody::encoded(ctx.body)),
        );
        let patch = kwargs.patch.clone();
        (execution::invoke(handler, kwargs, None), patch, object)
    };
    let logger = &object.logger;
    let uid = &task.uid;
    let outcome = if handler.is_blocking() {
        // A plain fn runs on a blocking thread that belongs to the task.
        // Boxed: only such calls carry the scope.
        Box::pin(spawning::hosting(liveness.clone(), invoking)).await
    } else {
        invoking.await
    };
    let backoff = handler.options().backoff.unwrap_or(env.default_backoff);
    let resolution = execution::resolve(handler, outcome, backoff, logger);
    let result = match &resolution {
        Disposition::Succeeded(Some(result)) => Some(result.clone()),
        _ => None,
    };
    if (!patch.is_empty() || result.is_some()) && !stopped.is_set() {
        let mut merged = patch.take();
        if !merged.is_object() {
            merged = json!({});
        }
        if let Some(result) = result {
            ensure_field(&mut merged, &["status", handler.id()], result);
        }
        // Boxed: only a call that patches makes the request, and its future
        // would make every call's larger.
        let body = Body::lazy(encoded);
        Box::pin(apply(env, (uid, stopped), &body, merged, logger)).await;
    }
    match resolution {
        Disposition::Succeeded(result) => TaskOutcome::Ok(result),
        Disposition::Ignored => TaskOutcome::Ok(None),
        Disposition::Retry { delay, message } => TaskOutcome::Temporary { delay, message },
        Disposition::Failed { message } => TaskOutcome::Permanent { message },
    }
}

/// A call's `Kwargs`, and its object's logger and memo (made at its first
/// call: an object's namespace, name and memo never change while it lives).
fn kwargs_of<'t>(
    (handler, env): (&Handler, &TaskEnvironment),
    task: &'t TaskShared,
    body: Body,
    attempt: Attempt,
    (stopped, live): (Stopped, LiveBody),
) -> (Kwargs, &'t TaskObject) {
    let object = task.object(|| TaskObject {
        logger: Logger::new(qualified_name(body.namespace(), body.name())),
        memo: env.memories.memo_of(&task.uid),
    });
    // Filled in place: this runs on every tick.
    let mut kwargs = Kwargs::of(body, object.memo.clone(), object.logger.clone());
    kwargs.set_cluster(handler.client_for(&env.client), env.indexes.clone());
    kwargs.set_attempt(attempt);
    kwargs.set_task(stopped, live);
    (kwargs, object)
}

/// Applies a task's patch to its object, guarded by the object's UID; a
/// gone or replaced object sets the task's stop flag.
async fn apply(
    env: &TaskEnvironment,
    (uid, stopped): (&str, &StopFlag),
    body: &Body,
    patch: Value,
    logger: &Logger,
) {
    let Some(target) = body.name().map(|name| {
        PatchTarget::named(
            (body.namespace(), name),
            Arc::clone(&env.target.api),
            env.target.status_subresource,
        )
    }) else {
        return;
    };
    let mut guarded = json!({"metadata": {"uid": uid}});
    merge_into(&mut guarded, patch);
    match env
        .patcher
        .merge_as::<serde::de::IgnoredAny>(&target, &guarded)
        .await
    {
        Ok(PatchOutcome::Patched(_)) => {}
        Ok(PatchOutcome::Gone) => {
            logger.debug("The object is gone; the task ends.");
            stopped.set(StopReason::ObjectDeleted);
        }
        Err(PatchError::Conflict { .. }) => {
            logger.debug("The object was replaced by another of the same name; the task ends.");
            stopped.set(StopReason::ObjectDeleted);
        }
        Err(error) => logger.warn(format_args!("Patching the object failed: {error}")),
    }
}

/// Hears about abandoned tasks: a warning, an Event on the object, a count
/// (the spawner's counters).
pub(crate) struct TaskObserver {
    poster: Option<EventPoster>,
}

impl TaskObserver {
    /// An observer posting through `poster`, if any.
    pub(crate) fn new(poster: Option<EventPoster>) -> Arc<Self> {
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
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::mock_api::{self, Reply, example};
    use crate::model::errors::Error;
    use crate::model::resources::ResourceRef;
    use crate::settings::NetworkingSettings;
    use crate::spawning::outcome::Verdict;
    use crate::spawning::testkit::{Recorder, paused_runtime, settle};
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

    fn environment(client: kube::Client) -> TaskEnvironment {
        TaskEnvironment {
            target: ResourceTarget {
                api: Arc::new(mock_api::example_resource()),
                namespaced: true,
                status_subresource: false,
            },
            patcher: Patcher::new(client.clone(), &NetworkingSettings::default()),
            client,
            poster: None,
            memories: Memories::default(),
            indexes: Indexes::default(),
            default_backoff: Duration::from_secs(60),
        }
    }

    /// The verdict after the first tick of a timer failing with a regular
    /// error, in an environment whose default backoff is 7 s.
    async fn first_verdict(handler: Handler) -> Verdict {
        let (client, _) = mock_api::client(|_| Reply::Json(200, example("ns", "a", "u1", "2")));
        let env = TaskEnvironment {
            default_backoff: Duration::from_secs(7),
            ..environment(client)
        };
        let recorder = Recorder::new();
        let spawner = Spawner::new(recorder.clone(), SpawnerSettings::default());
        let body = Arc::new(example("ns", "a", "u1", "1"));
        spawner.ensure("u1", &task_spec(&handler, &env, Owner::unique()), &body);
        let verdict = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                if let Some(seen) = recorder.outcomes().first() {
                    return seen.verdict;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the timer ticks");
        spawner.stop_object("u1", StopReason::ObjectDeleted);
        spawner.wait_stopped("u1").await;
        verdict
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_without_a_backoff_retries_after_the_default_backoff() {
        let failing = || {
            let resource = ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples");
            Handler::timer(resource, "tick", |_: Kwargs| async {
                Err::<(), _>(Error::regular("no luck"))
            })
            .interval(Duration::from_secs(60))
        };
        assert_eq!(
            first_verdict(failing()).await,
            Verdict::RetryIn(Duration::from_secs(7))
        );
        assert_eq!(
            first_verdict(failing().backoff(Duration::from_secs(2))).await,
            Verdict::RetryIn(Duration::from_secs(2))
        );
    }

    /// What a timer's ticks allocate, over `TICKS` ticks of a handler that
    /// only reads its `Kwargs`: the most held at once, and the allocations
    /// per tick. Counted on the test's thread, where the current-thread
    /// runtime runs the task.
    fn allocated_by_ticks() -> (u64, u64) {
        const TICKS: u64 = 100;
        let runtime = paused_runtime();
        let ticks = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&ticks);
        let handler = Handler::timer(
            ResourceRef::dynamic("", "v1", "configmaps"),
            "tick",
            move |kw: Kwargs| {
                let counted = Arc::clone(&counted);
                async move {
                    std::hint::black_box(kw.name());
                    counted.fetch_add(1, Ordering::Relaxed);
                }
            },
        )
        .interval(Duration::from_secs(1))
        .takes_client(false);
        let run = |seconds: u64| {
            runtime.block_on(async {
                for _ in 0..seconds {
                    tokio::time::advance(Duration::from_secs(1)).await;
                    settle().await;
                }
            });
        };
        let spawner = runtime.block_on(async {
            let (client, _) = mock_api::client(|_| Reply::Json(200, example("ns", "a", "u1", "2")));
            let spec = task_spec(&handler, &environment(client), Owner::unique());
            let spawner = Spawner::new(Arc::new(()), SpawnerSettings::default());
            spawner.ensure("u1", &spec, &Arc::new(example("ns", "a", "u1", "1")));
            spawner
        });
        // The first ticks make what an object keeps (its logger, its memo).
        run(3);
        let before = ticks.load(Ordering::Relaxed);
        let counted = allocation_counter::measure(|| run(TICKS));
        assert_eq!(
            ticks.load(Ordering::Relaxed) - before,
            TICKS,
            "one tick a second"
        );
        runtime.block_on(async {
            spawner.stop_object("u1", StopReason::ObjectDeleted);
            spawner.wait_stopped("u1").await;
        });
        (counted.bytes_max, counted.count_total / TICKS)
    }

    // About 1,330 bytes at most at once (1,410 in a debug build), in four
    // allocations a tick, each within what glibc's `malloc` serves from its
    // per-thread cache (1,032 bytes): the handler's future with its
    // `Kwargs` (536 bytes) inside, the call around it, the attempt, the
    // call's `patch`. The handler's future held twice (in an async block
    // around it) costs 550 more, the call keeping its `Kwargs` (a borrowed
    // local) 530 more, a timeout's sleep in every call 120 more, the patch
    // request's future in every call 500 more: each fails this test.
    const TICK_CEILING: u64 = 1_450;

    #[test]
    fn a_tick_holds_at_most_1_450_bytes_in_4_allocations() {
        let (peak, allocations) = allocated_by_ticks();
        assert!(
            peak <= TICK_CEILING,
            "a tick holds {peak} bytes at once (at most {TICK_CEILING})"
        );
        assert_eq!(allocations, 4, "allocations a tick");
    }

    #[tokio::test(start_paused = true)]
    async fn a_tick_gets_the_client_unless_its_fn_takes_none() {
        let expecting = |client: bool| {
            let resource = ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples");
            Handler::timer(resource, "tick", move |kw: Kwargs| async move {
                if kw.client.is_some() == client {
                    Ok(())
                } else {
                    Err(Error::permanent(format!("client: {}", kw.client.is_some())))
                }
            })
            .interval(Duration::from_secs(60))
        };
        assert_eq!(first_verdict(expecting(true)).await, Verdict::Done);
        let without = expecting(false).takes_client(false);
        assert_eq!(first_verdict(without).await, Verdict::Done);
    }

    #[tokio::test(start_paused = true)]
    async fn a_daemon_reads_its_object_as_it_is_now_through_live() {
        let (client, _) = mock_api::client(|_| Reply::Json(200, example("ns", "a", "u1", "2")));
        let env = environment(client);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&seen);
        let resource = ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples");
        let handler = Handler::daemon(resource, "follow", move |kw: Kwargs| {
            let seen = Arc::clone(&recorded);
            async move {
                let mut live = kw.live.clone().expect("daemons get a live body");
                let stopped = kw.stopped.clone().expect("daemons get a stop flag");
                let version = |body: &Value| body["metadata"]["resourceVersion"].clone();
                let record = |body: &Value| seen.lock().expect("lock").push(version(body));
                record(&kw.body);
                while !stopped.is_set() {
                    tokio::select! {
                        () = live.changed() => record(&live.get()),
                        () = stopped.cancelled() => {}
                    }
                }
                // The call's own body stays as it was.
                record(&kw.body);
                Ok::<_, Error>(())
            }
        });
        let spawner = Spawner::new(Recorder::new(), SpawnerSettings::default());
        let spec = task_spec(&handler, &env, Owner::unique());
        spawner.ensure("u1", &spec, &Arc::new(example("ns", "a", "u1", "1")));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(spawner.update_body("u1", Arc::new(example("ns", "a", "u1", "2"))));
        tokio::time::sleep(Duration::from_secs(1)).await;
        spawner.ensure("u1", &spec, &Arc::new(example("ns", "a", "u1", "3")));
        tokio::time::sleep(Duration::from_secs(1)).await;
        spawner.stop_object("u1", StopReason::ObjectDeleted);
        spawner.wait_stopped("u1").await;
        assert_eq!(*seen.lock().expect("lock"), ["1", "2", "3", "1"]);
        assert_eq!(spawner.counters().snapshot().stopped, 1, "not failed");
    }

    #[tokio::test(start_paused = true)]
    async fn pausing_stops_the_tasks_of_the_live_objects_and_forgets_them() {
        let (client, _) = mock_api::client(|_| Reply::Json(200, example("ns", "a", "u1", "2")));
        let env = environment(client);
        let reasons = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&reasons);
        let resource = ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples");
        let handler = Handler::daemon(resource, "watch", move |kw: Kwargs| {
            let reasons = Arc::clone(&recorded);
            async move {
                let stopped = kw.stopped.clone().expect("daemons get a stop flag");
                stopped.cancelled().await;
                reasons.lock().expect("lock").push(stopped.reason());
                Ok::<_, Error>(())
            }
        });
        let spawner = Arc::new(Spawner::new(Recorder::new(), SpawnerSettings::default()));
        let exiting = CancellationToken::new();
        let tasks = ResourceTasks::new(
            std::slice::from_ref(&handler),
            &env,
            Arc::clone(&spawner),
            exiting.clone(),
        );
        for uid in ["u1", "u2"] {
            let body = Arc::new(example("ns", uid, uid, "1"));
            assert_eq!(tasks.serve(&Arc::from(uid), &body, &[true]), None);
        }
        // Another resource's object, in the same spawner: not paused.
        let others = ResourceTasks::new(&[handler], &env, Arc::clone(&spawner), exiting.clone());
        let body = Arc::new(example("ns", "o1", "o1", "1"));
        assert_eq!(others.serve(&Arc::from("o1"), &body, &[true]), None);
        tokio::time::sleep(Duration::from_secs(1)).await;
        // A gone object is no longer live: stopped as gone, not paused.
        tasks.stop_gone("u2", DeletedBy::Event);
        spawner.wait_stopped("u2").await;
        tasks.pause(&exiting).await;
        assert!(spawner.running("u1").is_empty());
        assert_eq!(
            *reasons.lock().expect("lock"),
            [
                Some(StopReason::ObjectDeleted),
                Some(StopReason::OperatorPausing)
            ]
        );
        // Forgotten: served again, its task is spawned afresh.
        let body = Arc::new(example("ns", "u1", "u1", "2"));
        assert_eq!(tasks.serve(&Arc::from("u1"), &body, &[true]), None);
        assert_eq!(spawner.running("u1"), ["watch"]);
        assert_eq!(spawner.running("o1"), ["watch"], "another resource's");
        for uid in ["u1", "o1"] {
            spawner.stop_object(uid, StopReason::OperatorExiting);
            spawner.wait_stopped(uid).await;
        }
    }

    /// A plain-fn daemon, as the macros make it: its body runs through
    /// `spawning::run_blocking`. It records its start, then waits for its
    /// stop flag if `honours`, else until `released`.
    fn blocking_daemon(
        honours: bool,
        started: &Arc<std::sync::Barrier>,
        released: &Arc<std::sync::atomic::AtomicBool>,
    ) -> Handler {
        let (started, released) = (Arc::clone(started), Arc::clone(released));
        let resource = ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples");
        let func: crate::model::handlers::HandlerFn = Arc::new(move |kw: Kwargs| {
            let (started, released) = (Arc::clone(&started), Arc::clone(&released));
            spawning::run_blocking(move || {
                let stopped = kw.stopped.clone().expect("daemons get a stop flag");
                started.wait();
                if honours {
                    while !stopped.wait_blocking(Duration::from_millis(10)) {}
                } else {
                    while !released.load(std::sync::atomic::Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
                Ok(None)
            })
        });
        Handler::new(
            crate::model::handlers::HandlerKind::Daemon,
            Some(resource),
            "sync".into(),
            func,
        )
        .blocking(true)
        .cancellation_backoff(Duration::from_millis(100))
        .cancellation_timeout(Duration::from_millis(100))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_plain_fn_daemon_runs_on_a_thread_of_its_task_and_stops_in_bounds() {
        let (client, _) = mock_api::client(|_| Reply::Json(200, example("ns", "a", "u1", "2")));
        let env = environment(client);
        let body = Arc::new(example("ns", "a", "u1", "1"));
        /// Lets the thread that ignores its flag end when the test does,
        /// failed or not (the runtime waits for its blocking threads).
        struct Release(Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Release {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let _release = Release(Arc::clone(&released));
        for honours in [true, false] {
            let started = Arc::new(std::sync::Barrier::new(2));
            let recorder = Recorder::new();
            let spawner = Spawner::new(recorder.clone(), SpawnerSettings::default());
            let spec = task_spec(
                &blocking_daemon(honours, &started, &released),
                &env,
                Owner::unique(),
            );
            spawner.ensure("u1", &spec, &body);
            let waiting = Arc::clone(&started);
            tokio::task::spawn_blocking(move || waiting.wait())
                .await
                .expect("the daemon starts");
            spawner.stop_object("u1", StopReason::ObjectDeleted);
            tokio::time::timeout(Duration::from_secs(10), spawner.wait_stopped("u1"))
                .await
                .expect("stopping is bounded");
            let counters = spawner.counters().snapshot();
            if honours {
                assert_eq!(
                    (counters.stopped, counters.abandoned),
                    (1, 0),
                    "{counters:?}"
                );
            } else {
                assert_eq!(
                    counters.abandoned, 1,
                    "the thread kept the task: {counters:?}"
                );
                assert_eq!(recorder.abandoned().len(), 1, "and it was reported");
            }
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
        let env = environment(client);
        let resource = ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples");
        let handler = Handler::timer(resource, "tick", |_: Kwargs| async {
            Err::<(), _>(Error::regular("no luck"))
        })
        .interval(Duration::from_secs(60));
        let recorder = Recorder::new();
        let spawner = Spawner::new(recorder.clone(), SpawnerSettings::default());
        let body = Arc::new(example("ns", "a", "u1", "1"));
        spawner.ensure("u1", &task_spec(&handler, &env, Owner::unique()), &body);
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
