//! `#[on_login]` handlers: the credentials every request of the operator
//! uses, from the operator's own code (Kopf's login activities and vault).
//!
//! Without login handlers the operator uses the client it is given, or the
//! kubeconfig / in-cluster credentials kube infers. With them, it runs them
//! before anything else (the start-up handlers included) and sends every
//! request with what they returned: a [`ConnectionInfo`], or a whole
//! [`kube::config::Kubeconfig`]. Each handler's result is one credential;
//! the first usable one is used.
//!
//! # Guarantees
//! - A request answered `401 Unauthorized` marks its credential as
//!   refused and is sent again once, with the next credential. When no
//!   credential is left (or every one has expired), requests wait while the
//!   login handlers run again, and go on with what they return. Refused
//!   credentials are never used again, as in Kopf.
//! - Login handlers retry as other activities do (temporary errors after
//!   their delay, up to `retries` attempts and until `timeout` after the
//!   first). When they give no usable credential at
//!   start-up, the operator does not start ([`OperatorError::Login`]);
//!   later, requests fail with a message saying so until a login, retried
//!   with the operator's networking backoff, succeeds.
//! - A watch already streaming goes on with the credential it started
//!   with; its next request uses the current one.
//!
//! [`OperatorError::Login`]: crate::OperatorError::Login

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine as _;
use futures::future::BoxFuture;
use http::{Request, Response, StatusCode};
use kube::client::Body;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tower::{BoxError, Layer as _};

use crate::model::handlers::Handler;
use crate::model::kwargs::{Attempt, Kwargs, Logger, Memo};
use crate::model::retrying::{Backoff, RetryPolicy};
use crate::operations::metrics::ApiMetricsLayer;
use crate::processing::execution::{self, Disposition};

/// What a login handler returns: where the API server is and how to
/// authenticate to it (Kopf's `kopf.ConnectionInfo`).
///
/// Data fields hold PEM text; path fields name files read when the
/// credential is built. A handler may return a
/// [`kube::config::Kubeconfig`] instead (its current context is used).
///
/// ```
/// use kopf_runtime as kopf;
///
/// #[kopf::on_login(retries = 3)]
/// async fn login(logger: &kopf::Logger) -> kopf::Result<kopf::ConnectionInfo> {
///     let token = std::env::var("MY_API_TOKEN")?;
///     logger.info("logging in with the token from MY_API_TOKEN");
///     Ok(kopf::ConnectionInfo {
///         token: Some(token),
///         ca_path: Some("/etc/my-cluster/ca.crt".into()),
///         ..kopf::ConnectionInfo::new("https://my-cluster.example.com:6443")
///     })
/// }
/// # fn main() {}
/// ```
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConnectionInfo {
    /// The API server's URL, e.g. `https://127.0.0.1:6443`.
    pub server: String,
    /// A file with the certificate authority's certificate (PEM).
    pub ca_path: Option<PathBuf>,
    /// The certificate authority's certificate (PEM).
    pub ca_data: Option<String>,
    /// Do not verify the server's certificate.
    pub insecure: bool,
    /// Basic authentication's user name.
    pub username: Option<String>,
    /// Basic authentication's password.
    pub password: Option<String>,
    /// A bearer token.
    pub token: Option<String>,
    /// A file with the client certificate (PEM).
    pub certificate_path: Option<PathBuf>,
    /// The client certificate (PEM).
    pub certificate_data: Option<String>,
    /// A file with the client certificate's private key (PEM).
    pub private_key_path: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    pub private_key_data: Option<String>,
    /// The namespace of requests that name none.
    pub default_namespace: Option<String>,
    /// When the credential stops being valid: after it, the login handlers
    /// run again before the next request.
    pub expiration: Option<jiff::Timestamp>,
}

