//! The public handle of a running emulator and its builder.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::admission::ServiceKey;
use crate::error::EmulatorError;
use crate::failures::ApiError;
use crate::faults::Faults;
use crate::history::{DEFAULT_HISTORY_AGE, DEFAULT_HISTORY_BYTES};
use crate::preload;
use crate::rbac::usage::RbacUsage;
use crate::recording::RecordedRequest;
use crate::resources;
use crate::server::{self, ConnectionLimits, Running};
use crate::shared::Shared;
use crate::store::Store;

/// Default number of watch events kept per resource for resuming watches.
pub const DEFAULT_HISTORY_LIMIT: usize = 100_000;

/// How often a restart retries binding the same port.
const REBIND_RETRIES: u32 = 250;

#[derive(Debug, Clone)]
enum Preload {
    Yaml(String),
    File(PathBuf),
}

/// How long a restart asked for through the admin endpoint waits, so that
/// the admin request's own answer is sent before every connection closes.
const ADMIN_RESTART_GRACE: Duration = Duration::from_millis(50);

/// Stops the server generation `running` holds, resets the store to
/// `reset` if given, keeps the port closed for `down`, then serves `addr`
/// again, unless the emulator is shut down (`stopped`) meanwhile: then the
/// port stays closed and the restart ends at once.
async fn restart_server(
    running: &tokio::sync::Mutex<Option<Running>>,
    stopped: &CancellationToken,
    shared: &Arc<Shared>,
    addr: SocketAddr,
    reset: Option<&[Value]>,
    down: Duration,
) {
    let mut running = tokio::select! {
        _ = stopped.cancelled() => return,
        running = running.lock() => running,
    };
    if let Some(r) = running.take() {
        r.stop().await;
    }
    if let Some(objects) = reset {
        let mut store = shared.store();
        store.reset();
        if let Err(e) = preload::apply(&mut store, objects) {
            tracing::warn!(error = %e, "emulator: re-applying preloads after restart failed");
        }
    }
    let rebound = stopped
        .run_until_cancelled(async {
            if !down.is_zero() {
                tokio::time::sleep(down).await;
            }
            server::bind(addr, REBIND_RETRIES).await
        })
        .await;
    match rebound {
        None => {}
        Some(Ok(listener)) => *running = Some(server::spawn(listener, shared.clone())),
        Some(Err(e)) => tracing::error!(error = %e, "emulator: cannot re-bind after restart"),
    }
}

/// Configures and starts an [`Emulator`].
#[derive(Debug, Clone)]
#[must_use = "call .start().await to run the emulator"]
pub struct EmulatorBuilder {
    port: u16,
    crds: Vec<Value>,
    preloads: Vec<Preload>,
    history_limit: usize,
    history_bytes: usize,
    history_age: Duration,
    connection_limits: ConnectionLimits,
    token: Option<String>,
    webhook_services: HashMap<ServiceKey, SocketAddr>,
    request_timeout: Duration,
    rbac: bool,
}

impl Default for EmulatorBuilder {
    fn default() -> Self {
        Self {
            port: 0,
            crds: Vec::new(),
            preloads: Vec::new(),
            history_limit: DEFAULT_HISTORY_LIMIT,
            history_bytes: DEFAULT_HISTORY_BYTES,
            history_age: DEFAULT_HISTORY_AGE,
            connection_limits: ConnectionLimits::default(),
            token: None,
            webhook_services: HashMap::new(),
            request_timeout: crate::admission::deadline::DEFAULT_REQUEST_TIMEOUT,
            rbac: false,
        }
    }
}

impl EmulatorBuilder {
    /// Listens on this port of 127.0.0.1 (0, the default, picks a free one).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Registers a CRD (with a status subresource and a schema preserving unknown
    /// fields), exactly as creating it through the API would.
    pub fn crd(
        mut self,
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
    ) -> Self {
        self.crds.push(resources::crd_object(
            group, version, plural, kind, namespaced,
        ));
        self
    }

    /// Registers a CRD given whole, as its manifest (e.g. a
    /// `CustomResourceExt::crd()` serialized): with its short names,
    /// categories, printer columns and schema, exactly as creating it
    /// through the API would. An invalid one fails [`start`](Self::start).
    pub fn crd_manifest(mut self, crd: Value) -> Self {
        self.crds.push(crd);
        self
    }

