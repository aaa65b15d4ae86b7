//! [`Operator`]: the registry, a client and settings, running until stopped
//! (its docs hold the guarantees).
//!
//! One watch per served resource feeds a queue with one serial worker per
//! object; start-up handlers run before the first watch, clean-up handlers
//! after the last worker. Which resources are served is decided by
//! discovery: the handlers' resource selectors are resolved at start-up
//! and again whenever the cluster's custom resource definitions change (see
//! `scanning`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::core::ApiResource;
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

use crate::admission::Reviewer;
use crate::deploying::{Missing, MissingPermissions, Permission};
use crate::endpoints::{EndpointState, Endpoints};
use crate::fencing::{self, Fence, Held};
use crate::fields::object_name;
use crate::handlers::{Handler, HandlerKind};
use crate::health::{Health, Phase, Registered, ResourceHealth};
use crate::indexing::{Hold, IndexGate, OperatorIndexes, ResourceIndexer};
use crate::kwargs::{Memo, MemoBase};
use crate::leadership;
use crate::login::{LoginError, Vault};
use crate::metrics::{self, Metrics};
use crate::namespaces::NamespaceSelector;
use crate::patching::ResourceTarget;
use crate::peering::Peering;
use crate::posting::{self, EventPoster, ObjectReference};
use crate::probing::Probes;
use crate::processing::{ResourceHandlers, ResourceProcessor, Work};
use crate::queueing::{ProcessFn, Processed, Queue, QueueSettings};
use crate::registry::Registry;
use crate::resources::Discovered;
use crate::retrying::{Backoff, ErrorClass, classify};
use crate::scanning::{self, Groups, RESCAN_INTERVAL, Rescan, Resolution, Wanted};
use crate::scraping::ScrapeTime;
use crate::settings::{OperatorSettings, PostingSettings, StartupSettings};
use crate::sharding::SlotSet;
use crate::spawning::resource::{ResourceTasks, TaskObserver};
use crate::spawning::{Spawner, SpawnerSettings, TaskCounters};
use crate::stopping::StopReason;
use crate::watching::{ObjectEvent, ResourceWatcher, Seen};
use crate::webhooks::{self, WebhookError, WebhookServer, managed};

mod activities;
mod permissions;

use activities::Activity;

/// Why an operator could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorError {
    /// A handler of a kind this runtime does not run yet.
    #[error(
        "handler `{handler}` is `{kind}`, which this runtime does not run yet; remove it or register it only where it is supported"
    )]
    Unsupported {
        /// The handler's source path.
        handler: String,
        /// Its kind.
        kind: HandlerKind,
    },
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

/// How many watch events wait for the processing of a resource.
const EVENT_BUFFER: usize = 64;

/// How to run without a cluster, in this build.
#[cfg(feature = "emulator")]
const NO_CLUSTER_HINT: &str = "run with --emulator";
#[cfg(not(feature = "emulator"))]
const NO_CLUSTER_HINT: &str =
    "build with kopf-runtime's `emulator` feature and run with --emulator";

/// Kinds whose handlers this runtime runs.
fn is_supported(kind: HandlerKind) -> bool {
    kind.is_changing()
        || kind.is_spawning()
        || matches!(
            kind,
            HandlerKind::OnEvent
                | HandlerKind::OnStartup
                | HandlerKind::OnCleanup
                | HandlerKind::Index
                | HandlerKind::OnLogin
                | HandlerKind::OnProbe
                | HandlerKind::OnValidate
                | HandlerKind::OnMutate
        )
}

