//! Calling a webhook: one AdmissionReview POSTed as JSON over HTTPS/1.1,
//! the server certificate verified against the webhook's `caBundle`, the
//! whole call (connecting included) bounded by its timeout.
//!
//! TLS is rustls with the `ring` provider, the one kube's client already
//! builds with.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;

/// The largest webhook answer read: twice the largest body, so that an
/// AdmissionReview whose patch replaces a whole object at the 3 MiB limit
/// (4 MiB in base64) fits. The API server reads an answer whole
/// (client-go's rest client sets no limit); the emulator bounds it as it
/// bounds a client's body, and answers more as a failed call.
const RESPONSE_LIMIT: usize = 2 * crate::limits::BODY_LIMIT;

/// Why a webhook could not be called, or answered nothing usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookCallError {
    /// The URL is not `https://HOST[:PORT]/PATH`.
    #[error("invalid webhook URL {url:?}: {why}; use https://HOST[:PORT]/PATH")]
    Url {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The CA bundle holds no usable PEM certificate.
    #[error(
        "invalid caBundle: {0}; pass the PEM certificate(s) of the CA that signed the webhook's serving certificate"
    )]
    CaBundle(String),
    /// Connecting, the TLS handshake (an unverified certificate among
    /// others) or the exchange failed.
    #[error("Post {url:?}: {why}")]
    Transport {
        /// The URL called.
        url: String,
        /// What failed.
        why: String,
    },
    /// No complete answer within the timeout.
    #[error("Post {url:?}: context deadline exceeded (no answer within {timeout:?})")]
    Timeout {
        /// The URL called.
        url: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The webhook answered with an HTTP status other than 2xx.
    #[error("the server responded with HTTP {status}: {body}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The start of the answer's body.
        body: String,
    },
    /// The answer is not JSON.
    #[error("the webhook's answer is not JSON: {0}")]
    NotJson(String),
}

/// Where to connect and what to verify.
#[derive(Debug, Clone)]
pub(crate) struct Destination {
    /// The URL (for messages and the `Host` header's source).
    pub(crate) url: String,
    /// `host:port` to connect to.
    pub(crate) connect: String,
    /// The name the server certificate must be valid for.
    pub(crate) server_name: ServerName<'static>,
    /// `Host` header value.
    pub(crate) host: String,
    /// Path and query of the request.
    pub(crate) path_and_query: String,
}

impl Destination {
    /// A destination from an `https://` URL.
    pub(crate) fn from_url(url: &str) -> Result<Destination, WebhookCallError> {
        let bad = |why: &str| WebhookCallError::Url {
            url: url.to_string(),
            why: why.to_string(),
        };
        let uri: http::Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
        if uri.scheme_str() != Some("https") {
            return Err(bad("webhooks are called over https only"));
        }
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| bad("no host"))?;
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let server_name = ServerName::try_from(bare.to_string())
            .map_err(|e| bad(&format!("the host is not a DNS name or IP address: {e}")))?;
        let port = uri.port_u16().unwrap_or(443);
        Ok(Destination {
            url: url.to_string(),
            connect: format!("{host}:{port}"),
            server_name,
            host: uri.authority().map_or(host, |a| a.as_str()).to_string(),
            path_and_query: uri.path_and_query().map_or("/", |p| p.as_str()).to_string(),
        })
    }
}