    /// Creates the objects of a multi-document YAML at start (CRDs and namespaces
    /// first; missing namespaces are created).
    pub fn preload_yaml(mut self, yaml: &str) -> Self {
        self.preloads.push(Preload::Yaml(yaml.into()));
        self
    }

    /// Like [`preload_yaml`](Self::preload_yaml), reading a file at start.
    pub fn preload_file(mut self, path: impl AsRef<Path>) -> Self {
        self.preloads
            .push(Preload::File(path.as_ref().to_path_buf()));
        self
    }

    /// How many watch events are kept per resource for resuming watches
    /// (older resourceVersions get `410 Gone`).
    pub fn history_limit(mut self, events: usize) -> Self {
        self.history_limit = events.max(1);
        self
    }

    /// How many bytes of watch events are kept, over every resource
    /// (default 128 MiB); the oldest events go first (resuming before them
    /// gets `410 Gone`).
    pub fn history_bytes(mut self, bytes: usize) -> Self {
        self.history_bytes = bytes;
        self
    }

    /// How long watch events are kept (default 5 minutes, the API server's
    /// compaction interval); resuming before them gets `410 Gone`.
    pub fn history_age(mut self, age: Duration) -> Self {
        self.history_age = age;
        self
    }

    /// How long a client may take to send a request's headers, from their
    /// first byte (default 30 s); waiting for the first byte is idling.
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.connection_limits.header_read_timeout = timeout;
        self
    }

    /// How long a connection may stay open with no request in flight (default
    /// 120 s); a watch streaming its response counts as a request in flight.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.connection_limits.idle_timeout = timeout;
        self
    }

    /// How many connections are served at once (default 1,024): at the cap
    /// the connection idle the longest is closed to make room, and when every
    /// one is busy a newcomer is answered `503 ServiceUnavailable`.
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.connection_limits.max_connections = connections.max(1);
        self
    }

    /// Requires `Authorization: Bearer <token>` (the scheme in any case) on
    /// every API request; others are answered `401 Unauthorized`. The
    /// `/_emulator/` endpoints are open, and so are `/version`, `/healthz`,
    /// `/livez` and `/readyz` to a request with no bearer token, as a
    /// cluster lets anyone read them (a wrong token is still refused). [`Emulator::client`] and [`Emulator::kubeconfig`]
    /// carry the token, and [`Emulator::set_token`] changes it (a rotation).
    pub fn require_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Authenticates and authorizes every request as an API server with
    /// RBAC does (off by default: everyone may do everything).
    ///
    /// - Who: the token the emulator requires ([`require_token`](Self::require_token)),
    ///   or no token when none is required, is `system:admin` in
    ///   `system:masters`, allowed everything ([`Emulator::client`] and
    ///   [`Emulator::kubeconfig`] are that); a token the TokenRequest API
    ///   minted (`POST /api/v1/namespaces/NS/serviceaccounts/NAME/token`,
    ///   `kubectl create token`, [`Emulator::service_account_token`]) is
    ///   `system:serviceaccount:NS:NAME` in `system:serviceaccounts`,
    ///   `system:serviceaccounts:NS` and `system:authenticated`, until it
    ///   expires or its ServiceAccount is deleted (or replaced: tokens are
    ///   bound to its UID); no token while one is required is
    ///   `system:anonymous` in `system:unauthenticated`; any other token
    ///   is `401`.
    /// - What: everyone else gets what the stored Roles, ClusterRoles,
    ///   RoleBindings and ClusterRoleBindings grant, matched as the API
    ///   server's RBAC authorizer matches them (verbs, groups, resources
    ///   with `*` and `*/SUB`, resource names, non-resource URLs), and
    ///   `403 Forbidden` with its `Status` otherwise. The ClusterRoles
    ///   every user gets in a cluster (`system:discovery`,
    ///   `system:basic-user`, `system:public-info-viewer`) and their
    ///   ClusterRoleBindings are created at start.
    /// - The record: [`Emulator::rbac_usage`] (and
    ///   `GET /_emulator/rbac/usage`) tells which rule allowed each
    ///   user's requests and which requests were denied.
    ///
    /// The RBAC, review and TokenRequest APIs are served with or without
    /// it; without it, reviews answer as an API server allowing
    /// everything, and minted tokens authenticate nobody.
    ///
    /// Roles, ClusterRoles and bindings are validated (422) and their
    /// subjects defaulted as the API server does, with or without it.
    ///
    /// `Impersonate-User` and `Impersonate-Group` are granted as the API
    /// server grants them (the `impersonate` verb on `users`,
    /// `serviceaccounts`, `groups`); [`Emulator::client_as`] acts as any
    /// user that way.
    ///
    /// A user other than the administrator may write a Role or ClusterRole
    /// only with rules it holds (or `escalate` on it), and bind a role only
    /// if it holds its rules (or `bind` on it), as the API server checks.
    ///
    /// Not done: aggregated ClusterRoles, `LocalSubjectAccessReview`,
    /// `TokenReview`, `Impersonate-Extra-*`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::Secret;
    /// let emulator = kopf_testing::Emulator::builder().rbac().start().await?;
    /// # let sa: k8s_openapi::api::core::v1::ServiceAccount = serde_json::from_value(serde_json::json!({"metadata": {"name": "op"}}))?;
    /// # kube::Api::<k8s_openapi::api::core::v1::ServiceAccount>::default_namespaced(emulator.client()).create(&Default::default(), &sa).await?;
    /// let operator = emulator.client_as_service_account("default", "op")?;
    /// let secrets: kube::Api<Secret> = kube::Api::default_namespaced(operator);
    /// assert!(secrets.list(&Default::default()).await.is_err(), "403: no Role grants it");
    /// assert_eq!(emulator.rbac_usage().denials[0].resource, "secrets");
    /// # Ok(()) }
    /// ```
    pub fn rbac(mut self) -> Self {
        self.rbac = true;
        self
    }

    /// Gives each request this long (60 s by default, the API server's
    /// `--request-timeout`) for its admission webhooks together: each call
    /// is bounded by its `timeoutSeconds` and by what is left of this, and a
    /// request still calling webhooks when it runs out is answered `504
    /// Timeout`, as the API server answers it.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Serves the admission webhooks that configurations reach through the
    /// Service `namespace/name` on `port` (`clientConfig.service`, port 443
    /// when unset) at `addr`, as the emulator resolves no Service DNS. The
    /// server certificate is verified for `NAME.NAMESPACE.svc`, as the API
    /// server verifies it. Calls to a Service not mapped fail (and
    /// `failurePolicy` decides).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), kopf_testing::EmulatorError> {
    /// let emulator = kopf_testing::Emulator::builder()
    ///     .webhook_service("operators", "kopf-webhook", 443, ([127, 0, 0, 1], 9443).into())
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn webhook_service(
        mut self,
        namespace: impl Into<String>,
        name: impl Into<String>,
        port: u16,
        addr: SocketAddr,
    ) -> Self {
        self.webhook_services
            .insert((namespace.into(), name.into(), port), addr);
        self
    }

    /// Starts the emulator on 127.0.0.1.
    ///
    /// # Errors
    /// If the port cannot be bound, or a preload is unreadable, invalid or rejected.
    pub async fn start(self) -> Result<Emulator, EmulatorError> {
        let mut objects = self.crds.clone();
        if self.rbac {
            objects.extend(crate::rbac::bootstrap::objects());
        }
        for preload in &self.preloads {
            let yaml = match preload {
                Preload::Yaml(yaml) => yaml.clone(),
                Preload::File(path) => {
                    std::fs::read_to_string(path).map_err(|source| EmulatorError::PreloadFile {
                        path: path.clone(),
                        source,
                    })?
                }
            };
            objects.extend(preload::parse(&yaml)?);
        }
        let mut store = Store::new(self.history_limit);
        store.set_history_bounds(self.history_bytes, self.history_age);
        preload::apply(&mut store, &objects)?;
        let listener = server::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, self.port)), 0).await?;
        let addr = listener
            .local_addr()
            .map_err(|source| EmulatorError::Bind {
                addr: SocketAddr::from((Ipv4Addr::LOCALHOST, self.port)),
                source,
            })?;
        let mut shared = Shared::new(store, addr.port());
        shared.connection_limits = self.connection_limits;
        shared.set_token(self.token);
        shared.rbac.enabled = self.rbac;
        shared.admission.set_services(self.webhook_services);
        shared.admission.request_timeout = self.request_timeout;
        let (restarts, mut restart_requests) = tokio::sync::mpsc::unbounded_channel();
        shared.restarts = Some(restarts);
        let shared = Arc::new(shared);
        let running = Arc::new(tokio::sync::Mutex::new(Some(server::spawn(
            listener,
            shared.clone(),
        ))));
        // Restarts asked for through the admin endpoint. The loop holds the
        // shared state weakly: it ends when the emulator is gone (the
        // sender lives in the shared state).
        // Shutting down ends the loop, and a restart under way.
        let weak = Arc::downgrade(&shared);
        let restarting = Arc::downgrade(&running);
        let stopped = CancellationToken::new();
        let stopping = stopped.clone();
        tokio::spawn(async move {
            while let Some(Some(down)) = stopping.run_until_cancelled(restart_requests.recv()).await
            {
                // Let the admin request's answer go out before its
                // connection is closed with the others.
                tokio::time::sleep(ADMIN_RESTART_GRACE).await;
                let (Some(shared), Some(running)) = (weak.upgrade(), restarting.upgrade()) else {
                    return;
                };
                restart_server(&running, &stopping, &shared, addr, None, down).await;
            }
        });
        tracing::debug!(%addr, "emulator: listening");
        Ok(Emulator {
            faults: Faults {
                shared: shared.clone(),
            },
            shared,
            addr,
            objects,
            running,
            stopped,
        })
    }
}

