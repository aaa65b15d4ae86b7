//! How API failures are classified and how long to wait before retrying.
//!
//! Shared by [`watching`](crate::watching), [`patching`](crate::persistence::patching) and
//! [`posting`](crate::posting): `429` and `5xx` answers and transport errors
//! are transient and retried after a backoff; a `retryAfterSeconds` from the
//! server (in the `Status` details) replaces the configured delay; `410 Gone`
//! means "re-list"; `404`, `409` and `422` are answers for the caller to act on.
//!
//! It also holds when a handler is given up ([`RetryPolicy`]): change
//! handlers, activities, login handlers, daemons and timers all retry by it.

use std::fmt;
use std::time::Duration;

use kube::core::Status;

use crate::model::handlers::Options;

/// What a failed request means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorClass {
    /// `404 Not Found`: the object (or resource) is not there.
    NotFound,
    /// `409 Conflict`: a concurrent change; re-read and retry.
    Conflict,
    /// `410 Gone`: the resourceVersion is too old; re-list.
    Expired,
    /// `422 Unprocessable Entity`: invalid, including a failed JSON-patch `test`.
    Invalid,
    /// `429` or `5xx`, or no answer at all: retry after the delay, which the
    /// server may have suggested.
    Transient {
        /// The server's `retryAfterSeconds`, if it gave one.
        retry_after: Option<Duration>,
    },
    /// Any other answer (`400`, `401`, `403`, …) or a local failure.
    Permanent,
}

/// Classify a kube client error.
pub(crate) fn classify(error: &kube::Error) -> ErrorClass {
    match error {
        kube::Error::Api(status) => classify_status(status),
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            ErrorClass::Transient { retry_after: None }
        }
        _ => ErrorClass::Permanent,
    }
}

/// Classify an API `Status` (from an error answer or a watch `ERROR` event).
pub(crate) fn classify_status(status: &Status) -> ErrorClass {
    match status.code {
        404 => ErrorClass::NotFound,
        409 => ErrorClass::Conflict,
        410 => ErrorClass::Expired,
        422 => ErrorClass::Invalid,
        429 | 500..=599 => ErrorClass::Transient {
            retry_after: retry_after(status),
        },
        // A watch ERROR event may carry only the reason, not the code.
        0 if status.reason == "Expired" || status.reason == "Gone" => ErrorClass::Expired,
        _ => ErrorClass::Permanent,
    }
}

/// The server's suggested delay (`details.retryAfterSeconds`), if any.
pub(crate) fn retry_after(status: &Status) -> Option<Duration> {
    status
        .details
        .as_ref()
        .map(|d| d.retry_after_seconds)
        .filter(|&s| s > 0)
        .map(|s| Duration::from_secs(u64::from(s)))
}

/// A sequence of delays between attempts (Kopf's `error_backoffs`).
///
/// [`Self::next_delay`] gives the next configured delay, or the server's hint
/// instead when there is one; [`Self::reset`] starts over after a success.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    delays: Vec<Duration>,
    attempt: usize,
    repeat_last: bool,
}

impl Backoff {
    /// A finite backoff: `delays.len()` retries, then [`Self::next_delay`]
    /// returns `None`.
    pub(crate) fn limited(delays: &[Duration]) -> Self {
        Self {
            delays: delays.to_vec(),
            attempt: 0,
            repeat_last: false,
        }
    }

    /// An endless backoff: after the listed delays, the last one repeats
    /// (1 s if the list is empty).
    pub(crate) fn endless(delays: &[Duration]) -> Self {
        Self {
            delays: delays.to_vec(),
            attempt: 0,
            repeat_last: true,
        }
    }

    /// The delay before the next attempt, or `None` when retries are used up.
    /// A server hint replaces the configured delay but still uses up a retry.
    pub(crate) fn next_delay(&mut self, server_hint: Option<Duration>) -> Option<Duration> {
        let configured = match self.delays.get(self.attempt) {
            Some(delay) => *delay,
            None if self.repeat_last => self
                .delays
                .last()
                .copied()
                .unwrap_or(Duration::from_secs(1)),
            None => return None,
        };
        self.attempt = self.attempt.saturating_add(1);
        Some(server_hint.unwrap_or(configured))
    }

    /// How many delays were handed out since the last reset.
    pub(crate) fn attempts(&self) -> usize {
        self.attempt
    }

