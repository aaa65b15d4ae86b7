//! Helpers shared by the workspace integration tests: an operator running
//! against a fresh emulator, waiting for conditions, and recording calls.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kopf_runtime::settings::OperatorSettings;
use kopf_runtime::spawning::{Counters, CountersSnapshot};
use kopf_runtime::{Operator, OperatorError, Registry};
use kopf_testing::Emulator;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long any condition in these tests may take before the test fails.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// An operator running in the background against an emulator.
pub struct Running {
    stop: CancellationToken,
    task: JoinHandle<Result<(), OperatorError>>,
    counters: Arc<Counters>,
}

impl Running {
    /// Starts `registry` against the emulator with test-friendly settings.
    pub fn start(emulator: &Emulator, registry: Registry) -> Self {
        Self::start_with(emulator, registry, test_settings())
    }

    /// Starts `registry` against the emulator with `settings`.
    pub fn start_with(emulator: &Emulator, registry: Registry, settings: OperatorSettings) -> Self {
        let stop = CancellationToken::new();
        let operator = Operator::new(registry)
            .client(emulator.client())
            .settings(settings);
        let counters = operator.task_counters();
        let task = tokio::spawn(operator.run_until(stop.clone().cancelled_owned()));
        Self {
            stop,
            task,
            counters,
        }
    }

    /// The live counters of the operator's daemons and timers (still readable
    /// after [`Running::stop`]).
    pub fn counters(&self) -> Arc<Counters> {
        Arc::clone(&self.counters)
    }

    /// The counters of the operator's daemons and timers, now.
    pub fn task_counters(&self) -> CountersSnapshot {
        self.counters.snapshot()
    }

    /// Stops the operator and waits until it has exited.
    pub async fn stop(self) {
        self.stop.cancel();
        match tokio::time::timeout(PATIENCE, self.task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => panic!("the operator failed: {error}"),
            Ok(Err(error)) => panic!("the operator task panicked: {error}"),
            Err(_) => panic!("the operator did not stop within {PATIENCE:?}"),
        }
    }
}

/// Settings for tests: no Kubernetes Events unless a test wants them, short exits.
pub fn test_settings() -> OperatorSettings {
    let mut settings = OperatorSettings::default();
    settings.queueing.exit_timeout = Duration::from_secs(2);
    settings
}

/// Polls `check` until it returns `Some`, failing the test after [`PATIENCE`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {PATIENCE:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Records handler calls: a name and the interesting part of the kwargs.
#[derive(Clone, Default)]
pub struct Calls(Arc<Mutex<Vec<(String, Value)>>>);

impl Calls {
    /// Records one call.
    pub fn push(&self, name: &str, detail: Value) {
        self.0
            .lock()
            .expect("calls lock")
            .push((name.to_owned(), detail));
    }

    /// All calls so far.
    pub fn all(&self) -> Vec<(String, Value)> {
        self.0.lock().expect("calls lock").clone()
    }

    /// The calls named `name`.
    pub fn named(&self, name: &str) -> Vec<Value> {
        self.all()
            .into_iter()
            .filter(|(n, _)| n == name)
            .map(|(_, d)| d)
            .collect()
    }

    /// Waits until there are at least `n` calls named `name`; returns them.
    pub async fn wait_for(&self, name: &str, n: usize) -> Vec<Value> {
        eventually(&format!("{n} call(s) of {name}"), || {
            let calls = self.named(name);
            async move { (calls.len() >= n).then_some(calls) }
        })
        .await
    }
}

/// Everything logged at `WARN` or above in this test process, as text.
///
/// The first call installs a global `tracing` subscriber recording warnings
/// (tests in one binary share it: look for what is unique to your test).
pub fn captured_warnings() -> String {
    let buffer = warnings_buffer();
    let bytes = buffer.lock().expect("log lock").clone();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Starts capturing warnings (see [`captured_warnings`]).
pub fn capture_warnings() {
    warnings_buffer();
}

fn warnings_buffer() -> Arc<Mutex<Vec<u8>>> {
    static BUFFER: std::sync::OnceLock<Arc<Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    Arc::clone(BUFFER.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = CaptureWriter(Arc::clone(&buffer));
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        // Another subscriber may be installed already; then nothing is captured.
        let _ = tracing::subscriber::set_global_default(subscriber);
        buffer
    }))
}

#[derive(Clone)]
struct CaptureWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for CaptureWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log lock").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