impl std::fmt::Debug for ConnectionInfo {
    /// Secrets are shown as `<hidden>`: connection info may be logged.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |secret: &Option<String>| secret.as_ref().map(|_| "<hidden>");
        f.debug_struct("ConnectionInfo")
            .field("server", &self.server)
            .field("ca_path", &self.ca_path)
            .field("ca_data", &self.ca_data.as_ref().map(|_| "…"))
            .field("insecure", &self.insecure)
            .field("username", &self.username)
            .field("password", &hidden(&self.password))
            .field("token", &hidden(&self.token))
            .field("certificate_path", &self.certificate_path)
            .field(
                "certificate_data",
                &self.certificate_data.as_ref().map(|_| "…"),
            )
            .field("private_key_path", &self.private_key_path)
            .field("private_key_data", &hidden(&self.private_key_data))
            .field("default_namespace", &self.default_namespace)
            .field("expiration", &self.expiration)
            .finish()
    }
}

impl ConnectionInfo {
    /// Connection info for `server`, without credentials.
    pub fn new(server: impl Into<String>) -> Self {
        Self {
            server: server.into(),
            ..Self::default()
        }
    }

    /// The kubeconfig that says the same.
    fn to_kubeconfig(&self) -> Value {
        let b64 = |pem: &String| base64::engine::general_purpose::STANDARD.encode(pem);
        let mut cluster = json!({"server": self.server});
        let mut user = json!({});
        let mut context = json!({"cluster": "login", "user": "login"});
        let put = |target: &mut Value, key: &str, value: Option<Value>| {
            if let (Some(value), Some(map)) = (value, target.as_object_mut()) {
                map.insert(key.to_owned(), value);
            }
        };
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| json!(p));
        put(
            &mut cluster,
            "insecure-skip-tls-verify",
            self.insecure.then_some(Value::Bool(true)),
        );
        put(&mut cluster, "certificate-authority", path(&self.ca_path));
        put(
            &mut cluster,
            "certificate-authority-data",
            self.ca_data.as_ref().map(|d| json!(b64(d))),
        );
        put(&mut user, "token", self.token.as_ref().map(|t| json!(t)));
        put(
            &mut user,
            "username",
            self.username.as_ref().map(|u| json!(u)),
        );
        put(
            &mut user,
            "password",
            self.password.as_ref().map(|p| json!(p)),
        );
        put(
            &mut user,
            "client-certificate",
            path(&self.certificate_path),
        );
        put(
            &mut user,
            "client-certificate-data",
            self.certificate_data.as_ref().map(|d| json!(b64(d))),
        );
        put(&mut user, "client-key", path(&self.private_key_path));
        put(
            &mut user,
            "client-key-data",
            self.private_key_data.as_ref().map(|d| json!(b64(d))),
        );
        put(
            &mut context,
            "namespace",
            self.default_namespace.as_ref().map(|n| json!(n)),
        );
        json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "login", "cluster": cluster}],
            "users": [{"name": "login", "user": user}],
            "contexts": [{"name": "login", "context": context}],
            "current-context": "login",
        })
    }
}

/// Why no credential could be made of a login handler's result, or why a
/// request found none.
#[derive(Debug, Clone, thiserror::Error)]
#[error("login failed: {0}")]
pub struct LoginError(String);

/// One credential: a client for it, and what identifies it.
#[derive(Clone)]
struct Credential {
    id: u64,
    client: kube::Client,
    expiration: Option<jiff::Timestamp>,
    /// A digest of what the handler returned, to know it when it comes again.
    digest: u64,
    default_namespace: String,
}