/// An in-memory Kubernetes API server listening on 127.0.0.1.
///
/// Dropping it stops the server (open connections are closed shortly after).
///
/// # Caveats
/// [`client`](Self::client) must be called inside a Tokio runtime.
#[derive(Debug)]
pub struct Emulator {
    pub(crate) shared: Arc<Shared>,
    faults: Faults,
    addr: SocketAddr,
    objects: Vec<Value>,
    running: Arc<tokio::sync::Mutex<Option<Running>>>,
    /// Cancelled on shutdown: ends restarts under way, so that no restart
    /// keeps the emulator from stopping.
    stopped: CancellationToken,
}

impl Emulator {
    /// Starts an emulator on a free port with the namespaces `default`,
    /// `kube-system` and `kube-public`.
    ///
    /// # Errors
    /// If no port can be bound.
    pub async fn start() -> Result<Emulator, EmulatorError> {
        Self::builder().start().await
    }

    /// A builder for CRDs, preloads, a fixed port or a history limit.
    pub fn builder() -> EmulatorBuilder {
        EmulatorBuilder::default()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kube client for this emulator, with default namespace `default`
    /// (and the token it requires now, if any).
    pub fn client(&self) -> kube::Client {
        let uri: http::Uri = self
            .url()
            .parse()
            .expect("invariant: an http://127.0.0.1:PORT URL parses");
        let mut config = kube::Config::new(uri);
        config.auth_info.token = self.token().map(Into::into);
        kube::Client::try_from(config)
            .expect("invariant: a plain-HTTP config always builds a client")
    }

    /// A kubeconfig pointing at this emulator (context `kopf-emulator`,
    /// namespace `default`, and the token it requires now, if any).
    pub fn kubeconfig(&self) -> kube::config::Kubeconfig {
        let doc = kubeconfig_json(&self.url(), self.token().as_deref());
        serde_json::from_value(doc)
            .expect("invariant: the kubeconfig document matches kube's schema")
    }

    /// Writes [`kubeconfig`](Self::kubeconfig) to a file (atomically: a temporary file, then rename).
    ///
    /// # Errors
    /// If the file cannot be written.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        write_kubeconfig_file(&self.url(), self.token().as_deref(), path)
    }