/// A configured operator: what to run, against which cluster, how.
///
/// # Guarantees
/// - Every handler the registry holds either runs or is refused at start-up
///   with an error naming it ([`OperatorError::Unsupported`]).
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
    /// [`OperatorError::Unsupported`] for a handler this runtime cannot run,
    /// [`OperatorError::Client`] without a cluster, [`OperatorError::Login`]
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
        mut stop: Pin<Box<dyn Future<Output = ()> + Send + 'a>>,
    ) -> Pin<Box<dyn Future<Output = Result<(), OperatorError>> + Send + 'a>> {
        Box::pin(async move {
            if let Some(handler) = self
                .registry
                .handlers()
                .iter()
                .find(|h| !is_supported(h.kind()))
            {
                return Err(OperatorError::Unsupported {
                    handler: handler.source().to_string(),
                    kind: handler.kind(),
                });
            }
            let is_webhook =
                |h: &&Handler| matches!(h.kind(), HandlerKind::OnValidate | HandlerKind::OnMutate);
            if self.webhooks.is_none()
                && let Some(handler) = self.registry.handlers().iter().find(is_webhook)
            {
                return Err(OperatorError::NoWebhookServer {
                    handler: handler.source().to_string(),
                });
            }
            let endpoints = self.endpoints.take();
            let health = endpoints.as_ref().map(|_| Arc::new(Health::default()));
            let metrics = match (&endpoints, &health) {
                (Some(endpoints), Some(health)) => endpoints.api_metrics().map(|api| {
                    Arc::new(Metrics::new(
                        ScrapeTime::new(Arc::clone(health), self.task_counters.clone()),
                        api.clone(),
                    ))
                }),
                _ => None,
            };
            // The operator's own copies of the handlers carry their metrics.
            let measured = |handlers: Vec<Handler>| match &metrics {
                Some(metrics) => measured(metrics, handlers, ""),
                None => handlers,
            };
            let measured_of = |kind| measured(self.registry.of_kind(kind).cloned().collect());
            let root = CancellationToken::new();
            // However the run ends, early or not, the background tasks stop.
            let _background = root.clone().drop_guard();
            let tasks = TaskTracker::new();

            // The operator's memo: for the login, start-up and clean-up
            // handlers, and, as the start-up handlers leave it, what every
            // object's memo starts as.
            let memo = self.memo.clone();
            // Login handlers, if any, give the credentials of every request.
            let logins = measured_of(HandlerKind::OnLogin);
            let vault = (!logins.is_empty()).then(|| {
                Vault::new(
                    logins,
                    self.settings.networking.error_backoffs.clone(),
                    self.settings.execution.default_backoff,
                    memo.clone(),
                )
            });
            if let (Some(health), Some(_)) = (&health, &vault) {
                health.enter(Phase::LoggingIn);
            }

            // Served before anything else, the login included, so that the
            // probes answer while the operator starts.
            let probe_handlers = measured_of(HandlerKind::OnProbe);
            // Made before the probes, which may read them as any handler.
            let indexes = OperatorIndexes::new(&self.registry);
            let endpoint_state = match (endpoints, &health) {
                (Some(endpoints), Some(health)) => {
                    log_urls(&endpoints);
                    let state = Arc::new(EndpointState {
                        probes: (!probe_handlers.is_empty()).then(|| {
                            Probes::new(probe_handlers, memo.clone(), indexes.kwarg().clone())
                        }),
                        health: Arc::clone(health),
                        metrics: metrics.clone(),
                    });
                    endpoints.serve(Arc::clone(&state), root.child_token(), &tasks);
                    Some(state)
                }
                _ => {
                    if !probe_handlers.is_empty() {
                        tracing::info!(
                            "the on_probe handlers run only when a liveness endpoint is served (--liveness)"
                        );
                    }
                    None
                }
            };

            let counting = metrics.as_ref().map(|metrics| metrics.api_layer());
            let client = match (&vault, self.client.clone()) {
                (Some(vault), _) => tokio::select! {
                    client = vault.client(counting.cloned()) => client.map_err(OperatorError::Login)?,
                    () = &mut stop => return Ok(()),
                },
                (None, Some(client)) => match &metrics {
                    Some(metrics) if !self.client_measured => metrics::instrument(client, metrics),
                    _ => client,
                },
                (None, None) => metrics::infer_client(counting)
                    .await
                    .map_err(OperatorError::Client)?,
            };
            if let Some(vault) = vault {
                tasks.spawn(vault.authenticate(root.child_token()));
            }
            if let Some(state) = &endpoint_state {
                state.health.enter(Phase::Starting);
                if let Some(probes) = &state.probes {
                    probes.connect(client.clone());
                }
            }
            tokio::select! {
                checked = self.check_permissions(&client) => checked?,
                () = &mut stop => return Ok(()),
            }
            let start_poster = |posting: &PostingSettings| {
                posting.enabled.then(|| {
                    let (poster, task) = EventPoster::new(client.clone(), posting.clone());
                    tasks.spawn(task.run(root.child_token()));
                    poster
                })
            };
            let startup_poster = start_poster(&self.settings.posting);

            let startup_handlers = measured_of(HandlerKind::OnStartup);
            let startup_settings = StartupSettings::new(self.settings.clone());
            let startup = Activity {
                client: &client,
                poster: startup_poster.as_ref(),
                memo: &memo,
                settings: activities::Settings::Changing(&startup_settings),
            };
            let startup = activities::run(&startup_handlers, &startup);
            tokio::select! {
                started = startup => started.map_err(|failure| OperatorError::Startup {
                    handler: failure.handler,
                    message: failure.message,
                })?,
                () = &mut stop => {
                    // As in Kopf: a start-up cut short serves nothing and cleans nothing up.
                    tracing::warn!("stopped before the start-up handlers finished");
                    root.cancel();
                    tasks.close();
                    let exit_timeout =
                        startup_settings.get().queueing.exit_timeout + Duration::from_secs(1);
                    if tokio::time::timeout(exit_timeout, tasks.wait()).await.is_err() {
                        tracing::warn!("background tasks did not stop in time; abandoning them");
                    }
                    return Ok(());
                }
            }
            // Everything from here on runs with the settings and the memo as
            // the start-up handlers left them.
            let settings = Arc::new(startup_settings.close());
            let memo_base = memo.freeze();
            if let Some(server) = self.webhooks.take() {
                let handlers = measured(
                    self.registry
                        .handlers()
                        .iter()
                        .filter(is_webhook)
                        .cloned()
                        .collect(),
                );
                if let Some(metrics) = &metrics {
                    metrics.admission_webhooks(handlers.iter().map(|h| h.id()));
                }
                let (found, resources) = watch::channel(Arc::from(Vec::new()));
                tasks.spawn(managed::discover(
                    client.clone(),
                    handlers.clone(),
                    found,
                    root.child_token(),
                ));
                if let Some(configurations) = server.managed().cloned() {
                    tasks.spawn(managed::manage(
                        client.clone(),
                        configurations,
                        handlers.clone(),
                        resources.clone(),
                        server.ca(),
                        root.child_token(),
                    ));
                }
                let reviewer = Reviewer::new(
                    handlers,
                    resources,
                    memo_base.clone(),
                    indexes.kwarg().clone(),
                    Some(client.clone()),
                );
                webhooks::serve(
                    server,
                    reviewer,
                    metrics.clone(),
                    root.child_token(),
                    &tasks,
                )?;
            }
            // The start-up handlers' Events are posted as the operator started;
            // the rest as they left `posting` (that poster ends once it has
            // posted what is queued).
            let poster = if settings.posting == self.settings.posting {
                startup_poster
            } else {
                drop(startup_poster);
                start_poster(&settings.posting)
            };

            let observer = TaskObserver::new(poster.clone());
            // With a Lease, resources are served only while this replica
            // leads: in terms, each ended with its tasks stopped before the
            // elector may let the Lease go.
            let mut served = Ok(());
            let mut election = match self.peering.take() {
                None => None,
                Some(peering) => {
                    match peering.ward(&client, &settings.peering, root.child_token(), &tasks) {
                        Ok(ward) => Some((ward, peering.lease())),
                        Err(problem) => {
                            served = Err(OperatorError::Peering {
                                lease: peering.lease(),
                                problem,
                            });
                            None
                        }
                    }
                }
            };
            if let (Some(health), Some(_)) = (&health, &election) {
                health.lead(false, 0);
                health.enter(Phase::Serving);
            }
            while served.is_ok() {
                // With a Lease, what the term serves: the slots held.
                let mut slots = None;
                if let Some((ward, lease)) = &mut election {
                    let held = tokio::select! {
                        held = ward.hold_some(settings.peering.retry_period / 2) => held,
                        () = &mut stop => break,
                    };
                    tracing::info!(%lease, slots = held.len(), "leading: serving the resources");
                    if let Some(health) = &health {
                        health.lead(true, if ward.sharded() { held.len() } else { 0 });
                    }
                    slots = Some(held);
                } else if let Some(health) = &health {
                    health.enter(Phase::Discovering);
                }
                // What the term starts waits for its Leases to be held on
                // this process's clock.
                let fence = match (&election, slots) {
                    (Some((ward, _)), Some(held)) => Some(Fence::new(
                        ward.tenures(held),
                        metrics.as_deref().map(fencing::counters),
                        settings.peering.retry_period,
                    )),
                    _ => None,
                };
                let spawner = Spawner::with_counters(
                    tokio::runtime::Handle::current(),
                    Arc::clone(&observer) as Arc<dyn crate::spawning::Observer>,
                    SpawnerSettings {
                        graceful_exit_limit: settings.background.graceful_exit_limit,
                        default_cancellation_timeout: settings
                            .background
                            .default_cancellation_timeout,
                    },
                    Arc::clone(&self.task_counters.0),
                );
                let spawner = Arc::new(match &fence {
                    Some(fence) => spawner.fenced(fence.clone()),
                    None => spawner,
                });
                // What the term writes is refused once it is over.
                let over = CancellationToken::new();
                let watching = root.child_token();
                let serving = TaskTracker::new();
                let context = ServeContext {
                    client: match (&election, &fence) {
                        (Some((_, lease)), Some(fence)) => {
                            leadership::term_client(client.clone(), &over, fence.clone(), lease)
                        }
                        _ => client.clone(),
                    },
                    fence: fence.clone(),
                    settings: Arc::clone(&settings),
                    poster: poster.clone(),
                    namespaces: self.namespaces.clone(),
                    spawner: Arc::clone(&spawner),
                    watching: watching.clone(),
                    tasks: serving.clone(),
                    indexes: indexes.clone(),
                    health: health.clone(),
                    metrics: metrics.clone(),
                    memo: memo_base.clone(),
                    slots: slots.filter(|slots| !slots.is_all()),
                };
                // The term ends when the operator stops, or when the slots
                // held change.
                let mut moved = false;
                let mut term: Pin<Box<dyn Future<Output = ()> + Send + '_>> =
                    match (&mut election, slots) {
                        (Some((ward, _)), Some(held)) => {
                            let (stop, moved) = (&mut stop, &mut moved);
                            Box::pin(async move {
                                tokio::select! {
                                    () = stop => {}
                                    () = ward.moved_from(held) => *moved = true,
                                }
                            })
                        }
                        _ => Box::pin(&mut stop),
                    };
                served = Resources::new(context, &self.registry)
                    .serve_until(&mut term)
                    .await;
                drop(term);
                watching.cancel();
                serving.close();
                let lost = match (&election, slots) {
                    (Some((ward, _)), Some(held)) if moved => held.loses_to(ward.held()),
                    _ => false,
                };
                if !moved && served.is_ok() {
                    tracing::info!("stopping the operator");
                } else if moved {
                    tracing::warn!(lost, "the slots held changed: pausing the resources");
                    if let Some(health) = &health {
                        health.lead(false, 0);
                    }
                }
                let reason = if moved {
                    StopReason::LeadershipLost
                } else {
                    StopReason::OperatorExiting
                };
                let deadline = election
                    .as_ref()
                    .and_then(|(ward, _)| ward.others_may_lead_at())
                    .filter(|_| lost);
                let paused = end_term(&serving, &spawner, reason, &settings, &over, deadline).await;
                let Some((ward, lease)) = &election else {
                    break;
                };
                if let Some(fence) = &fence {
                    fence.report(lease);
                }
                if !paused {
                    return Err(OperatorError::LeaseOutlived {
                        lease: lease.clone(),
                    });
                }
                if !moved {
                    // Released now that it is paused, not competed for again.
                    ward.stop_paused();
                    break;
                }
                // What the watches saw goes stale; the next term lists anew.
                indexes.reset();
                ward.paused();
                tracing::info!(%lease, "paused: competing for the Lease again");
            }
            let exit_timeout = settings.queueing.exit_timeout;
            // A start-up that failed cleans nothing up (as a failed start-up handler).
            let cleanup_handlers = measured_of(HandlerKind::OnCleanup);
            let cleanup = Activity {
                client: &client,
                poster: poster.as_ref(),
                memo: &memo,
                settings: activities::Settings::Fixed(&settings),
            };
            if served.is_ok()
                && let Err(failure) = activities::run(&cleanup_handlers, &cleanup).await
            {
                tracing::warn!(
                    handler = %failure.handler,
                    message = %failure.message,
                    "a clean-up handler failed for good",
                );
            }
            root.cancel();
            tasks.close();
            if tokio::time::timeout(exit_timeout + Duration::from_secs(1), tasks.wait())
                .await
                .is_err()
            {
                tracing::warn!("background tasks did not stop in time; abandoning them");
            }
            served
        })
    }
}

