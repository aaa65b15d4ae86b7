//! The operator's Prometheus metrics, served by `--metrics` in the
//! OpenMetrics text format through `prometheus-client`.
//!
//! Each [`Operator`](crate::Operator) owns its registry (there is no global
//! one), so two operators in one process never mix their figures. Labels
//! name resources, handlers, outcomes, event types, reasons, verbs and
//! codes, never objects: the number of series does not grow with the
//! number of objects.
//!
//! What moves on every event or call is resolved once: a handler's
//! counters, histogram and gauge ([`HandlerMetrics`]), a resource's watch
//! counters ([`WatchMetrics`]) and queue histogram are looked up when the
//! resource starts being served, so the hot path costs atomic increments
//! and one uncontended lock per observation, with no hashing of label
//! sets. What can be read from the engine's own state (objects tracked,
//! queue depth, the last event's time, daemons and timers running, task
//! exits) is read at scrape time instead.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::time::Instant;

use crate::model::errors::{HandlerError, Outcome};
use crate::model::resources::Discovered;

/// Upper bounds of the buckets of handler durations, in seconds.
const HANDLER_BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Upper bounds of the buckets of queue and API latencies, in seconds.
const LATENCY_BUCKETS: [f64; 11] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
];

/// The label of a resource in every family: `v1/configmaps`,
/// `kopf.dev/v1/kopfexamples`.
pub(crate) fn resource_label(resource: &Discovered) -> String {
    format!("{}/{}", resource.api_version(), resource.plural)
}

/// What became of a handler: one call's outcome, or the runtime giving up
/// on it between calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandlerOutcome {
    /// The call succeeded.
    Success,
    /// The call failed and will be retried.
    Temporary,
    /// The call failed for good.
    Permanent,
    /// The call ran out of its time, or the handler's `timeout` passed.
    Timeout,
    /// The handler's `retries` are used up (or its `timeout` would pass
    /// before the next attempt): the runtime gives up.
    RetriesExhausted,
    /// The call failed and `errors = ignored` counts it as done.
    Ignored,
}

impl HandlerOutcome {
    const ALL: [Self; 6] = [
        Self::Success,
        Self::Temporary,
        Self::Permanent,
        Self::Timeout,
        Self::RetriesExhausted,
        Self::Ignored,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Temporary => "temporary",
            Self::Permanent => "permanent",
            Self::Timeout => "timeout",
            Self::RetriesExhausted => "retries_exhausted",
            Self::Ignored => "ignored",
        }
    }

    /// A call's outcome; other errors count as `regular`, what the
    /// handler's `errors` mode makes of them.
    pub(crate) fn of(outcome: &Outcome, regular: Self) -> Self {
        match outcome {
            Ok(_) => Self::Success,
            Err(HandlerError::Temporary { .. }) => Self::Temporary,
            Err(HandlerError::Permanent { .. }) => Self::Permanent,
            Err(_) => regular,
        }
    }
}

/// A watch event's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchEventType {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Error,
}

impl WatchEventType {
    const ALL: [Self; 5] = [
        Self::Added,
        Self::Modified,
        Self::Deleted,
        Self::Bookmark,
        Self::Error,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
            Self::Bookmark => "BOOKMARK",
            Self::Error => "ERROR",
        }
    }
}

/// Why a list-then-watch loop started another request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RestartReason {
    /// The stream stayed silent for `inactivity_timeout`, or ran out of
    /// its `client_timeout`.
    Timeout,
    /// The server ended the stream (its own timeout, a proxy, a cut).
    Closed,
    /// `410 Gone`: the version expired, the resource is listed again.
    Expired,
    /// `429 Too Many Requests`.
    Throttled,
    /// Any other failure of a list or watch request.
    Error,
}

