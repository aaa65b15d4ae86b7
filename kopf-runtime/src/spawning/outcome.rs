//! What a call of a daemon or timer returned ([`TaskOutcome`]), what the
//! task does next ([`Verdict`]), and which kind of task it is
//! ([`TaskKind`]): what the loops, their observer and the task's spec all
//! speak of, so it depends on none of them.

use std::time::Duration;

use serde_json::Value;

/// The result of one call of a daemon or timer handler.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TaskOutcome {
    /// Success, with the value to store under `status.<handler id>` (the
    /// engine's business).
    Ok(Option<Value>),
    /// A temporary failure: retry after `delay` (Kopf's `TemporaryError`).
    Temporary {
        /// How long to wait before the next attempt.
        delay: Duration,
        /// What went wrong.
        message: String,
    },
    /// A permanent failure: do not retry (Kopf's `PermanentError`).
    Permanent {
        /// What went wrong.
        message: String,
    },
    /// Any other failure: retry after the handler's `backoff`. A panic in the
    /// handler is reported as this.
    Error {
        /// What went wrong.
        message: String,
    },
}

impl TaskOutcome {
    #[cfg(test)]
    /// `Ok(None)`: success without a result.
    #[must_use]
    pub(crate) fn ok() -> Self {
        Self::Ok(None)
    }
}

/// What the runtime does after an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Success. A daemon is finished for good; a timer waits for its next tick.
    Done,
    /// The handler will be called again after this delay (retry count + 1).
    RetryIn(Duration),
    /// Permanent failure or retries exhausted. A daemon is finished for good
    /// (permanently failed); a timer waits for its next tick and starts
    /// counting retries from zero.
    GaveUp,
    /// The stop flag was set while the handler ran; the task exits.
    Stopped,
}

/// Which kind of spawning handler a task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskKind {
    /// A daemon: the handler runs once (with retries) for as long as it wants.
    Daemon,
    /// A timer: the handler is called on the schedule of its
    /// [`TimerOptions`](crate::model::handlers::TimerOptions).
    Timer,
}