/// Waits for what a term served to stop: the served resources, then the
/// daemons and timers, told `reason`. Each is bounded as on exit (each
/// queue gets `exit_timeout`, then a grace to cancel; the tasks get
/// `shutdown_timeout`), and what remains is abandoned. With a `deadline`
/// (a slot given up without a release, which may be another replica's
/// then), the term's writes are refused at once, and the result says
/// whether everything stopped before it.
async fn end_term(
    serving: &TaskTracker,
    spawner: &Spawner,
    reason: StopReason,
    settings: &OperatorSettings,
    over: &CancellationToken,
    deadline: Option<Instant>,
) -> bool {
    let shutdown_timeout = settings.background.shutdown_timeout;
    if let Some(deadline) = deadline {
        over.cancel();
        let drained = async {
            serving.wait().await;
            spawner.shutdown_for(reason, shutdown_timeout).await.is_ok()
        };
        return tokio::time::timeout_at(deadline, drained).await == Ok(true);
    }
    let exit_timeout = settings.queueing.exit_timeout;
    if tokio::time::timeout(exit_timeout + Duration::from_secs(2), serving.wait())
        .await
        .is_err()
    {
        tracing::warn!("the served resources did not stop in time; abandoning them");
    }
    if let Err(error) = spawner.shutdown_for(reason, shutdown_timeout).await {
        tracing::warn!(%error, "daemons and timers did not all stop in time");
    }
    true
}

