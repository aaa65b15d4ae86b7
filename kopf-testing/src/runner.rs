//! [`KopfRunner`]: an operator run in-process against a fresh emulator, for
//! tests, as Kopf's `kopf.testing.KopfRunner`.
//!
//! A test starts the operator, acts on the emulator through
//! [`KopfRunner::client`], waits for what the handlers did (objects through
//! the client, log lines through [`KopfRunner::wait_for_output`]), then
//! stops it and looks at how it ended and what it logged ([`Finished`]),
//! as Kopf's `runner.exit_code`, `runner.exception` and `runner.output`.
//!
//! ```
//! use kopf_testing::KopfRunner;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::api::{Api, PostParams};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Any future that runs until `stop` completes is an operator; with
//! // kopf-runtime it is
//! // `kopf::Operator::new(registry).client(client).run_until(stop)`.
//! let runner = KopfRunner::builder()
//!     .start(|client, stop| async move {
//!         tracing::info!("operator is up");
//!         let _ = client;
//!         stop.await;
//!         Ok::<(), std::convert::Infallible>(())
//!     })
//!     .await?;
//! runner.wait_for_output("operator is up").await?;
//!
//! let cms: Api<ConfigMap> = Api::namespaced(runner.client(), "default");
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("demo".into());
//! cms.create(&PostParams::default(), &cm).await?;
//!
//! let finished = runner.stop().await?;
//! assert!(finished.result.is_ok());
//! assert!(finished.output.contains("operator is up"));
//! # Ok(()) }
//! ```
//!
//! # Why the operator is a closure
//!
//! kopf-runtime depends on this crate (its `emulator` feature runs an
//! operator on the emulator), so this crate cannot name kopf-runtime's
//! `Operator` without a dependency cycle. The runner takes the operator as
//! what it is to the outside: a future, built from a [`kube::Client`] of the
//! emulator and a [`Stop`] signal, that returns when the signal fires. With
//! kopf-runtime, that is one line (see the example above), and the runner
//! serves any operator built on kube the same way.
//!
//! # Caveats
//! - Log lines are captured through a `tracing` subscriber that the runner
//!   sets as the default of the current thread while it lives, and as the
//!   subscriber of the operator's own task. On a current-thread runtime
//!   (`#[tokio::test]`'s default) every task the operator spawns runs on
//!   this thread, so everything is captured; on a multi-thread runtime,
//!   the lines of tasks that the operator spawns are not, and neither are
//!   those of blocking threads (plain-`fn` handlers). The runner is
//!   therefore not `Send`: keep it in the test's own task.
//! - Every wait ends after [`KopfRunnerBuilder::timeout`] (30 s by default)
//!   with an error that carries the output so far.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tracing::instrument::WithSubscriber as _;

use crate::emulator::{Emulator, EmulatorBuilder};
use crate::error::EmulatorError;

/// How long a wait of the runner lasts by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// What the runner captures by default: `INFO` and above, and the
/// `DEBUG` lines of kopf-runtime (its object log lines are `kopf::objects`).
pub const DEFAULT_LOG_FILTER: &str = "info,kopf=debug,kopf_runtime=debug";

/// The signal an operator run by [`KopfRunner`] stops on: a future that
/// completes when [`KopfRunner::stop`] is called (or the runner is dropped).
pub struct Stop(Pin<Box<WaitForCancellationFutureOwned>>);

impl Future for Stop {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl std::fmt::Debug for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stop").finish_non_exhaustive()
    }
}

/// Why a wait of the runner, or the runner itself, failed. Each variant
/// carries the output captured so far, to show in the test's failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunnerError {
    /// The emulator did not start.
    #[error(transparent)]
    Emulator(#[from] EmulatorError),
    /// A wait ran out of time.
    #[error("timed out after {timeout:?} waiting for {what}; the output so far:\n{output}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long it was awaited.
        timeout: Duration,
        /// The output captured so far.
        output: String,
    },
    /// The operator returned while a wait expected it to run (e.g. it
    /// failed at start-up): stop the runner to see its result.
    #[error("the operator exited while waiting for {what}; the output:\n{output}")]
    Exited {
        /// What was awaited.
        what: String,
        /// The output captured.
        output: String,
    },
    /// The operator panicked.
    #[error("the operator panicked: {message}; the output:\n{output}")]
    Panicked {
        /// The panic's message.
        message: String,
        /// The output captured.
        output: String,
    },
}