impl RestartReason {
    const ALL: [Self; 5] = [
        Self::Timeout,
        Self::Closed,
        Self::Expired,
        Self::Throttled,
        Self::Error,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Closed => "closed",
            Self::Expired => "expired",
            Self::Throttled => "throttled",
            Self::Error => "error",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandlerLabels {
    resource: String,
    handler: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    resource: String,
    handler: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    resource: String,
    r#type: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RestartLabels {
    resource: String,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FencedLabels {
    what: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdmissionLabels {
    webhook: String,
    result: &'static str,
}

/// How an admission request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AdmissionResult {
    /// Reviewed and allowed.
    Allowed,
    /// Reviewed and denied by a handler.
    Denied,
    /// Not reviewed: a malformed request, an unknown resource.
    Error,
}

impl AdmissionResult {
    fn as_str(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Denied => "denied",
            Self::Error => "error",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbLabels {
    verb: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: &'static str,
    code: Code,
}

/// An API answer's status code, or `error` for none (a transport failure
/// or a timeout).
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
enum Code {
    Status(u16),
    NoAnswer,
}

impl EncodeLabelValue for Code {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        match self {
            Self::Status(code) => EncodeLabelValue::encode(code, encoder),
            Self::NoAnswer => EncodeLabelValue::encode(&"error", encoder),
        }
    }
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn handler_histogram() -> Histogram {
    Histogram::new(HANDLER_BUCKETS)
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The metrics of one operator; see the [module docs](self).
pub(crate) struct Metrics {
    registry: Registry,
    invocations: Family<OutcomeLabels, Counter>,
    durations: HistogramFamily<HandlerLabels>,
    in_flight: Family<HandlerLabels, Gauge>,
    queue_latency: HistogramFamily<ResourceLabels>,
    watch_events: Family<EventLabels, Counter>,
    watch_restarts: Family<RestartLabels, Counter>,
    admission: Family<AdmissionLabels, Counter>,
    fenced: Family<FencedLabels, Counter>,
    api: ApiMetricsLayer,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// The families of one operator, with `scraped`, what is read from the
    /// engine's state at scrape time ([`scraping`](crate::operations::scraping)); `api`
    /// counts the kube client's requests.
    pub(crate) fn new(scraped: impl Collector, api: ApiMetricsLayer) -> Self {
        let mut registry = Registry::default();
        let invocations = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "kopf_handler_invocations",
            "Handler calls by outcome; timeout and retries_exhausted also count the runtime giving up on a handler between calls",
            invocations.clone(),
        );
        let durations: HistogramFamily<HandlerLabels> =
            Family::new_with_constructor(handler_histogram);
        registry.register(
            "kopf_handler_duration_seconds",
            "How long handler calls took",
            durations.clone(),
        );
        let in_flight = Family::<HandlerLabels, Gauge>::default();
        registry.register(
            "kopf_handlers_in_flight",
            "Handler calls running now",
            in_flight.clone(),
        );
        let queue_latency: HistogramFamily<ResourceLabels> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "kopf_queue_latency_seconds",
            "How long an event waited in its object's queue before its processing started",
            queue_latency.clone(),
        );
        let watch_events = Family::<EventLabels, Counter>::default();
        registry.register(
            "kopf_watch_events",
            "Watch events received, by type",
            watch_events.clone(),
        );
        let watch_restarts = Family::<RestartLabels, Counter>::default();
        registry.register(
            "kopf_watch_restarts",
            "List and watch requests started again, by reason",
            watch_restarts.clone(),
        );
        let admission = Family::<AdmissionLabels, Counter>::default();
        registry.register(
            "kopf_admission_requests",
            "Admission requests by webhook id (empty: none in the path) and result: allowed, denied, or error (no review)",
            admission.clone(),
        );
        let fenced = Family::<FencedLabels, Counter>::default();
        registry.register(
            "kopf_fenced",
            "Work held back because this replica's Lease had lapsed on its own clock, by what: event, timer, daemon, write",
            fenced.clone(),
        );
        registry.register(
            "kopf_api_requests",
            "Requests to the Kubernetes API by verb and status code (error: no answer), as answered after the client's own retries",
            api.requests.clone(),
        );
        registry.register(
            "kopf_api_request_duration_seconds",
            "How long the Kubernetes API took to answer, until the response headers",
            api.latency.clone(),
        );
        registry.register_collector(Box::new(scraped));
        Self {
            registry,
            invocations,
            durations,
            in_flight,
            queue_latency,
            watch_events,
            watch_restarts,
            admission,
            fenced,
            api,
        }
    }

    /// The `kopf_fenced_total` counters of `whats`, resolved (and scraped
    /// at zero) now.
    pub(crate) fn fenced<const N: usize>(&self, whats: [&'static str; N]) -> [Counter; N] {
        whats.map(|what| self.fenced.get_or_create_owned(&FencedLabels { what }))
    }

    /// Resolves the admission series of the webhook `ids`, so that they
    /// are scraped (at zero) before the first request.
    pub(crate) fn admission_webhooks<'a>(&self, ids: impl IntoIterator<Item = &'a str>) {
        for webhook in ids {
            for result in [
                AdmissionResult::Allowed,
                AdmissionResult::Denied,
                AdmissionResult::Error,
            ] {
                drop(self.admission.get_or_create(&AdmissionLabels {
                    webhook: webhook.to_owned(),
                    result: result.as_str(),
                }));
            }
        }
    }

    /// Counts an admission request to `webhook` (empty for none).
    #[cfg(feature = "webhooks")]
    pub(crate) fn admission(&self, webhook: &str, result: AdmissionResult) {
        self.admission
            .get_or_create(&AdmissionLabels {
                webhook: webhook.to_owned(),
                result: result.as_str(),
            })
            .inc();
    }

    /// The metrics of the handler `id` of `resource` (empty for none).
    pub(crate) fn handler(&self, id: &str, resource: &str) -> Arc<HandlerMetrics> {
        let labels = HandlerLabels {
            resource: resource.to_owned(),
            handler: id.to_owned(),
        };
        let outcomes = HandlerOutcome::ALL.map(|outcome| {
            self.invocations.get_or_create_owned(&OutcomeLabels {
                resource: labels.resource.clone(),
                handler: labels.handler.clone(),
                outcome: outcome.as_str(),
            })
        });
        Arc::new(HandlerMetrics {
            outcomes,
            duration: self.durations.get_or_create_owned(&labels),
            in_flight: self.in_flight.get_or_create_owned(&labels),
        })
    }

    /// The watch counters of a resource.
    pub(crate) fn watch(&self, resource: &str) -> WatchMetrics {
        WatchMetrics {
            events: WatchEventType::ALL.map(|kind| {
                self.watch_events.get_or_create_owned(&EventLabels {
                    resource: resource.to_owned(),
                    r#type: kind.as_str(),
                })
            }),
            restarts: RestartReason::ALL.map(|reason| {
                self.watch_restarts.get_or_create_owned(&RestartLabels {
                    resource: resource.to_owned(),
                    reason: reason.as_str(),
                })
            }),
        }
    }

    /// The queue latency histogram of a resource.
    pub(crate) fn queue_latency(&self, resource: &str) -> Histogram {
        self.queue_latency.get_or_create_owned(&ResourceLabels {
            resource: resource.to_owned(),
        })
    }

    /// The layer counting a kube client's requests in these metrics.
    pub(crate) fn api_layer(&self) -> &ApiMetricsLayer {
        &self.api
    }

    /// Every family, in the OpenMetrics text format.
    pub(crate) fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String fails only if a collector fails, and ours
        // do not.
        if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::warn!(%error, "the metrics could not be encoded");
        }
        text
    }
}

/// A client of the kube API whose requests are counted in `metrics`.
///
/// The client is put behind another one: each request takes one more
/// hop through a channel than with a client built with the layer
/// ([`ApiMetricsLayer`] with `kube::client::ClientBuilder::with_layer`).
pub(crate) fn instrument(client: kube::Client, metrics: &Metrics) -> kube::Client {
    use tower::Layer as _;
    let namespace = client.default_namespace().to_owned();
    kube::Client::new(metrics.api.layer(ClientService(client)), namespace)
}

/// The client kube infers from the environment (the kubeconfig, or the
/// pod's service account), with the layer counting its requests inside,
/// if given.
pub(crate) async fn infer_client(
    counting: Option<&ApiMetricsLayer>,
) -> Result<kube::Client, kube::Error> {
    let Some(layer) = counting else {
        return kube::Client::try_default().await;
    };
    let config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(layer)
        .build())
}

/// The counters, histogram and gauge of one handler, resolved once.
#[derive(Debug)]
pub(crate) struct HandlerMetrics {
    outcomes: [Counter; HandlerOutcome::ALL.len()],
    duration: Histogram,
    in_flight: Gauge,
}

impl HandlerMetrics {
    /// Counts an outcome.
    pub(crate) fn count(&self, outcome: HandlerOutcome) {
        let index = HandlerOutcome::ALL
            .iter()
            .position(|o| *o == outcome)
            .unwrap_or_default();
        self.outcomes[index].inc();
    }

