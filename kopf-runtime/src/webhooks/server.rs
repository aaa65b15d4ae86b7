//! The webhook server's listener: TLS connections, HTTP/1.1 requests,
//! `POST {root}/{handler id}` to the [`Reviewer`].
//!
//! # Guarantees
//! - A request is answered whatever its handlers do: a panic is caught
//!   and denies the request (`500` in the review); a connection that
//!   fails its handshake or its request is dropped alone.
//! - At most [`MAX_CONNECTIONS`] connections are served at once, a
//!   handshake gets [`HANDSHAKE_TIMEOUT`], a body at most [`MAX_BODY`].
//! - Every request counts in `kopf_admission_requests` by webhook id and
//!   result: `allowed`, `denied`, or `error` (no review: not a review, no
//!   such resource, a body too large).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::tls::POLL_INTERVAL;
use super::{WebhookServer, dump_ca, unquote};
use crate::operations::listening;
use crate::operations::metrics::{AdmissionResult, Metrics};
use crate::webhooks::admission::{Call, Reviewer, Verdict};

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
) -> Result<(), super::WebhookError> {
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
}