    /// Start over (after a successful attempt).
    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// When a handler is given up, from its `retries`, `timeout` and `backoff`
/// (Kopf's rule, `kopf/_core/actions/execution.py`).
///
/// `retry` is the number of attempts made before the one in question
/// (0 for the first), as handlers see it; `runtime` is the time since the
/// first attempt started.
///
/// # Guarantees
/// - Before an attempt ([`Self::before_attempt`]): the handler is given up
///   if `runtime >= timeout`, or else if `retry >= retries`. This catches
///   the time an operator was down between two attempts.
/// - After a failure that asks for a retry after `delay`
///   ([`Self::after_failure`]): the handler is given up if
///   `runtime + delay >= timeout` (the next attempt would start too late),
///   or else if `retry + 1 >= retries` (the attempts are used up). So
///   `retries = 3` makes the third failure final, and no attempt starts at
///   or after `timeout`.
/// - Without `retries`, a handler retries forever; without `timeout`,
///   only `retries` limit it.
/// - An attempt runs for at most what is left of `timeout`
///   ([`Self::limit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetryPolicy {
    /// How many attempts a handler gets; `None`: no limit.
    pub(crate) retries: Option<u32>,
    /// How long after its first attempt no attempt starts; `None`: never.
    pub(crate) timeout: Option<Duration>,
    /// The delay before retrying a regular error.
    pub(crate) backoff: Duration,
}

/// Why a handler is given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GiveUp {
    /// Its `timeout` has passed (or would before the next attempt).
    TimedOut(Duration),
    /// Its `retries` are used up.
    RetriesExhausted(u32),
}

impl fmt::Display for GiveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GiveUp::TimedOut(timeout) => {
                write!(f, "timed out after {}s", timeout.as_secs_f64())
            }
            GiveUp::RetriesExhausted(limit) => write!(f, "exceeded {limit} retries"),
        }
    }
}

impl RetryPolicy {
    /// The policy of a handler with `options`; without a `backoff` of its
    /// own, a regular error is retried after `default_backoff`.
    pub(crate) fn of(options: &Options, default_backoff: Duration) -> Self {
        Self {
            retries: options.retries,
            timeout: options.timeout,
            backoff: options.backoff.unwrap_or(default_backoff),
        }
    }

    /// Whether attempt number `retry` (0-based), `runtime` after the first
    /// attempt started, is not made.
    pub(crate) fn before_attempt(&self, retry: u32, runtime: Duration) -> Option<GiveUp> {
        if let Some(timeout) = self.timeout.filter(|timeout| runtime >= *timeout) {
            return Some(GiveUp::TimedOut(timeout));
        }
        self.retries
            .filter(|limit| retry >= *limit)
            .map(GiveUp::RetriesExhausted)
    }

    /// Whether attempt number `retry` (0-based), which failed `runtime`
    /// after the first attempt started and asked for a retry after `delay`,
    /// is the last.
    pub(crate) fn after_failure(
        &self,
        retry: u32,
        runtime: Duration,
        delay: Duration,
    ) -> Option<GiveUp> {
        // The next attempt would be the next number, `delay` later.
        self.before_attempt(retry.saturating_add(1), runtime.saturating_add(delay))
    }

    /// How long an attempt started `runtime` after the first may run: what
    /// is left of `timeout`, if there is one.
    pub(crate) fn limit(&self, runtime: Duration) -> Option<Duration> {
        self.timeout.map(|timeout| timeout.saturating_sub(runtime))
    }
}

#[cfg(test)]
mod tests {
    use kube::core::response::StatusDetails;

    use super::*;