impl Credential {
    /// The credential a login handler's `result` describes.
    async fn of(result: &Value) -> Result<Credential, LoginError> {
        let is_kubeconfig = result
            .as_object()
            .is_some_and(|o| o.contains_key("clusters") || o.contains_key("contexts"));
        let (kubeconfig, expiration) = if is_kubeconfig {
            (result.clone(), None)
        } else {
            let info: ConnectionInfo = serde_json::from_value(result.clone()).map_err(|e| {
                LoginError(format!(
                    "the result is neither a `kopf::ConnectionInfo` nor a kubeconfig: {e}"
                ))
            })?;
            if info.server.is_empty() {
                return Err(LoginError(
                    "the connection info names no `server`; set it to the API server's URL".into(),
                ));
            }
            (info.to_kubeconfig(), info.expiration)
        };
        let kubeconfig: Kubeconfig = serde_json::from_value(kubeconfig)
            .map_err(|e| LoginError(format!("the kubeconfig does not parse: {e}")))?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| LoginError(format!("the credentials are not usable: {e}")))?;
        let default_namespace = config.default_namespace.clone();
        let client = kube::Client::try_from(config)
            .map_err(|e| LoginError(format!("no client can be made of the credentials: {e}")))?;
        static IDS: AtomicU64 = AtomicU64::new(0);
        Ok(Credential {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            client,
            expiration,
            digest: digest(result),
            default_namespace,
        })
    }

    fn expired(&self) -> bool {
        self.expiration
            .is_some_and(|expiration| expiration <= jiff::Timestamp::now())
    }
}

fn digest(value: &Value) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.to_string().hash(&mut hasher);
    hasher.finish()
}

/// What the vault holds: credentials, or where logging in is.
#[derive(Clone)]
enum LoginState {
    /// The login handlers run (at start, or once no credential is left).
    LoggingIn,
    /// The credentials to use, the first one first; never empty.
    Ready(Vec<Credential>),
    /// The last login gave no usable credential.
    Failed(String),
}

/// The credentials from the login handlers, and the handlers to get more
/// (Kopf's vault and authenticator).
pub(crate) struct Vault {
    handlers: Vec<Handler>,
    state: watch::Sender<LoginState>,
    /// Digests of the credentials the API server refused.
    refused: Mutex<HashSet<u64>>,
    backoffs: Vec<Duration>,
    /// The retry delay of login handlers without a `backoff` of their own.
    default_backoff: Duration,
    /// The operator's memo, which the login handlers receive.
    memo: Memo,
}

impl Vault {
    /// A vault filled by `handlers` (the `on_login` ones); after a failed
    /// login it tries again after each of `backoffs` (the last repeating).
    /// A handler without a `backoff` retries after `default_backoff`. The
    /// handlers receive `memo`, the operator's.
    pub(crate) fn new(
        handlers: Vec<Handler>,
        backoffs: Vec<Duration>,
        default_backoff: Duration,
        memo: Memo,
    ) -> Arc<Self> {
        Arc::new(Self {
            handlers,
            state: watch::Sender::new(LoginState::LoggingIn),
            refused: Mutex::new(HashSet::new()),
            backoffs,
            default_backoff,
            memo,
        })
    }

    /// Runs the login handlers once, for the first credentials, and returns
    /// a client that sends every request with the vault's credentials,
    /// counted by `counting` (whatever credential sends it), if given.
    ///
    /// # Errors
    /// [`LoginError`] if the handlers give no usable credential.
    pub(crate) async fn client(
        self: &Arc<Self>,
        counting: Option<ApiMetricsLayer>,
    ) -> Result<kube::Client, LoginError> {
        tracing::info!("Initial authentication has been initiated.");
        let credentials = self.login().await;
        self.fill(credentials.clone());
        let credentials = credentials?;
        tracing::info!("Initial authentication has finished.");
        let namespace = credentials
            .first()
            .map_or_else(|| "default".to_owned(), |c| c.default_namespace.clone());
        let service = LoginService {
            vault: Arc::clone(self),
        };
        Ok(match counting {
            Some(layer) => kube::Client::new(layer.layer(service), namespace),
            None => kube::Client::new(service, namespace),
        })
    }

