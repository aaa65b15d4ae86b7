//! The timer loop: a daemon that calls its handler on a schedule.
//!
//! - The first tick is right after `initial_delay` (interrupted by stopping).
//! - Not `sharp`: the next tick is `interval` after the end of the previous
//!   run. `sharp`: ticks fall on multiples of `interval` from the first tick;
//!   those missed while the handler ran are skipped. The schedule is computed
//!   from ideal times, so it does not drift.
//! - `idle`: a tick (or retry) waits until the object has not changed for
//!   `idle`; every change (a new body through [`Spawner::ensure_encoded`])
//!   restarts that wait. The object's first sighting counts as a change.
//! - No `interval` (as in Kopf): with `idle`, the next tick after a run
//!   waits for a change of the object after the run began, then for the
//!   object to be idle again, so that the timer runs once per quiet
//!   period; with neither, the timer runs once (with its retries) and ends
//!   for good, not spawned again for the object.
//! - Errors: `Temporary { delay }` retries after `delay`, a regular `Error`
//!   after `backoff`, within `retries` and `timeout`; then (or on `Permanent`) the
//!   timer gives up on this tick and waits for the next one, counting retries
//!   from zero again. A timer with an `interval` or `idle` never ends on its
//!   own.
//!
//! Each timer is one task with one alarm (see [`alarms`](super::alarms)),
//! which waits in its spawner's slots and not in Tokio's wheel; a tick
//! allocates the state of the handler call and nothing else, so that a
//! waiting timer is small.
//!
//! [`Spawner::ensure_encoded`]: super::Spawner::ensure_encoded

use std::task::Poll;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::outcome::Verdict;
use super::runner::Run;
use crate::model::handlers::TimerOptions;
use crate::peering::fencing::Held;
use crate::spawning::stopping::{FlagState, deadline_after};

/// Run a timer until it is stopped.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn would keep its argument twice in every task"
)]
pub(crate) fn run(mut run: Run) -> impl Future<Output = ()> + Send {
    // An async block, not an async fn: an async fn keeps a second copy of
    // its argument in its future, and every task holds that future.
    async move {
        // Not kept in a local: what a waiting timer's future holds in
        // locals is held by every waiting timer.
        if run.spec.timer_options().is_none() {
            return;
        }
        if let Some(delay) = run.spec.start_delay()
            && Box::pin(run.flag().wait(delay)).await
        {
            return;
        }
        let anchor = Instant::now();
        // A series of retries, boxed: only a failing handler makes one.
        let mut retrying: Option<Box<Retrying>> = None;
        // One alarm for the timer's whole life, filed with its spawner's
        // (see `alarms`), and its deadline the next tick's: a tick only
        // re-arms it, with no allocation. The stop flag wakes the task
        // through its one waker slot, so the waiting future holds no
        // waiter of its own.
        let mut alarm = run.liveness.shared.calling.alarms.at(anchor);
        loop {
            // The alarm first: a due tick then costs no look at the flag's
            // waker slot, only at its atomic. The flag by its field path,
            // not `run.flag()`: the loop borrows `run.changes` mutably.
            let stopped = std::future::poll_fn(|cx| match alarm.poll_rung(cx) {
                Poll::Ready(()) => Poll::Ready(run.liveness.shared.flag.is_set()),
                Poll::Pending => run.liveness.shared.flag.poll_set(cx).map(|()| true),
            })
            .await;
            if stopped {
                return;
            }
            run.warm();
            // Every other wait is boxed: a waiting timer's state is then the
            // few bytes above, not the largest of these (for tens of
            // thousands of timers). What the attempt keeps (its outcome, its
            // start) stays in its own box too.
            if let (Some(idle), Some(changes)) = (schedule(&run).idle, run.changes.as_mut())
                && Box::pin(wait_idle(&run.liveness.shared.flag, changes, idle)).await
            {
                return;
            }
            let begun = Instant::now();
            if let Some(recheck) = run.held_back(Held::Timer, begun) {
                // The Lease lapsed (the process was paused?): no tick until it
                // is renewed; the term ends first if it is not.
                alarm.reset(deadline_after(begun, recheck));
                continue;
            }
            if schedule(&run).interval.is_none()
                && let Some(changes) = run.changes.as_mut()
            {
                // What this attempt reads is seen: only a later change makes
                // the next run due.
                changes.mark_unchanged();
            }
            let verdict = Box::pin(attempt(&run, &mut retrying, begun)).await;
            let now = Instant::now();
            let schedule = schedule(&run);
            let next = match verdict {
                Verdict::Stopped => return,
                Verdict::RetryIn(delay) => deadline_after(now, delay),
                Verdict::Done | Verdict::GaveUp => match schedule.interval {
                    Some(interval) if schedule.sharp => {
                        next_sharp_tick(anchor, interval, alarm.deadline().max(anchor), now)
                    }
                    Some(interval) => deadline_after(now, interval),
                    None => {
                        // Only timers with `idle` watch the changes.
                        let Some(changes) = run.changes.as_mut() else {
                            run.finish_for_good();
                            return;
                        };
                        // Once the object changes, it is due when idle.
                        if Box::pin(wait_change(&run.liveness.shared.flag, changes)).await {
                            return;
                        }
                        Instant::now()
                    }
                },
            };
            alarm.reset(next);
        }
    }
}

