//! [`Endpoints`]: the HTTP listeners of the liveness probe (`--liveness`),
//! the readiness probe (`/readyz` beside it) and the metrics (`--metrics`),
//! served with hyper; the answers come from [`probing`]
//! and [`Metrics`].

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::operations::health::Health;
use crate::operations::listening::{self, ListenUrl, Scheme};
use crate::operations::metrics::{ApiMetricsLayer, Metrics};
use crate::operations::probing::{self, Probes};

/// The path of the readiness probe, on the liveness listener.
pub const READINESS_PATH: &str = "/readyz";

/// The OpenMetrics text format's content type.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Why the endpoints could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointError {
    /// A URL that cannot be served.
    #[error("the {endpoint} endpoint {url:?} cannot be served: {why}")]
    InvalidUrl {
        /// `liveness` or `metrics`.
        endpoint: &'static str,
        /// The URL as given.
        url: String,
        /// What is wrong, and what would do.
        why: String,
    },
    /// An address that cannot be listened on (in use, not local, forbidden).
    #[error(
        "cannot listen on {address} for the {endpoint} endpoint: {source}; pick another port or address"
    )]
    Bind {
        /// `liveness` or `metrics`.
        endpoint: &'static str,
        /// The address as given (`host:port`).
        address: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
}

/// How the endpoints' URLs are written.
const HTTP: Scheme = Scheme {
    name: "http",
    default_port: 80,
    example: "http://0.0.0.0:8080/healthz",
    only: "only http:// is served; terminate TLS in front of it",
};

/// The URL of `endpoint` taken apart; the path defaults to `/`.
pub(crate) fn target(endpoint: &'static str, url: &str) -> Result<ListenUrl, EndpointError> {
    let mut target = ListenUrl::parse(url, &HTTP).map_err(|why| EndpointError::InvalidUrl {
        endpoint,
        url: url.to_owned(),
        why,
    })?;
    if target.path.is_empty() {
        "/".clone_into(&mut target.path);
    }
    Ok(target)
}

/// What one listener serves.
#[derive(Debug, Clone, Default)]
struct Routes {
    liveness: Option<String>,
    metrics: Option<String>,
}

#[derive(Debug)]
struct Listener {
    listener: TcpListener,
    routes: Routes,
}

/// The bound listeners of the liveness, readiness and metrics endpoints.
///
/// Listeners are bound before the operator starts, so that an address that
/// cannot be had is a start-up error naming it, and so that a port `0` is
/// known (see [`Endpoints::liveness_url`]) before anything is served. The
/// operator serves them from its start (before the login and start-up
/// handlers run) until it exits, on every replica.
///
/// ```no_run
/// use kopf_runtime::{Endpoints, Operator, Registry};
///
/// # async fn example(registry: Registry) -> Result<(), Box<dyn std::error::Error>> {
/// let endpoints = Endpoints::bind(
///     Some("http://0.0.0.0:8080/healthz"),
///     Some("http://0.0.0.0:9090/metrics"),
/// )
/// .await?;
/// println!("probes at {:?}", endpoints.liveness_url());
/// Operator::new(registry).endpoints(endpoints).run().await?;
/// # Ok(()) }
/// ```
///
/// # Endpoints
/// - `GET <liveness path>`: 200 and `{handler id: result}` of the `on_probe`
///   handlers, run at most once per 10 s once the operator has its client
///   (`{}` before); 500 when a probe handler fails or a watch has gone
///   silent, with `{"failed": {id: error}, "silent": {watch: why},
///   "results": {…}}`.
/// - `GET /readyz` on the liveness listener: 200 once the login, the
///   start-up handlers and the first discovery are done and every resource
///   served has finished its first listing (a resource served later is
///   waited for likewise, one no longer served is not); 503 before, with
///   `{"ready": false, "waiting": {what: why}}`.
/// - `GET <metrics path>`: the metrics in the OpenMetrics text format.
///
/// When the liveness and metrics URLs share host and port, one listener
/// serves both (with port `0`, on one free port).
#[derive(Debug)]
pub struct Endpoints {
    listeners: Vec<Listener>,
    liveness: Option<String>,
    metrics: Option<String>,
    /// The API request families, when metrics are served.
    api: Option<ApiMetricsLayer>,
}

