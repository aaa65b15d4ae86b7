//! How API failures are classified and how long to wait before retrying.
//!
//! Shared by [`watching`](crate::watching), [`patching`](crate::patching) and
//! [`posting`](crate::posting): `429` and `5xx` answers and transport errors
//! are transient and retried after a backoff; a `retryAfterSeconds` from the
//! server (in the `Status` details) replaces the configured delay; `410 Gone`
//! means "re-list"; `404`, `409` and `422` are answers for the caller to act on.

use std::time::Duration;

use kube::core::Status;

/// What a failed request means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
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
pub fn classify(error: &kube::Error) -> ErrorClass {
    match error {
        kube::Error::Api(status) => classify_status(status),
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            ErrorClass::Transient { retry_after: None }
        }
        _ => ErrorClass::Permanent,
    }
}

/// Classify an API `Status` (from an error answer or a watch `ERROR` event).
pub fn classify_status(status: &Status) -> ErrorClass {
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
pub fn retry_after(status: &Status) -> Option<Duration> {
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
pub struct Backoff {
    delays: Vec<Duration>,
    attempt: usize,
    repeat_last: bool,
}

impl Backoff {
    /// A finite backoff: `delays.len()` retries, then [`Self::next_delay`]
    /// returns `None`.
    pub fn limited(delays: &[Duration]) -> Self {
        Self {
            delays: delays.to_vec(),
            attempt: 0,
            repeat_last: false,
        }
    }

    /// An endless backoff: after the listed delays, the last one repeats
    /// (1 s if the list is empty).
    pub fn endless(delays: &[Duration]) -> Self {
        Self {
            delays: delays.to_vec(),
            attempt: 0,
            repeat_last: true,
        }
    }

    /// The delay before the next attempt, or `None` when retries are used up.
    /// A server hint replaces the configured delay but still uses up a retry.
    pub fn next_delay(&mut self, server_hint: Option<Duration>) -> Option<Duration> {
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
    pub fn attempts(&self) -> usize {
        self.attempt
    }

    /// Start over (after a successful attempt).
    pub fn reset(&mut self) {
        self.attempt = 0;
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
}
