//! The one deadline of a request, which its admission webhooks share, as
//! the API server gives every request one deadline (`--request-timeout`,
//! 60 s by default) and caps each webhook's `timeoutSeconds` by what is
//! left of it. A request whose deadline passes while a webhook is called
//! is answered `504 Timeout`, as the API server's timeout filter answers
//! it (dropping the warnings gathered so far).
//!
//! The deadline rides with the request's task (as Go's `context` does),
//! set once in the handler around the whole request.

use std::future::Future;
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use crate::failures::ApiError;

/// The API server's default `--request-timeout`.
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

tokio::task_local! {
    static DEADLINE: Instant;
}

/// Runs `request` with `deadline` as the deadline of its webhook calls.
pub(crate) async fn scope<F: Future>(deadline: Instant, request: F) -> F::Output {
    DEADLINE.scope(deadline, request).await
}

/// How long a call whose own timeout is `timeout` may take: `timeout`, or
/// what is left of the request's deadline if that is less (`true` then).
pub(crate) fn cap(timeout: Duration) -> (Duration, bool) {
    let left = DEADLINE
        .try_with(|deadline| deadline.saturating_duration_since(Instant::now()))
        .ok();
    match left {
        Some(left) if left < timeout => (left, true),
        _ => (timeout, false),
    }
}

/// The answer to a request whose deadline passed, as the API server's
/// timeout filter writes it.
pub(crate) fn exceeded() -> ApiError {
    let mut err = ApiError::new(
        504,
        "Timeout",
        "Timeout: request did not complete within the allotted timeout",
    );
    err.details = Some(json!({}));
    err
}

/// The `timeout` a webhook is told: whole seconds, rounded up.
pub(crate) fn query_seconds(timeout: Duration) -> u64 {
    let secs = timeout.as_secs();
    if timeout.subsec_nanos() > 0 {
        secs + 1
    } else {
        secs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn calls_are_capped_by_what_is_left() {
        assert_eq!(
            cap(Duration::from_secs(10)),
            (Duration::from_secs(10), false),
            "no deadline, no cap"
        );
        let deadline = Instant::now() + Duration::from_secs(3);
        scope(deadline, async {
            assert_eq!(cap(Duration::from_secs(10)), (Duration::from_secs(3), true));
            assert_eq!(cap(Duration::from_secs(2)), (Duration::from_secs(2), false));
            tokio::time::sleep(Duration::from_secs(4)).await;
            assert_eq!(cap(Duration::from_secs(2)), (Duration::ZERO, true));
        })
        .await;
    }

    #[test]
    fn webhooks_are_told_whole_seconds_rounded_up() {
        assert_eq!(query_seconds(Duration::from_secs(10)), 10);
        assert_eq!(query_seconds(Duration::from_millis(1200)), 2);
        assert_eq!(query_seconds(Duration::from_millis(1)), 1);
    }
}
