//! The webhook server: its listener, bound with its certificates before
//! the operator starts ([`WebhookServer::bind`]), then served: TLS
//! connections, HTTP/1.1 requests, `POST {root}/{handler id}` to the
//! [`Reviewer`].
//!
//! # Guarantees
//! - A request is answered whatever its handlers do: a panic is caught
//!   and denies the request (`500` in the review); a connection that
//!   fails its handshake or its request is dropped alone.
//! - At most `MAX_CONNECTIONS` (`operations/listening.rs`) connections are served at once, a
//!   handshake gets [`HANDSHAKE_TIMEOUT`], a body at most [`MAX_BODY`].
//! - Every request counts in `kopf_admission_requests` by webhook id and
//!   result: `allowed`, `denied`, or `error` (no review: not a review, no
//!   such resource, a body too large).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::args::{ServiceRef, WebhookArgs};
use super::error::WebhookError;
use super::managed;
use super::paths::unquote;
use super::tls::{CertSource, Certificates, POLL_INTERVAL};
use crate::operations::listening::{self, ListenUrl, Scheme};
use crate::operations::metrics::{AdmissionResult, Metrics};
use crate::webhooks::admission::{Call, Reviewer, Verdict};

/// The bound listener of the admission webhook server, with its
/// certificates and what it tells the cluster.
///
/// Bound before the operator starts, so that an address that cannot be had
/// or certificates that do not load are start-up errors, and a port `0`
/// is known ([`WebhookServer::url`]). The operator serves it on every
/// replica, from after its start-up handlers until it exits.
///
/// ```no_run
/// use clap::Parser;
/// use kopf_runtime::{Args, Operator, Registry, WebhookServer};
///
/// # async fn example(registry: Registry) -> Result<(), Box<dyn std::error::Error>> {
/// let args = Args::try_parse_from(["operator", "--webhook-server", "https://127.0.0.1:0"])?;
/// let server = WebhookServer::bind(&args.webhooks).await?;
/// println!("webhooks at {}, CA:\n{}", server.url(), server.ca_pem());
/// Operator::new(registry).webhooks(server).run().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct WebhookServer {
    listener: TcpListener,
    /// The URL clients reach the root at (no trailing `/`).
    url: String,
    /// The root path (no trailing `/`; empty for `/`).
    path: String,
    certificates: Certificates,
    ca_dump: Option<PathBuf>,
    managed: Option<managed::Managed>,
}

impl WebhookServer {
    /// Binds the server that `args` describe (`--webhook-server` and the
    /// flags beside it), and writes the CA bundle to `--webhook-ca-dump`.
    ///
    /// # Errors
    /// [`WebhookError`]: no `--webhook-server`, a URL that cannot be served,
    /// an address that cannot be had, certificates that do not load.
    pub async fn bind(args: &WebhookArgs) -> Result<Self, WebhookError> {
        args.check()?;
        let url = args
            .server
            .as_deref()
            .ok_or_else(|| WebhookError::Flags("no --webhook-server URL is given".to_owned()))?;
        let target = target(url)?;
        let listener = TcpListener::bind((target.host.as_str(), target.port))
            .await
            .map_err(|source| WebhookError::Bind {
                address: format!("{}:{}", listening::url_host(&target.host), target.port),
                source,
            })?;
        let port = listener
            .local_addr()
            .map_or(target.port, |address| address.port());
        let accessible = accessible(&target.host);
        let host = args.host.clone().unwrap_or_else(|| accessible.clone());
        let source = match (&args.cert, &args.key) {
            (Some(cert), Some(key)) => CertSource::Files {
                cert: cert.clone(),
                key: key.clone(),
                ca: args.ca.clone(),
            },
            _ => {
                let mut names = vec![host.clone(), accessible];
                names.extend(args.extra_sans.iter().cloned());
                let mut seen = std::collections::HashSet::new();
                names.retain(|n| seen.insert(n.clone()));
                CertSource::SelfSigned { names }
            }
        };
        let certificates = Certificates::new(&source)?;
        let port_part = if port == 443 {
            String::new()
        } else {
            format!(":{port}")
        };
        let public_url = format!(
            "https://{}{port_part}{}",
            listening::url_host(&host),
            target.path
        );
        let service = args.service.as_deref().map(ServiceRef::parse).transpose()?;
        let managed = args.managed.as_ref().map(|name| managed::Managed {
            name: name.clone(),
            client: match service {
                Some(service) => managed::ClientConfig::Service {
                    service,
                    path: target.path.clone(),
                },
                None => managed::ClientConfig::Url(public_url.clone()),
            },
        });
        let server = Self {
            listener,
            url: public_url,
            path: target.path,
            certificates,
            ca_dump: args.ca_dump.clone(),
            managed,
        };
        dump_ca(server.ca_dump.as_deref(), &server.ca_pem())?;
        Ok(server)
    }