/// How an operator run by [`KopfRunner`] ended (Kopf's `exit_code`,
/// `exception` and `output`).
#[derive(Debug)]
#[non_exhaustive]
pub struct Finished<E> {
    /// What the operator's future returned.
    pub result: Result<(), E>,
    /// Every line it logged, as text.
    pub output: String,
}

/// Options of a [`KopfRunner`]: the emulator, the timeout of its waits and
/// what it captures of the logs.
#[must_use]
#[derive(Debug)]
pub struct KopfRunnerBuilder {
    emulator: EmulatorBuilder,
    timeout: Duration,
    log_filter: String,
}

impl KopfRunnerBuilder {
    /// Starts this emulator (with its CRDs, preloaded objects, …) instead
    /// of a bare one.
    pub fn emulator(mut self, emulator: EmulatorBuilder) -> Self {
        self.emulator = emulator;
        self
    }

    /// How long each wait, and stopping, may take ([`DEFAULT_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Which log lines to capture, as an `EnvFilter` directive
    /// ([`DEFAULT_LOG_FILTER`]); an invalid one captures `INFO` and above.
    pub fn log_filter(mut self, filter: impl Into<String>) -> Self {
        self.log_filter = filter.into();
        self
    }

    /// Starts the emulator, then the operator that `operator` returns,
    /// given a client of the emulator and the signal to stop on.
    ///
    /// # Errors
    /// [`RunnerError::Emulator`] when the emulator does not start.
    pub async fn start<F, Fut, E>(self, operator: F) -> Result<KopfRunner<E>, RunnerError>
    where
        F: FnOnce(kube::Client, Stop) -> Fut,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Send + 'static,
    {
        let logs = Output::default();
        let writer = logs.clone();
        let filter = tracing_subscriber::EnvFilter::try_new(&self.log_filter)
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let dispatch = tracing::Dispatch::new(subscriber);
        let guard = tracing::dispatcher::set_default(&dispatch);

        let emulator = self.emulator.start().await?;
        let stop = CancellationToken::new();
        let signal = Stop(Box::pin(stop.clone().cancelled_owned()));
        let future = operator(emulator.client(), signal);
        let task = tokio::spawn(future.with_subscriber(dispatch));
        Ok(KopfRunner {
            emulator: Some(emulator),
            stop,
            task: Some(task),
            logs,
            timeout: self.timeout,
            _guard: guard,
        })
    }
}

/// An operator running in-process against a fresh emulator; see the
/// [module docs](self).
pub struct KopfRunner<E> {
    emulator: Option<Emulator>,
    stop: CancellationToken,
    task: Option<JoinHandle<Result<(), E>>>,
    logs: Output,
    timeout: Duration,
    _guard: tracing::dispatcher::DefaultGuard,
}

impl<E> std::fmt::Debug for KopfRunner<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KopfRunner")
            .field("emulator", &self.emulator.as_ref().map(Emulator::url))
            .field("running", &self.is_running())
            .finish_non_exhaustive()
    }
}

impl KopfRunner<()> {
    /// A runner with a bare emulator, the default timeout and log filter.
    pub fn builder() -> KopfRunnerBuilder {
        KopfRunnerBuilder {
            emulator: Emulator::builder(),
            timeout: DEFAULT_TIMEOUT,
            log_filter: DEFAULT_LOG_FILTER.to_owned(),
        }
    }
}

impl<E> KopfRunner<E> {
    /// The emulator the operator runs against (its requests, its faults).
    pub fn emulator(&self) -> &Emulator {
        self.emulator
            .as_ref()
            .expect("invariant: the emulator lives as long as the runner")
    }

    /// A client of the emulator, to create, change and read objects.
    pub fn client(&self) -> kube::Client {
        self.emulator().client()
    }

    /// Everything the operator logged so far, as text.
    pub fn output(&self) -> String {
        self.logs.text()
    }

    /// Whether the operator is still running.
    pub fn is_running(&self) -> bool {
        self.task.as_ref().is_some_and(|task| !task.is_finished())
    }

