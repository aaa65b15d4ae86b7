//! [`Operator`]: the registry, a client and settings, running until stopped
//! (its docs hold the guarantees).
//!
//! One watch per served resource feeds a queue with one serial worker per
//! object; start-up handlers run before the first watch, clean-up handlers
//! after the last worker. Which resources are served is decided by
//! discovery: the handlers' resource selectors are resolved at start-up
//! and again whenever the cluster's custom resource definitions change (see
//! `scanning`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

use crate::deploying::{Missing, MissingPermissions, Permission};
use crate::model::handlers::{Handler, HandlerKind};
use crate::model::kwargs::{Memo, MemoBase};
use crate::model::registry::Registry;
use crate::operations::endpoints::Endpoints;
use crate::operations::health::Health;
use crate::operations::metrics::Metrics;
use crate::operator::login::LoginError;
use crate::operator::namespaces::NamespaceSelector;
use crate::peering::Peering;
use crate::posting::EventPoster;
use crate::processing::indexing::OperatorIndexes;
use crate::settings::OperatorSettings;
use crate::spawning::TaskCounters;
use crate::webhooks::{WebhookError, WebhookServer};

mod activities;
mod dispatch;
pub(crate) mod login;
pub(crate) mod namespaces;
mod permissions;
mod resources;
pub(crate) mod scanning;
mod serve;
mod startup;
mod terms;

use activities::Activity;

/// What stops the operator's run once it completes.
type Stop<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Why an operator could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorError {
    /// Admission handlers, but no webhook server to serve them (as in Kopf).
    #[error(
        "handler `{handler}` is an admission handler, but no webhook server is configured; run with --webhook-server https://0.0.0.0:9443 (and --webhook-managed NAME to configure the cluster), or give the Operator a WebhookServer"
    )]
    NoWebhookServer {
        /// The first admission handler's source path.
        handler: String,
    },
    /// The webhook server could not be served.
    #[error(transparent)]
    Webhooks(#[from] WebhookError),
    /// No cluster to talk to.
    #[error("cannot connect to a cluster: {0}; set KUBECONFIG, pass --kubeconfig, or {hint}", hint = NO_CLUSTER_HINT)]
    Client(#[source] kube::Error),
    /// The `on_login` handlers gave no usable credentials at start-up.
    #[error("{0}; make an `on_login` handler return a `kopf::ConnectionInfo` or a kubeconfig")]
    Login(#[source] LoginError),
    /// An `on_startup` handler failed for good (a permanent error, a
    /// regular one with `errors = Permanent`, or its `retries` or `timeout`
    /// exhausted), so the operator does not start.
    #[error(
        "start-up handler `{handler}` failed for good, so the operator does not start: {message}"
    )]
    Startup {
        /// The handler's id.
        handler: String,
        /// Why.
        message: String,
    },
    /// A resource selector names one resource but matches several (in
    /// different API groups), so the operator does not start.
    #[error(
        "the resource `{selector}` is ambiguous: it matches {}; name its group, e.g. {hint}",
        candidates.join(", ")
    )]
    AmbiguousResource {
        /// The selector, as written.
        selector: String,
        /// The resources it matches (`plural.version.group`).
        candidates: Vec<String>,
        /// The same selector narrowed to the first candidate's group.
        hint: String,
    },
    /// The operator lacks permissions it needs (each one named in the
    /// message, with how to grant them), so it does not start; see
    /// [`Operator::missing_permissions`].
    #[error("{report}")]
    MissingPermissions {
        /// Every permission missing.
        missing: Vec<Missing>,
        /// The report: each one, and how to grant them.
        report: String,
    },
    /// The replica cannot compete for its Lease as configured.
    #[error("cannot compete for the Lease {lease}: {problem}")]
    Peering {
        /// The Lease, as `namespace/name`.
        lease: String,
        /// What is wrong, and how to fix it.
        problem: String,
    },
    /// The replica stopped leading on its Lease, and its handlers, daemons
    /// or timers still ran when another replica could take the Lease over.
    #[error(
        "stopped leading on the Lease {lease} with handlers, daemons or timers still running \
         when another replica could take it over; exiting so that two replicas never act on \
         one object (make them stop sooner, e.g. with shorter cancellation timeouts, or raise \
         settings.peering.lease_duration)"
    )]
    LeaseOutlived {
        /// The Lease, as `namespace/name`.
        lease: String,
    },
    /// Two handlers with one id, from different resource selectors, would
    /// serve one resource, so the operator does not start.
    #[error(
        "duplicate handler id `{id}` for `{kind_scope}` handlers of {resource}: {}; give one of them a distinct `id = \"…\"`",
        handlers.join(" and ")
    )]
    DuplicateHandler {
        /// The shared id.
        id: String,
        /// The resource both selectors resolved to.
        resource: String,
        /// The scope in which ids must be unique: one handler kind, or all
        /// daemons and timers, or all indexes.
        kind_scope: &'static str,
        /// Both handlers: their fn paths and their selectors.
        handlers: Vec<String>,
    },
}