    /// Logs in again whenever no credential is left, until `stop`.
    pub(crate) async fn authenticate(self: Arc<Self>, stop: CancellationToken) {
        let mut backoff = Backoff::endless(&self.backoffs);
        let mut state = self.state.subscribe();
        loop {
            tokio::select! {
                changed = state.wait_for(|s| matches!(s, LoginState::LoggingIn)) => {
                    if changed.is_err() {
                        return;
                    }
                }
                () = stop.cancelled() => return,
            }
            tracing::info!("Re-authentication has been initiated.");
            let credentials = tokio::select! {
                credentials = self.login() => credentials,
                () = stop.cancelled() => return,
            };
            let failed = credentials.is_err();
            self.fill(credentials);
            if !failed {
                tracing::info!("Re-authentication has finished.");
                backoff.reset();
                continue;
            }
            let delay = backoff.next_delay(None).unwrap_or(Duration::from_secs(1));
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = stop.cancelled() => return,
            }
            self.state.send_replace(LoginState::LoggingIn);
        }
    }

    fn fill(&self, credentials: Result<Vec<Credential>, LoginError>) {
        self.state.send_replace(match credentials {
            Ok(credentials) => LoginState::Ready(credentials),
            Err(LoginError(message)) => {
                tracing::error!("Authentication has failed: {message}");
                LoginState::Failed(message)
            }
        });
    }

    /// Runs every login handler; the usable credentials they return, in
    /// their order, none of them refused before.
    async fn login(&self) -> Result<Vec<Credential>, LoginError> {
        let mut credentials = Vec::new();
        for handler in &self.handlers {
            let Some(result) = run(handler, self.default_backoff, &self.memo).await else {
                continue;
            };
            match Credential::of(&result).await {
                Ok(credential) if self.is_refused(credential.digest) => {
                    tracing::warn!(handler = %handler.id(), "the login handler returned credentials the API server refused before; ignoring them");
                }
                Ok(credential) => credentials.push(credential),
                Err(LoginError(message)) => {
                    tracing::error!(handler = %handler.id(), "the login handler's result is not usable: {message}");
                }
            }
        }
        if credentials.is_empty() {
            return Err(LoginError(
                "no usable credentials were retrieved from the login handlers".into(),
            ));
        }
        Ok(credentials)
    }

    fn is_refused(&self, digest: u64) -> bool {
        self.refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&digest)
    }

    /// The credential to send a request with, once there is one.
    async fn credential(&self) -> Result<Credential, LoginError> {
        let mut state = self.state.subscribe();
        loop {
            let current = state.borrow_and_update().clone();
            match current {
                LoginState::Ready(credentials) => match credentials.first() {
                    Some(first) if first.expired() => self.drop_credential(first.id, false),
                    Some(first) => return Ok(first.clone()),
                    None => {}
                },
                LoginState::Failed(message) => return Err(LoginError(message)),
                LoginState::LoggingIn => {}
            }
            if state.changed().await.is_err() {
                return Err(LoginError("the operator is stopping".into()));
            }
        }
    }

    /// Stops using the credential `id` (`refused` by the API server, or
    /// expired); without credentials, the login handlers run again.
    fn drop_credential(&self, id: u64, refused: bool) {
        self.state.send_if_modified(|state| {
            let LoginState::Ready(credentials) = state else {
                return false;
            };
            let Some(position) = credentials.iter().position(|c| c.id == id) else {
                return false;
            };
            let credential = credentials.remove(position);
            if refused {
                self.refused
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(credential.digest);
                tracing::info!("The API server refused a credential (401 Unauthorized).");
            }
            if credentials.is_empty() {
                *state = LoginState::LoggingIn;
            }
            true
        });
    }

    /// Sends `request` with the current credential; on `401`, once more
    /// with the next one. Errors are the client's own (`kube::Error`), or a
    /// [`LoginError`] when there is no credential.
    async fn send(&self, request: Request<Body>) -> Result<Response<Body>, BoxError> {
        let again = try_clone(&request);
        let credential = self.credential().await?;
        let response = credential.client.send(request).await?;
        if response.status() != StatusCode::UNAUTHORIZED {
            return Ok(response);
        }
        self.drop_credential(credential.id, true);
        let Some(again) = again else {
            return Ok(response);
        };
        let credential = self.credential().await?;
        Ok(credential.client.send(again).await?)
    }
}