/// A resource's identity: group, version, plural.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ResourceKey(String, String, String);

impl ResourceKey {
    fn of(resource: &Discovered) -> Self {
        Self(
            resource.group.clone(),
            resource.version.clone(),
            resource.plural.clone(),
        )
    }
}

/// What the serving of every resource shares.
#[derive(Clone)]
struct ServeContext {
    client: Client,
    settings: Arc<OperatorSettings>,
    poster: Option<EventPoster>,
    namespaces: NamespaceSelector,
    spawner: Arc<Spawner>,
    /// Cancelled when the operator exits.
    watching: CancellationToken,
    /// Owns the serving of every resource; awaited on exit.
    tasks: TaskTracker,
    /// The indexes that `#[index]` handlers fill.
    indexes: OperatorIndexes,
    /// What the probes report, when the endpoints are served.
    health: Option<Arc<Health>>,
    /// The operator's metrics, when served.
    metrics: Option<Arc<Metrics>>,
    /// The operator's memo as the start-up handlers left it.
    memo: MemoBase,
    /// The shard slots whose objects are served, if not all.
    slots: Option<SlotSet>,
    /// What holds work back once the term's Leases lapse, with a Lease.
    fence: Option<Fence>,
}

/// The resources served, kept in step with the cluster's (Kopf's resource
/// observer and orchestrator): resolved from the handlers' selectors at
/// start-up, and again after every change of the custom resource
/// definitions; each served resource is a [`ServeResource`] task.
struct Resources {
    context: ServeContext,
    /// The handlers' distinct selectors.
    wanted: Vec<Wanted>,
    /// The handlers of each selector, in the order of `wanted`.
    handlers: Vec<Vec<Handler>>,
    /// The API groups the selectors can match.
    groups: Groups,
    /// What discovery last said of those groups.
    known: Vec<Discovered>,
    served: BTreeMap<ResourceKey, Served>,
    /// Resources no longer served whose serving is still ending.
    finishing: Vec<Finishing>,
    reported: Reported,
    /// Keep every index unfilled until the resources found at start-up are
    /// served (see the runtime's `indexing` module).
    start_up: Vec<Hold>,
}

/// A resource being served.
struct Served {
    resource: Discovered,
    /// Its handlers, by kind, id and source.
    handlers: Vec<(HandlerKind, String, String)>,
    /// Ends its serving.
    stop: CancellationToken,
    /// Cancelled once its serving has ended.
    done: CancellationToken,
    /// Its place in the probes and the metrics, given up (dropped) as soon
    /// as it stops being served.
    _health: Option<Registered>,
}

impl Served {
    /// Whether serving `resource` with `handlers` is what this serving does.
    fn is_same(&self, resource: &Discovered, handlers: &[Handler]) -> bool {
        self.resource.kind == resource.kind
            && self.resource.namespaced == resource.namespaced
            && self.resource.status_subresource == resource.status_subresource
            && self.handlers == identities(handlers)
    }
}

/// A resource no longer served whose serving has not ended yet: the same
/// objects (in another version) are served only after it, so that their
/// daemons and timers are stopped before they are spawned again.
struct Finishing {
    group: String,
    plural: String,
    done: CancellationToken,
}

/// The problems already reported, so that each is reported once while it lasts.
#[derive(Default)]
struct Reported {
    ambiguous: HashSet<usize>,
    unmatched: HashSet<usize>,
    unsuitable: HashSet<String>,
    duplicates: HashSet<String>,
}

fn identities(handlers: &[Handler]) -> Vec<(HandlerKind, String, String)> {
    handlers
        .iter()
        .map(|h| (h.kind(), h.id().to_owned(), h.source().to_string()))
        .collect()
}

impl Resources {
    fn new(context: ServeContext, registry: &Registry) -> Self {
        let mut wanted: Vec<Wanted> = Vec::new();
        let mut handlers: Vec<Vec<Handler>> = Vec::new();
        for handler in registry.handlers() {
            let Some(selector) = handler.resource() else {
                continue;
            };
            let patches = handler.kind().is_changing() || handler.kind().is_spawning();
            match wanted.iter().position(|w| w.selector == *selector) {
                Some(index) => {
                    wanted[index].patches |= patches;
                    handlers[index].push(handler.clone());
                }
                None => {
                    wanted.push(Wanted {
                        selector: selector.clone(),
                        patches,
                    });
                    handlers.push(vec![handler.clone()]);
                }
            }
        }
        let groups = Groups::of(wanted.iter().map(|w| &w.selector));
        let start_up = context.indexes.hold_all();
        Self {
            start_up,
            context,
            wanted,
            handlers,
            groups,
            known: Vec::new(),
            served: BTreeMap::new(),
            finishing: Vec::new(),
            reported: Reported::default(),
        }
    }

