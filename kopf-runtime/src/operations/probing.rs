//! The liveness and readiness reports: `on_probe` handlers, run at most once
//! per [`PROBE_PERIOD`] however often they are asked for, and the watches'
//! [`Health`].
//!
//! # Guarantees
//! - The probe handlers run together, each once per run, under its own
//!   `timeout` (else [`PROBE_TIMEOUT`]) and without retries, as in Kopf;
//!   not before the operator has its client (after the login handlers):
//!   until then, liveness answers without their results.
//! - Between runs, the last results are served; requests that come while
//!   a run is under way wait for it and share its results.
//! - Liveness fails (500) when a probe handler fails or a served resource's
//!   watch has gone silent, naming each; readiness fails (503) until the
//!   operator has started and every resource it serves now has finished
//!   its first listing, naming what it waits for (see `health`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::time::Instant;

use crate::model::handlers::Handler;
use crate::model::kwargs::{Attempt, Indexes, Kwargs, Logger, Memo};
use crate::operations::health::Health;
use crate::processing::execution;

/// How long the results of the probe handlers are served before they run
/// again (Kopf's period).
pub(crate) const PROBE_PERIOD: Duration = Duration::from_secs(10);

/// The time limit of a probe handler without a `timeout` of its own.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The results of one run of the probe handlers.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ProbeResults {
    /// What each handler that succeeded returned (`null` for nothing).
    pub(crate) results: Map<String, Value>,
    /// Why each handler that failed failed.
    pub(crate) failures: BTreeMap<String, String>,
}

/// The `on_probe` handlers and their last results.
pub(crate) struct Probes {
    handlers: Vec<Handler>,
    /// The operator's client, once it has one (after the login handlers).
    client: OnceLock<kube::Client>,
    memo: Memo,
    /// The operator's indexes, which probe handlers may take by id.
    indexes: Indexes,
    last: Mutex<Option<(Instant, Arc<ProbeResults>)>>,
    /// Held by the one run under way.
    running: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Probes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probes")
            .field("handlers", &self.handlers.len())
            .finish_non_exhaustive()
    }
}

impl Probes {
    /// The probe handlers of an operator, calling with `memo` and
    /// `indexes`; they run once [`connect`](Self::connect) gives them the
    /// operator's client.
    pub(crate) fn new(handlers: Vec<Handler>, memo: Memo, indexes: Indexes) -> Self {
        Self {
            handlers,
            client: OnceLock::new(),
            memo,
            indexes,
            last: Mutex::new(None),
            running: tokio::sync::Mutex::new(()),
        }
    }

    fn fresh(&self) -> Option<Arc<ProbeResults>> {
        let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let (at, results) = last.as_ref()?;
        (at.elapsed() < PROBE_PERIOD).then(|| Arc::clone(results))
    }

    /// The operator has its client: the handlers may run.
    pub(crate) fn connect(&self, client: kube::Client) {
        let _ = self.client.set(client);
    }

    /// The results of the last run, if younger than [`PROBE_PERIOD`];
    /// otherwise of a new run (or of the one under way). None while the
    /// operator has no client yet: the handlers do not run then.
    pub(crate) async fn results(&self) -> Arc<ProbeResults> {
        let Some(client) = self.client.get() else {
            return Arc::default();
        };
        if let Some(results) = self.fresh() {
            return results;
        }
        let _running = self.running.lock().await;
        if let Some(results) = self.fresh() {
            return results;
        }
        let results = Arc::new(self.run(client).await);
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((Instant::now(), Arc::clone(&results)));
        results
    }

    async fn run(&self, client: &kube::Client) -> ProbeResults {
        let calls = self.handlers.iter().map(|handler| {
            let logger = Logger::new(handler.id().to_owned());
            let kwargs = Kwargs::of_operator(self.memo.clone(), logger)
                .with_cluster(Some(client.clone()), self.indexes.clone())
                .with_attempt(Attempt {
                    retry: 0,
                    started: jiff::Timestamp::now(),
                    runtime: Duration::ZERO,
                });
            let limit = handler.options().timeout.unwrap_or(PROBE_TIMEOUT);
            let call = execution::invoke(handler, kwargs, Some(limit));
            async move { (handler.id(), call.await) }
        });
        let mut out = ProbeResults::default();
        for (id, outcome) in futures::future::join_all(calls).await {
            match outcome {
                Ok(result) => {
                    out.results
                        .insert(id.to_owned(), result.unwrap_or(Value::Null));
                }
                Err(error) => {
                    tracing::warn!(handler = %id, %error, "a probe handler failed");
                    out.failures.insert(id.to_owned(), error.to_string());
                }
            }
        }
        out
    }
}