/// How to run without a cluster, in this build.
#[cfg(feature = "emulator")]
const NO_CLUSTER_HINT: &str = "run with --emulator";
#[cfg(not(feature = "emulator"))]
const NO_CLUSTER_HINT: &str =
    "build with kopf-runtime's `emulator` feature and run with --emulator";

/// A configured operator: what to run, against which cluster, how.
///
/// # Guarantees
/// - Every handler the registry holds runs; admission handlers need a
///   webhook server, and without one are refused at start-up with an error
///   naming the first ([`OperatorError::NoWebhookServer`]).
/// - With `on_login` handlers, they run first and their credentials serve
///   every request; a stop meanwhile ends the run at once.
/// - The handlers that take an index start handling their objects once it
///   is filled.
/// - Start-up and clean-up handlers are retried as Kopf retries them (per
///   `errors`, `retries`, `backoff`, `timeout`); the operator starts
///   serving only once every start-up handler has succeeded, and does not
///   start if one fails for good ([`OperatorError::Startup`]).
/// - The login, start-up and clean-up handlers receive the operator's memo
///   ([`Operator::memo`]); every object's memo starts as a copy of it as
///   the start-up handlers left it, their values shared (see [`Memo`]).
/// - Everything after the start-up runs with the settings as the start-up
///   handlers left them (see
///   [`StartupSettings`](crate::settings::StartupSettings) for what they
///   cannot change).
/// - A stop during the start-up handlers cancels them; nothing is served and
///   no clean-up handler runs (as in Kopf).
/// - A resource selector that names one resource but matches several is a
///   start-up error naming the candidates
///   ([`OperatorError::AmbiguousResource`]); so are two handlers of one id
///   that different selectors bring to one resource
///   ([`OperatorError::DuplicateHandler`]). Neither runs the clean-up
///   handlers. A selector that matches nothing is a warning: it is served
///   once its resource appears.
/// - A served resource that disappears from the cluster (its CRD deleted,
///   its version no longer served, no longer selected) stops being served,
///   with a warning saying why: its watch ends, its handlers in flight get
///   `queueing.exit_timeout`, and its daemons and timers are stopped as on
///   the operator's exit, with the reason "operator pausing" (`on_delete`
///   handlers do not run: the objects are not deleted). It is served again,
///   from a fresh listing, once it is back.
/// - On stop, watching ends first; handlers in flight get
///   `queueing.exit_timeout` to finish and are cancelled after it (nothing
///   acts on objects once [`Operator::run_until`] returns); then the clean-up
///   handlers run.
/// - The [`Endpoints`], if given, are served from before the login and
///   start-up handlers until [`Operator::run_until`] returns. Readiness
///   waits for the login, the start-up handlers and the first discovery,
///   then for the first listing of every resource served (a resource
///   served later is waited for likewise; one no longer served is not).
///
/// # Caveats
/// - A clean-up handler that keeps failing with retries and no `retries`
///   or `timeout` holds the exit, as in Kopf: give such handlers a limit.
///
/// ```no_run
/// use kopf_runtime::{Kwargs, Operator, Registry, ResourceRef};
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// # async fn example(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let registry = Registry::builder()
///     .on_create(ResourceRef::of::<ConfigMap>(), "created", |kw: Kwargs| async move {
///         kw.logger.info(format!("{:?} created", kw.name()));
///         Ok::<_, kopf_runtime::Error>(())
///     })
///     .build()?;
/// let stop = tokio_util::sync::CancellationToken::new();
/// Operator::new(registry).client(client).run_until(stop.cancelled_owned()).await?;
/// # Ok(()) }
/// ```
pub struct Operator {
    registry: Arc<Registry>,
    settings: OperatorSettings,
    memo: Memo,
    client: Option<Client>,
    namespaces: NamespaceSelector,
    task_counters: TaskCounters,
    endpoints: Option<Endpoints>,
    /// Whether the client already counts its requests in the endpoints'
    /// metrics (the runner builds it so).
    client_measured: bool,
    /// The Lease to lead on, if more than one replica runs.
    peering: Option<Peering>,
    /// The admission webhook server, if any.
    webhooks: Option<WebhookServer>,
    /// What handlers do with their own client (`Runner::rbac`).
    permissions: Vec<Permission>,
    /// What to do when permissions are missing at start-up.
    on_missing: MissingPermissions,
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator")
            .field("handlers", &self.registry.len())
            .field("namespaces", &self.namespaces)
            .finish_non_exhaustive()
    }
}