impl Endpoints {
    /// Binds the listeners of the liveness endpoint (with readiness at
    /// [`READINESS_PATH`] beside it) and of the metrics endpoint, each
    /// given as a URL like Kopf's `--liveness`: `http://0.0.0.0:8080/healthz`.
    /// Port `0` picks a free port.
    ///
    /// # Errors
    /// [`EndpointError::InvalidUrl`] for a URL that is not `http://` or
    /// whose paths collide; [`EndpointError::Bind`] naming an address that
    /// cannot be listened on.
    pub async fn bind(
        liveness: Option<&str>,
        metrics: Option<&str>,
    ) -> Result<Self, EndpointError> {
        let liveness_target = liveness.map(|url| target("liveness", url)).transpose()?;
        let metrics_target = metrics.map(|url| target("metrics", url)).transpose()?;
        if let Some(live) = &liveness_target {
            if live.path == READINESS_PATH {
                return Err(EndpointError::InvalidUrl {
                    endpoint: "liveness",
                    url: liveness.unwrap_or_default().to_owned(),
                    why: format!("{READINESS_PATH} is the readiness probe's path; use /healthz"),
                });
            }
            if let Some(target) = &metrics_target
                && (target.host.as_str(), target.port) == (live.host.as_str(), live.port)
                && (target.path == live.path || target.path == READINESS_PATH)
            {
                return Err(EndpointError::InvalidUrl {
                    endpoint: "metrics",
                    url: metrics.unwrap_or_default().to_owned(),
                    why: "its path is taken on the liveness endpoint's listener; use /metrics"
                        .to_owned(),
                });
            }
        }
        let mut endpoints = Self {
            listeners: Vec::new(),
            liveness: None,
            metrics: None,
            api: metrics_target.as_ref().map(|_| ApiMetricsLayer::default()),
        };
        if let Some(target) = &liveness_target {
            let listener = listen("liveness", target).await?;
            let port = local_port(&listener, target);
            endpoints.liveness = Some(format!(
                "http://{}:{port}{}",
                target.url_host(),
                target.path
            ));
            endpoints.listeners.push(Listener {
                listener,
                routes: Routes {
                    liveness: Some(target.path.clone()),
                    metrics: None,
                },
            });
        }
        if let Some(target) = &metrics_target {
            let shared = liveness_target.as_ref().filter(|live| {
                (live.host.as_str(), live.port) == (target.host.as_str(), target.port)
            });
            let port = if shared.is_some() {
                let listener = endpoints
                    .listeners
                    .first_mut()
                    .expect("invariant: the liveness listener was bound first");
                listener.routes.metrics = Some(target.path.clone());
                local_port(&listener.listener, target)
            } else {
                let listener = listen("metrics", target).await?;
                let port = local_port(&listener, target);
                endpoints.listeners.push(Listener {
                    listener,
                    routes: Routes {
                        liveness: None,
                        metrics: Some(target.path.clone()),
                    },
                });
                port
            };
            endpoints.metrics = Some(format!(
                "http://{}:{port}{}",
                target.url_host(),
                target.path
            ));
        }
        Ok(endpoints)
    }

    /// The liveness endpoint's URL, with the port it was given.
    pub fn liveness_url(&self) -> Option<&str> {
        self.liveness.as_deref()
    }

    /// The readiness endpoint's URL (beside the liveness endpoint).
    pub fn readiness_url(&self) -> Option<String> {
        let liveness = self.liveness.as_deref()?;
        let authority_end = liveness["http://".len()..]
            .find('/')
            .map_or(liveness.len(), |i| i + "http://".len());
        Some(format!("{}{READINESS_PATH}", &liveness[..authority_end]))
    }

    /// The metrics endpoint's URL, with the port it was given.
    pub fn metrics_url(&self) -> Option<&str> {
        self.metrics.as_deref()
    }

    /// The layer counting API requests, when metrics are served (and so
    /// must be collected).
    pub(crate) fn api_metrics(&self) -> Option<&ApiMetricsLayer> {
        self.api.as_ref()
    }

    /// Serves every listener in `tasks` until `stop`.
    pub(crate) fn serve(
        self,
        served: Arc<EndpointState>,
        stop: CancellationToken,
        tasks: &TaskTracker,
    ) {
        for Listener { listener, routes } in self.listeners {
            let routes = Arc::new(routes);
            let served = Arc::clone(&served);
            let serving = stop.clone();
            tasks.spawn(listening::accept(
                listener,
                stop.clone(),
                "endpoint",
                move |stream| {
                    let (routes, served, stop) =
                        (Arc::clone(&routes), Arc::clone(&served), serving.clone());
                    let service = hyper::service::service_fn(move |request| {
                        let (routes, served) = (Arc::clone(&routes), Arc::clone(&served));
                        async move { Ok::<_, Infallible>(respond(&routes, &served, request).await) }
                    });
                    async move { listening::serve_connection(stream, service, &stop).await }
                },
            ));
        }
    }
}

async fn listen(endpoint: &'static str, target: &ListenUrl) -> Result<TcpListener, EndpointError> {
    TcpListener::bind((target.host.as_str(), target.port))
        .await
        .map_err(|source| EndpointError::Bind {
            endpoint,
            address: format!("{}:{}", target.url_host(), target.port),
            source,
        })
}

fn local_port(listener: &TcpListener, target: &ListenUrl) -> u16 {
    listener
        .local_addr()
        .map_or(target.port, |address: SocketAddr| address.port())
}