/// A copy of a request whose body is in memory (every request kube makes).
fn try_clone(request: &Request<Body>) -> Option<Request<Body>> {
    let mut copy = Request::new(request.body().try_clone()?);
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    Some(copy)
}

/// Runs one login handler, with the operator's `memo`, until it succeeds or
/// fails for good; its result, if any.
async fn run(handler: &Handler, default_backoff: Duration, memo: &Memo) -> Option<Value> {
    let logger = Logger::new(handler.id().to_owned());
    let started = jiff::Timestamp::now();
    let since = tokio::time::Instant::now();
    let policy = RetryPolicy::of(handler.options(), default_backoff);
    let mut retry = 0;
    loop {
        let runtime = since.elapsed();
        let kwargs = Kwargs::of_operator(memo.clone(), logger.clone()).with_attempt(Attempt {
            retry,
            started,
            runtime,
        });
        let outcome = execution::invoke(handler, kwargs, policy.limit(runtime)).await;
        let attempt = (retry, since.elapsed());
        match execution::resolve_attempt(handler, outcome, &policy, attempt, &logger) {
            Disposition::Succeeded(result) => return result,
            Disposition::Ignored | Disposition::Failed { .. } => return None,
            Disposition::Retry { delay, .. } => {
                retry += 1;
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// The HTTP service of the operator's client: each request goes through
/// the vault's current credential.
#[derive(Clone)]
struct LoginService {
    vault: Arc<Vault>,
}

impl tower::Service<Request<Body>> for LoginService {
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<Body>, BoxError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let vault = Arc::clone(&self.vault);
        Box::pin(async move { vault.send(request).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_info_reads_as_a_kubeconfig() {
        let info = ConnectionInfo {
            token: Some("t".into()),
            ca_data: Some("PEM".into()),
            insecure: true,
            default_namespace: Some("ns".into()),
            ..ConnectionInfo::new("https://127.0.0.1:6443")
        };
        let kubeconfig: Kubeconfig =
            serde_json::from_value(info.to_kubeconfig()).expect("a kubeconfig");
        let cluster = kubeconfig.clusters[0].cluster.clone().expect("a cluster");
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(cluster.insecure_skip_tls_verify, Some(true));
        assert_eq!(cluster.certificate_authority_data.as_deref(), Some("UEVN"));
        let context = kubeconfig.contexts[0].context.clone().expect("a context");
        assert_eq!(context.namespace.as_deref(), Some("ns"));
    }

    #[tokio::test]
    async fn results_become_credentials_or_say_why_not() {
        let info =
            serde_json::to_value(ConnectionInfo::new("http://127.0.0.1:1")).expect("serializable");
        let credential = Credential::of(&info).await.expect("usable");
        assert_eq!(credential.default_namespace, "default");

        let kubeconfig = json!({
            "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:2"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "ns"}}],
            "current-context": "x",
        });
        let credential = Credential::of(&kubeconfig).await.expect("usable");
        assert_eq!(credential.default_namespace, "ns");

        let error = Credential::of(&json!(42)).await.err().expect("not usable");
        assert!(error.to_string().contains("ConnectionInfo"), "{error}");

        // Fields may be left out, as in JSON written by hand; not the server.
        let partial = json!({"server": "http://127.0.0.1:3", "token": "t"});
        assert!(Credential::of(&partial).await.is_ok());
        let error = Credential::of(&json!({"token": "t"}))
            .await
            .err()
            .expect("no server");
        assert!(error.to_string().contains("server"), "{error}");
    }

    #[test]
    fn secrets_do_not_show_in_debug_output() {
        let info = ConnectionInfo {
            token: Some("s3cr3t".into()),
            password: Some("pa55".into()),
            ..ConnectionInfo::new("https://example.com")
        };
        let shown = format!("{info:?}");
        assert!(
            !shown.contains("s3cr3t") && !shown.contains("pa55"),
            "{shown}"
        );
        assert!(shown.contains("example.com"));
    }
}