    /// Serves the selected resources until `stop` completes, following the
    /// cluster's changes.
    ///
    /// # Errors
    /// [`OperatorError::AmbiguousResource`] and
    /// [`OperatorError::DuplicateHandler`], from the first resolution only.
    async fn serve_until(
        mut self,
        stop: &mut Pin<Box<dyn Future<Output = ()> + Send + '_>>,
    ) -> Result<(), OperatorError> {
        if self.wanted.is_empty() {
            self.serving();
            stop.await;
            return Ok(());
        }
        let client = self.context.client.clone();
        let settings = Arc::clone(&self.context.settings);
        let all = self.groups.clone();
        let mut backoff = Backoff::endless(&settings.networking.error_backoffs);
        self.known = loop {
            let scanned = tokio::select! {
                scanned = scanning::scan(&client, &all) => scanned,
                () = &mut *stop => return Ok(()),
            };
            match scanned {
                Ok(found) => break found,
                Err(error) => {
                    let delay = next_delay(&mut backoff, &error);
                    tracing::warn!(%error, ?delay, "discovery of the served resources failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = &mut *stop => return Ok(()),
                    }
                }
            }
        };
        backoff.reset();
        let resolution = scanning::resolve(&self.wanted, &self.known);
        self.check(&resolution)?;
        self.revise(resolution);
        // Every index found at start-up has its servings' holds now.
        self.start_up.clear();
        self.serving();

        let (tx, mut rescans) = mpsc::channel(16);
        let definitions_stop = self.context.watching.child_token();
        let mut definitions = tokio::spawn(scanning::watch_definitions(
            client.clone(),
            settings.watching.clone(),
            self.context.health.clone(),
            tx,
            definitions_stop.clone(),
        ));
        let mut definitions_done = false;
        let mut rescans_open = true;
        // The groups to scan again, and when.
        let mut pending: Option<Groups> = None;
        let mut due: Option<Instant> = None;
        let mut periodic = false;
        loop {
            tokio::select! {
                () = &mut *stop => break,
                rescan = rescans.recv(), if rescans_open => {
                    let Some(rescan) = rescan else {
                        rescans_open = false;
                        continue;
                    };
                    self.note(&mut pending, rescan);
                    while let Ok(rescan) = rescans.try_recv() {
                        self.note(&mut pending, rescan);
                    }
                    if pending.is_some() && due.is_none() {
                        due = Some(Instant::now());
                    }
                }
                ended = &mut definitions, if !definitions_done => {
                    definitions_done = true;
                    match ended {
                        Ok(Ok(())) => {}
                        Ok(Err(error)) => {
                            tracing::warn!(
                                %error,
                                "cannot watch the custom resource definitions; resources that appear or disappear are noticed by scanning every {RESCAN_INTERVAL:?} instead"
                            );
                            periodic = true;
                            pending.get_or_insert_with(|| all.clone());
                            due.get_or_insert_with(|| Instant::now() + RESCAN_INTERVAL);
                        }
                        Err(error) => {
                            tracing::error!(%error, "the watch of the custom resource definitions failed");
                        }
                    }
                }
                () = sleep_until(due), if due.is_some() => {
                    due = None;
                    let groups = pending.take().unwrap_or_else(|| all.clone());
                    let scanned = tokio::select! {
                        scanned = scanning::scan(&client, &groups) => scanned,
                        () = &mut *stop => break,
                    };
                    match scanned {
                        Ok(found) => {
                            backoff.reset();
                            scanning::merge(&mut self.known, &groups, found);
                            let resolution = scanning::resolve(&self.wanted, &self.known);
                            self.revise(resolution);
                            if periodic {
                                pending = Some(all.clone());
                                due = Some(Instant::now() + RESCAN_INTERVAL);
                            }
                        }
                        Err(error) => {
                            let delay = next_delay(&mut backoff, &error);
                            tracing::warn!(%error, ?delay, "discovery of the served resources failed; retrying");
                            pending.get_or_insert_with(|| Groups::Only(Default::default())).add(&groups);
                            due = Some(Instant::now() + delay);
                        }
                    }
                }
            }
        }
        definitions_stop.cancel();
        if !definitions_done && let Err(error) = definitions.await {
            tracing::error!(%error, "the watch of the custom resource definitions failed");
        }
        Ok(())
    }

    /// Every resource found at start-up is served: readiness now waits for
    /// their listings.
    fn serving(&self) {
        if let Some(health) = &self.context.health {
            health.enter(Phase::Serving);
        }
    }

    /// Adds the groups a change of the definitions asks to scan again, if
    /// the selectors can match them.
    fn note(&self, pending: &mut Option<Groups>, rescan: Rescan) {
        let groups = match rescan {
            Rescan::All => self.groups.clone(),
            Rescan::Group(group) if self.groups.includes(&group) => {
                Groups::Only([group].into_iter().collect())
            }
            Rescan::Group(_) => return,
        };
        if !groups.is_empty() {
            pending
                .get_or_insert_with(|| Groups::Only(Default::default()))
                .add(&groups);
        }
    }

    /// The start-up errors of the first resolution.
    fn check(&self, resolution: &Resolution) -> Result<(), OperatorError> {
        if let Some((index, candidates)) = resolution.ambiguous.first() {
            let selector = &self.wanted[*index].selector;
            let hint = candidates.first().map_or_else(String::new, |first| {
                format!("`{}`", selector.clone().with_group(first.group.clone()))
            });
            return Err(OperatorError::AmbiguousResource {
                selector: selector.to_string(),
                candidates: candidates.iter().map(ToString::to_string).collect(),
                hint,
            });
        }
        for (resource, indexes) in &resolution.served {
            self.handlers_of(resource, indexes)?;
        }
        Ok(())
    }

    /// The handlers that serve `resource`: those of the selectors at
    /// `indexes`, each once (one fn may reach a resource through several
    /// selectors, as in Kopf).
    ///
    /// # Errors
    /// [`OperatorError::DuplicateHandler`] for two handlers of one id.
    fn handlers_of(
        &self,
        resource: &Discovered,
        indexes: &[usize],
    ) -> Result<Vec<Handler>, OperatorError> {
        let mut found: Vec<(usize, &Handler)> = Vec::new();
        for &index in indexes {
            for handler in &self.handlers[index] {
                let scope = handler.kind().id_scope();
                let same_id = found
                    .iter()
                    .find(|(_, h)| h.kind().id_scope() == scope && h.id() == handler.id());
                match same_id {
                    Some((_, first))
                        if first.kind() == handler.kind() && first.source() == handler.source() => {
                    }
                    Some((first_index, first)) => {
                        let described = |handler: &Handler, index: usize| {
                            format!(
                                "`{}` (as `{}`)",
                                handler.source(),
                                self.wanted[index].selector
                            )
                        };
                        return Err(OperatorError::DuplicateHandler {
                            id: handler.id().to_owned(),
                            resource: resource.to_string(),
                            kind_scope: scope,
                            handlers: vec![
                                described(first, *first_index),
                                described(handler, index),
                            ],
                        });
                    }
                    None => found.push((index, handler)),
                }
            }
        }
        Ok(found.into_iter().map(|(_, h)| h.clone()).collect())
    }

