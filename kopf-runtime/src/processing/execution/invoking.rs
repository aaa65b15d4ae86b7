//! One call of a handler, with its panics caught and its time limited
//! ([`invoke`]), and what its outcome comes to ([`resolve_attempt`]): the
//! same for change handlers, activities, daemons, timers and the rest.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{CatchUnwind, Either, Map, Ready};
use serde_json::Value;

use crate::model::errors::{HandlerError, Outcome};
use crate::model::handlers::{ErrorsMode, Handler};
use crate::model::kwargs::{Kwargs, Logger};
use crate::model::retrying::{GiveUp, RetryPolicy};
use crate::operations::metrics::{HandlerMetrics, HandlerOutcome};

/// What a handler's outcome comes to, as Kopf decides it by the error's
/// kind and the handler's `errors` mode; the same for change handlers,
/// daemons and timers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Disposition {
    /// Success, with the result for `status.<id>`, if any.
    Succeeded(Option<Value>),
    /// A regular error with `errors = ignored`: done, as if it succeeded.
    Ignored,
    /// To be called again after `delay`; `message` says what went wrong.
    Retry { delay: Duration, message: String },
    /// Failed for good; `message` says what went wrong.
    Failed { message: String },
}

/// Resolves the outcome of attempt number `retry` (0-based) of `handler`,
/// which ended `runtime` after its first attempt started, by its `policy`:
/// as [`resolve`] does, and a retry that the policy does not allow
/// ([`RetryPolicy::after_failure`]) is given up ([`give_up`]).
pub(crate) fn resolve_attempt(
    handler: &Handler,
    outcome: Outcome,
    policy: &RetryPolicy,
    (retry, runtime): (u32, Duration),
    logger: &Logger,
) -> Disposition {
    match resolve(handler, outcome, policy.backoff, logger) {
        Disposition::Retry { delay, message } => {
            match policy.after_failure(retry, runtime, delay) {
                Some(why) => Disposition::Failed {
                    message: give_up(handler, why, Some(&message), logger),
                },
                None => Disposition::Retry { delay, message },
            }
        }
        disposition => disposition,
    }
}

/// Gives `handler` up (see [`RetryPolicy`]): logs why, in the one wording
/// of every kind of handler, counts it in the handler's metrics (as
/// `timeout` or `retries_exhausted`), and returns the message of the
/// failure, with the `last_error` if the handler had one.
pub(crate) fn give_up(
    handler: &Handler,
    why: GiveUp,
    last_error: Option<&str>,
    logger: &Logger,
) -> String {
    logger.error(format_args!("Handler '{}' has {why}.", handler.id()));
    if let Some(metrics) = &handler.metrics {
        metrics.count(match why {
            GiveUp::TimedOut(_) => HandlerOutcome::Timeout,
            GiveUp::RetriesExhausted(_) => HandlerOutcome::RetriesExhausted,
        });
    }
    match last_error {
        Some(error) => format!("{why}; the last error: {error}"),
        None => why.to_string(),
    }
}

/// Resolves a handler's outcome, logging a failure once, in Kopf's words.
/// `backoff` is the delay of a regular error with `errors = temporary` and
/// of a temporary error without its own delay.
pub(crate) fn resolve(
    handler: &Handler,
    outcome: Outcome,
    backoff: Duration,
    logger: &Logger,
) -> Disposition {
    let name = &handler.id();
    match outcome {
        Ok(result) => Disposition::Succeeded(result.filter(|r| !r.is_null())),
        Err(HandlerError::Temporary { message, delay }) => {
            logger.error(format_args!(
                "Handler '{name}' failed temporarily: {message}"
            ));
            let delay = delay.unwrap_or(backoff);
            Disposition::Retry { delay, message }
        }
        Err(HandlerError::Permanent { message }) => {
            logger.error(format_args!(
                "Handler '{name}' failed permanently: {message}"
            ));
            Disposition::Failed { message }
        }
        Err(error) => {
            let message = error.to_string();
            let (next, disposition) = match handler.options().errors {
                ErrorsMode::Ignored => ("ignore", Disposition::Ignored),
                ErrorsMode::Permanent => ("stop", Disposition::Failed { message }),
                ErrorsMode::Temporary => {
                    let delay = backoff;
                    ("retry", Disposition::Retry { delay, message })
                }
            };
            logger.error(format_args!(
                "Handler '{name}' failed with an exception. Will {next}: {error}"
            ));
            disposition
        }
    }
}

/// A handler call started by [`catch_panics`]: it resolves to the call's output,
/// or to the message of its panic.
pub(crate) type PanicsCaught<F> = Map<
    Either<CatchUnwind<AssertUnwindSafe<F>>, Ready<std::thread::Result<<F as Future>::Output>>>,
    fn(std::thread::Result<<F as Future>::Output>) -> Result<<F as Future>::Output, String>,
>;

/// Starts a handler call with its panics caught, whether the call panics
/// when started or while it runs: the one guard of every handler call
/// (change handlers, event handlers, daemons, timers).
pub(crate) fn catch_panics<F: Future>(start: impl FnOnce() -> F) -> PanicsCaught<F> {
    let started = match std::panic::catch_unwind(AssertUnwindSafe(start)) {
        Ok(future) => Either::Left(AssertUnwindSafe(future).catch_unwind()),
        Err(panic) => Either::Right(futures::future::ready(Err(panic))),
    };
    started.map(unpanicked::<F::Output> as fn(_) -> _)
}

fn unpanicked<T>(result: std::thread::Result<T>) -> Result<T, String> {
    result.map_err(|panic| panicked(&*panic))
}

/// Calls a handler with panics contained and an optional time limit.
///
/// The handler is called at once (its kwargs are moved into its own
/// future); what is returned holds only that call and the limit, not the
/// kwargs a second time, as an `async fn` would.
///
/// With metrics, the call counts as in flight while it runs, and its
/// outcome and duration are recorded when it ends.
pub(crate) fn invoke(
    handler: &Handler,
    kwargs: Kwargs,
    limit: Option<Duration>,
) -> impl Future<Output = Outcome> + Send + use<> {
    let errors = handler.options().errors;
    let in_flight = handler.metrics.clone().map(HandlerMetrics::start);
    let call = catch_panics(|| handler.call(kwargs));
    async move {
        let outcome = match limit {
            // Boxed: its sleep would make every call's future larger,
            // and most handlers have no timeout.
            Some(limit) => match Box::pin(tokio::time::timeout(limit, call)).await {
                Ok(outcome) => outcome,
                Err(_elapsed) => {
                    if let Some(in_flight) = in_flight {
                        in_flight.finish(HandlerOutcome::Timeout);
                    }
                    return Err(HandlerError::Permanent {
                        message: format!("timed out after {}", seconds(limit)),
                    });
                }
            },
            None => call.await,
        };
        let outcome = outcome.unwrap_or_else(|message| Err(HandlerError::Regular { message }));
        if let Some(in_flight) = in_flight {
            let regular = match errors {
                ErrorsMode::Temporary => HandlerOutcome::Temporary,
                ErrorsMode::Permanent => HandlerOutcome::Permanent,
                ErrorsMode::Ignored => HandlerOutcome::Ignored,
            };
            in_flight.finish(HandlerOutcome::of(&outcome, regular));
        }
        outcome
    }
}

fn panicked(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string payload".to_owned());
    format!("the handler panicked: {text}")
}

fn seconds(duration: Duration) -> String {
    format!("{}s", duration.as_secs_f64())
}
