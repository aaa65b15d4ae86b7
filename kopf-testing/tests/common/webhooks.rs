//! A small HTTPS admission webhook server for the tests: certificates made
//! with rcgen, every AdmissionReview it receives kept, and an answer chosen
//! by the test per request.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};
use tokio::task::JoinSet;

/// A CA and a serving certificate it signed for some names.
pub(crate) struct Pki {
    /// The CA certificate, PEM.
    pub ca_pem: String,
    cert: CertificateDer<'static>,
    key: Vec<u8>,
}

impl Pki {
    /// A fresh CA and a certificate for `names` (DNS names or IP addresses).
    pub(crate) fn new(names: &[&str]) -> Pki {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key"))
            .expect("self-sign the CA");
        let key = KeyPair::generate().expect("server key");
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cert = CertificateParams::new(names)
            .expect("server params")
            .signed_by(&key, &ca)
            .expect("sign the server certificate");
        Pki {
            ca_pem: ca.pem(),
            cert: cert.der().clone(),
            key: key.serialize_der(),
        }
    }

    /// The CA as a configuration's `caBundle` (base64 of the PEM).
    pub(crate) fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    /// A TLS acceptor serving this PKI's certificate.
    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.clone()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(vec![self.cert.clone()], key)
            .expect("server certificate");
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }
}

/// A TLS front for a plain-HTTP server (the emulator): kubectl sends
/// credentials over TLS only. Stops when dropped.
pub(crate) struct TlsProxy {
    /// Where it listens (127.0.0.1).
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TlsProxy {
    /// Accepts TLS with `pki`'s certificate and relays each connection to
    /// `upstream`.
    pub(crate) async fn start(pki: &Pki, upstream: SocketAddr) -> TlsProxy {
        let acceptor = pki.acceptor();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the TLS proxy");
        let addr = listener.local_addr().expect("local addr");
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                connections.spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut plain) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        TlsProxy { addr, task }
    }
}

/// What the server answers one review with.
pub(crate) enum Reply {
    /// This JSON, 200.
    Json(Value),
    /// This JSON, after a while.
    After(Duration, Value),
    /// A status and a body as they are.
    Raw(u16, &'static str),
}

type Answer = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

/// A running webhook server; stops when dropped.
pub(crate) struct Hook {
    /// Where it listens (127.0.0.1).
    pub addr: SocketAddr,
    /// Every review received, with the path it was sent to.
    seen: Arc<Mutex<Vec<(String, Value)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Hook {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Hook {
    /// Serves `answer` over HTTPS with `pki`'s certificate.
    pub(crate) async fn start(
        pki: &Pki,
        answer: impl Fn(&Value) -> Reply + Send + Sync + 'static,
    ) -> Hook {
        let acceptor = pki.acceptor();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the webhook server");
        let addr = listener.local_addr().expect("local addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let answer: Answer = Arc::new(answer);
        let task = tokio::spawn({
            let seen = seen.clone();
            async move {
                // Connections live in the set, so they end with the server.
                let mut connections = JoinSet::new();
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    let (acceptor, seen, answer) = (acceptor.clone(), seen.clone(), answer.clone());
                    connections.spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let service = hyper::service::service_fn(move |req| {
                            serve(req, seen.clone(), answer.clone())
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(tls), service)
                            .await;
                    });
                }
            }
        });
        Hook { addr, seen, task }
    }

    /// The reviews received so far (their `request`), with their paths.
    pub(crate) fn seen(&self) -> Vec<(String, Value)> {
        self.seen.lock().expect("seen lock").clone()
    }

    /// The `request`s received at `path`.
    pub(crate) fn requests(&self, path: &str) -> Vec<Value> {
        self.seen()
            .into_iter()
            .filter(|(p, _)| p == path)
            .map(|(_, r)| r)
            .collect()
    }

    /// `https://127.0.0.1:PORT{path}`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.addr.port())
    }
}

async fn serve(
    req: hyper::Request<hyper::body::Incoming>,
    seen: Arc<Mutex<Vec<(String, Value)>>>,
    answer: Answer,
) -> Result<hyper::Response<Full<Bytes>>, hyper::Error> {
    let path = req.uri().path().to_string();
    let body = req.into_body().collect().await?.to_bytes();
    let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let request = review.get("request").cloned().unwrap_or(Value::Null);
    seen.lock()
        .expect("seen lock")
        .push((path, request.clone()));
    let (status, body) = match answer(&request) {
        Reply::Json(v) => (200, v.to_string()),
        Reply::After(delay, v) => {
            tokio::time::sleep(delay).await;
            (200, v.to_string())
        }
        Reply::Raw(status, body) => (status, body.to_string()),
    };
    let mut resp = hyper::Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = hyper::StatusCode::from_u16(status).expect("a status code");
    Ok(resp)
}

/// An AdmissionReview answering `request` with `response` (uid added).
pub(crate) fn review(request: &Value, mut response: Value) -> Value {
    response["uid"] = request["uid"].clone();
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// Allows `request`.
pub(crate) fn allow(request: &Value) -> Reply {
    Reply::Json(review(request, json!({"allowed": true})))
}

/// Denies `request` with a code and message.
pub(crate) fn deny(request: &Value, code: u16, message: &str) -> Reply {
    Reply::Json(review(
        request,
        json!({"allowed": false, "status": {"code": code, "message": message}}),
    ))
}

/// A webhook entry calling `url` for configmaps (any operation), trusting `pki`.
pub(crate) fn webhook(name: &str, url: &str, pki: &Pki) -> Value {
    json!({
        "name": name,
        "clientConfig": {"url": url, "caBundle": pki.ca_bundle()},
        "rules": [{"operations": ["*"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    })
}

/// A webhook configuration object (`Validating…` or `Mutating…`).
pub(crate) fn configuration(kind: &str, name: &str, webhooks: Vec<Value>) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": webhooks,
    })
}