    /// Serves what `resolution` selects and stops serving the rest.
    fn revise(&mut self, resolution: Resolution) {
        self.report(&resolution);
        let mut desired: BTreeMap<ResourceKey, (Discovered, Vec<Handler>)> = BTreeMap::new();
        let mut duplicates = HashSet::new();
        for (resource, indexes) in &resolution.served {
            match self.handlers_of(resource, indexes) {
                Ok(handlers) => {
                    desired.insert(ResourceKey::of(resource), (resource.clone(), handlers));
                }
                Err(error) => {
                    let name = resource.to_string();
                    if !self.reported.duplicates.contains(&name) {
                        tracing::warn!(%error, %resource, "not serving the resource");
                    }
                    duplicates.insert(name);
                }
            }
        }
        self.reported.duplicates = duplicates;
        let keys: Vec<ResourceKey> = self.served.keys().cloned().collect();
        for key in keys {
            let wanted = desired.get(&key);
            if wanted.is_some_and(|(r, h)| self.served[&key].is_same(r, h)) {
                continue;
            }
            let Some(served) = self.served.remove(&key) else {
                continue;
            };
            let resource = &served.resource;
            if wanted.is_some() {
                tracing::info!(%resource, "serving the resource afresh: its definition or its handlers changed");
            } else if self.known.iter().any(|r| ResourceKey::of(r) == key) {
                tracing::warn!(
                    %resource,
                    "stopped serving the resource: no handler's resource selects it any more (e.g. its group's preferred version changed)"
                );
            } else {
                tracing::warn!(
                    %resource,
                    "stopped serving the resource: the cluster no longer serves it (its CRD was deleted, or its version is no longer served); serving resumes when it is back"
                );
            }
            served.stop.cancel();
            self.finishing.push(Finishing {
                group: served.resource.group,
                plural: served.resource.plural,
                done: served.done,
            });
        }
        self.finishing.retain(|f| !f.done.is_cancelled());
        for (key, (resource, handlers)) in desired {
            if self.served.contains_key(&key) {
                continue;
            }
            let after = self
                .finishing
                .iter()
                .filter(|f| f.group == resource.group && f.plural == resource.plural)
                .map(|f| f.done.clone())
                .collect();
            let served = self.start(resource, handlers, after);
            self.served.insert(key, served);
        }
    }

    /// Reports each problem of `resolution` once while it lasts.
    fn report(&mut self, resolution: &Resolution) {
        let wanted = &self.wanted;
        let reported = &mut self.reported;
        reported
            .ambiguous
            .retain(|i| resolution.ambiguous.iter().any(|(a, _)| a == i));
        for (index, candidates) in &resolution.ambiguous {
            if reported.ambiguous.insert(*index) {
                let candidates: Vec<String> = candidates.iter().map(ToString::to_string).collect();
                tracing::warn!(
                    selector = %wanted[*index].selector,
                    candidates = %candidates.join(", "),
                    "the resource is ambiguous and is not served; name its group"
                );
            }
        }
        reported
            .unmatched
            .retain(|i| resolution.unmatched.iter().any(|(u, _)| u == i));
        for (index, near) in &resolution.unmatched {
            if reported.unmatched.insert(*index) {
                let selector = &wanted[*index].selector;
                if near.is_empty() {
                    tracing::warn!(%selector, "no resource in the cluster matches the handlers' resource (is its CRD installed?); it is served once it appears");
                } else {
                    tracing::warn!(%selector, candidates = %near.join(", "), "no resource in the cluster matches the handlers' resource, only others of that name (another group, or a version not served or not preferred); it is served once it appears");
                }
            }
        }
        reported
            .unsuitable
            .retain(|n| resolution.unsuitable.iter().any(|(u, _)| u == n));
        for (resource, why) in &resolution.unsuitable {
            if reported.unsuitable.insert(resource.clone()) {
                tracing::warn!(%resource, "the resource cannot be served: {why}");
            }
        }
    }

    /// Starts serving `resource` once the servings in `after` have ended.
    fn start(
        &self,
        resource: Discovered,
        handlers: Vec<Handler>,
        after: Vec<CancellationToken>,
    ) -> Served {
        tracing::info!(%resource, "serving the resource");
        let stop = self.context.watching.child_token();
        let done = CancellationToken::new();
        let context = &self.context;
        let scopes = listed_scopes(resource.namespaced, &context.namespaces);
        let identities = identities(&handlers);
        let label = metrics::resource_label(&resource);
        let handlers = match &context.metrics {
            Some(metrics) => measured(metrics, handlers, &label),
            None => handlers,
        };
        let health = context.health.as_ref().map(|health| {
            health.register(
                label.clone(),
                context.settings.watching.effective_silence_limit(),
                context.metrics.as_ref().map(|m| m.watch(&label)),
                context.metrics.as_ref().map(|m| m.queue_latency(&label)),
            )
        });
        let serve = ServeResource {
            target: target_of(&resource),
            handlers: ResourceHandlers::new(handlers.iter())
                .with_indexes(context.indexes.kwarg().clone())
                .with_memo(context.memo.clone()),
            client: context.client.clone(),
            settings: Arc::clone(&context.settings),
            poster: context.poster.clone(),
            namespaces: context.namespaces.clone(),
            spawner: Arc::clone(&context.spawner),
            indexer: context.indexes.indexer(
                &handlers,
                scopes,
                context.client.clone(),
                context.settings.execution.default_backoff,
                context.memo.clone(),
            ),
            gate: context.indexes.gate(&handlers),
            health: health.as_ref().map(|h| Arc::clone(h.resource())),
            slots: context.slots,
            fence: context.fence.clone(),
        };
        context.tasks.spawn(serve.run(
            stop.clone(),
            context.watching.clone(),
            after,
            done.clone().drop_guard(),
        ));
        Served {
            resource,
            handlers: identities,
            stop,
            done,
            _health: health,
        }
    }
}

