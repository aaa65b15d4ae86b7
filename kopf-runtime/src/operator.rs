//! [`Operator`]: the registry, a client and settings, running until stopped.
//!
//! One watch per served resource feeds a queue with one serial worker per
//! object; start-up handlers run before the first watch, clean-up handlers
//! after the last worker.
//!
//! # Guarantees
//! - Every handler the registry holds either runs or is refused at start-up
//!   with an error naming it ([`OperatorError::Unsupported`]).
//! - A stop during the start-up handlers cancels them; nothing is served and
//!   no clean-up handler runs (as in Kopf).
//! - On stop, watching ends first; handlers in flight get
//!   `queueing.exit_timeout` to finish and are cancelled after it (nothing
//!   acts on objects once [`Operator::run_until`] returns); then the clean-up
//!   handlers run.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::core::ApiResource;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::execution;
use crate::fields::object_name;
use crate::handlers::{Handler, HandlerKind};
use crate::kwargs::{Kwargs, Logger};
use crate::namespaces::NamespaceSelector;
use crate::patching::ResourceTarget;
use crate::posting::{self, EventPoster, ObjectReference};
use crate::processing::{ResourceHandlers, ResourceProcessor, Work};
use crate::queueing::{ProcessFn, Queue, QueueSettings};
use crate::registry::Registry;
use crate::resources::ResourceRef;
use crate::settings::OperatorSettings;
use crate::spawning::resource::TaskObserver;
use crate::spawning::{Counters, Spawner, SpawnerSettings};
use crate::watching::{ObjectEvent, ResourceWatcher, Seen};

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
    /// No cluster to talk to.
    #[error("cannot connect to a cluster: {0}; set KUBECONFIG, pass --kubeconfig, or {hint}", hint = NO_CLUSTER_HINT)]
    Client(#[source] kube::Error),
    /// An `on_startup` handler failed for good, so the operator does not start.
    #[error("start-up handler `{handler}` failed: {message}")]
    Startup {
        /// The handler's id.
        handler: String,
        /// Why.
        message: String,
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
            HandlerKind::OnEvent | HandlerKind::OnStartup | HandlerKind::OnCleanup
        )
}