    /// A call starts: it is in flight until the guard is finished or dropped.
    pub(crate) fn start(self: Arc<Self>) -> InFlight {
        self.in_flight.inc();
        InFlight {
            metrics: self,
            started: Instant::now(),
        }
    }
}

/// A handler call in flight (see [`HandlerMetrics::start`]).
#[derive(Debug)]
pub(crate) struct InFlight {
    metrics: Arc<HandlerMetrics>,
    started: Instant,
}

impl InFlight {
    /// The call ended with `outcome`: counted, and its duration observed.
    pub(crate) fn finish(self, outcome: HandlerOutcome) {
        self.metrics.count(outcome);
        self.metrics
            .duration
            .observe(self.started.elapsed().as_secs_f64());
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.metrics.in_flight.dec();
    }
}

/// The watch counters of one resource, resolved once.
#[derive(Debug, Clone)]
pub(crate) struct WatchMetrics {
    events: [Counter; WatchEventType::ALL.len()],
    restarts: [Counter; RestartReason::ALL.len()],
}

impl WatchMetrics {
    /// Counts a watch event.
    pub(crate) fn event(&self, kind: WatchEventType) {
        self.events[kind as usize].inc();
    }

    /// Counts a restart of the list-then-watch loop.
    pub(crate) fn restart(&self, reason: RestartReason) {
        self.restarts[reason as usize].inc();
    }
}

/// A tower layer counting API requests by verb and code, with their
/// latency; its families are registered with the operator's [`Metrics`].
#[derive(Clone)]
pub(crate) struct ApiMetricsLayer {
    requests: Family<RequestLabels, Counter>,
    latency: HistogramFamily<VerbLabels>,
}

impl Default for ApiMetricsLayer {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
        }
    }
}