/// Sleeps until `due` (forever without one).
async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

/// The delay before retrying after `error`: the server's hint, else the backoff's.
fn next_delay(backoff: &mut Backoff, error: &kube::Error) -> Duration {
    let hint = match classify(error) {
        ErrorClass::Transient { retry_after } => retry_after,
        _ => None,
    };
    backoff.next_delay(hint).unwrap_or(Duration::from_secs(1))
}

/// Where the patches of a discovered resource's objects go.
fn target_of(resource: &Discovered) -> ResourceTarget {
    ResourceTarget {
        api: Arc::new(ApiResource {
            group: resource.group.clone(),
            version: resource.version.clone(),
            api_version: resource.api_version(),
            kind: resource.kind.clone(),
            plural: resource.plural.clone(),
        }),
        namespaced: resource.namespaced,
        status_subresource: resource.status_subresource,
    }
}

/// How many listings the watch of a resource starts with: one per served
/// namespace given by name, else one (the cluster, or the first namespace
/// that matches the globs).
fn listed_scopes(namespaced: bool, namespaces: &NamespaceSelector) -> usize {
    if !namespaced || namespaces.is_cluster_wide() {
        return 1;
    }
    namespaces.exact_names().map_or(1, |names| names.len())
}

/// Everything needed to serve one resource.
struct ServeResource {
    target: ResourceTarget,
    handlers: ResourceHandlers,
    client: Client,
    settings: Arc<OperatorSettings>,
    poster: Option<EventPoster>,
    namespaces: NamespaceSelector,
    spawner: Arc<Spawner>,
    /// Runs the resource's `#[index]` handlers on each event, if it has any.
    indexer: Option<ResourceIndexer>,
    /// Holds the processing back until the indexes its handlers take are filled.
    gate: Option<IndexGate>,
    /// Where the watches report, for the probes and the metrics.
    health: Option<Arc<ResourceHealth>>,
    /// The shard slots whose objects are served, if not all.
    slots: Option<SlotSet>,
    /// What holds the processing back once the term's Leases lapse.
    fence: Option<Fence>,
}

impl ServeResource {
    /// Once the servings `after` have ended, watches the resource and feeds
    /// its queue until `stop` (a child of `exiting`, the operator's exit)
    /// is cancelled; then drains the queue, and, when the resource stops
    /// being served while the operator goes on, stops its objects' daemons
    /// and timers. `done` is dropped at the end.
    async fn run(
        self,
        stop: CancellationToken,
        exiting: CancellationToken,
        after: Vec<CancellationToken>,
        done: DropGuard,
    ) {
        for previous in after {
            tokio::select! {
                () = previous.cancelled() => {}
                () = stop.cancelled() => return,
            }
        }
        let target = self.target;
        let poster = self.poster.clone();
        let mut indexer = self.indexer;
        let gate = self.gate;
        let processor = Arc::new(ResourceProcessor::new(
            target.clone(),
            self.handlers,
            Arc::clone(&self.settings),
            self.client.clone(),
            self.poster,
            Arc::clone(&self.spawner),
            stop.clone(),
        ));
        let tasks = Arc::clone(processor.tasks());
        let echoes = processor.echoes().cloned();
        let reporter = poster.clone();
        let latency = self
            .health
            .as_ref()
            .and_then(|health| health.queue_latency().cloned());
        let measures_latency = latency.is_some();
        // Handlers post Events with `kopf_runtime::posting::{info, warn, …}`
        // through the poster in scope.
        let fence = self.fence;
        let process: ProcessFn<String, Work> = Arc::new(move |uid, work| {
            let processor = Arc::clone(&processor);
            let poster = poster.clone();
            let gate = gate.clone();
            let fence = fence.clone();
            if let (Some(latency), Some(queued_at)) = (&latency, work.queued_at) {
                latency.observe(queued_at.elapsed().as_secs_f64());
            }
            Box::pin(async move {
                if let Some(gate) = gate {
                    // Boxed: only the start-up waits, every call's future stays small.
                    Box::pin(gate.wait(work.event.object().map(|o| &**o))).await;
                }
                // The Lease lapsed (the process was paused?): tried again
                // once renewed; the term ends first if it is not.
                if let Some(fence) = &fence
                    && !fence.allows_now(Held::Event)
                {
                    return Processed {
                        expect_version: None,
                        retry_after: Some(fence.retry()),
                    };
                }
                let processing = processor.process(uid, work);
                match poster {
                    Some(poster) => posting::scope(poster, processing).await,
                    None => processing.await,
                }
            })
        });
        let queueing = &self.settings.queueing;
        let queue = Queue::new(
            QueueSettings {
                max_workers: queueing.worker_limit.unwrap_or(usize::MAX >> 4),
                max_backlog: queueing.backlog_limit,
                idle_timeout: queueing.idle_timeout,
                consistency_timeout: self.settings.persistence.consistency_timeout,
            },
            CancellationToken::new(),
            process,
        );
        let watcher = ResourceWatcher::new(
            self.client.clone(),
            (*target.api).clone(),
            target.namespaced,
            self.namespaces,
            self.settings.watching.clone(),
        );
        // The operator's own patches that come back with nothing new are
        // skipped by the watch, undecoded.
        let watcher = match echoes {
            Some(echoes) => watcher.with_echoes(echoes),
            None => watcher,
        };
        // Other replicas' objects are skipped undecoded, unless an index
        // needs every object.
        let watcher = match self.slots {
            Some(slots) if indexer.is_none() => watcher.with_slots(slots),
            _ => watcher,
        };
        let watcher = match &self.health {
            Some(health) => {
                health.set_queue_depth(queue.workers_reader());
                watcher.with_health(Arc::clone(health))
            }
            None => watcher,
        };
        // A short channel: when processing lags, the watch waits rather than
        // decoding bodies ahead that would only sit here (a burst of
        // creations would otherwise leave the memory of a thousand bodies
        // behind after they are processed).
        let (tx, mut rx) = mpsc::channel::<ObjectEvent>(EVENT_BUFFER);
        let watch = tokio::spawn(watcher.run(tx, stop.clone()));
        let mut synced = false;
        // The UIDs of the objects reported as undecodable, until a later
        // state of theirs decodes or they are deleted, and whether their
        // deletion waiting on the operator's finalizer was reported.
        let mut undecodable: HashMap<String, bool> = HashMap::new();
        let finalizer = self.settings.persistence.finalizer.clone();
        // The UIDs of the live objects, when they may have daemons or
        // timers: to stop them if the resource stops being served.
        let mut live: HashSet<String> = HashSet::new();
        while let Some(event) = rx.recv().await {
            if let Some(indexer) = &mut indexer {
                // Before the event is queued: its handlers see the index with it.
                Box::pin(indexer.observe(&event)).await;
            }
            // Another replica's slot (with indexes, the watch sends them
            // all): indexed as every object, not handled.
            if let (Some(slots), Some(uid)) = (self.slots, event.uid())
                && !slots.serve(uid)
            {
                continue;
            }
            if !tasks.is_empty()
                && let Some(uid) = event.uid()
            {
                if matches!(event, ObjectEvent::Deleted { .. }) {
                    live.remove(uid);
                } else if !live.contains(uid) {
                    live.insert(uid.to_owned());
                }
            }
            if let ObjectEvent::Deleted { how, .. } = &event
                && let Some(uid) = event.uid()
                && !tasks.is_empty()
            {
                tasks.stop_gone(uid, *how);
            }
            if !undecodable.is_empty()
                && let Some(uid) = event.uid()
                && !matches!(event, ObjectEvent::Undecodable { .. })
            {
                undecodable.remove(uid);
            }
            match &event {
                ObjectEvent::Undecodable { object, reason, .. } => {
                    if let Some(uid) = event.uid() {
                        let held = held_for_deletion(object, &finalizer);
                        let reported = undecodable.insert(uid.to_owned(), held);
                        if reported.is_none_or(|was_held| held && !was_held) {
                            let finalizer = held.then_some(finalizer.as_str());
                            report_undecodable(reporter.as_ref(), object, reason, finalizer);
                        }
                    }
                }
                ObjectEvent::Synced { count } => {
                    if !synced {
                        tracing::debug!(resource = %target.api.plural, count, "initial listing complete");
                    }
                    synced = true;
                }
                ObjectEvent::Upserted {
                    seen: Seen::Unchanged,
                    ..
                } if synced => {}
                _ => {
                    if let Some(uid) = event.uid().map(str::to_owned) {
                        queue
                            .push(
                                uid,
                                Work {
                                    event,
                                    initial_listing: !synced,
                                    queued_at: measures_latency.then(Instant::now),
                                },
                            )
                            .await;
                    }
                }
            }
        }
        if let Err(error) = watch.await {
            tracing::error!(%error, resource = %target.api.plural, "the watcher task failed");
        }
        queue.shutdown(self.settings.queueing.exit_timeout).await;
        if !exiting.is_cancelled() && !live.is_empty() {
            pause_tasks(&tasks, &self.spawner, &live, &exiting).await;
        }
        if !exiting.is_cancelled()
            && let Some(indexer) = &mut indexer
        {
            indexer.clear();
        }
        drop(done);
    }
}