/// The answer to a liveness probe: 200 with `{handler id: result}`, or 500
/// with `{"failed": {handler id: error}, "silent": {watch: why},
/// "results": {…}}`.
pub(crate) async fn liveness(probes: Option<&Probes>, health: &Health) -> (u16, Value) {
    let results = match probes {
        Some(probes) => probes.results().await,
        None => Arc::default(),
    };
    let silent: Map<String, Value> = health
        .silent()
        .into_iter()
        .map(|(scope, why)| (scope, Value::String(why)))
        .collect();
    if results.failures.is_empty() && silent.is_empty() {
        return (200, Value::Object(results.results.clone()));
    }
    let failed: Map<String, Value> = results
        .failures
        .iter()
        .map(|(id, error)| (id.clone(), Value::String(error.clone())))
        .collect();
    (
        500,
        json!({"failed": failed, "silent": silent, "results": results.results}),
    )
}

/// The answer to a readiness probe: 200 with `{"ready": true}`, or 503
/// with `{"ready": false, "waiting": {resource: why}}`.
pub(crate) fn readiness(health: &Health) -> (u16, Value) {
    let waiting: Map<String, Value> = health
        .not_ready()
        .into_iter()
        .map(|(resource, why)| (resource, Value::from(why.as_str())))
        .collect();
    if waiting.is_empty() {
        (200, json!({"ready": true}))
    } else {
        (503, json!({"ready": false, "waiting": waiting}))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::mock_api::{self, Reply};
    use crate::model::errors::Error;

    fn counting(runs: &Arc<AtomicUsize>) -> Handler {
        let runs = Arc::clone(runs);
        Handler::on_probe("count", move |_: Kwargs| {
            let runs = Arc::clone(&runs);
            async move {
                let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                Ok::<_, Error>(json!(n))
            }
        })
    }

    fn client() -> kube::Client {
        mock_api::client(|_| Reply::Json(404, json!({}))).0
    }

    #[tokio::test(start_paused = true)]
    async fn results_are_served_for_ten_seconds_and_concurrent_asks_share_one_run() {
        let runs = Arc::new(AtomicUsize::new(0));
        let probes = Probes::new(vec![counting(&runs)], Memo::default(), Indexes::default());
        assert_eq!(
            *probes.results().await,
            ProbeResults::default(),
            "nothing runs without a client"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        probes.connect(client());
        let asks = (0..5).map(|_| probes.results());
        for results in futures::future::join_all(asks).await {
            assert_eq!(results.results["count"], 1);
        }
        tokio::time::advance(PROBE_PERIOD - Duration::from_millis(1)).await;
        assert_eq!(probes.results().await.results["count"], 1);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(probes.results().await.results["count"], 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_or_slow_probe_is_named_and_the_others_still_report() {
        let failing = Handler::on_probe("broken", |_: Kwargs| async {
            Err::<(), _>(Error::temporary("no luck", Duration::from_secs(1)))
        });
        let slow = Handler::on_probe("slow", |_: Kwargs| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
        })
        .timeout(Duration::from_secs(2));
        let runs = Arc::new(AtomicUsize::new(0));
        let probes = Probes::new(
            vec![failing, slow, counting(&runs)],
            Memo::default(),
            Indexes::default(),
        );
        probes.connect(client());
        let health = Health::default();
        let (status, body) = liveness(Some(&probes), &health).await;
        assert_eq!(status, 500);
        assert_eq!(body["results"], json!({"count": 1}));
        assert_eq!(body["failed"]["broken"], "temporary error: no luck");
        let slow = body["failed"]["slow"]
            .as_str()
            .expect("the slow one failed");
        assert!(slow.ends_with("timed out after 2s"), "{slow}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "no retries");
    }
}