    /// The URL clients reach the webhooks at (a handler's is this URL,
    /// `/`, and its id).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The CA bundle (PEM) that clients verify the server with, as it is now.
    pub fn ca_pem(&self) -> String {
        self.certificates.ca().borrow().to_string()
    }

    /// The CA bundle as it is now and as it changes.
    pub(crate) fn ca(&self) -> watch::Receiver<Arc<str>> {
        self.certificates.ca()
    }

    /// The configurations to keep up to date, if asked.
    pub(crate) fn managed(&self) -> Option<&managed::Managed> {
        self.managed.as_ref()
    }
}

/// Writes the CA bundle to `--webhook-ca-dump`, whole or not at all.
fn dump_ca(path: Option<&std::path::Path>, pem: &str) -> Result<(), WebhookError> {
    let Some(path) = path else {
        return Ok(());
    };
    let failed = |source| WebhookError::CaDump {
        path: path.to_owned(),
        source,
    };
    let partial = path.with_extension("partial");
    std::fs::write(&partial, pem).map_err(failed)?;
    std::fs::rename(&partial, path).map_err(failed)
}

/// How `--webhook-server` is written.
const HTTPS: Scheme = Scheme {
    name: "https",
    default_port: 443,
    example: "https://0.0.0.0:9443",
    only: "only https:// is served: API servers call webhooks over HTTPS",
};

/// `--webhook-server` taken apart; the path without a trailing `/`.
pub(crate) fn target(url: &str) -> Result<ListenUrl, WebhookError> {
    let mut target = ListenUrl::parse(url, &HTTPS).map_err(|why| WebhookError::InvalidUrl {
        url: url.to_owned(),
        why,
    })?;
    target.path = target.path.trim_end_matches('/').to_owned();
    Ok(target)
}

/// The address clients reach a listening address at: the loopback for
/// "every interface" (Kopf's `_get_accessible_addr`).
fn accessible(host: &str) -> String {
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) if ip.is_unspecified() => "127.0.0.1".to_owned(),
        Ok(IpAddr::V6(ip)) if ip.is_unspecified() => "::1".to_owned(),
        _ => host.to_owned(),
    }
}

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest review body served: an object and its old version, each
/// at most what etcd stores (1.5 MiB), with room to spare.
const MAX_BODY: usize = 8 * 1024 * 1024;

/// What the requests need.
struct Served {
    root: String,
    reviewer: Reviewer,
    metrics: Option<Arc<Metrics>>,
}

/// Serves `server` in `tasks` until `stop`: the listener, and the watch of
/// the certificate files that re-dumps the CA bundle when it changes.
pub(crate) fn serve(
    server: WebhookServer,
    reviewer: Reviewer,
    metrics: Option<Arc<Metrics>>,
    stop: CancellationToken,
    tasks: &TaskTracker,
) -> Result<(), WebhookError> {
    let config = server.certificates.server_config()?;
    let acceptor = TlsAcceptor::from(Arc::new(config));
    tracing::info!(url = %server.url, "serving the admission webhooks");
    let WebhookServer {
        listener,
        path,
        certificates,
        ca_dump,
        ..
    } = server;
    let mut ca = certificates.ca();
    let served = Arc::new(Served {
        root: path,
        reviewer,
        metrics,
    });
    let serving = stop.clone();
    tasks.spawn(listening::accept(
        listener,
        stop.clone(),
        "webhook",
        move |stream| {
            connection(
                stream,
                acceptor.clone(),
                Arc::clone(&served),
                serving.clone(),
            )
        },
    ));
    tasks.spawn(async move {
        let mut poll = tokio::time::interval(POLL_INTERVAL);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = poll.tick() => certificates.refresh(),
                changed = ca.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let pem = ca.borrow_and_update().to_string();
                    if let Err(error) = dump_ca(ca_dump.as_deref(), &pem) {
                        tracing::warn!(%error, "the new CA bundle could not be written out");
                    }
                }
            }
        }
    });
    Ok(())
}

/// Serves one connection: a TLS handshake within [`HANDSHAKE_TIMEOUT`],
/// then its requests until it ends or `stop`.
async fn connection(
    stream: tokio::net::TcpStream,
    acceptor: TlsAcceptor,
    served: Arc<Served>,
    stop: CancellationToken,
) {
    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            tracing::debug!(%error, "a webhook client's TLS handshake failed");
            return;
        }
        Err(_elapsed) => return,
    };
    let service = hyper::service::service_fn(move |request| {
        let served = Arc::clone(&served);
        async move { Ok::<_, Infallible>(respond(&served, request).await) }
    });
    listening::serve_connection(stream, service, &stop).await;
}

