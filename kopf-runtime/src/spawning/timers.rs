//! The timer loop: a daemon that calls its handler on a schedule.
//!
//! - The first tick is right after `initial_delay` (interrupted by stopping).
//! - Not `sharp`: the next tick is `interval` after the end of the previous
//!   run. `sharp`: ticks fall on multiples of `interval` from the first tick;
//!   those missed while the handler ran are skipped. The schedule is computed
//!   from ideal times, so it does not drift.
//! - `idle`: a tick (or retry) waits until the object has not changed for
//!   `idle`; every change ([`Spawner::update_body`], [`Spawner::touched`])
//!   restarts that wait. The object's first sighting counts as a change.
//! - Errors: `Temporary { delay }` retries after `delay`, a regular `Error`
//!   after `backoff`, up to `retries` attempts; then (or on `Permanent`) the
//!   timer gives up on this tick and waits for the next one, counting retries
//!   from zero again. A timer never ends on its own.
//!
//! Each timer is one task with one pinned sleep; a tick allocates nothing
//! beyond what the handler call itself does.
//!
//! [`Spawner::update_body`]: super::Spawner::update_body
//! [`Spawner::touched`]: super::Spawner::touched

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::registry::Run;
use super::stopping::StopFlag;
use super::task::{TimerSchedule, Verdict};

/// Run a timer until it is stopped.
pub(crate) async fn run(mut run: Run, schedule: TimerSchedule) {
    if let Some(delay) = run.spec.initial_delay
        && run.flag.wait(delay).await
    {
        return;
    }
    let flag = run.flag.clone();
    let anchor = Instant::now();
    let mut tick = anchor;
    let mut retry = 0;
    let mut started = None;
    loop {
        if flag.sleep_until(tick).await {
            return;
        }
        if let Some(idle) = schedule.idle
            && wait_idle(&flag, &mut run.changes, idle).await
        {
            return;
        }
        let begun = Instant::now();
        let first = *started.get_or_insert_with(|| (jiff::Timestamp::now(), begun));
        let outcome = run.call(retry, first).await;
        if flag.is_set() {
            run.report(retry, &outcome, Verdict::Stopped);
            return;
        }
        let verdict = run.spec.verdict_for(&outcome, retry);
        run.report(retry, &outcome, verdict);
        let now = Instant::now();
        match verdict {
            Verdict::RetryIn(delay) => {
                retry += 1;
                tick = now + delay;
            }
            Verdict::Done | Verdict::GaveUp | Verdict::Stopped => {
                retry = 0;
                started = None;
                tick = if schedule.sharp {
                    next_sharp_tick(anchor, schedule.interval, tick.max(anchor), now)
                } else {
                    now + schedule.interval
                };
            }
        }
    }
}

/// Wait until the object has been unchanged for `idle`. Returns whether the
/// stop flag was set meanwhile.
async fn wait_idle(flag: &StopFlag, changes: &mut watch::Receiver<Instant>, idle: Duration) -> bool {
    loop {
        let last = *changes.borrow_and_update();
        let due = last + idle;
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
    anchor + Duration::from_nanos(offset)
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
        assert_eq!(next_sharp_tick(anchor, s(1), anchor, anchor + ms(2500)), anchor + s(3));
        // A run ending exactly on a slot: that slot is due now.
        assert_eq!(next_sharp_tick(anchor, s(1), anchor, anchor + s(2)), anchor + s(2));
        // A late wake-up within slot 4 (e.g. after idling) still aligns to the grid.
        assert_eq!(next_sharp_tick(anchor, s(1), anchor + ms(4200), anchor + ms(4300)), anchor + s(5));
    }
}
