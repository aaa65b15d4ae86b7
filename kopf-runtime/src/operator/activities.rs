//! Start-up and clean-up handlers, Kopf's activities: each runs until it
//! succeeds or fails for good, retried as Kopf retries any handler.
//!
//! Each round calls, in the registry's order, every handler that has not
//! ended and whose retry is due, then sleeps until the next retry is due.
//! An outcome is resolved as a change handler's is
//! ([`execution::resolve_attempt`]): a
//! temporary error is retried after its delay; a regular one as the
//! handler's `errors` says, after its `backoff` (else
//! `settings.execution.default_backoff`); and the handler is given up as
//! its [`RetryPolicy`] says.
//!
//! The handlers of both activities receive the operator's memo (one memo,
//! the same for all); start-up handlers also receive the operator's
//! settings, which they may change (`StartupSettings`), and which are read
//! anew for each retry's delay.
//!
//! # Guarantees
//! - The handlers run one after another, never at once.
//! - The handlers post Events (`posting::info`, …) with the operator's
//!   poster, from plain `fn`s too.
//! - A start-up handler that changes a setting that cannot change after the
//!   operator started fails for good, the change undone
//!   (`StartupSettings::refuse_fixed`).
//! - Every handler runs until it ends, even when another one has already
//!   failed for good (as in Kopf).
//! - The activity fails only once all handlers have ended, with the first
//!   handler that failed for good and why.

use std::time::Duration;

use kube::Client;
use tokio::time::Instant;

use crate::model::errors::HandlerError;
use crate::model::handlers::Handler;
use crate::model::kwargs::{Attempt, Indexes, Kwargs, Logger, Memo};
use crate::model::retrying::RetryPolicy;
use crate::posting::{self, EventPoster};
use crate::processing::execution::{self, Disposition};
use crate::settings::{OperatorSettings, StartupSettings};

/// Where a delay too long for the clock ends: never, as far as anyone waits.
const FAR: Duration = Duration::from_secs(86_400 * 365);

/// A handler of an activity that failed for good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Failure {
    /// The handler's id.
    pub(super) handler: String,
    /// Why it failed, and after how many attempts.
    pub(super) message: String,
}

/// Where one handler of the activity is.
struct Attempts {
    /// The attempts made so far.
    retry: u32,
    /// When the first attempt started, on the wall clock and on Tokio's.
    started: Option<(jiff::Timestamp, Instant)>,
    /// When the next attempt is due.
    due: Instant,
    /// `None` while it runs; then whether it failed for good, and why.
    ended: Option<Result<(), String>>,
}

/// What the handlers of an activity receive.
pub(super) struct Activity<'a> {
    pub(super) client: &'a Client,
    pub(super) poster: Option<&'a EventPoster>,
    /// The operator's memo.
    pub(super) memo: &'a Memo,
    pub(super) settings: Settings<'a>,
}

/// The operator's settings, as the handlers of an activity have them.
pub(super) enum Settings<'a> {
    /// At start-up: the handlers may change them (`Kwargs::settings`).
    Changing(&'a StartupSettings),
    /// At clean-up: as the operator ran with them.
    Fixed(&'a OperatorSettings),
}

impl Settings<'_> {
    fn default_backoff(&self) -> Duration {
        match self {
            Settings::Changing(settings) => settings.get().execution.default_backoff,
            Settings::Fixed(settings) => settings.execution.default_backoff,
        }
    }
}

/// Runs `handlers` until each has succeeded or failed for good.
///
/// # Errors
/// The first handler (in the registry's order) that failed for good.
pub(super) async fn run(handlers: &[Handler], activity: &Activity<'_>) -> Result<(), Failure> {
    let now = Instant::now();
    let mut attempts: Vec<Attempts> = handlers
        .iter()
        .map(|_| Attempts {
            retry: 0,
            started: None,
            due: now,
            ended: None,
        })
        .collect();
    loop {
        for (handler, state) in handlers.iter().zip(&mut attempts) {
            if state.ended.is_none() && state.due <= Instant::now() {
                let attempting = attempt(handler, state, activity);
                match activity.poster {
                    Some(poster) => posting::scope(poster.clone(), attempting).await,
                    None => attempting.await,
                }
            }
        }
        let next = attempts
            .iter()
            .filter(|state| state.ended.is_none())
            .map(|state| state.due)
            .min();
        match next {
            Some(due) => tokio::time::sleep_until(due).await,
            None => break,
        }
    }
    let failed = handlers.iter().zip(attempts).find_map(|(handler, state)| {
        let message = state.ended?.err()?;
        Some(Failure {
            handler: handler.id().to_owned(),
            message,
        })
    });
    failed.map_or(Ok(()), Err)
}