impl Operator {
    /// An operator running `registry`'s handlers cluster-wide, with default
    /// settings and the client kube infers from the environment.
    pub fn new(registry: Registry) -> Self {
        Self {
            registry: Arc::new(registry),
            settings: OperatorSettings::default(),
            memo: Memo::new(),
            client: None,
            namespaces: NamespaceSelector::all(),
            task_counters: TaskCounters::default(),
            endpoints: None,
            client_measured: false,
            peering: None,
            webhooks: None,
            permissions: Vec::new(),
            on_missing: MissingPermissions::default(),
        }
    }

    /// The lifetime counters of the operator's daemons and timers (spawned,
    /// stopped, cancelled, abandoned, …), for metrics and tests; they keep
    /// counting while the operator runs.
    pub fn task_counters(&self) -> TaskCounters {
        self.task_counters.clone()
    }

    /// Uses this client instead of inferring one (unless the registry has
    /// `on_login` handlers: their credentials serve every request then).
    pub fn client(mut self, client: Client) -> Self {
        self.client = Some(client);
        self
    }

    /// Uses these settings.
    pub fn settings(mut self, settings: OperatorSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Serves the liveness, readiness and metrics endpoints on these
    /// listeners from the operator's start until it exits (see
    /// [`Endpoints`]); metrics are collected only when served.
    ///
    /// # Caveats
    /// With metrics, a client given with [`Operator::client`] is put
    /// behind another one that counts its requests: one more hop through
    /// a channel per request. [`run`](crate::run) and
    /// [`Runner`](crate::Runner) build their client with the counting
    /// layer inside instead, as the operator does with the client it
    /// infers and with the one its `on_login` handlers' credentials serve.
    pub fn endpoints(mut self, endpoints: Endpoints) -> Self {
        self.endpoints = Some(endpoints);
        self
    }

    /// Serves the `on_validate` and `on_mutate` handlers with this server,
    /// on every replica, from after the start-up handlers until the
    /// operator exits; with managed configurations, keeps them up to date
    /// (see [`WebhookServer`]).
    pub fn webhooks(mut self, server: WebhookServer) -> Self {
        self.webhooks = Some(server);
        self
    }

    /// Uses this client, built with the endpoints' layer counting its
    /// requests (`Endpoints::api_metrics`).
    pub(crate) fn measured_client(mut self, client: Client) -> Self {
        self.client = Some(client);
        self.client_measured = true;
        self
    }

    /// Serves the resources only while this replica leads on the Lease
    /// that `peering` names (Kopf's `peering_name=` of an embedded
    /// operator): the other replicas wait, with their probes, metrics,
    /// start-up and clean-up handlers running, and take over when the
    /// leader exits or cannot renew the Lease. With
    /// [`Peering::shards`], each replica serves the objects of the shard
    /// slots it holds instead, about its share of them. The timings are
    /// [`settings.peering`](crate::settings::PeeringSettings).
    ///
    /// # Caveats
    /// A replica that stops leading while its handlers, daemons or timers
    /// still run when another replica may take the Lease ends its run with
    /// [`OperatorError::LeaseOutlived`]; they may still run then, and the
    /// process should exit (as [`run`](crate::run) does).
    ///
    /// ```no_run
    /// # async fn example(registry: kopf_runtime::Registry) -> Result<(), kopf_runtime::OperatorError> {
    /// use kopf_runtime::{Operator, Peering};
    ///
    /// Operator::new(registry)
    ///     .peering(Peering::new("my-operator").priority(10))
    ///     .run()
    ///     .await
    /// # }
    /// ```
    pub fn peering(mut self, peering: Peering) -> Self {
        self.peering = Some(peering);
        self
    }

    /// Uses `memo` as the operator's memo (Kopf's `memo=` of an embedded
    /// operator): the login, start-up and clean-up handlers receive it, and
    /// what it holds once the start-up handlers have ended is what every
    /// object's memo starts with (see [`Memo`]). The caller may keep a
    /// clone, e.g. to read what the handlers left there after the run.
    pub fn memo(mut self, memo: Memo) -> Self {
        self.memo = memo;
        self
    }

    /// Serves only the namespaces `selector` matches.
    pub fn namespaces(mut self, selector: NamespaceSelector) -> Self {
        self.namespaces = selector;
        self
    }

    /// Runs until SIGINT or SIGTERM.
    ///
    /// # Errors
    /// See [`Operator::run_until`].
    pub async fn run(self) -> Result<(), OperatorError> {
        self.run_until(shutdown_signal()).await
    }

    /// Runs until `stop` completes.
    ///
    /// # Errors
    /// [`OperatorError::NoWebhookServer`] for admission handlers without a
    /// webhook server, [`OperatorError::Client`] without a cluster, [`OperatorError::Login`]
    /// when the `on_login` handlers give no credentials,
    /// [`OperatorError::Startup`] when a start-up handler fails for good.
    pub async fn run_until(
        self,
        stop: impl Future<Output = ()> + Send,
    ) -> Result<(), OperatorError> {
        // One body, polled through one boxed future, for every kind of
        // `stop` and every caller: the operator's whole run is large code,
        // not worth a copy in each place that awaits it.
        self.run_until_boxed(Box::pin(stop)).await
    }

    fn run_until_boxed<'a>(
        mut self,
        mut stop: Stop<'a>,
    ) -> Pin<Box<dyn Future<Output = Result<(), OperatorError>> + Send + 'a>> {
        Box::pin(async move {
            self.check_webhooks()?;
            let background = Background::new();
            let Some(started) = self.start(&mut stop, &background).await? else {
                return Ok(());
            };
            let served = self.serve(&started, &mut stop, &background).await;
            if let Err(outlived @ OperatorError::LeaseOutlived { .. }) = served {
                // Its tasks may still act on objects: the process is to
                // exit at once, with nothing cleaned up or waited for.
                return Err(outlived);
            }
            // A start-up that failed cleans nothing up (as a failed
            // start-up handler).
            if served.is_ok() {
                self.clean_up(&started).await;
            }
            background
                .stop(started.settings.queueing.exit_timeout)
                .await;
            served
        })
    }

    /// Runs the clean-up handlers; one that fails for good is reported.
    async fn clean_up(&self, started: &Started) {
        let handlers = self.measured_of(started.metrics.as_ref(), HandlerKind::OnCleanup);
        let cleanup = Activity {
            client: &started.client,
            poster: started.poster.as_ref(),
            memo: &started.memo,
            settings: activities::Settings::Fixed(&started.settings),
        };
        if let Err(failure) = activities::run(&handlers, &cleanup).await {
            tracing::warn!(
                handler = %failure.handler,
                message = %failure.message,
                "a clean-up handler failed for good",
            );
        }
    }
}