/// A configured operator: what to run, against which cluster, how.
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
    client: Option<Client>,
    namespaces: NamespaceSelector,
    task_counters: Arc<Counters>,
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
            client: None,
            namespaces: NamespaceSelector::all(),
            task_counters: Arc::default(),
        }
    }

    /// The lifetime counters of the operator's daemons and timers (spawned,
    /// stopped, cancelled, abandoned, …), for metrics; they keep counting
    /// while the operator runs.
    pub fn task_counters(&self) -> Arc<Counters> {
        Arc::clone(&self.task_counters)
    }

    /// Uses this client instead of inferring one.
    pub fn client(mut self, client: Client) -> Self {
        self.client = Some(client);
        self
    }

    /// Uses these settings.
    pub fn settings(mut self, settings: OperatorSettings) -> Self {
        self.settings = settings;
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
    /// [`OperatorError::Client`] without a cluster, [`OperatorError::Startup`]
    /// when a start-up handler fails for good.
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
        self,
        mut stop: Pin<Box<dyn Future<Output = ()> + Send + 'a>>,
    ) -> Pin<Box<dyn Future<Output = Result<(), OperatorError>> + Send + 'a>> {
        Box::pin(async move {
            if let Some(handler) = self
                .registry
                .handlers()
                .iter()
                .find(|h| !is_supported(h.kind))
            {
                return Err(OperatorError::Unsupported {
                    handler: handler.fn_path.to_string(),
                    kind: handler.kind,
                });
            }
            let client = match self.client.clone() {
                Some(client) => client,
                None => Client::try_default().await.map_err(OperatorError::Client)?,
            };
            let settings = Arc::new(self.settings.clone());
            let root = CancellationToken::new();
            let tasks = TaskTracker::new();

            let poster = if settings.posting.enabled {
                let (poster, task) = EventPoster::new(client.clone(), settings.posting.clone());
                tasks.spawn(task.run(root.child_token()));
                Some(poster)
            } else {
                None
            };

            let observer = TaskObserver::new(poster.clone());
            let spawner = Arc::new(Spawner::with_counters(
                tokio::runtime::Handle::current(),
                Arc::clone(&observer) as Arc<dyn crate::spawning::Observer>,
                SpawnerSettings {
                    graceful_exit_limit: settings.background.graceful_exit_limit,
                    default_cancellation_timeout: settings.background.default_cancellation_timeout,
                },
                Arc::clone(&self.task_counters),
            ));

            let activities = |kind| {
                self.registry
                    .of_kind(kind)
                    .cloned()
                    .collect::<Vec<Handler>>()
            };
            let startup_handlers = activities(HandlerKind::OnStartup);
            let startup = run_activities(&startup_handlers, &client, true);
            tokio::select! {
                started = startup => started?,
                () = &mut stop => {
                    // As in Kopf: a start-up cut short serves nothing and cleans nothing up.
                    tracing::warn!("stopped before the start-up handlers finished");
                    root.cancel();
                    tasks.close();
                    let exit_timeout = settings.queueing.exit_timeout + Duration::from_secs(1);
                    if tokio::time::timeout(exit_timeout, tasks.wait()).await.is_err() {
                        tracing::warn!("background tasks did not stop in time; abandoning them");
                    }
                    return Ok(());
                }
            }

            let watching = root.child_token();
            let mut queues = Vec::new();
            for (resource, handlers) in self.resources().into_values() {
                let handlers = ResourceHandlers::new(handlers.iter());
                let serve = ServeResource {
                    resource,
                    handlers,
                    client: client.clone(),
                    settings: Arc::clone(&settings),
                    poster: poster.clone(),
                    namespaces: self.namespaces.clone(),
                    spawner: Arc::clone(&spawner),
                };
                let (queue_tx, queue_rx) = tokio::sync::oneshot::channel();
                tasks.spawn(serve.run(watching.clone(), queue_tx));
                queues.push(queue_rx);
            }

            stop.await;
            tracing::info!("stopping the operator");
            watching.cancel();
            let exit_timeout = settings.queueing.exit_timeout;
            for queue in queues {
                if let Ok(queue) = queue.await {
                    queue.shutdown(exit_timeout).await;
                }
            }
            if let Err(error) = spawner.shutdown(settings.background.shutdown_timeout).await {
                tracing::warn!(%error, "daemons and timers did not all stop in time");
            }
            if let Err(error) =
                run_activities(&activities(HandlerKind::OnCleanup), &client, false).await
            {
                tracing::warn!(%error, "a clean-up handler failed");
            }
            root.cancel();
            tasks.close();
            if tokio::time::timeout(exit_timeout + Duration::from_secs(1), tasks.wait())
                .await
                .is_err()
            {
                tracing::warn!("background tasks did not stop in time; abandoning them");
            }
            Ok(())
        })
    }

    /// The resources served, each with its handlers, in a stable order.
    fn resources(&self) -> BTreeMap<ResourceKey, (ResourceRef, Vec<Handler>)> {
        let mut out: BTreeMap<ResourceKey, (ResourceRef, Vec<Handler>)> = BTreeMap::new();
        for handler in self.registry.handlers() {
            let Some(resource) = &handler.resource else {
                continue;
            };
            let key = ResourceKey::of(resource);
            out.entry(key)
                .or_insert_with(|| (resource.clone(), Vec::new()))
                .1
                .push(handler.clone());
        }
        out
    }
}

/// A resource's identity: group, version, plural.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ResourceKey(String, String, String);

impl ResourceKey {
    fn of(resource: &ResourceRef) -> Self {
        Self(
            resource.group.to_string(),
            resource.version.to_string(),
            resource.plural.to_string(),
        )
    }
}

/// Everything needed to serve one resource.
struct ServeResource {
    resource: ResourceRef,
    handlers: ResourceHandlers,
    client: Client,
    settings: Arc<OperatorSettings>,
    poster: Option<EventPoster>,
    namespaces: NamespaceSelector,
    spawner: Arc<Spawner>,
}