/// What the endpoints report on.
#[derive(Debug)]
pub(crate) struct EndpointState {
    /// The `on_probe` handlers.
    pub(crate) probes: Option<Probes>,
    /// The watches.
    pub(crate) health: Arc<Health>,
    /// The metrics, if served.
    pub(crate) metrics: Option<Arc<Metrics>>,
}

async fn respond(
    routes: &Routes,
    served: &EndpointState,
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET is served\n");
    }
    let path = request.uri().path();
    if routes.liveness.as_deref() == Some(path) {
        let (status, body) = probing::liveness(served.probes.as_ref(), &served.health).await;
        return json(status, &body);
    }
    if routes.liveness.is_some() && path == READINESS_PATH {
        let (status, body) = probing::readiness(&served.health);
        return json(status, &body);
    }
    if routes.metrics.as_deref() == Some(path)
        && let Some(metrics) = &served.metrics
    {
        return respond_with(StatusCode::OK, OPENMETRICS, metrics.encode());
    }
    text(StatusCode::NOT_FOUND, "not found\n")
}

fn json(status: u16, body: &serde_json::Value) -> Response<Full<Bytes>> {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    respond_with(status, "application/json", format!("{body}\n"))
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    respond_with(status, "text/plain; charset=utf-8", body.to_owned())
}

fn respond_with(
    status: StatusCode,
    content_type: &'static str,
    body: String,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_taken_apart_as_kopf_does() {
        let healthz = target("liveness", "http://0.0.0.0:8080/healthz").expect("valid");
        assert_eq!(
            healthz,
            ListenUrl {
                host: "0.0.0.0".into(),
                port: 8080,
                path: "/healthz".into()
            }
        );
        let bare = target("liveness", "http://Localhost").expect("valid");
        assert_eq!(
            (bare.host.as_str(), bare.port, bare.path.as_str()),
            ("localhost", 80, "/")
        );
        let v6 = target("metrics", "http://[::1]:9090/metrics").expect("valid");
        assert_eq!(
            (v6.host.as_str(), v6.url_host()),
            ("::1", "[::1]".to_owned())
        );
        for (url, why) in [
            ("https://0.0.0.0:8080/healthz", "only http://"),
            ("0.0.0.0:8080", "no scheme"),
            ("http://0.0.0.0:8080/healthz?x=1", "a query"),
            ("not a url at all", "not a URL"),
        ] {
            let error = target("liveness", url).expect_err(url).to_string();
            assert!(error.contains(why), "{url}: {error}");
            assert!(error.contains("the liveness endpoint"), "{error}");
        }
    }

    #[tokio::test]
    async fn one_listener_serves_both_when_host_and_port_are_the_same() {
        let endpoints = Endpoints::bind(
            Some("http://127.0.0.1:0/healthz"),
            Some("http://127.0.0.1:0/metrics"),
        )
        .await
        .expect("binds");
        assert_eq!(endpoints.listeners.len(), 1);
        let port = endpoints.listeners[0]
            .listener
            .local_addr()
            .expect("bound")
            .port();
        assert_eq!(
            endpoints.liveness_url(),
            Some(format!("http://127.0.0.1:{port}/healthz").as_str())
        );
        assert_eq!(
            endpoints.readiness_url(),
            Some(format!("http://127.0.0.1:{port}/readyz"))
        );
        assert_eq!(
            endpoints.metrics_url(),
            Some(format!("http://127.0.0.1:{port}/metrics").as_str())
        );

        let apart = Endpoints::bind(
            Some("http://127.0.0.1:0/healthz"),
            Some("http://localhost:0/metrics"),
        )
        .await
        .expect("binds");
        assert_eq!(apart.listeners.len(), 2);
    }

    #[tokio::test]
    async fn colliding_paths_and_taken_ports_are_refused_naming_them() {
        let clash = Endpoints::bind(Some("http://127.0.0.1:0/x"), Some("http://127.0.0.1:0/x"))
            .await
            .expect_err("one path for two endpoints");
        assert!(
            matches!(
                clash,
                EndpointError::InvalidUrl {
                    endpoint: "metrics",
                    ..
                }
            ),
            "{clash}"
        );
        let readyz = Endpoints::bind(Some("http://127.0.0.1:0/readyz"), None)
            .await
            .expect_err("the readiness probe's path");
        assert!(readyz.to_string().contains("use /healthz"), "{readyz}");

        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = taken.local_addr().expect("bound").port();
        let error = Endpoints::bind(None, Some(&format!("http://127.0.0.1:{port}/metrics")))
            .await
            .expect_err("the port is taken");
        assert!(
            error.to_string().starts_with(&format!(
                "cannot listen on 127.0.0.1:{port} for the metrics endpoint: "
            )),
            "{error}"
        );
    }
}