/// What the start-up leaves to the serving and the clean-up.
struct Started {
    /// The operator's client (the login's credentials serve it, if any).
    client: Client,
    /// The settings as the start-up handlers left them.
    settings: Arc<OperatorSettings>,
    /// The operator's memo: the clean-up handlers receive it.
    memo: Memo,
    /// The operator's memo as the start-up handlers left it: every
    /// object's memo starts as a copy of it.
    memo_base: MemoBase,
    /// Posts the Events of the handlers, if posting is enabled.
    poster: Option<EventPoster>,
    /// The indexes that `#[index]` handlers fill.
    indexes: OperatorIndexes,
    /// What the probes report, when the endpoints are served.
    health: Option<Arc<Health>>,
    /// The operator's metrics, when served.
    metrics: Option<Arc<Metrics>>,
}

/// What runs beside the serving until the operator exits (the endpoints,
/// the login's renewals, the Event posters, the webhooks, the electors):
/// cancelled however the run ends, and awaited, within a limit, when it
/// ends normally.
struct Background {
    root: CancellationToken,
    tasks: TaskTracker,
    /// Cancels `root` when the run ends early.
    _cancel_on_drop: DropGuard,
}

impl Background {
    fn new() -> Self {
        let root = CancellationToken::new();
        Self {
            _cancel_on_drop: root.clone().drop_guard(),
            root,
            tasks: TaskTracker::new(),
        }
    }

    /// Stops the background tasks, waiting for them at most `exit_timeout`
    /// and a second, then abandoning them.
    async fn stop(&self, exit_timeout: Duration) {
        self.root.cancel();
        self.tasks.close();
        if tokio::time::timeout(exit_timeout + Duration::from_secs(1), self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("background tasks did not stop in time; abandoning them");
        }
    }
}

/// `handlers`, each carrying its metrics if there are any.
fn measured_if(metrics: Option<&Arc<Metrics>>, handlers: Vec<Handler>) -> Vec<Handler> {
    match metrics {
        Some(metrics) => measured(metrics, handlers, ""),
        None => handlers,
    }
}

/// `handlers` of `resource` (a [`crate::operations::metrics::resource_label`], empty for
/// those of no resource), each carrying its metrics.
fn measured(metrics: &Metrics, handlers: Vec<Handler>, resource: &str) -> Vec<Handler> {
    handlers
        .into_iter()
        .map(|mut handler| {
            handler.metrics = Some(metrics.handler(handler.id(), resource));
            handler
        })
        .collect()
}

/// Logs where the endpoints are served.
fn log_urls(endpoints: &Endpoints) {
    if let Some(url) = endpoints.liveness_url() {
        tracing::info!(%url, "serving the liveness probe");
    }
    if let Some(url) = endpoints.readiness_url() {
        tracing::info!(%url, "serving the readiness probe");
    }
    if let Some(url) = endpoints.metrics_url() {
        tracing::info!(%url, "serving the metrics");
    }
}

/// Completes on SIGINT or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