    fn status(code: u16, retry_after_seconds: u32) -> Status {
        Status {
            code,
            details: Some(StatusDetails {
                name: String::new(),
                group: String::new(),
                kind: String::new(),
                uid: String::new(),
                causes: Vec::new(),
                retry_after_seconds,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn statuses_are_classified() {
        assert_eq!(classify_status(&status(404, 0)), ErrorClass::NotFound);
        assert_eq!(classify_status(&status(409, 0)), ErrorClass::Conflict);
        assert_eq!(classify_status(&status(410, 0)), ErrorClass::Expired);
        assert_eq!(classify_status(&status(422, 0)), ErrorClass::Invalid);
        assert_eq!(classify_status(&status(403, 0)), ErrorClass::Permanent);
        assert_eq!(
            classify_status(&status(500, 0)),
            ErrorClass::Transient { retry_after: None }
        );
        assert_eq!(
            classify_status(&status(429, 7)),
            ErrorClass::Transient {
                retry_after: Some(Duration::from_secs(7))
            }
        );
        let expired = Status {
            reason: "Expired".into(),
            ..Default::default()
        };
        assert_eq!(classify_status(&expired), ErrorClass::Expired);
    }

    #[test]
    fn kube_errors_are_classified() {
        let api = kube::Error::Api(Box::new(status(503, 2)));
        assert_eq!(
            classify(&api),
            ErrorClass::Transient {
                retry_after: Some(Duration::from_secs(2))
            }
        );
        let io = kube::Error::ReadEvents(std::io::Error::other("reset"));
        assert_eq!(classify(&io), ErrorClass::Transient { retry_after: None });
        let serde = kube::Error::SerdeError(serde_json::from_str::<u8>("x").expect_err("invalid"));
        assert_eq!(classify(&serde), ErrorClass::Permanent);
    }

    #[test]
    fn limited_backoff_runs_out() {
        let secs = |s| Duration::from_secs(s);
        let mut backoff = Backoff::limited(&[secs(1), secs(2)]);
        assert_eq!(backoff.next_delay(None), Some(secs(1)));
        assert_eq!(backoff.next_delay(Some(secs(9))), Some(secs(9)));
        assert_eq!(backoff.next_delay(None), None);
        assert_eq!(backoff.attempts(), 2);
        backoff.reset();
        assert_eq!(backoff.next_delay(None), Some(secs(1)));
    }

    #[test]
    fn endless_backoff_repeats_the_last_delay() {
        let secs = |s| Duration::from_secs(s);
        let mut backoff = Backoff::endless(&[secs(1), secs(3)]);
        let delays: Vec<_> = (0..4).map(|_| backoff.next_delay(None)).collect();
        assert_eq!(
            delays,
            [Some(secs(1)), Some(secs(3)), Some(secs(3)), Some(secs(3))]
        );
        assert_eq!(Backoff::endless(&[]).next_delay(None), Some(secs(1)));
    }

    fn policy(retries: Option<u32>, timeout: Option<u64>) -> RetryPolicy {
        RetryPolicy {
            retries,
            timeout: timeout.map(Duration::from_secs),
            backoff: Duration::from_secs(1),
        }
    }

    #[test]
    fn a_handler_is_given_up_before_an_attempt_exactly_at_its_timeout() {
        let s = Duration::from_secs;
        let policy = policy(None, Some(10));
        assert_eq!(policy.before_attempt(5, s(9)), None);
        assert_eq!(
            policy.before_attempt(5, s(10)),
            Some(GiveUp::TimedOut(s(10)))
        );
        assert_eq!(policy.limit(s(4)), Some(s(6)));
        assert_eq!(policy.limit(s(11)), Some(Duration::ZERO));
    }

    #[test]
    fn a_failure_is_final_when_the_next_attempt_would_start_at_the_timeout() {
        let s = Duration::from_secs;
        let policy = policy(None, Some(10));
        assert_eq!(policy.after_failure(0, s(5), s(4)), None);
        assert_eq!(
            policy.after_failure(0, s(6), s(4)),
            Some(GiveUp::TimedOut(s(10))),
            "exactly at the timeout"
        );
    }

    #[test]
    fn retries_count_attempts_and_the_last_failure_is_final() {
        let s = Duration::from_secs;
        let policy = policy(Some(3), None);
        assert_eq!(policy.after_failure(1, s(0), s(1)), None);
        assert_eq!(
            policy.after_failure(2, s(0), s(1)),
            Some(GiveUp::RetriesExhausted(3)),
            "the third failure"
        );
        assert_eq!(policy.before_attempt(2, s(0)), None);
        assert_eq!(
            policy.before_attempt(3, s(0)),
            Some(GiveUp::RetriesExhausted(3))
        );
    }

    #[test]
    fn without_limits_a_handler_retries_forever() {
        let policy = policy(None, None);
        let long = Duration::from_secs(86_400 * 365);
        assert_eq!(policy.before_attempt(u32::MAX, long), None);
        assert_eq!(policy.after_failure(u32::MAX, long, long), None);
        assert_eq!(policy.limit(long), None);
    }

    #[test]
    fn the_timeout_is_reported_before_the_retries() {
        let s = Duration::from_secs;
        let policy = policy(Some(1), Some(1));
        assert_eq!(
            policy.after_failure(0, s(0), s(1)),
            Some(GiveUp::TimedOut(s(1)))
        );
        assert_eq!(policy.before_attempt(1, s(1)), Some(GiveUp::TimedOut(s(1))));
        assert_eq!(GiveUp::TimedOut(s(1)).to_string(), "timed out after 1s");
        assert_eq!(
            GiveUp::RetriesExhausted(1).to_string(),
            "exceeded 1 retries"
        );
    }

    #[test]
    fn an_unset_backoff_is_the_default() {
        let s = Duration::from_secs;
        let options = Options::default();
        assert_eq!(RetryPolicy::of(&options, s(7)).backoff, s(7));
        let options = Options {
            backoff: Some(Duration::ZERO),
            ..Options::default()
        };
        assert_eq!(RetryPolicy::of(&options, s(7)).backoff, Duration::ZERO);
    }
}