impl ServeResource {
    /// Discovers the resource, then watches it and feeds its queue until
    /// `watching` is cancelled. The queue is handed out through `queue_out`
    /// so the operator can drain it on exit.
    async fn run(
        self,
        watching: CancellationToken,
        queue_out: tokio::sync::oneshot::Sender<Queue<String, Work>>,
    ) {
        let Some(target) = discover_until_found(&self.client, &self.resource, &watching).await
        else {
            return;
        };
        let poster = self.poster.clone();
        let processor = Arc::new(ResourceProcessor::new(
            target.clone(),
            self.handlers,
            Arc::clone(&self.settings),
            self.client.clone(),
            self.poster,
            self.spawner,
            watching.clone(),
        ));
        let tasks = Arc::clone(processor.tasks());
        let echoes = processor.echoes().cloned();
        let reporter = poster.clone();
        // Handlers post Events with `kopf_runtime::posting::{info, warn, …}`
        // through the poster in scope.
        let process: ProcessFn<String, Work> = Arc::new(move |uid, work| {
            let processor = Arc::clone(&processor);
            let poster = poster.clone();
            Box::pin(async move {
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
        // A short channel: when processing lags, the watch waits rather than
        // decoding bodies ahead that would only sit here (a burst of
        // creations would otherwise leave the memory of a thousand bodies
        // behind after they are processed).
        let (tx, mut rx) = mpsc::channel::<ObjectEvent>(EVENT_BUFFER);
        let watch = tokio::spawn(watcher.run(tx, watching.clone()));
        let mut synced = false;
        // The UIDs of the objects reported as undecodable, until a later
        // state of theirs decodes or they are deleted.
        let mut undecodable = HashSet::new();
        while let Some(event) = rx.recv().await {
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
                    if let Some(uid) = event.uid()
                        && undecodable.insert(uid.to_owned())
                    {
                        report_undecodable(reporter.as_ref(), object, reason);
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
        let _ = queue_out.send(queue);
    }
}

/// Reports an object that does not decode, once while it stays so: a
/// warning and a Kubernetes Event on it. Nothing handles it meanwhile; its
/// daemons and timers, if an earlier state started them, go on with that
/// state until it decodes again or is deleted.
fn report_undecodable(poster: Option<&EventPoster>, object: &Value, reason: &str) {
    let name = object_name(object);
    tracing::warn!(object = %name, %reason, "skipping an object that cannot be decoded");
    if let Some(poster) = poster {
        poster.warn(
            ObjectReference::from_body(object),
            "Undecodable",
            &format!("The operator cannot decode this object and skips it: {reason}"),
        );
    }
}

/// Finds the resource in discovery; retries with a warning until it exists
/// (a CRD may be installed after the operator starts) or `stop` fires.
async fn discover_until_found(
    client: &Client,
    resource: &ResourceRef,
    stop: &CancellationToken,
) -> Option<ResourceTarget> {
    let mut delay = Duration::from_millis(500);
    loop {
        match discover(client, resource).await {
            Ok(Some(target)) => return Some(target),
            Ok(None) => tracing::warn!(
                resource = %resource.api_version(), plural = %resource.plural,
                "the resource is not served by the cluster (is its CRD installed?); retrying"
            ),
            Err(error) => {
                tracing::warn!(%error, plural = %resource.plural, "discovery failed; retrying")
            }
        }
        tokio::select! {
            () = stop.cancelled() => return None,
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// Looks the resource up in its group version's resource list.
async fn discover(
    client: &Client,
    resource: &ResourceRef,
) -> Result<Option<ResourceTarget>, kube::Error> {
    let api_version = resource.api_version();
    let list = if resource.group.is_empty() {
        client.list_core_api_resources(&resource.version).await?
    } else {
        client.list_api_group_resources(&api_version).await?
    };
    let Some(found) = list.resources.iter().find(|r| r.name == resource.plural) else {
        return Ok(None);
    };
    let status_subresource = list
        .resources
        .iter()
        .any(|r| r.name == format!("{}/status", resource.plural));
    Ok(Some(ResourceTarget {
        api: Arc::new(ApiResource {
            group: resource.group.to_string(),
            version: resource.version.to_string(),
            api_version,
            kind: found.kind.clone(),
            plural: resource.plural.to_string(),
        }),
        namespaced: found.namespaced,
        status_subresource,
    }))
}

/// Runs start-up or clean-up handlers, each until it succeeds or fails for
/// good (retrying temporary errors after their delay).
async fn run_activities(
    handlers: &[Handler],
    client: &Client,
    fatal: bool,
) -> Result<(), OperatorError> {
    for handler in handlers {
        let mut retry = 0;
        let started = jiff::Timestamp::now();
        loop {
            let mut kwargs = Kwargs::new(serde_json::Value::Null);
            kwargs.client = Some(client.clone());
            kwargs.logger = Logger::new(handler.id.clone());
            kwargs.retry = retry;
            kwargs.started = Some(started);
            let outcome = execution::invoke(handler, kwargs, handler.options.timeout).await;
            let delay = match outcome {
                Ok(_) => {
                    tracing::info!(handler = %handler.id, "activity succeeded");
                    break;
                }
                Err(crate::errors::HandlerError::Temporary { message, delay }) => {
                    tracing::warn!(handler = %handler.id, %message, "activity failed temporarily");
                    delay.unwrap_or(handler.options.backoff)
                }
                Err(error) => {
                    let message = error.to_string();
                    tracing::error!(handler = %handler.id, %message, "activity failed");
                    if fatal {
                        return Err(OperatorError::Startup {
                            handler: handler.id.clone(),
                            message,
                        });
                    }
                    break;
                }
            };
            retry += 1;
            if handler.options.retries.is_some_and(|limit| retry >= limit) {
                let message = format!("exceeded {retry} retries");
                if fatal {
                    return Err(OperatorError::Startup {
                        handler: handler.id.clone(),
                        message,
                    });
                }
                break;
            }
            tokio::time::sleep(delay).await;
        }
    }
    Ok(())
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