/// Stops the daemons and timers of a resource that is no longer served as
/// on the operator's exit, but so that they may be spawned again when it is
/// back ([`StopReason::OperatorPausing`]); once they have ended (each
/// within its stop limit) or the operator exits, the objects are forgotten.
async fn pause_tasks(
    tasks: &ResourceTasks,
    spawner: &Spawner,
    uids: &HashSet<String>,
    exiting: &CancellationToken,
) {
    let stopping: usize = uids
        .iter()
        .map(|uid| spawner.stop_object(uid, StopReason::OperatorPausing))
        .sum();
    if stopping > 0 {
        tracing::debug!(
            tasks = stopping,
            reason = %StopReason::OperatorPausing,
            "stopping the daemons and timers of a resource no longer served"
        );
    }
    let ended = futures::future::join_all(uids.iter().map(|uid| tasks.wait_forgotten(uid)));
    tokio::select! {
        _ = ended => {}
        () = exiting.cancelled() => return,
    }
    for uid in uids {
        tasks.forget(uid);
    }
}

/// Whether the deletion of `object` (an identity) waits on `finalizer`.
fn held_for_deletion(object: &Value, finalizer: &str) -> bool {
    let metadata = &object["metadata"];
    !metadata["deletionTimestamp"].is_null()
        && metadata["finalizers"]
            .as_array()
            .is_some_and(|all| all.iter().any(|f| f == finalizer))
}

/// Reports an object that does not decode, once while it stays so, and
/// once more if its deletion then waits on the operator's `finalizer`: a
/// warning and a Kubernetes Event on it. Nothing handles it meanwhile; its
/// daemons and timers, if an earlier state started them, go on with that
/// state until it decodes again or is deleted. The finalizer stays until
/// the handlers it holds the object for can run on a state that decodes.
fn report_undecodable(
    poster: Option<&EventPoster>,
    object: &Value,
    reason: &str,
    finalizer: Option<&str>,
) {
    let name = object_name(object);
    let message = match finalizer {
        None => format!("The operator cannot decode this object and skips it: {reason}"),
        Some(finalizer) => format!(
            "The operator cannot decode this object, whose deletion waits for its \
             finalizer {finalizer}: {reason}. The finalizer stays until its handlers can \
             run: make the object decodable again, or remove the finalizer by hand \
             (its handlers then never run)."
        ),
    };
    tracing::warn!(object = %name, %reason, finalizer, "skipping an object that cannot be decoded");
    if let Some(poster) = poster {
        poster.warn(ObjectReference::from_body(object), "Undecodable", &message);
    }
}

/// `handlers` of `resource` (a [`metrics::resource_label`], empty for
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
pub async fn shutdown_signal() {
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
