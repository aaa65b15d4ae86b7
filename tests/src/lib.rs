//! Helpers shared by the workspace integration tests: an operator running
//! against a fresh emulator, waiting for conditions, and recording calls.

pub mod process;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kopf_runtime::settings::OperatorSettings;
use kopf_runtime::{
    Endpoints, Kwargs, NamespaceSelector, Operator, OperatorError, Peering, Registry, TaskCounters,
    TaskCounts,
};
use kopf_testing::Emulator;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long any condition in these tests may take before the test fails.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Where the operator stores the last handled essence of an object.
pub const DIFFBASE: &str = "kopf.zalando.org/last-handled-configuration";

/// The label that [`touch`] sets.
pub const TOUCH: &str = "kopf-tests/touch";

/// An operator running in the background against an emulator.
pub struct Running {
    stop: CancellationToken,
    task: JoinHandle<Result<(), OperatorError>>,
    counters: TaskCounters,
    urls: Urls,
}

/// Where an operator started with [`Running::serving`] serves its endpoints.
#[derive(Debug, Clone, Default)]
pub struct Urls {
    /// The liveness probe.
    pub liveness: String,
    /// The readiness probe.
    pub readiness: String,
    /// The metrics.
    pub metrics: String,
}

impl Running {
    /// Starts `registry` against the emulator with test-friendly settings.
    pub fn start(emulator: &Emulator, registry: Registry) -> Self {
        Self::start_with(emulator, registry, test_settings())
    }

    /// Starts `registry` against the emulator with `settings`.
    pub fn start_with(emulator: &Emulator, registry: Registry, settings: OperatorSettings) -> Self {
        Self::start_in(emulator, registry, settings, NamespaceSelector::all())
    }

    /// Starts `registry` against the emulator with `settings`, serving the
    /// namespaces `selector` matches.
    pub fn start_in(
        emulator: &Emulator,
        registry: Registry,
        settings: OperatorSettings,
        selector: NamespaceSelector,
    ) -> Self {
        let operator = Operator::new(registry)
            .client(emulator.client())
            .settings(settings)
            .namespaces(selector);
        Self::run(operator, Urls::default())
    }

    /// Starts `registry` against the emulator with `settings`, serving the
    /// liveness, readiness and metrics endpoints on one free loopback port
    /// (see [`Running::urls`]).
    pub async fn serving(
        emulator: &Emulator,
        registry: Registry,
        settings: OperatorSettings,
    ) -> Self {
        let operator = Operator::new(registry)
            .client(emulator.client())
            .settings(settings);
        Self::serving_operator(operator).await
    }

    /// [`Running::serving`], as one replica electing the leader on
    /// `peering`.
    pub async fn replica(
        emulator: &Emulator,
        registry: Registry,
        settings: OperatorSettings,
        peering: Peering,
    ) -> Self {
        let operator = Operator::new(registry)
            .client(emulator.client())
            .settings(settings)
            .peering(peering);
        Self::serving_operator(operator).await
    }

    async fn serving_operator(operator: Operator) -> Self {
        let endpoints = Endpoints::bind(
            Some("http://127.0.0.1:0/healthz"),
            Some("http://127.0.0.1:0/metrics"),
        )
        .await
        .expect("a free loopback port");
        let urls = Urls {
            liveness: endpoints.liveness_url().expect("liveness").to_owned(),
            readiness: endpoints.readiness_url().expect("readiness"),
            metrics: endpoints.metrics_url().expect("metrics").to_owned(),
        };
        Self::run(operator.endpoints(endpoints), urls)
    }

    /// Runs `operator` as it is configured, with its endpoints at `urls`
    /// (if any).
    pub fn operator(operator: Operator, urls: Urls) -> Self {
        Self::run(operator, urls)
    }

    fn run(operator: Operator, urls: Urls) -> Self {
        let stop = CancellationToken::new();
        let counters = operator.task_counters();
        let task = tokio::spawn(operator.run_until(stop.clone().cancelled_owned()));
        Self {
            stop,
            task,
            counters,
            urls,
        }
    }

    /// Where the endpoints are served (empty unless started with
    /// [`Running::serving`]).
    pub fn urls(&self) -> &Urls {
        &self.urls
    }

    /// The live counters of the operator's daemons and timers (still readable
    /// after [`Running::stop`]).
    pub fn counters(&self) -> TaskCounters {
        self.counters.clone()
    }

