//! The daemon loop: call the handler once and let it run as long as it
//! wants; retry on errors as Kopf does.
//!
//! - `initial_delay` is waited first, and is interrupted by stopping.
//! - [`TaskOutcome::Ok`](super::TaskOutcome::Ok): the daemon is finished for
//!   good for this object (not respawned until the object is forgotten).
//! - `Temporary { delay }`: called again after `delay`; a regular `Error`
//!   after the handler's `backoff`; both count towards `retries`, after which
//!   the daemon gives up (finished for good, permanently failed).
//! - `Permanent`: gives up at once.
//! - Whatever the outcome, a daemon whose stop flag is set exits and may be
//!   spawned again later (e.g. after a filter mismatch ends).

use tokio::time::Instant;

use super::registry::Run;
use super::task::Verdict;

/// Run a daemon until it finishes, gives up, or is stopped.
pub(crate) async fn run(run: Run) {
    if let Some(delay) = run.spec.initial_delay
        && run.flag.wait(delay).await
    {
        return;
    }
    let started = (jiff::Timestamp::now(), Instant::now());
    let mut retry = 0;
    loop {
        let outcome = run.call(retry, started).await;
        if run.flag.is_set() {
            run.report(retry, &outcome, Verdict::Stopped);
            return;
        }
        let verdict = run.spec.verdict_for(&outcome, retry);
        run.report(retry, &outcome, verdict);
        match verdict {
            Verdict::RetryIn(delay) => {
                if run.flag.wait(delay).await {
                    return;
                }
                retry += 1;
            }
            Verdict::Done | Verdict::GaveUp | Verdict::Stopped => {
                run.finish_for_good();
                return;
            }
        }
    }
}