impl std::fmt::Debug for ApiMetricsLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiMetricsLayer").finish_non_exhaustive()
    }
}

impl<S> tower::Layer<S> for ApiMetricsLayer {
    type Service = ApiMetricsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ApiMetricsService {
            inner,
            layer: self.clone(),
        }
    }
}

/// See [`ApiMetricsLayer`].
#[derive(Clone)]
pub(crate) struct ApiMetricsService<S> {
    inner: S,
    layer: ApiMetricsLayer,
}

impl<S, B, R> tower::Service<http::Request<B>> for ApiMetricsService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let verb = verb(&request);
        let started = Instant::now();
        let answer = self.inner.call(request);
        let layer = self.layer.clone();
        Box::pin(async move {
            let answer = answer.await;
            let code = match &answer {
                Ok(response) => Code::Status(response.status().as_u16()),
                Err(_) => Code::NoAnswer,
            };
            layer
                .latency
                .get_or_create(&VerbLabels { verb })
                .observe(started.elapsed().as_secs_f64());
            layer
                .requests
                .get_or_create(&RequestLabels { verb, code })
                .inc();
            answer
        })
    }
}

/// The Kubernetes verb of a request: from the name kube gives its requests,
/// else from the method.
fn verb<B>(request: &http::Request<B>) -> &'static str {
    let named = request.extensions().get::<&'static str>().copied();
    let by_name = named.and_then(|name| {
        [
            ("watch", "watch"),
            ("list", "list"),
            ("get", "get"),
            ("create", "create"),
            ("replace", "update"),
            ("patch", "patch"),
            ("delete_collection", "deletecollection"),
            ("delete", "delete"),
        ]
        .into_iter()
        .find(|(prefix, _)| name.starts_with(prefix))
        .map(|(_, verb)| verb)
    });
    by_name.unwrap_or_else(|| {
        let query = request.uri().query().unwrap_or_default();
        match *request.method() {
            http::Method::GET if query.contains("watch=true") || query.contains("watch=1") => {
                "watch"
            }
            http::Method::GET => "get",
            http::Method::POST => "create",
            http::Method::PUT => "update",
            http::Method::PATCH => "patch",
            http::Method::DELETE => "delete",
            _ => "other",
        }
    })
}

/// A kube client as a tower service, to put layers around it.
#[derive(Clone)]
struct ClientService(kube::Client);

impl tower::Service<http::Request<kube::client::Body>> for ClientService {
    type Response = http::Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, kube::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let client = self.0.clone();
        Box::pin(async move { client.send(request).await })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::errors::Error;
    use crate::model::handlers::Handler;
    use crate::model::kwargs::Kwargs;
    use crate::model::resources::ResourceRef;
    use crate::operations::health::Health;
    use crate::operations::scraping::ScrapeTime;
    use crate::spawning::TaskCounters;

    fn metrics() -> Metrics {
        Metrics::new(
            ScrapeTime::new(Arc::new(Health::default()), TaskCounters::default()),
            ApiMetricsLayer::default(),
        )
    }