    /// The counters of the operator's daemons and timers, now.
    pub fn task_counters(&self) -> TaskCounts {
        self.counters.snapshot()
    }

    /// Stops the operator and waits until it has exited.
    pub async fn stop(self) {
        self.stop.cancel();
        self.join().await;
    }

    /// Whether the operator is still running (it has not exited on its own).
    pub fn is_running(&self) -> bool {
        !self.task.is_finished()
    }

    /// How the operator ended on its own, within [`PATIENCE`].
    pub async fn outcome(self) -> Result<(), OperatorError> {
        tokio::time::timeout(PATIENCE, self.task)
            .await
            .unwrap_or_else(|_| panic!("the operator did not end within {PATIENCE:?}"))
            .unwrap_or_else(|error| panic!("the operator task panicked: {error}"))
    }

    async fn join(self) {
        match tokio::time::timeout(PATIENCE, self.task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => panic!("the operator failed: {error}"),
            Ok(Err(error)) => panic!("the operator task panicked: {error}"),
            Err(_) => panic!("the operator did not stop within {PATIENCE:?}"),
        }
    }
}

/// The handlers declared with the attribute macros in the test binary
/// whose ids are `ids`: each test runs only its own.
pub fn declared(ids: &[&str]) -> Registry {
    let all = Registry::from_inventory().expect("the declared handlers are valid");
    let own = all
        .handlers()
        .iter()
        .filter(|h| ids.contains(&h.id()))
        .cloned();
    let registry = Registry::from_handlers(own).expect("a valid registry");
    assert_eq!(registry.len(), ids.len(), "every id is declared: {ids:?}");
    registry
}

/// Settings for tests: no Kubernetes Events unless a test wants them, short exits.
pub fn test_settings() -> OperatorSettings {
    let mut settings = OperatorSettings::default();
    settings.queueing.exit_timeout = Duration::from_secs(2);
    settings.posting.enabled = false;
    settings
}

/// The API resource of ConfigMaps, for raw access.
pub fn configmaps() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
}

/// A raw API for `resource` in namespace `ns`.
pub fn raw_api(emulator: &Emulator, resource: &ApiResource, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(emulator.client(), ns, resource)
}

/// Creates an object of `resource` named `name` in `ns`; `extra` is merged
/// into the body (e.g. `{"metadata": {"labels": …}, "data": …}`).
pub async fn create(
    emulator: &Emulator,
    resource: &ApiResource,
    ns: &str,
    name: &str,
    extra: Value,
) -> Value {
    let mut body = json!({
        "apiVersion": resource.api_version, "kind": resource.kind,
        "metadata": {"name": name, "namespace": ns},
    });
    merge(&mut body, extra);
    let object: DynamicObject = serde_json::from_value(body).expect("a valid object");
    let created = raw_api(emulator, resource, ns)
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating {ns}/{name}: {e}"));
    serde_json::to_value(created).expect("serializable")
}

/// Creates the ConfigMap `default/name` with `data: {k: v}`.
pub async fn new_configmap(emulator: &Emulator, name: &str) {
    create(
        emulator,
        &configmaps(),
        "default",
        name,
        json!({"data": {"k": "v"}}),
    )
    .await;
}

/// Creates a namespace.
pub async fn create_namespace(emulator: &Emulator, name: &str) {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(emulator.client());
    let ns = serde_json::from_value(json!({"metadata": {"name": name}})).expect("a namespace");
    api.create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
}

/// The object as the API server has it, as JSON (`None` if absent).
pub async fn get(
    emulator: &Emulator,
    resource: &ApiResource,
    ns: &str,
    name: &str,
) -> Option<Value> {
    raw_api(emulator, resource, ns)
        .get_opt(name)
        .await
        .expect("get works")
        .map(|o| serde_json::to_value(o).expect("serializable"))
}

/// An annotation of a body, if present.
pub fn annotation<'a>(body: &'a Value, key: &str) -> Option<&'a str> {
    body.pointer("/metadata/annotations")?.get(key)?.as_str()
}