    /// The bearer token API requests must carry, if one is required (see
    /// [`EmulatorBuilder::require_token`]).
    pub fn token(&self) -> Option<String> {
        self.shared.token()
    }

    /// Requires `token` from now on (`None`: none). Requests with the old
    /// token get `401 Unauthorized`, as after a rotation of credentials;
    /// watches already streaming go on.
    pub fn set_token(&self, token: Option<&str>) {
        self.shared.set_token(token.map(str::to_owned));
    }

    /// What RBAC decided so far: which rule allowed each user's requests
    /// (how many), and each request denied (see [`EmulatorBuilder::rbac`];
    /// empty without it).
    pub fn rbac_usage(&self) -> RbacUsage {
        self.shared.rbac.usage.snapshot()
    }

    /// Forgets what [`rbac_usage`](Self::rbac_usage) recorded.
    pub fn clear_rbac_usage(&self) {
        self.shared.rbac.usage.clear();
    }

    /// Mints a token for the ServiceAccount `namespace/name`, as the
    /// TokenRequest API does (valid for an hour): with
    /// [`EmulatorBuilder::rbac`], requests with it are that ServiceAccount's.
    ///
    /// # Errors
    /// `404` if the ServiceAccount does not exist.
    pub fn service_account_token(&self, namespace: &str, name: &str) -> Result<String, ApiError> {
        let answer = crate::rbac::reviews::token_request(&self.shared, namespace, name, json!({}))?;
        answer
            .pointer("/status/token")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| ApiError::internal("the TokenRequest was answered without a token"))
    }

    /// A kube client for this emulator that authenticates as the
    /// ServiceAccount `namespace/name` (with a token from
    /// [`service_account_token`](Self::service_account_token)), with
    /// default namespace `namespace`.
    ///
    /// # Errors
    /// `404` if the ServiceAccount does not exist.
    ///
    /// # Caveats
    /// Must be called inside a Tokio runtime.
    pub fn client_as_service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<kube::Client, ApiError> {
        let token = self.service_account_token(namespace, name)?;
        let uri: http::Uri = self
            .url()
            .parse()
            .expect("invariant: an http://127.0.0.1:PORT URL parses");
        let mut config = kube::Config::new(uri);
        config.default_namespace = namespace.to_string();
        config.auth_info.token = Some(token.into());
        Ok(kube::Client::try_from(config)
            .expect("invariant: a plain-HTTP config always builds a client"))
    }

    /// A kubeconfig pointing at this emulator that authenticates as the
    /// ServiceAccount `namespace/name` (a fresh token, valid for an hour),
    /// with default namespace `namespace`: for an operator run as its own
    /// process (write it with `serde_json::to_string`, which kubeconfig
    /// readers accept as YAML).
    ///
    /// # Errors
    /// `404` if the ServiceAccount does not exist.
    pub fn kubeconfig_as_service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<kube::config::Kubeconfig, ApiError> {
        let token = self.service_account_token(namespace, name)?;
        let mut doc = kubeconfig_json(&self.url(), Some(&token));
        doc["contexts"][0]["context"]["namespace"] = json!(namespace);
        Ok(serde_json::from_value(doc)
            .expect("invariant: the kubeconfig document matches kube's schema"))
    }

    /// A kube client for this emulator acting as `user` in `groups`
    /// (`Impersonate-User`, `Impersonate-Group`), as the administrator
    /// impersonates: with [`EmulatorBuilder::rbac`], its requests are
    /// authorized as that user's, who needs no credentials of its own
    /// (`system:authenticated` is added to the groups; a ServiceAccount's
    /// user name with no groups gets its ServiceAccount groups).
    ///
    /// # Caveats
    /// Must be called inside a Tokio runtime.
    pub fn client_as(&self, user: &str, groups: &[&str]) -> kube::Client {
        let uri: http::Uri = self
            .url()
            .parse()
            .expect("invariant: an http://127.0.0.1:PORT URL parses");
        let mut config = kube::Config::new(uri);
        config.auth_info.token = self.token().map(Into::into);
        config.auth_info.impersonate = Some(user.to_string());
        if !groups.is_empty() {
            config.auth_info.impersonate_groups =
                Some(groups.iter().map(|g| g.to_string()).collect());
        }
        kube::Client::try_from(config)
            .expect("invariant: a plain-HTTP config always builds a client")
    }

    /// The fault-injection handle.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The requests served so far (oldest first, bounded).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.recorder.snapshot()
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        self.shared.recorder.clear();
    }

    /// Restarts the server on the same port, closing every connection and watch.
    ///
    /// With `keep_state = false`, all objects, CRDs and history are wiped (the
    /// resourceVersion keeps growing, so old versions get `410 Gone`), then the
    /// builder's CRDs and preloads are created again, as at start.
    pub async fn restart(&self, keep_state: bool) {
        let reset = (!keep_state).then_some(self.objects.as_slice());
        restart_server(
            &self.running,
            &self.stopped,
            &self.shared,
            self.addr,
            reset,
            Duration::ZERO,
        )
        .await;
    }

    /// Restarts the server as a process restart that keeps its storage
    /// would (an API server in front of a kept etcd): every connection and
    /// watch is closed, new connections are refused for `down`, then the
    /// same port is served again. Objects, watch history, resourceVersions,
    /// fault rules and request counts are kept, so clients resume their
    /// watches where they were. `POST /_emulator/restart` does the same from
    /// another process.
    pub async fn restart_with_downtime(&self, down: Duration) {
        restart_server(
            &self.running,
            &self.stopped,
            &self.shared,
            self.addr,
            None,
            down,
        )
        .await;
    }

    /// Stops the server and waits for every connection to close; a
    /// restart under way ends without serving again.
    pub async fn shutdown(self) {
        self.stopped.cancel();
        if let Some(r) = self.running.lock().await.take() {
            r.stop().await;
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.stopped.cancel();
        // Locked only while a restart is under way, which ends on the
        // cancellation above without serving again.
        if let Ok(running) = self.running.try_lock()
            && let Some(r) = running.as_ref()
        {
            r.signal_stop();
        }
    }
}