    /// The value of the line of `text` that starts with `series `.
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_is_counted_once_by_outcome_with_its_duration_and_in_flight_meanwhile() {
        let metrics = metrics();
        let resource = ResourceRef::dynamic("", "v1", "configmaps");
        let mut slow = Handler::on_create(resource.clone(), "slow", |_: Kwargs| async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            Err::<(), _>(Error::regular("no luck"))
        });
        slow.metrics = Some(metrics.handler(slow.id(), "v1/configmaps"));
        let call =
            crate::processing::execution::invoke(&slow, Kwargs::new(serde_json::json!({})), None);
        let call = tokio::spawn(call);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let labels = r#"{resource="v1/configmaps",handler="slow"}"#;
        let text = metrics.encode();
        assert_eq!(
            sample(&text, &format!("kopf_handlers_in_flight{labels}")),
            Some(1.0)
        );
        assert!(call.await.expect("no panic").is_err());

        let text = metrics.encode();
        assert_eq!(
            sample(&text, &format!("kopf_handlers_in_flight{labels}")),
            Some(0.0)
        );
        let outcome = |outcome: &str| {
            let series = format!(
                r#"kopf_handler_invocations_total{{resource="v1/configmaps",handler="slow",outcome="{outcome}"}}"#
            );
            sample(&text, &series)
        };
        // A regular error is retried by default: temporary.
        assert_eq!(outcome("temporary"), Some(1.0));
        assert_eq!(outcome("success"), Some(0.0));
        assert_eq!(
            sample(
                &text,
                &format!("kopf_handler_duration_seconds_count{labels}")
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(&text, &format!("kopf_handler_duration_seconds_sum{labels}")),
            Some(2.0)
        );

        let mut limited = Handler::on_create(resource, "limited", |_: Kwargs| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
        });
        limited.metrics = Some(metrics.handler(limited.id(), "v1/configmaps"));
        let outcome = crate::processing::execution::invoke(
            &limited,
            Kwargs::new(serde_json::json!({})),
            Some(Duration::from_secs(1)),
        )
        .await;
        assert!(outcome.is_err());
        let text = metrics.encode();
        let timeout = r#"kopf_handler_invocations_total{resource="v1/configmaps",handler="limited",outcome="timeout"}"#;
        assert_eq!(sample(&text, timeout), Some(1.0));
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn verbs_follow_the_names_kube_gives_then_the_methods() {
        let request = |method: &str, uri: &str, name: Option<&'static str>| {
            let mut request = http::Request::builder()
                .method(method)
                .uri(uri)
                .body(())
                .expect("a request");
            if let Some(name) = name {
                request.extensions_mut().insert(name);
            }
            request
        };
        for (method, uri, name, want) in [
            (
                "GET",
                "/api/v1/configmaps?watch=true",
                Some("watch"),
                "watch",
            ),
            ("GET", "/api/v1/configmaps", Some("list"), "list"),
            (
                "PATCH",
                "/api/v1/namespaces/d/configmaps/a/status",
                Some("patch_status"),
                "patch",
            ),
            (
                "PUT",
                "/api/v1/namespaces/d/configmaps/a",
                Some("replace"),
                "update",
            ),
            (
                "DELETE",
                "/api/v1/namespaces/d/configmaps",
                Some("delete_collection"),
                "deletecollection",
            ),
            (
                "GET",
                "/api/v1/configmaps?&watch=true&resourceVersion=1",
                None,
                "watch",
            ),
            ("GET", "/api/v1", None, "get"),
            ("POST", "/api/v1/namespaces/d/events", None, "create"),
            ("PATCH", "/api/v1/namespaces/d/configmaps/a", None, "patch"),
        ] {
            assert_eq!(
                verb(&request(method, uri, name)),
                want,
                "{method} {uri} {name:?}"
            );
        }
    }

    #[test]
    fn every_family_has_a_help_text_and_the_scrape_ends_as_openmetrics_does() {
        let metrics = metrics();
        // Families with labels show once their series are resolved, as the
        // operator does for every handler and resource at its start.
        metrics.queue_latency("v1/configmaps");
        metrics.handler("probe", "");
        metrics.admission_webhooks(["check"]);
        let text = metrics.encode();
        for family in [
            "kopf_handler_invocations",
            "kopf_handler_duration_seconds",
            "kopf_queue_latency_seconds",
            "kopf_objects_tracked",
            "kopf_tasks_running",
            "kopf_task_exits",
            "kopf_leader",
            "kopf_admission_requests",
        ] {
            assert!(
                text.contains(&format!("# HELP {family} ")),
                "{family} in:\n{text}"
            );
        }
        assert!(text.ends_with("# EOF\n"));
    }
}