/// Sets the label [`TOUCH`] of `name` to a new value, then waits until the
/// operator has stored that value in the object's diff-base.
///
/// The operator processes the events of one object in order, so by then it
/// has processed every event of the object from before the touch, and what
/// they caused has happened: call it before asserting that something did
/// not happen. Only change handlers store a diff-base, so the object must
/// have some; to them, the touch is an update whose only change is the
/// label (see [`only_touched`]).
pub async fn touch(api: &Api<DynamicObject>, name: &str) {
    static TOUCHES: AtomicU64 = AtomicU64::new(0);
    let value = TOUCHES.fetch_add(1, Ordering::Relaxed).to_string();
    let label = Patch::Merge(json!({"metadata": {"labels": {TOUCH: &value}}}));
    // Faults a test injects may hit this patch too: retried until it passes.
    eventually(
        &format!("the touch {value} of {name} to be accepted"),
        || async { api.patch(name, &PatchParams::default(), &label).await.ok() },
    )
    .await;
    eventually(
        &format!("the touch {value} of {name} to be handled"),
        || async {
            let body = serde_json::to_value(api.get_opt(name).await.ok()??).ok()?;
            let essence: Value = serde_json::from_str(annotation(&body, DIFFBASE)?).ok()?;
            (essence.pointer("/metadata/labels")?.get(TOUCH)? == value.as_str()).then_some(())
        },
    )
    .await;
}

/// Whether the change a handler is called for is a [`touch`] alone: its old
/// and new essences differ in the label [`TOUCH`] and nothing else.
pub fn only_touched(kw: &Kwargs) -> bool {
    fn untouched(essence: Option<&Value>) -> Value {
        let mut essence = essence.cloned().unwrap_or_else(|| json!({}));
        if let Some(metadata) = essence.get_mut("metadata").and_then(Value::as_object_mut) {
            if let Some(labels) = metadata.get_mut("labels").and_then(Value::as_object_mut) {
                labels.remove(TOUCH);
                if labels.is_empty() {
                    metadata.remove("labels");
                }
            }
            if metadata.is_empty()
                && let Some(essence) = essence.as_object_mut()
            {
                essence.remove("metadata");
            }
        }
        essence
    }
    kw.old != kw.new && untouched(kw.old.as_deref()) == untouched(kw.new.as_deref())
}

/// RFC 7386 merge of `patch` into `dst`.
fn merge(dst: &mut Value, patch: Value) {
    match (dst, patch) {
        (Value::Object(dst), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(dst.entry(key).or_insert(Value::Null), value);
            }
        }
        (dst, patch) => *dst = patch,
    }
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

/// A `GET` of `url` (`http://127.0.0.1:PORT/path`) over a new connection
/// ([`kopf_testing::http_get`]): the status code and the body, failing the
/// test if there is no answer within [`PATIENCE`].
pub async fn http_get(url: &str) -> (u16, String) {
    tokio::time::timeout(PATIENCE, kopf_testing::http_get(url))
        .await
        .unwrap_or_else(|_| panic!("GET {url} took over {PATIENCE:?}"))
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

/// A `GET` of a JSON endpoint: the status code and the parsed body.
pub async fn get_json(url: &str) -> (u16, Value) {
    let (status, body) = http_get(url).await;
    let body = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{url} sent {body:?}: {e}"));
    (status, body)
}

/// A scrape of a metrics endpoint, parsed by a Prometheus text parser;
/// every line must be a sample, a `# HELP`/`# TYPE` line, or the closing
/// `# EOF` of the OpenMetrics format.
pub async fn scrape(url: &str) -> Metrics {
    let (status, text) = http_get(url).await;
    assert_eq!(status, 200, "{url}: {text}");
    assert_eq!(
        text.lines().last(),
        Some("# EOF"),
        "an OpenMetrics text:\n{text}"
    );
    for line in text.lines().filter(|line| *line != "# EOF") {
        let info = prometheus_parse::LineInfo::parse(line);
        assert!(
            !matches!(
                info,
                prometheus_parse::LineInfo::Ignored | prometheus_parse::LineInfo::Empty
            ),
            "not a metric line: {line:?}"
        );
    }
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .expect("a Prometheus text");
    Metrics { scrape, text }
}

/// A parsed scrape (see [`scrape`]).
pub struct Metrics {
    /// The samples and help texts.
    pub scrape: prometheus_parse::Scrape,
    /// The text as served.
    pub text: String,
}

impl Metrics {
    /// The value of the sample `name` with exactly `labels`, if present.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        use prometheus_parse::Value as V;
        self.scrape
            .samples
            .iter()
            .filter(|s| s.metric == name && s.labels.len() == labels.len())
            .find(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| match &s.value {
                V::Counter(v) | V::Gauge(v) | V::Untyped(v) => *v,
                V::Histogram(_) | V::Summary(_) => f64::NAN,
            })
    }

    /// As [`Metrics::get`], 0 when absent.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or(0.0)
    }

    /// How many series the scrape holds (a histogram's buckets each count).
    pub fn series(&self) -> usize {
        self.text.lines().filter(|l| !l.starts_with('#')).count()
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

/// Sends the runtime's logs to the test output (filtered by `RUST_LOG`,
/// `info` by default; shown only for failing tests) and starts capturing
/// warnings process-wide (see [`captured_warnings`]).
pub fn logs() {
    warnings();
}

/// Log lines captured by [`capture_logs`] or, process-wide, by [`logs`].
#[derive(Clone, Default)]
pub struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl CapturedLogs {
    /// Everything logged so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("logs lock")).into_owned()
    }
}