/// The webhook id of a path under `root`: `Ok(None)` for the root itself
/// (every handler), `Err(())` for a path elsewhere.
fn webhook_of(root: &str, path: &str) -> Result<Option<String>, ()> {
    let rest = path.strip_prefix(root).ok_or(())?;
    if rest.is_empty() || rest == "/" {
        return Ok(None);
    }
    let id = rest.strip_prefix('/').ok_or(())?;
    unquote(id).map(Some).ok_or(())
}

async fn respond(served: &Served, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let Ok(webhook) = webhook_of(&served.root, request.uri().path()) else {
        return text(
            StatusCode::NOT_FOUND,
            "no webhooks at this path\n".to_owned(),
        );
    };
    // Ids come from clients: only the handlers' own are labels.
    let label = match webhook.as_deref() {
        None => "",
        Some(id) if served.reviewer.knows(id) => id,
        Some(_) => "unknown",
    };
    let count = |result| {
        if let Some(metrics) = &served.metrics {
            metrics.admission(label, result);
        }
    };
    if request.method() != Method::POST {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "webhooks take POST requests\n".to_owned(),
        );
    }
    let headers: BTreeMap<String, String> = request
        .headers()
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(error) => {
            count(AdmissionResult::Error);
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the review could not be read: {error}\n"),
            );
        }
    };
    let call = Call {
        webhook: webhook.as_deref(),
        headers,
    };
    match served.reviewer.review(&body, call).await {
        Ok((answer, verdict)) => {
            count(match verdict {
                Verdict::Allowed => AdmissionResult::Allowed,
                Verdict::Denied => AdmissionResult::Denied,
            });
            let mut response = Response::new(Full::new(Bytes::from(answer.to_string())));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/json"),
            );
            response
        }
        Err(error) => {
            count(AdmissionResult::Error);
            tracing::warn!(%error, webhook = webhook.as_deref().unwrap_or_default(), "an admission request got no review");
            let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::BAD_REQUEST);
            text(status, format!("{error}\n"))
        }
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_under_the_root_name_a_webhook_or_all() {
        assert_eq!(webhook_of("", "/"), Ok(None));
        assert_eq!(webhook_of("", "/check"), Ok(Some("check".into())));
        assert_eq!(webhook_of("/hooks", "/hooks"), Ok(None));
        assert_eq!(
            webhook_of("/hooks", "/hooks/check/spec.size"),
            Ok(Some("check/spec.size".into()))
        );
        assert_eq!(webhook_of("/hooks", "/hooksx"), Err(()));
        assert_eq!(webhook_of("/hooks", "/other/check"), Err(()));
    }

    #[test]
    fn urls_are_taken_apart_and_only_https_is_served() {
        assert_eq!(
            target("https://0.0.0.0:9443/hooks/").expect("valid"),
            ListenUrl {
                host: "0.0.0.0".into(),
                port: 9443,
                path: "/hooks".into()
            }
        );
        assert_eq!(target("https://[::]").expect("valid").port, 443);
        assert_eq!(target("https://h:1").expect("valid").path, "");
        for bad in ["http://0.0.0.0:80", "0.0.0.0:9443", "https://h:1/?x=1"] {
            assert!(target(bad).is_err(), "{bad}");
        }
        assert_eq!(accessible("0.0.0.0"), "127.0.0.1");
        assert_eq!(accessible("::"), "::1");
        assert_eq!(accessible("example.com"), "example.com");
    }

    #[tokio::test]
    async fn a_bound_server_knows_its_port_and_dumps_its_ca() {
        let dump = std::env::temp_dir().join(format!("kopf-ca-{}.pem", std::process::id()));
        let args = WebhookArgs {
            server: Some("https://127.0.0.1:0/hooks".into()),
            ca_dump: Some(dump.clone()),
            ..WebhookArgs::default()
        };
        let server = WebhookServer::bind(&args).await.expect("bound");
        assert!(
            server.url().starts_with("https://127.0.0.1:"),
            "{}",
            server.url()
        );
        assert!(server.url().ends_with("/hooks"));
        assert!(!server.url().contains(":0/"));
        let dumped = std::fs::read_to_string(&dump).expect("dumped");
        assert_eq!(dumped, server.ca_pem());
        std::fs::remove_file(&dump).ok();
    }
}