/// What a timer keeps while it retries a tick: how many retries so far, and
/// when the first attempt began.
struct Retrying {
    retry: u32,
    first: Instant,
}

/// The options of a timer's task (checked when its loop starts).
fn schedule(run: &Run) -> &TimerOptions {
    run.spec
        .timer_options()
        .expect("invariant: a timer's loop runs a timer's spec")
}

/// One attempt of a tick begun at `begun`, in the series of retries
/// `retrying` (which it ends or goes on with): boxed by the loop, so that
/// what it keeps over the call is not in every waiting timer's future.
async fn attempt(run: &Run, retrying: &mut Option<Box<Retrying>>, begun: Instant) -> Verdict {
    let (retry, first) = retrying
        .as_deref()
        .map_or((0, begun), |series| (series.retry, series.first));
    let verdict = run.attempt(retry, first).await;
    match verdict {
        Verdict::RetryIn(_) => match retrying {
            Some(series) => series.retry += 1,
            None => *retrying = Some(Box::new(Retrying { retry: 1, first })),
        },
        Verdict::Done | Verdict::GaveUp => *retrying = None,
        Verdict::Stopped => {}
    }
    verdict
}

/// Wait until the object has changed since the receiver last looked.
/// Returns whether the stop flag was set meanwhile.
async fn wait_change(flag: &FlagState, changes: &mut watch::Receiver<Instant>) -> bool {
    tokio::select! {
        biased;
        () = flag.cancelled() => true,
        changed = changes.changed() => {
            if changed.is_err() {
                // The object's memory is gone: no more changes can come.
                flag.cancelled().await;
                return true;
            }
            flag.is_set()
        }
    }
}

/// Wait until the object has been unchanged for `idle`. Returns whether the
/// stop flag was set meanwhile.
async fn wait_idle(
    flag: &FlagState,
    changes: &mut watch::Receiver<Instant>,
    idle: Duration,
) -> bool {
    loop {
        let last = *changes.borrow_and_update();
        let due = deadline_after(last, idle);
        if Instant::now() >= due {
            return flag.is_set();
        }
        tokio::select! {
            biased;
            () = flag.cancelled() => return true,
            changed = changes.changed() => {
                if changed.is_err() {
                    // The object's memory is gone: no more changes can come.
                    return flag.sleep_until(due).await;
                }
            }
            () = tokio::time::sleep_until(due) => {}
        }
    }
}