    /// Waits until the output contains `text`.
    ///
    /// # Errors
    /// [`RunnerError::Timeout`] after the runner's timeout,
    /// [`RunnerError::Exited`] if the operator returns first.
    pub async fn wait_for_output(&self, text: &str) -> Result<(), RunnerError> {
        self.wait_until(&format!("{text:?} in the output"), || async {
            self.output().contains(text).then_some(())
        })
        .await
    }

    /// Polls `check` until it returns `Some`, e.g. until an object has the
    /// status a handler sets; returns what it returned.
    ///
    /// # Errors
    /// [`RunnerError::Timeout`] after the runner's timeout,
    /// [`RunnerError::Exited`] if the operator returns first.
    pub async fn wait_until<T, F, Fut>(&self, what: &str, mut check: F) -> Result<T, RunnerError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            if let Some(value) = check().await {
                return Ok(value);
            }
            if !self.is_running() {
                return Err(RunnerError::Exited {
                    what: what.to_owned(),
                    output: self.output(),
                });
            }
            if tokio::time::Instant::now() > deadline {
                return Err(RunnerError::Timeout {
                    what: what.to_owned(),
                    timeout: self.timeout,
                    output: self.output(),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the operator, waits until it has returned, and shuts the
    /// emulator down.
    ///
    /// # Errors
    /// [`RunnerError::Timeout`] if the operator does not return within the
    /// runner's timeout, [`RunnerError::Panicked`] if it panicked.
    pub async fn stop(mut self) -> Result<Finished<E>, RunnerError> {
        self.stop.cancel();
        let task = self
            .task
            .take()
            .expect("invariant: the task is taken only here, once");
        let joined = tokio::time::timeout(self.timeout, task).await;
        if let Some(emulator) = self.emulator.take() {
            emulator.shutdown().await;
        }
        let output = self.output();
        match joined {
            Ok(Ok(result)) => Ok(Finished { result, output }),
            Ok(Err(error)) => Err(RunnerError::Panicked {
                message: error.to_string(),
                output,
            }),
            Err(_) => Err(RunnerError::Timeout {
                what: "the operator to stop".to_owned(),
                timeout: self.timeout,
                output,
            }),
        }
    }
}

impl<E> Drop for KopfRunner<E> {
    fn drop(&mut self) {
        // A test that fails before `stop` leaves nothing running.
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The captured log lines, shared with the subscriber's writer.
#[derive(Clone, Default)]
struct Output(Arc<Mutex<Vec<u8>>>);

impl Output {
    fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl std::io::Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_operator_that_fails_at_start_ends_the_wait_with_its_output() {
        let runner = KopfRunner::builder()
            .start(|_client, _stop| async {
                tracing::error!("cannot start");
                Err::<(), _>("no")
            })
            .await
            .expect("the emulator starts");
        let error = runner
            .wait_for_output("never logged")
            .await
            .expect_err("the operator exited");
        assert!(
            matches!(&error, RunnerError::Exited { output, .. } if output.contains("cannot start")),
            "{error}"
        );
        let finished = runner.stop().await.expect("it has stopped");
        assert_eq!(finished.result, Err("no"));
    }

    #[tokio::test]
    async fn stop_ends_the_operator_and_returns_its_output() {
        let runner = KopfRunner::builder()
            .start(|client, stop| async move {
                let _ = client;
                tracing::info!("up");
                stop.await;
                tracing::info!("down");
                Ok::<_, String>(())
            })
            .await
            .expect("the emulator starts");
        runner.wait_for_output("up").await.expect("it logs");
        assert!(runner.is_running());
        let finished = runner.stop().await.expect("it stops");
        assert_eq!(finished.result, Ok(()));
        assert!(finished.output.contains("down"), "{}", finished.output);
    }

    #[tokio::test]
    async fn a_wait_times_out_with_the_output_so_far() {
        let runner = KopfRunner::builder()
            .timeout(Duration::from_millis(200))
            .start(|_client, stop| async move {
                tracing::info!("waiting");
                stop.await;
                Ok::<_, String>(())
            })
            .await
            .expect("the emulator starts");
        runner.wait_for_output("waiting").await.expect("it logs");
        let error = runner
            .wait_for_output("never")
            .await
            .expect_err("times out");
        assert!(
            matches!(&error, RunnerError::Timeout { output, .. } if output.contains("waiting")),
            "{error}"
        );
    }
}