/// The kubeconfig document for a server URL (with a bearer token).
pub(crate) fn kubeconfig_json(url: &str, token: Option<&str>) -> Value {
    let user = match token {
        Some(token) => json!({"token": token}),
        None => json!({}),
    };
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kopf-emulator", "cluster": {"server": url}}],
        "users": [{"name": "kopf-emulator", "user": user}],
        "contexts": [{"name": "kopf-emulator", "context": {"cluster": "kopf-emulator", "user": "kopf-emulator", "namespace": "default"}}],
        "current-context": "kopf-emulator",
        "preferences": {},
    })
}

/// Writes a kubeconfig for `url` (with a bearer token) to `path` atomically.
pub(crate) fn write_kubeconfig_file(
    url: &str,
    token: Option<&str>,
    path: &Path,
) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(&kubeconfig_json(url, token))
        .map_err(std::io::Error::other)?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "kubeconfig".into());
    let tmp = path.with_file_name(format!(".{file_name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::{StreamExt, TryStreamExt};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
    use kube::runtime::watcher;

    use super::*;

    fn cm(name: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.data = Some([("k".to_string(), "v".to_string())].into());
        cm
    }

    #[tokio::test]
    async fn kube_api_crud_round_trip() {
        let emulator = Emulator::start().await.unwrap();
        let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
        let created = api.create(&PostParams::default(), &cm("a")).await.unwrap();
        assert!(created.metadata.uid.is_some());
        let got = api.get("a").await.unwrap();
        assert_eq!(
            got.metadata.resource_version,
            created.metadata.resource_version
        );
        let patch = serde_json::json!({"data": {"k": "w"}});
        let patched = api
            .patch("a", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        assert_eq!(patched.data.unwrap()["k"], "w");
        assert_eq!(
            api.list(&ListParams::default()).await.unwrap().items.len(),
            1
        );
        api.delete("a", &DeleteParams::default()).await.unwrap();
        let err = api.get("a").await.unwrap_err();
        assert!(
            matches!(err, kube::Error::Api(ref s) if s.code == 404),
            "{err:?}"
        );
        assert!(
            emulator
                .requests()
                .iter()
                .any(|r| r.verb == "patch" && r.status == 200)
        );
    }

    #[tokio::test]
    async fn kube_watcher_sees_changes_and_survives_restart() {
        let emulator = Emulator::start().await.unwrap();
        let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
        let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
        let first = tokio::time::timeout(Duration::from_secs(5), events.try_next())
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(first, Some(watcher::Event::Init)));
        api.create(&PostParams::default(), &cm("a")).await.unwrap();
        let seen = async {
            while let Some(ev) = events.try_next().await.transpose() {
                if let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = ev
                    && o.metadata.name.as_deref() == Some("a")
                {
                    return;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(5), seen)
            .await
            .unwrap();
        let port = emulator.addr().port();
        emulator.restart(true).await;
        assert_eq!(emulator.addr().port(), port);
        api.create(&PostParams::default(), &cm("b")).await.ok();
        let seen = async {
            while let Some(ev) = events.next().await {
                if let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = ev
                    && o.metadata.name.as_deref() == Some("b")
                {
                    return;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), seen)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn injected_failures_answer_status() {
        let emulator = Emulator::start().await.unwrap();
        let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
        emulator
            .faults()
            .fail_next(1, crate::FailRule::status(500).verb("list"));
        let err = api.list(&ListParams::default()).await.unwrap_err();
        assert!(
            matches!(err, kube::Error::Api(ref s) if s.code == 500),
            "{err:?}"
        );
        assert!(api.list(&ListParams::default()).await.is_ok());
        // kube retries 429 after Retry-After: the request log shows both answers.
        emulator.clear_requests();
        emulator
            .faults()
            .fail_next(1, crate::FailRule::status(429).verb("list"));
        assert!(api.list(&ListParams::default()).await.is_ok());
        let statuses: Vec<u16> = emulator.requests().iter().map(|r| r.status).collect();
        assert_eq!(statuses, vec![429, 200]);
    }

    async fn wait_for_apply<S>(events: &mut S, name: &str)
    where
        S: futures::Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>> + Unpin,
    {
        let seen = async {
            while let Some(ev) = events.next().await {
                if let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = ev
                    && o.metadata.name.as_deref() == Some(name)
                {
                    return;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), seen)
            .await
            .expect("the watcher saw the object in time");
    }

    #[tokio::test]
    async fn streaming_list_watcher_works() {
        let emulator = Emulator::start().await.unwrap();
        let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
        api.create(&PostParams::default(), &cm("before"))
            .await
            .unwrap();
        let mut events = watcher(api.clone(), watcher::Config::default().streaming_lists()).boxed();
        wait_for_apply(&mut events, "before").await;
        api.create(&PostParams::default(), &cm("after"))
            .await
            .unwrap();
        wait_for_apply(&mut events, "after").await;
        assert!(
            emulator
                .requests()
                .iter()
                .any(|r| r.verb == "watch" && r.query.contains("sendInitialEvents=true"))
        );
    }

    #[tokio::test]
    async fn watcher_recovers_from_compaction() {
        let emulator = Emulator::start().await.unwrap();
        let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
        let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
        api.create(&PostParams::default(), &cm("a")).await.unwrap();
        wait_for_apply(&mut events, "a").await;
        api.create(&PostParams::default(), &cm("b")).await.unwrap();
        emulator.faults().compact();
        emulator.faults().drop_watches();
        api.create(&PostParams::default(), &cm("c")).await.unwrap();
        wait_for_apply(&mut events, "c").await;
    }

    #[tokio::test]
    async fn label_selected_watch_sees_objects_leave() {
        let emulator = Emulator::start().await.unwrap();
        let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
        let mut labelled = cm("a");
        labelled.metadata.labels = Some([("app".to_string(), "x".to_string())].into());
        api.create(&PostParams::default(), &labelled).await.unwrap();
        let mut events = watcher(api.clone(), watcher::Config::default().labels("app=x")).boxed();
        wait_for_apply(&mut events, "a").await;
        let patch = serde_json::json!({"metadata": {"labels": {"app": "y"}}});
        api.patch("a", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        let deleted = async {
            while let Some(ev) = events.next().await {
                if let Ok(watcher::Event::Delete(o)) = ev {
                    return o.metadata.name;
                }
            }
            None
        };
        let name = tokio::time::timeout(Duration::from_secs(5), deleted)
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("a"));
    }

    #[tokio::test]
    async fn controller_reconciles_custom_resources_with_status() {
        use kube::api::DynamicObject;
        use kube::discovery::ApiResource;
        use kube::runtime::Controller;
        use kube::runtime::controller::Action;

        let emulator = Emulator::builder()
            .crd("example.com", "v1", "widgets", "Widget", true)
            .start()
            .await
            .unwrap();
        let client = emulator.client();
        let ar = ApiResource {
            group: "example.com".into(),
            version: "v1".into(),
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
        let mut w = DynamicObject::new("w1", &ar);
        w.data = serde_json::json!({"spec": {"size": 1}});
        api.create(&PostParams::default(), &w).await.unwrap();

        let ctx = Arc::new(api.clone());
        let reconcile = |obj: Arc<DynamicObject>, api: Arc<Api<DynamicObject>>| async move {
            let name = obj.metadata.name.clone().unwrap_or_default();
            let status = serde_json::json!({"status": {"seen": obj.metadata.generation}});
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await?;
            Ok::<_, kube::Error>(Action::await_change())
        };
        let error_policy = |_: Arc<DynamicObject>, _: &kube::Error, _: Arc<Api<DynamicObject>>| {
            Action::await_change()
        };
        let controller = Controller::new_with(api.clone(), watcher::Config::default(), ar.clone())
            .run(reconcile, error_policy, ctx)
            .for_each(|_| async {});
        let check = async {
            loop {
                let obj = api.get("w1").await.unwrap();
                if obj.data.pointer("/status/seen") == Some(&serde_json::json!(1)) {
                    return obj;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let obj = tokio::select! {
            obj = check => obj,
            _ = controller => panic!("the controller stopped"),
            _ = tokio::time::sleep(Duration::from_secs(10)) => panic!("not reconciled in time"),
        };
        assert_eq!(
            obj.metadata.generation,
            Some(1),
            "a status write does not bump the generation"
        );
        assert_eq!(obj.data["spec"]["size"], 1);
    }

    #[tokio::test]
    async fn a_required_token_is_checked_and_can_be_rotated() {
        let emulator = Emulator::builder()
            .require_token("t1")
            .start()
            .await
            .unwrap();
        let anonymous =
            kube::Client::try_from(kube::Config::new(emulator.url().parse().unwrap())).unwrap();
        let api: Api<ConfigMap> = Api::default_namespaced(anonymous);
        let err = api.list(&ListParams::default()).await.unwrap_err();
        assert!(
            matches!(err, kube::Error::Api(ref s) if s.code == 401 && s.reason == "Unauthorized"),
            "{err:?}"
        );
        let old: Api<ConfigMap> = Api::default_namespaced(emulator.client());
        old.create(&PostParams::default(), &cm("a")).await.unwrap();

        emulator.set_token(Some("t2"));
        let err = old.get("a").await.unwrap_err();
        assert!(
            matches!(err, kube::Error::Api(ref s) if s.code == 401),
            "{err:?}"
        );
        let new: Api<ConfigMap> = Api::default_namespaced(emulator.client());
        assert!(new.get("a").await.is_ok());
        let user = emulator.kubeconfig().auth_infos[0].auth_info.clone();
        assert!(
            user.and_then(|u| u.token).is_some(),
            "the kubeconfig carries it"
        );
        let refused = emulator
            .requests()
            .iter()
            .filter(|r| r.status == 401)
            .count();
        assert_eq!(refused, 2);
    }

    #[tokio::test]
    async fn held_requests_wait_until_released() {
        let emulator = Emulator::start().await.unwrap();
        let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
        let held = emulator.faults().hold(Some("list"), Some("configmaps"));
        let listing = tokio::spawn({
            let api = api.clone();
            async move { api.list(&ListParams::default()).await }
        });
        while held.waiting() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        api.create(&PostParams::default(), &cm("a")).await.unwrap();
        assert!(!listing.is_finished(), "others go on, the listing waits");
        held.release();
        let listed = tokio::time::timeout(Duration::from_secs(5), listing)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(listed.items.len(), 1, "answered once released");
    }
}