/// The first multiple of `interval` after `anchor` that is later than the
/// slot of the run that began at `slot` and not earlier than `now`.
fn next_sharp_tick(anchor: Instant, interval: Duration, slot: Instant, now: Instant) -> Instant {
    let step = interval.as_nanos().max(1);
    let after_slot = (slot - anchor).as_nanos() / step + 1;
    let covering_now = (now - anchor).as_nanos().div_ceil(step);
    let slots = after_slot.max(covering_now);
    let offset = u64::try_from(slots.saturating_mul(step)).unwrap_or(u64::MAX);
    deadline_after(anchor, Duration::from_nanos(offset))
}

#[cfg(test)]
mod schedule_tests {
    use super::*;

    #[test]
    fn sharp_ticks_skip_missed_slots_and_never_repeat_a_slot() {
        let anchor = Instant::now();
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        // A fast run: the next slot.
        assert_eq!(next_sharp_tick(anchor, s(1), anchor, anchor), anchor + s(1));
        // A run of 2.5 intervals: slots 1 and 2 are skipped.
        assert_eq!(
            next_sharp_tick(anchor, s(1), anchor, anchor + ms(2500)),
            anchor + s(3)
        );
        // A run ending exactly on a slot: that slot is due now.
        assert_eq!(
            next_sharp_tick(anchor, s(1), anchor, anchor + s(2)),
            anchor + s(2)
        );
        // A late wake-up within slot 4 (e.g. after idling) still aligns to the grid.
        assert_eq!(
            next_sharp_tick(anchor, s(1), anchor + ms(4200), anchor + ms(4300)),
            anchor + s(5)
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::testkit::{Calls, body, millis, secs, spawner};
    use super::super::{Ensured, TaskOutcome, TaskSpec, task_fn};
    use super::Verdict;
    use crate::spawning::stopping::StopReason;

    /// A timer handler that records its calls, takes `runs` to complete, and
    /// returns `outcomes[call]` (the last one repeated).
    fn timer(
        calls: &Calls,
        interval: std::time::Duration,
        runs: std::time::Duration,
        outcomes: Vec<TaskOutcome>,
    ) -> TaskSpec {
        let calls = calls.clone();
        let outcomes = Arc::new(outcomes);
        TaskSpec::timer(
            "t",
            interval,
            task_fn(move |_ctx| {
                let n = calls.hit();
                let outcome = outcomes[n.min(outcomes.len() - 1)].clone();
                async move {
                    tokio::time::sleep(runs).await;
                    outcome
                }
            }),
        )
    }

    fn ok() -> Vec<TaskOutcome> {
        vec![TaskOutcome::ok()]
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_keeps_what_it_derives_from_its_object_and_each_task_has_its_own() {
        use std::sync::Mutex;
        use std::sync::atomic::{AtomicUsize, Ordering};

        use crate::model::kwargs::{Logger, Memo};
        use crate::spawning::liveness::TaskObject;

        let (spawner, _) = spawner();
        let made = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (m, s) = (made.clone(), seen.clone());
        let spec = TaskSpec::timer(
            "t",
            secs(1),
            task_fn(move |ctx| {
                let task = &ctx.liveness.shared;
                let object = task.object(|| {
                    let memo = Memo::new();
                    memo.insert(m.fetch_add(1, Ordering::SeqCst));
                    TaskObject {
                        logger: Logger::new(Arc::clone(&task.uid)),
                        memo,
                    }
                });
                let n = *object.memo.get::<usize>().expect("made with one");
                s.lock().expect("lock").push((ctx.uid().to_string(), n));
                async { TaskOutcome::ok() }
            }),
        )
        .build();
        spawner.ensure("u1", &spec, &body(1));
        spawner.ensure("u2", &spec, &body(1));
        tokio::time::sleep(millis(2500)).await;
        let seen = seen.lock().expect("lock").clone();
        assert_eq!(seen.len(), 6, "{seen:?}");
        assert_eq!(made.load(Ordering::SeqCst), 2, "one per task: {seen:?}");
        for (uid, n) in &seen {
            let first = seen.iter().find(|(u, _)| u == uid).expect("seen");
            assert_eq!(first.1, *n, "{uid} kept its own: {seen:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_fenced_timer_holds_its_ticks_back_while_its_lease_is_lapsed() {
        use crate::peering::fencing::{Fence, Held, Tenure};

        let tenure = Arc::new(Tenure::default());
        tenure.grant(tokio::time::Instant::now() + millis(3500));
        let fence = Fence::new(vec![Arc::clone(&tenure)], None, secs(2));
        let (spawner, _) = spawner();
        let spawner = spawner.fenced(fence.clone());
        let calls = Calls::new();
        let spec = timer(&calls, secs(1), secs(0), ok()).build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(millis(2500)).await;
        // The pause: the clock jumps past the Lease, the tick due at 3 s
        // runs at 7.5 s.
        tokio::time::advance(secs(5)).await;
        tokio::time::sleep(millis(500)).await;
        assert_eq!(calls.times(), [secs(0), secs(1), secs(2)], "none after");
        tenure.grant(tokio::time::Instant::now() + secs(10));
        tokio::time::sleep(secs(2)).await;
        assert_eq!(
            calls.times(),
            [secs(0), secs(1), secs(2), millis(9500)],
            "ticks again once renewed"
        );
        assert_eq!(fence.held_back(), vec![(Held::Timer, 1)]);
    }

    #[tokio::test(start_paused = true)]
    async fn first_tick_after_initial_delay_then_every_interval() {
        let (spawner, recorder) = spawner();
        let calls = Calls::new();
        let spec = timer(&calls, secs(10), secs(0), ok())
            .initial_delay(secs(5))
            .build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(millis(30_500)).await;
        assert_eq!(calls.times(), [secs(5), secs(15), secs(25)]);
        assert!(recorder.verdicts().iter().all(|v| *v == (0, Verdict::Done)));
    }

    #[tokio::test(start_paused = true)]
    async fn interval_counts_from_the_end_of_a_long_run_when_not_sharp() {
        let (spawner, _) = spawner();
        let calls = Calls::new();
        let spec = timer(&calls, secs(1), millis(2500), ok()).build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(millis(7100)).await;
        assert_eq!(calls.times(), [secs(0), millis(3500), secs(7)]);
    }

    #[tokio::test(start_paused = true)]
    async fn sharp_ticks_stay_on_the_grid_and_skip_those_missed_by_a_long_run() {
        let (spawner, _) = spawner();
        let calls = Calls::new();
        let spec = timer(&calls, secs(1), millis(2500), ok())
            .sharp(true)
            .build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(millis(6100)).await;
        assert_eq!(calls.times(), [secs(0), secs(3), secs(6)]);
    }

    #[tokio::test(start_paused = true)]
    async fn sharp_timer_does_not_drift_when_runs_take_time() {
        let (spawner, _) = spawner();
        let calls = Calls::new();
        let spec = timer(&calls, secs(1), millis(300), ok())
            .sharp(true)
            .initial_delay(millis(250))
            .build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(millis(100_300)).await;
        let expected: Vec<_> = (0..=100).map(|k| millis(250 + 1000 * k)).collect();
        assert_eq!(calls.times(), expected);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_timer_waits_until_the_object_is_quiet_and_changes_reset_the_wait() {
        let (spawner, _) = spawner();
        let calls = Calls::new();
        let spec = timer(&calls, secs(1), secs(0), ok()).idle(secs(5)).build();
        spawner.ensure("u1", &spec, &body(1)); // first sighting at t=0
        tokio::time::sleep(secs(3)).await;
        assert!(spawner.update_body("u1", body(2))); // t=3
        tokio::time::sleep(secs(3)).await;
        spawner.touched("u1"); // t=6
        tokio::time::sleep(millis(6500)).await; // t=12.5
        assert_eq!(calls.times(), [secs(11), secs(12)]);
        spawner.touched("u1"); // t=12.5
        tokio::time::sleep(millis(7100)).await; // t=19.6
        assert_eq!(
            calls.times(),
            [
                secs(11),
                secs(12),
                millis(17_500),
                millis(18_500),
                millis(19_500)
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_timer_spawned_later_counts_from_the_last_change_before_it() {
        let (spawner, _) = spawner();
        let (busy, quiet) = (Calls::new(), Calls::new());
        let plain = timer(&busy, secs(100), secs(0), ok()).build();
        spawner.ensure("u1", &plain, &body(1)); // first sighting at t=0
        tokio::time::sleep(secs(3)).await;
        assert!(spawner.update_body("u1", body(2))); // t=3, no idle timer yet
        tokio::time::sleep(secs(1)).await;
        let spec = TaskSpec::timer("idle", secs(100), {
            let quiet = quiet.clone();
            task_fn(move |_ctx| {
                quiet.hit();
                async { TaskOutcome::ok() }
            })
        })
        .idle(secs(5))
        .build();
        spawner.ensure("u1", &spec, &body(2)); // t=4
        tokio::time::sleep(secs(10)).await;
        // Quiet since t=3, not since t=0 or its own start at t=4.
        assert_eq!(quiet.times(), [secs(8)]);
    }

    /// A timer without an interval that records its calls, takes `runs` to
    /// complete, and returns `outcomes[call]` (the last one repeated).
    fn without_interval(
        calls: &Calls,
        runs: std::time::Duration,
        outcomes: Vec<TaskOutcome>,
    ) -> TaskSpec {
        let calls = calls.clone();
        let outcomes = Arc::new(outcomes);
        TaskSpec::timer_without_interval(
            "t",
            task_fn(move |_ctx| {
                let n = calls.hit();
                let outcome = outcomes[n.min(outcomes.len() - 1)].clone();
                async move {
                    tokio::time::sleep(runs).await;
                    outcome
                }
            }),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_only_timer_runs_once_per_quiet_period() {
        let (spawner, recorder) = spawner();
        let calls = Calls::new();
        let spec = without_interval(&calls, secs(0), ok())
            .idle(secs(5))
            .build();
        spawner.ensure("u1", &spec, &body(1)); // first sighting at t=0
        tokio::time::sleep(secs(20)).await;
        assert_eq!(
            calls.times(),
            [secs(5)],
            "once, however long it stays quiet"
        );
        assert!(spawner.update_body("u1", body(2))); // t=20
        tokio::time::sleep(secs(2)).await;
        spawner.touched("u1"); // t=22
        tokio::time::sleep(secs(20)).await; // t=42
        assert_eq!(calls.times(), [secs(5), secs(27)]);
        assert_eq!(spawner.running("u1"), ["t"], "it never ends on its own");
        assert!(recorder.verdicts().iter().all(|v| *v == (0, Verdict::Done)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_while_an_idle_only_timer_runs_brings_the_next_run() {
        let (spawner, _) = spawner();
        let calls = Calls::new();
        let spec = without_interval(&calls, secs(3), ok())
            .idle(secs(5))
            .build();
        spawner.ensure("u1", &spec, &body(1)); // first sighting at t=0
        tokio::time::sleep(secs(6)).await; // runs from t=5 to t=8
        assert!(spawner.update_body("u1", body(2))); // t=6, during the run
        tokio::time::sleep(secs(20)).await; // t=26
        assert_eq!(calls.times(), [secs(5), secs(11)]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_only_timer_retries_after_errors_when_idle_again() {
        let (spawner, recorder) = spawner();
        let calls = Calls::new();
        let error = TaskOutcome::Error {
            message: "boom".into(),
        };
        let spec = without_interval(&calls, secs(0), vec![error, TaskOutcome::ok()])
            .idle(secs(5))
            .backoff(secs(1))
            .build();
        spawner.ensure("u1", &spec, &body(1)); // the first run fails at t=5
        tokio::time::sleep(millis(5500)).await;
        assert!(spawner.update_body("u1", body(2))); // the retry, due at t=6, waits
        tokio::time::sleep(secs(20)).await;
        assert_eq!(calls.times(), [secs(5), millis(10_500)]);
        assert_eq!(
            recorder.verdicts(),
            [(0, Verdict::RetryIn(secs(1))), (1, Verdict::Done)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_with_neither_interval_nor_idle_runs_once_for_good() {
        let (spawner, recorder) = spawner();
        let calls = Calls::new();
        let error = TaskOutcome::Error {
            message: "boom".into(),
        };
        let spec = without_interval(&calls, secs(0), vec![error, TaskOutcome::ok()])
            .backoff(secs(2))
            .build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(secs(60)).await;
        assert_eq!(calls.times(), [secs(0), secs(2)], "retried, then done");
        assert_eq!(
            recorder.verdicts(),
            [(0, Verdict::RetryIn(secs(2))), (1, Verdict::Done)]
        );
        assert!(spawner.running("u1").is_empty());
        assert_eq!(spawner.counters().snapshot().finished, 1);
        assert_eq!(
            spawner.ensure("u1", &spec, &body(2)),
            Ensured::Finished,
            "not spawned again for the object"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn identical_body_does_not_reset_idle() {
        let (spawner, _) = spawner();
        let calls = Calls::new();
        let spec = timer(&calls, secs(100), secs(0), ok())
            .idle(secs(5))
            .build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(secs(3)).await;
        assert!(!spawner.update_body("u1", body(1)));
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(secs(3)).await;
        assert_eq!(calls.times(), [secs(5)]);
    }

    #[tokio::test(start_paused = true)]
    async fn errors_back_off_and_retries_start_afresh_on_the_next_tick() {
        let (spawner, recorder) = spawner();
        let calls = Calls::new();
        let error = TaskOutcome::Error {
            message: "boom".into(),
        };
        let spec = timer(&calls, secs(10), secs(0), vec![error])
            .retries(2)
            .backoff(secs(3))
            .build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(millis(16_500)).await;
        assert_eq!(calls.times(), [secs(0), secs(3), secs(13), secs(16)]);
        assert_eq!(
            recorder.verdicts(),
            [
                (0, Verdict::RetryIn(secs(3))),
                (1, Verdict::GaveUp),
                (0, Verdict::RetryIn(secs(3))),
                (1, Verdict::GaveUp),
            ]
        );
        assert_eq!(
            spawner.running("u1"),
            ["t"],
            "a timer never ends on its own"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn temporary_error_retries_after_its_delay_then_the_interval_resumes() {
        let (spawner, recorder) = spawner();
        let calls = Calls::new();
        let temporary = TaskOutcome::Temporary {
            delay: millis(1500),
            message: "later".into(),
        };
        let spec = timer(
            &calls,
            secs(10),
            secs(0),
            vec![temporary, TaskOutcome::ok()],
        )
        .build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(millis(12_000)).await;
        assert_eq!(calls.times(), [secs(0), millis(1500), millis(11_500)]);
        assert_eq!(
            recorder.verdicts(),
            [
                (0, Verdict::RetryIn(millis(1500))),
                (1, Verdict::Done),
                (0, Verdict::Done)
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_error_waits_for_the_next_tick() {
        let (spawner, recorder) = spawner();
        let calls = Calls::new();
        let permanent = TaskOutcome::Permanent {
            message: "no".into(),
        };
        let spec = timer(&calls, secs(4), secs(0), vec![permanent]).build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(millis(8500)).await;
        assert_eq!(calls.times(), [secs(0), secs(4), secs(8)]);
        assert!(
            recorder
                .verdicts()
                .iter()
                .all(|v| *v == (0, Verdict::GaveUp))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn stop_between_ticks_ends_the_timer_at_once() {
        let (spawner, _) = spawner();
        let calls = Calls::new();
        let spec = timer(&calls, secs(10), secs(0), ok()).build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(secs(3)).await;
        let start = tokio::time::Instant::now();
        spawner.stop_object("u1", StopReason::ObjectDeleted);
        spawner.wait_stopped("u1").await;
        assert_eq!(start.elapsed(), secs(0));
        assert_eq!(calls.count(), 1);
        assert_eq!(spawner.counters().snapshot().stopped, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn stop_during_initial_delay_or_idle_wait_ends_the_timer_at_once() {
        let (spawner, _) = spawner();
        let calls = Calls::new();
        let delayed = timer(&calls, secs(1), secs(0), ok())
            .initial_delay(secs(60))
            .build();
        let idle = TaskSpec::clone(&timer(&calls, secs(1), secs(0), ok()).idle(secs(60))).build();
        spawner.ensure("u1", &delayed, &body(1));
        spawner.ensure("u2", &idle, &body(1));
        tokio::time::sleep(secs(5)).await;
        spawner.stop_all(StopReason::OperatorExiting);
        spawner.wait_stopped("u1").await;
        spawner.wait_stopped("u2").await;
        assert_eq!(tokio::time::Instant::now() - calls_epoch(&calls), secs(5));
        assert_eq!(calls.count(), 0);
    }

    /// Timers have no cancellation options of their own (as in Kopf): the
    /// settings bound their graceful exit.
    fn graceful_for(
        limit: std::time::Duration,
    ) -> (super::super::Spawner, Arc<super::super::testkit::Recorder>) {
        let recorder = super::super::testkit::Recorder::new();
        let settings = super::super::SpawnerSettings {
            graceful_exit_limit: limit,
            ..Default::default()
        };
        (
            super::super::Spawner::new(recorder.clone(), settings),
            recorder,
        )
    }

    fn calls_epoch(calls: &Calls) -> tokio::time::Instant {
        calls.epoch()
    }

    #[tokio::test(start_paused = true)]
    async fn stop_mid_run_lets_the_run_finish_within_the_graceful_exit_limit() {
        let (spawner, recorder) = graceful_for(secs(10));
        let calls = Calls::new();
        let spec = timer(&calls, secs(1), secs(3), ok()).build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(secs(1)).await;
        spawner.stop("u1", "t", StopReason::FilterMismatch);
        spawner.wait_stopped("u1").await;
        assert_eq!(calls.times(), [secs(0)]);
        assert_eq!(recorder.verdicts(), [(0, Verdict::Stopped)]);
        assert_eq!(recorder.outcomes()[0].at, secs(3));
        assert_eq!(spawner.counters().snapshot().stopped, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn stop_mid_run_cancels_a_long_run_after_the_graceful_exit_limit() {
        let (spawner, recorder) = graceful_for(secs(2));
        let calls = Calls::new();
        let spec = timer(&calls, secs(1), secs(600), ok()).build();
        spawner.ensure("u1", &spec, &body(1));
        tokio::time::sleep(secs(1)).await;
        let start = tokio::time::Instant::now();
        spawner.stop("u1", "t", StopReason::FilterMismatch);
        spawner.wait_stopped("u1").await;
        assert_eq!(start.elapsed(), secs(2));
        assert!(
            recorder.outcomes().is_empty(),
            "a cancelled run has no outcome"
        );
        assert_eq!(spawner.counters().snapshot().cancelled, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn ten_thousand_sharp_timers_tick_on_time() {
        let (spawner, _) = spawner();
        let calls = Calls::new();
        let spec = timer(&calls, secs(1), secs(0), ok()).sharp(true).build();
        let body = body(1);
        for n in 0..10_000 {
            spawner.ensure(&format!("u{n}"), &spec, &body);
        }
        tokio::time::sleep(millis(9500)).await;
        let times = calls.times();
        assert_eq!(times.len(), 100_000);
        assert!(
            times.iter().all(|t| t.subsec_nanos() == 0),
            "every tick on a whole second"
        );
        spawner.shutdown(secs(1)).await.expect("clean shutdown");
    }
}
