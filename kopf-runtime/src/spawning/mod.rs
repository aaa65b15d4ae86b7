//! Spawning handlers: daemons and timers, one task per `(object UID, handler id)`.
//!
//! Everything about daemons and timers lives here: the engine below, and
//! [`resource`], which turns a resource's `#[daemon]`/`#[timer]` handlers
//! into tasks and runs their calls.
//!
//! The engine builds one [`TaskSpec`] per `#[daemon]`/`#[timer]` handler
//! (its options are the handler's; the call is any [`TaskFn`](task::TaskFn)),
//! and drives one [`Spawner`]:
//!
//! - on every event of a matching object: [`Spawner::ensure_encoded`] (spawns if
//!   needed, refreshes the live body);
//! - when a handler stops matching: [`Spawner::stop`] with
//!   [`StopReason::FilterMismatch`](stopping::StopReason::FilterMismatch);
//! - on `DELETED`, on a re-list that misses the object, or on a
//!   `deletionTimestamp`: [`Spawner::stop_object`] with the matching
//!   [`StopReason`](stopping::StopReason), then (for finalizer-holding handlers)
//!   [`Spawner::wait_stopped_of`];
//! - on exit: [`Spawner::shutdown_for`].
//!
//! Outcomes of every call (for status patches) and abandoned tasks (for
//! Kubernetes Events and metrics) go to the engine's [`Observer`].

mod alarms;
mod counters;
mod daemons;
mod liveness;
mod observing;
mod outcome;
pub(crate) mod resource;
mod runner;
mod slots;
mod spawner;
pub(crate) mod stopping;
mod table;
mod task;
mod timers;

#[cfg(test)]
pub(crate) mod testkit;

pub use counters::{TaskCounters, TaskCounts};
pub(crate) use observing::{AbandonedReport, Observer};
pub(crate) use outcome::TaskOutcome;
pub(crate) use spawner::{Ensured, Spawner, SpawnerSettings};
pub(crate) use task::hosting;
pub use task::run_blocking;
pub(crate) use task::{Owner, TaskContext, TaskSpec, task_fn};

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::{Owner, Spawner, SpawnerSettings, TaskOutcome, TaskSpec, task_fn};
    use crate::spawning::stopping::StopReason;
    use crate::{Handler, Kwargs, ResourceRef};

    #[tokio::test]
    async fn a_daemon_runs_until_its_object_is_stopped() {
        let resource = ResourceRef::dynamic("", "v1", "configmaps");
        let handler = Handler::daemon(resource, "monitor", |_: Kwargs| async {})
            .cancellation_timeout(Duration::from_secs(5));
        let monitor = TaskSpec::new(
            Arc::new(handler),
            task_fn(|ctx| async move {
                while !ctx.stopped.wait(Duration::from_secs(10)).await {
                    let _body = ctx.body(); // the freshest body, updated in place
                }
                TaskOutcome::ok()
            }),
            Owner::unique(),
        );

        let spawner = Spawner::new(Arc::new(()), SpawnerSettings::default());
        let body = Arc::new(serde_json::json!({"metadata": {"uid": "u1"}}));
        spawner.ensure("u1", &monitor, &body);
        assert_eq!(spawner.running("u1"), ["monitor"]);

        spawner.stop_object("u1", StopReason::ObjectDeleted);
        spawner.wait_stopped("u1").await;
        spawner
            .shutdown(Duration::from_secs(30))
            .await
            .expect("nothing left to stop");
    }
}