/// The TLS client trusting only the certificates of a PEM bundle.
fn tls_config(ca_bundle: &[u8]) -> Result<rustls::ClientConfig, WebhookCallError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_bundle) {
        let cert = cert.map_err(|e| WebhookCallError::CaBundle(e.to_string()))?;
        roots
            .add(cert)
            .map_err(|e| WebhookCallError::CaBundle(e.to_string()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| WebhookCallError::CaBundle(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// POSTs `body` (JSON) and returns the status and body of the answer.
pub(crate) async fn post(
    to: &Destination,
    ca_bundle: &[u8],
    body: Vec<u8>,
    timeout: Duration,
) -> Result<(u16, Bytes), WebhookCallError> {
    let config = tls_config(ca_bundle)?;
    let exchange = exchange(to, config, body);
    match tokio::time::timeout(timeout, exchange).await {
        Ok(result) => result,
        Err(_) => Err(WebhookCallError::Timeout {
            url: to.url.clone(),
            timeout,
        }),
    }
}

async fn exchange(
    to: &Destination,
    config: rustls::ClientConfig,
    body: Vec<u8>,
) -> Result<(u16, Bytes), WebhookCallError> {
    let transport = |why: String| WebhookCallError::Transport {
        url: to.url.clone(),
        why,
    };
    let tcp = tokio::net::TcpStream::connect(&to.connect)
        .await
        .map_err(|e| transport(format!("dial tcp {}: {e}", to.connect)))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(to.server_name.clone(), tcp)
        .await
        .map_err(|e| transport(format!("tls: {e}")))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| transport(e.to_string()))?;
    let request = Request::post(to.path_and_query.as_str())
        .header(header::HOST, to.host.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| transport(e.to_string()))?;
    // The connection is driven here, beside the request, and ends once the
    // request's sender is dropped: nothing outlives the call.
    let exchange = async move {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| transport(e.to_string()))?;
        drop(sender);
        let status = response.status().as_u16();
        let body = Limited::new(response.into_body(), RESPONSE_LIMIT)
            .collect()
            .await
            .map_err(|e| transport(format!("reading the answer: {e}")))?
            .to_bytes();
        Ok((status, body))
    };
    let (result, _) = tokio::join!(exchange, connection);
    let (status, body) = result?;
    if !(200..300).contains(&status) {
        let text = String::from_utf8_lossy(&body[..body.len().min(1024)]).into_owned();
        return Err(WebhookCallError::Status { status, body: text });
    }
    Ok((status, body))
}

/// Sends one AdmissionReview to a webhook over HTTPS, as the emulator's
/// admission chain does, and returns the webhook's answer as JSON.
///
/// `ca_bundle` holds the PEM certificate(s) the server certificate must be
/// signed by (what a configuration's `caBundle` holds, before base64); the
/// certificate must be valid for the URL's host. The answer is returned as
/// it came, unchecked: compare its `response.uid` with the request's.
///
/// # Errors
/// A [`WebhookCallError`]: a URL other than `https://`, an unusable CA
/// bundle, a failed connection or TLS handshake, no answer within
/// `timeout`, a status other than 2xx, or an answer that is not JSON.
///
/// # Examples
/// ```no_run
/// use std::time::Duration;
/// use serde_json::json;
///
/// # async fn demo(ca_pem: &[u8]) -> Result<(), kopf_testing::WebhookCallError> {
/// let review = json!({
///     "apiVersion": "admission.k8s.io/v1",
///     "kind": "AdmissionReview",
///     "request": {
///         "uid": "d6f0c5e2-0000-4000-8000-000000000001",
///         "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
///         "resource": {"group": "", "version": "v1", "resource": "configmaps"},
///         "name": "demo",
///         "namespace": "default",
///         "operation": "CREATE",
///         "userInfo": {"username": "kubernetes-admin"},
///         "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "demo"}},
///         "oldObject": null,
///         "dryRun": false,
///     },
/// });
/// let answer = kopf_testing::call_webhook(
///     "https://127.0.0.1:9443/validate",
///     ca_pem,
///     &review,
///     Duration::from_secs(10),
/// )
/// .await?;
/// assert_eq!(answer["response"]["allowed"], true);
/// # Ok(()) }
/// ```
pub async fn call_webhook(
    url: &str,
    ca_bundle: &[u8],
    review: &Value,
    timeout: Duration,
) -> Result<Value, WebhookCallError> {
    let to = Destination::from_url(url)?;
    let body = serde_json::to_vec(review).unwrap_or_default();
    let (_, answer) = post(&to, ca_bundle, body, timeout).await?;
    serde_json::from_slice(&answer).map_err(|e| WebhookCallError::NotJson(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_must_be_https_with_a_host() {
        let to = Destination::from_url("https://127.0.0.1:9443/validate?x=1").unwrap();
        assert_eq!(to.connect, "127.0.0.1:9443");
        assert_eq!(to.path_and_query, "/validate?x=1");
        assert_eq!(to.host, "127.0.0.1:9443");
        let to = Destination::from_url("https://hook.example.com/v").unwrap();
        assert_eq!(to.connect, "hook.example.com:443");
        assert!(matches!(
            Destination::from_url("http://127.0.0.1/validate"),
            Err(WebhookCallError::Url { .. })
        ));
        assert!(Destination::from_url("not a url").is_err());
    }

    #[test]
    fn a_bundle_without_certificates_trusts_nothing() {
        assert!(tls_config(b"").is_ok());
        assert!(matches!(
            tls_config(b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"),
            Err(WebhookCallError::CaBundle(_))
        ));
    }
}
