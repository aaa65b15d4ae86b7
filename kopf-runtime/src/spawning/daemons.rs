//! The daemon loop: call the handler once and let it run as long as it
//! wants; retry on errors as Kopf does.
//!
//! - `initial_delay` is waited first, and is interrupted by stopping.
//! - [`TaskOutcome::Ok`](super::TaskOutcome::Ok): the daemon is finished for
//!   good for this object (not respawned until the object is forgotten).
//! - `Temporary { delay }`: called again after `delay`; a regular `Error`
//!   after the handler's `backoff`; both count towards `retries` and
//!   `timeout`, after which the daemon gives up (finished for good,
//!   permanently failed).
//! - `Permanent`: gives up at once.
//! - Whatever the outcome, a daemon whose stop flag is set exits and may be
//!   spawned again later (e.g. after a filter mismatch ends).

use tokio::time::Instant;

use super::outcome::Verdict;
use super::runner::Run;
use crate::peering::fencing::Held;

/// Run a daemon until it finishes, gives up, or is stopped.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn would keep its argument twice in every task"
)]
pub(crate) fn run(run: Run) -> impl Future<Output = ()> + Send {
    // An async block, not an async fn: an async fn keeps a second copy of
    // its argument in its future, and every task holds that future.
    async move {
        if let Some(delay) = run.spec.start_delay()
            && run.flag().wait(delay).await
        {
            return;
        }
        let started = Instant::now();
        let mut retry = 0;
        loop {
            // The Lease lapsed (the process was paused?): no call until it is
            // renewed; the term ends first if it is not.
            while let Some(recheck) = run.held_back(Held::Daemon, Instant::now()) {
                if run.flag().wait(recheck).await {
                    return;
                }
            }
            match run.attempt(retry, started).await {
                Verdict::Stopped => return,
                Verdict::RetryIn(delay) => {
                    if run.flag().wait(delay).await {
                        return;
                    }
                    retry += 1;
                }
                Verdict::Done | Verdict::GaveUp => {
                    run.finish_for_good();
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::super::outcome::Verdict;
    use super::super::testkit::{Calls, body, secs, spawner};
    use super::super::{Ensured, TaskOutcome, TaskSpec, task_fn};
    use crate::spawning::stopping::StopReason;

    fn error(message: &str) -> TaskOutcome {
        TaskOutcome::Error {
            message: message.into(),
        }
    }

    /// A daemon that records its calls and returns `outcomes[call]` (the last
    /// one repeated).
    fn scripted(calls: &Calls, outcomes: Vec<TaskOutcome>) -> TaskSpec {
        let calls = calls.clone();
        let outcomes = Arc::new(outcomes);
        TaskSpec::daemon(
            "d",
            task_fn(move |_ctx| {
                let n = calls.hit();
                let outcome = outcomes[n.min(outcomes.len() - 1)].clone();
                async move { outcome }
            }),
        )
    }

    /// A daemon that records its call and runs until stopped.
    fn until_stopped(calls: &Calls) -> TaskSpec {
        let calls = calls.clone();
        TaskSpec::daemon(
            "d",
            task_fn(move |ctx| {
                calls.hit();
                async move {
                    ctx.stopped.cancelled().await;
                    TaskOutcome::ok()
                }
            }),
        )
    }

    /// A daemon of a term whose Lease lapsed (a process resumed after a
    /// pause) is not called until the Lease is renewed, nor at all if the
    /// term ends first.
    #[tokio::test(start_paused = true)]
    async fn a_fenced_daemon_is_not_called_while_its_lease_is_lapsed() {
        use crate::peering::fencing::{Fence, Held, Tenure};

        let tenure = Arc::new(Tenure::default());
        let fence = Fence::new(vec![Arc::clone(&tenure)], None, secs(2));
        let (spawner, _) = spawner();
        let spawner = spawner.fenced(fence.clone());
        let calls = Calls::new();
        let spec = until_stopped(&calls).build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(secs(3)).await;
        assert_eq!(calls.count(), 0, "held back");
        tenure.grant(tokio::time::Instant::now() + secs(10));
        tokio::time::sleep(secs(2)).await;
        assert_eq!(calls.times(), [secs(4)], "called once renewed");
        assert_eq!(fence.held_back(), vec![(Held::Daemon, 2)]);

        // A term whose Lease lapsed for good ends: the daemon is stopped
        // without a call.
        tenure.revoke();
        let spec = until_stopped(&calls).build();
        spawner.ensure("u2", &spec, &body(1));
        tokio::time::sleep(secs(1)).await;
        assert!(spawner.stop("u2", "d", StopReason::LeadershipLost));
        spawner.wait_stopped("u2").await;
        assert_eq!(calls.count(), 1, "u2 never called");
    }

    #[tokio::test(start_paused = true)]
    async fn initial_delay_postpones_the_first_call() {
        let (spawner, _) = spawner();
        let calls = Calls::new();
        let spec = until_stopped(&calls).initial_delay(secs(5)).build();
        assert_eq!(spawner.ensure("u1", &spec, &body(1)), Ensured::Spawned);
        tokio::time::sleep(secs(4)).await;
        assert_eq!(calls.count(), 0);
        tokio::time::sleep(secs(60)).await;
        assert_eq!(calls.times(), [secs(5)]);
    }

    #[tokio::test(start_paused = true)]
    async fn stop_during_initial_delay_exits_at_once_without_calling() {
        let (spawner, _) = spawner();
        let calls = Calls::new();
        let spec = until_stopped(&calls).initial_delay(secs(60)).build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(secs(2)).await;
        let start = tokio::time::Instant::now();
        assert!(spawner.stop("u1", "d", StopReason::DeletionRequested));
        spawner.wait_stopped("u1").await;
        assert_eq!(start.elapsed(), secs(0));
        assert_eq!(calls.count(), 0);
        let counters = spawner.counters().snapshot();
        assert_eq!((counters.stopped, counters.cancelled), (1, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn daemon_returning_ok_is_not_respawned_until_forgotten() {
        let (spawner, recorder) = spawner();
        let calls = Calls::new();
        let spec = scripted(&calls, vec![TaskOutcome::Ok(Some(serde_json::json!(42)))]).build();
        spawner.ensure("u1", &spec, &body(1));
        spawner.wait_stopped("u1").await;
        assert_eq!(recorder.verdicts(), [(0, Verdict::Done)]);
        assert_eq!(
            recorder.outcomes()[0].outcome,
            TaskOutcome::Ok(Some(serde_json::json!(42)))
        );
        assert!(spawner.is_finished("u1", "d"));
        assert_eq!(spawner.ensure("u1", &spec, &body(2)), Ensured::Finished);
        tokio::time::sleep(secs(3600)).await;
        assert_eq!(calls.count(), 1);
        assert_eq!(spawner.counters().snapshot().finished, 1);

        spawner.forget("u1");
        assert_eq!(spawner.ensure("u1", &spec, &body(3)), Ensured::Spawned);
        spawner.wait_stopped("u1").await;
        assert_eq!(calls.count(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn temporary_error_restarts_after_its_delay() {
        let (spawner, recorder) = spawner();
        let calls = Calls::new();
        let temporary = TaskOutcome::Temporary {
            delay: secs(3),
            message: "later".into(),
        };
        let spec = scripted(
            &calls,
            vec![temporary.clone(), temporary, TaskOutcome::ok()],
        )
        .backoff(secs(100))
        .build();
        spawner.ensure("u1", &spec, &body(1));
        spawner.wait_stopped("u1").await;
        assert_eq!(calls.times(), [secs(0), secs(3), secs(6)]);
        assert_eq!(
            recorder.verdicts(),
            [
                (0, Verdict::RetryIn(secs(3))),
                (1, Verdict::RetryIn(secs(3))),
                (2, Verdict::Done)
            ]
        );
        assert!(spawner.is_finished("u1", "d"));
    }

    #[tokio::test(start_paused = true)]
    async fn regular_error_restarts_after_backoff() {
        let (spawner, recorder) = spawner();
        let calls = Calls::new();
        let spec = scripted(&calls, vec![error("boom"), TaskOutcome::ok()])
            .backoff(secs(7))
            .build();
        spawner.ensure("u1", &spec, &body(1));
        spawner.wait_stopped("u1").await;
        assert_eq!(calls.times(), [secs(0), secs(7)]);
        assert_eq!(
            recorder.verdicts(),
            [(0, Verdict::RetryIn(secs(7))), (1, Verdict::Done)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn retries_limit_gives_up_and_daemon_is_permanently_failed() {
        let (spawner, recorder) = spawner();
        let calls = Calls::new();
        let spec = scripted(&calls, vec![error("boom")])
            .retries(3)
            .backoff(secs(1))
            .build();
        spawner.ensure("u1", &spec, &body(1));
        spawner.wait_stopped("u1").await;
        assert_eq!(calls.times(), [secs(0), secs(1), secs(2)]);
        assert_eq!(
            recorder.verdicts(),
            [
                (0, Verdict::RetryIn(secs(1))),
                (1, Verdict::RetryIn(secs(1))),
                (2, Verdict::GaveUp)
            ]
        );
        assert_eq!(spawner.ensure("u1", &spec, &body(1)), Ensured::Finished);
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_error_gives_up_at_once() {
        let (spawner, recorder) = spawner();
        let calls = Calls::new();
        let spec = scripted(
            &calls,
            vec![TaskOutcome::Permanent {
                message: "no".into(),
            }],
        )
        .build();
        spawner.ensure("u1", &spec, &body(1));
        spawner.wait_stopped("u1").await;
        assert_eq!(recorder.verdicts(), [(0, Verdict::GaveUp)]);
        assert_eq!(spawner.ensure("u1", &spec, &body(1)), Ensured::Finished);
    }

    #[tokio::test(start_paused = true)]
    async fn panic_is_retried_as_a_regular_error() {
        let (spawner, recorder) = spawner();
        let attempts = Arc::new(AtomicU32::new(0));
        let seen = Arc::clone(&attempts);
        let spec = TaskSpec::daemon(
            "d",
            task_fn(move |_ctx| {
                let attempt = seen.fetch_add(1, Ordering::SeqCst);
                async move {
                    assert!(attempt > 0, "first attempt fails");
                    TaskOutcome::ok()
                }
            }),
        )
        .backoff(secs(2))
        .build();
        spawner.ensure("u1", &spec, &body(1));
        spawner.wait_stopped("u1").await;
        let outcomes = recorder.outcomes();
        assert_eq!(
            recorder.verdicts(),
            [(0, Verdict::RetryIn(secs(2))), (1, Verdict::Done)]
        );
        let TaskOutcome::Error { message } = &outcomes[0].outcome else {
            panic!("expected an error, got {:?}", outcomes[0].outcome);
        };
        assert!(message.contains("first attempt fails"), "{message}");
    }

    #[tokio::test(start_paused = true)]
    async fn retries_see_retry_count_and_first_start_time() {
        let (spawner, _) = spawner();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let spec = TaskSpec::daemon(
            "d",
            task_fn(move |ctx| {
                log.lock()
                    .expect("lock")
                    .push((ctx.retry, ctx.started_at, ctx.runtime()));
                async move {
                    if ctx.retry < 2 {
                        TaskOutcome::Temporary {
                            delay: secs(5),
                            message: "again".into(),
                        }
                    } else {
                        TaskOutcome::ok()
                    }
                }
            }),
        )
        .build();
        spawner.ensure("u1", &spec, &body(1));
        spawner.wait_stopped("u1").await;
        let seen = seen.lock().expect("lock").clone();
        let retries: Vec<_> = seen
            .iter()
            .map(|(retry, _, runtime)| (*retry, *runtime))
            .collect();
        assert_eq!(retries, [(0, secs(0)), (1, secs(5)), (2, secs(10))]);
        assert!(seen.iter().all(|(_, started, _)| *started == seen[0].1));
    }

    #[tokio::test(start_paused = true)]
    async fn daemon_stopped_from_outside_can_be_spawned_again() {
        let (spawner, recorder) = spawner();
        let calls = Calls::new();
        let spec = until_stopped(&calls).build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(secs(1)).await;
        spawner.stop("u1", "d", StopReason::FilterMismatch);
        spawner.wait_stopped("u1").await;
        assert_eq!(recorder.verdicts(), [(0, Verdict::Stopped)]);
        assert!(!spawner.is_finished("u1", "d"));
        assert_eq!(spawner.ensure("u1", &spec, &body(1)), Ensured::Spawned);
        tokio::time::sleep(secs(1)).await;
        assert_eq!(calls.count(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn daemon_sees_the_live_body_and_only_real_changes() {
        let (spawner, _) = spawner();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let spec = TaskSpec::daemon(
            "d",
            task_fn(move |mut ctx| {
                let log = Arc::clone(&log);
                async move {
                    loop {
                        log.lock()
                            .expect("lock")
                            .push(ctx.body()["spec"]["n"].clone());
                        tokio::select! {
                            () = ctx.stopped.cancelled() => return TaskOutcome::ok(),
                            () = ctx.body.changed() => {}
                        }
                    }
                }
            }),
        )
        .build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(secs(1)).await;
        assert!(spawner.update_body("u1", body(2)));
        tokio::time::sleep(secs(1)).await;
        assert!(
            !spawner.update_body("u1", body(2)),
            "an identical body is no change"
        );
        assert_eq!(
            spawner.ensure("u1", &spec, &body(3)),
            Ensured::AlreadyRunning
        );
        tokio::time::sleep(secs(1)).await;
        assert!(!spawner.update_body("u-unknown", body(4)));
        spawner.stop_object("u1", StopReason::ObjectDeleted);
        spawner.wait_stopped("u1").await;
        let seen = seen.lock().expect("lock").clone();
        assert_eq!(
            seen,
            [
                serde_json::json!(1),
                serde_json::json!(2),
                serde_json::json!(3)
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn timeout_gives_up_when_the_next_retry_would_start_too_late() {
        let (spawner, recorder) = spawner();
        let calls = Calls::new();
        let spec = scripted(&calls, vec![error("boom")])
            .backoff(secs(4))
            .timeout(secs(10))
            .build();
        spawner.ensure("u1", &spec, &body(1));
        spawner.wait_stopped("u1").await;
        assert_eq!(calls.times(), [secs(0), secs(4), secs(8)]);
        assert_eq!(
            recorder.verdicts(),
            [
                (0, Verdict::RetryIn(secs(4))),
                (1, Verdict::RetryIn(secs(4))),
                (2, Verdict::GaveUp)
            ]
        );
        assert!(spawner.is_finished("u1", "d"));
    }
}