/// One attempt of `handler`; `state` says what comes next.
async fn attempt(handler: &Handler, state: &mut Attempts, activity: &Activity<'_>) {
    let (started, started_at) = *state
        .started
        .get_or_insert_with(|| (jiff::Timestamp::now(), Instant::now()));
    let runtime = started_at.elapsed();
    let logger = Logger::new(handler.id().to_owned());
    let mut kwargs = Kwargs::of_operator(activity.memo.clone(), logger.clone())
        .with_cluster(Some(activity.client.clone()), Indexes::default())
        .with_attempt(Attempt {
            retry: state.retry,
            started,
            runtime,
        });
    if let Settings::Changing(settings) = &activity.settings {
        kwargs = kwargs.with_settings((*settings).clone());
    }
    let limit = RetryPolicy::of(handler.options(), Duration::ZERO).limit(runtime);
    let mut outcome = execution::invoke(handler, kwargs, limit).await;
    if let Settings::Changing(settings) = &activity.settings
        && let Some(message) = settings.refuse_fixed()
    {
        outcome = Err(HandlerError::Permanent { message });
    }
    // Read after the call: a start-up handler may change the default.
    let policy = RetryPolicy::of(handler.options(), activity.settings.default_backoff());
    let name = &handler.id();
    let attempt = (state.retry, started_at.elapsed());
    state.retry += 1;
    state.ended = match execution::resolve_attempt(handler, outcome, &policy, attempt, &logger) {
        Disposition::Succeeded(_) => {
            logger.info(format_args!("Handler '{name}' succeeded."));
            Some(Ok(()))
        }
        Disposition::Ignored => Some(Ok(())),
        Disposition::Failed { message } => Some(Err(message)),
        Disposition::Retry { delay, .. } => {
            let now = Instant::now();
            state.due = now.checked_add(delay).unwrap_or(now + FAR);
            None
        }
    };
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::mock_api::{self, Reply};
    use crate::model::errors::Error;
    use crate::model::handlers::ErrorsMode;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// Every attempt: the handler's id and the time since the test began.
    #[derive(Clone, Default)]
    struct Attempted(Arc<Mutex<Vec<(String, Duration)>>>);

    impl Attempted {
        fn of(&self, id: &str) -> Vec<Duration> {
            let all = self.0.lock().expect("lock");
            all.iter()
                .filter(|(who, _)| who == id)
                .map(|(_, at)| *at)
                .collect()
        }
    }

    /// A start-up handler that fails with `error` on its first `failures`
    /// attempts, then succeeds.
    fn flaky(
        id: &'static str,
        failures: u32,
        error: fn() -> Error,
        attempted: &Attempted,
    ) -> Handler {
        let (attempted, epoch) = (attempted.clone(), Instant::now());
        Handler::on_startup(id, move |kw: Kwargs| {
            attempted
                .0
                .lock()
                .expect("lock")
                .push((id.to_owned(), epoch.elapsed()));
            let outcome = if kw.retry < failures {
                Err(error())
            } else {
                Ok(())
            };
            async move { outcome }
        })
    }

    fn regular() -> Error {
        Error::regular("not yet")
    }

    async fn run_all(handlers: &[Handler], default_backoff: Duration) -> Result<(), Failure> {
        let (client, _) = mock_api::client(|_| Reply::Json(404, serde_json::json!({})));
        let mut settings = OperatorSettings::default();
        settings.execution.default_backoff = default_backoff;
        let activity = Activity {
            client: &client,
            poster: None,
            memo: &Memo::new(),
            settings: Settings::Fixed(&settings),
        };
        run(handlers, &activity).await
    }

    /// Runs start-up `handlers` with `settings` and `memo`.
    async fn start_up(
        handlers: &[Handler],
        settings: &StartupSettings,
        memo: &Memo,
    ) -> Result<(), Failure> {
        let (client, _) = mock_api::client(|_| Reply::Json(404, serde_json::json!({})));
        let activity = Activity {
            client: &client,
            poster: None,
            memo,
            settings: Settings::Changing(settings),
        };
        run(handlers, &activity).await
    }

    #[tokio::test(start_paused = true)]
    async fn start_up_handlers_share_the_operators_memo_and_settings_in_turn() {
        let first = Handler::on_startup("first", |kw: Kwargs| async move {
            kw.memo.insert(String::from("from first"));
            let settings = kw.settings.expect("start-up handlers have the settings");
            settings.update(|s| s.persistence.finalizer = "example.com/first".into())?;
            Ok::<_, Error>(())
        });
        let second = Handler::on_startup("second", |kw: Kwargs| async move {
            let seen = kw.memo.get::<String>().map(|s| s.to_string());
            let settings = kw.settings.expect("start-up handlers have the settings");
            let finalizer = settings.get().persistence.finalizer;
            kw.memo.insert(format!("{seen:?} {finalizer}"));
            settings.update(|s| s.persistence.diffbase_key = "example.com/second".into())?;
            Ok::<_, Error>(())
        });
        let memo = Memo::new();
        let settings = StartupSettings::new(OperatorSettings::default());
        assert_eq!(start_up(&[first, second], &settings, &memo).await, Ok(()));
        assert_eq!(
            memo.get::<String>().as_deref().map(String::as_str),
            Some("Some(\"from first\") example.com/first"),
            "the second saw what the first left"
        );
        let settings = settings.close();
        assert_eq!(settings.persistence.finalizer, "example.com/first");
        assert_eq!(settings.persistence.diffbase_key, "example.com/second");
    }

    #[tokio::test(start_paused = true)]
    async fn a_default_backoff_changed_at_start_up_delays_the_next_retry() {
        let attempted = Attempted::default();
        let epoch = Instant::now();
        let log = attempted.clone();
        let hasty = Handler::on_startup("hasty", move |kw: Kwargs| {
            log.0
                .lock()
                .expect("lock")
                .push(("hasty".to_owned(), epoch.elapsed()));
            let settings = kw.settings.clone();
            async move {
                if kw.retry == 0 {
                    settings
                        .expect("start-up handlers have the settings")
                        .update(|s| s.execution.default_backoff = secs(2))?;
                    return Err(regular());
                }
                Ok(())
            }
        });
        let settings = StartupSettings::new(OperatorSettings::default());
        assert_eq!(start_up(&[hasty], &settings, &Memo::new()).await, Ok(()));
        assert_eq!(attempted.of("hasty"), [secs(0), secs(2)], "not after 60 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_start_up_handler_changing_the_connect_timeout_fails_for_good() {
        let attempted = Attempted::default();
        let log = attempted.clone();
        let connecting = Handler::on_startup("connecting", move |kw: Kwargs| {
            log.0
                .lock()
                .expect("lock")
                .push(("connecting".to_owned(), Duration::ZERO));
            let settings = kw.settings.clone();
            async move {
                settings
                    .expect("start-up handlers have the settings")
                    .update(|s| s.networking.connect_timeout = Some(secs(1)))?;
                Ok::<_, Error>(())
            }
        });
        let settings = StartupSettings::new(OperatorSettings::default());
        let failure = start_up(&[connecting], &settings, &Memo::new())
            .await
            .expect_err("refused");
        assert_eq!(failure.handler, "connecting");
        assert!(
            failure
                .message
                .contains("`networking.connect_timeout` cannot change"),
            "{}",
            failure.message
        );
        assert_eq!(attempted.of("connecting").len(), 1, "not retried");
        assert_eq!(settings.get().networking.connect_timeout, None, "undone");
    }

    #[tokio::test(start_paused = true)]
    async fn regular_errors_are_retried_after_the_backoff_until_success() {
        let attempted = Attempted::default();
        let handlers = [
            flaky("own", 2, regular, &attempted).backoff(secs(3)),
            flaky("default", 1, regular, &attempted),
        ];
        assert_eq!(run_all(&handlers, secs(5)).await, Ok(()));
        assert_eq!(attempted.of("own"), [secs(0), secs(3), secs(6)]);
        assert_eq!(attempted.of("default"), [secs(0), secs(5)]);
    }

    #[tokio::test(start_paused = true)]
    async fn exhausted_retries_fail_the_activity_once_all_handlers_ended() {
        let attempted = Attempted::default();
        let handlers = [
            flaky("doomed", u32::MAX, regular, &attempted)
                .retries(3)
                .backoff(secs(1)),
            flaky("slow", 5, regular, &attempted).backoff(secs(2)),
        ];
        let failure = run_all(&handlers, secs(60)).await.expect_err("doomed");
        assert_eq!(failure.handler, "doomed");
        assert_eq!(
            failure.message,
            "exceeded 3 retries; the last error: not yet"
        );
        assert_eq!(attempted.of("doomed").len(), 3, "retries count attempts");
        assert_eq!(attempted.of("slow").len(), 6, "run to its success");
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_failures_and_timeouts_end_a_handler_at_once() {
        let attempted = Attempted::default();
        let handlers = [
            flaky(
                "permanent",
                u32::MAX,
                || Error::permanent("no way"),
                &attempted,
            ),
            flaky("strict", u32::MAX, regular, &attempted).errors(ErrorsMode::Permanent),
            flaky("timed", u32::MAX, regular, &attempted)
                .backoff(secs(4))
                .timeout(secs(10)),
            flaky("ignored", u32::MAX, regular, &attempted).errors(ErrorsMode::Ignored),
        ];
        let failure = run_all(&handlers, secs(60)).await.expect_err("failed");
        assert_eq!(failure.handler, "permanent");
        assert_eq!(failure.message, "no way");
        assert_eq!(attempted.of("permanent").len(), 1);
        assert_eq!(attempted.of("strict").len(), 1);
        assert_eq!(attempted.of("timed"), [secs(0), secs(4), secs(8)]);
        assert_eq!(attempted.of("ignored").len(), 1);
    }
}