impl std::io::Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("logs lock").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Captures the logs of this thread (with `#[tokio::test]`'s single-threaded
/// runtime: of the test and everything it spawns) until the guard drops.
pub fn capture_logs() -> (CapturedLogs, tracing::subscriber::DefaultGuard) {
    let logs = CapturedLogs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    (logs, tracing::subscriber::set_default(subscriber))
}

/// Everything logged at `WARN` or above in this test process, as text.
/// Tests in one binary share it: look for what is unique to your test.
pub fn captured_warnings() -> String {
    warnings().text()
}

/// The one process-wide subscriber, installed on first use, whichever test
/// of the binary comes first: test output as [`logs`] says, plus a capture
/// of every `WARN` and `ERROR` line.
fn warnings() -> &'static CapturedLogs {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    static WARNINGS: std::sync::OnceLock<CapturedLogs> = std::sync::OnceLock::new();
    WARNINGS.get_or_init(|| {
        let logs = CapturedLogs::default();
        let writer = logs.clone();
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        let output = tracing_subscriber::fmt::layer()
            .with_test_writer()
            .with_filter(filter);
        let captured = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .with_filter(tracing::level_filters::LevelFilter::WARN);
        let subscriber = tracing_subscriber::registry().with(output).with(captured);
        tracing::subscriber::set_global_default(subscriber)
            .expect("nothing but this installs a global subscriber in the tests");
        logs
    })
}

/// An answer over HTTPS: its status, its body, and the certificate chain
/// the server presented.
#[derive(Debug, Clone)]
pub struct HttpsAnswer {
    /// The HTTP status.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
    /// The server's certificates, leaf first (DER).
    pub peer: Vec<Vec<u8>>,
}

impl HttpsAnswer {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|error| {
            panic!(
                "not JSON ({error}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// POSTs `body` to `url` (`https://host:port/path`) on a new connection,
/// verifying the server against the CA bundle `ca_pem` only; `Err` says why
/// the connection or the request failed (e.g. the certificate is refused).
pub async fn https_post(url: &str, ca_pem: &str, body: &[u8]) -> Result<HttpsAnswer, String> {
    use http_body_util::BodyExt as _;
    use rustls::pki_types::pem::PemObject as _;

    let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    let host = uri
        .host()
        .ok_or("no host")?
        .trim_matches(['[', ']'])
        .to_owned();
    let port = uri.port_u16().unwrap_or(443);
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.map_err(|e| format!("the CA: {e}"))?)
            .map_err(|e| format!("the CA: {e}"))?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| e.to_string())?;
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let peer = tls
        .get_ref()
        .1
        .peer_certificates()
        .unwrap_or_default()
        .iter()
        .map(|c| c.to_vec())
        .collect();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|e| format!("HTTP: {e}"))?;
    let driver = tokio::spawn(connection);
    let request = http::Request::post(uri.path())
        .header(http::header::HOST, format!("{host}:{port}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::copy_from_slice(
            body,
        )))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("HTTP: {e}"))?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("HTTP body: {e}"))?
        .to_bytes()
        .to_vec();
    drop(sender);
    driver.abort();
    Ok(HttpsAnswer { status, body, peer })
}

/// An `AdmissionReview` request (v1) for a ConfigMap in `default`.
pub fn admission_review(operation: &str, object: Value, dry_run: bool) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "review-1",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "operation": operation,
            "namespace": "default",
            "name": object["metadata"]["name"],
            "userInfo": {"username": "tester", "groups": ["system:authenticated"]},
            "object": object,
            "dryRun": dry_run,
        }
    }))
    .expect("a review is JSON")
}
