//! The resources served, kept in step with the cluster's ([`Resources`]):
//! the handlers' selectors resolved by discovery at start-up and again
//! after every change of the custom resource definitions, each resource
//! served by a [`ServeResource`] task until it disappears.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::core::ApiResource;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::serve::ServeResource;
use super::{OperatorError, Stop, measured};
use crate::model::handlers::{Handler, HandlerKind};
use crate::model::kwargs::MemoBase;
use crate::model::registry::Registry;
use crate::model::resources::Discovered;
use crate::model::retrying::{Backoff, ErrorClass, classify};
use crate::operations::health::{Health, Phase, Registered};
use crate::operations::metrics::{self, Metrics};
use crate::operator::namespaces::NamespaceSelector;
use crate::operator::scanning::{self, Groups, RESCAN_INTERVAL, Rescan, Resolution, Wanted};
use crate::peering::fencing::Fence;
use crate::peering::sharding::SlotSet;
use crate::persistence::patching::ResourceTarget;
use crate::posting::EventPoster;
use crate::processing::ResourceHandlers;
use crate::processing::indexing::{Hold, OperatorIndexes};
use crate::settings::OperatorSettings;
use crate::spawning::Spawner;

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
pub(super) struct ServeContext {
    pub(super) client: Client,
    pub(super) settings: Arc<OperatorSettings>,
    pub(super) poster: Option<EventPoster>,
    pub(super) namespaces: NamespaceSelector,
    pub(super) spawner: Arc<Spawner>,
    /// Cancelled when the operator exits.
    pub(super) watching: CancellationToken,
    /// Owns the serving of every resource; awaited on exit.
    pub(super) tasks: TaskTracker,
    /// The indexes that `#[index]` handlers fill.
    pub(super) indexes: OperatorIndexes,
    /// What the probes report, when the endpoints are served.
    pub(super) health: Option<Arc<Health>>,
    /// The operator's metrics, when served.
    pub(super) metrics: Option<Arc<Metrics>>,
    /// The operator's memo as the start-up handlers left it.
    pub(super) memo: MemoBase,
    /// The shard slots whose objects are served, if not all.
    pub(super) slots: Option<SlotSet>,
    /// What holds work back once the term's Leases lapse, with a Lease.
    pub(super) fence: Option<Fence>,
}

/// The resources served, kept in step with the cluster's (Kopf's resource
/// observer and orchestrator): resolved from the handlers' selectors at
/// start-up, and again after every change of the custom resource
/// definitions; each served resource is a [`ServeResource`] task.
pub(super) struct Resources {
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
    pub(super) fn new(context: ServeContext, registry: &Registry) -> Self {
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
    pub(super) async fn serve_until(mut self, stop: &mut Stop<'_>) -> Result<(), OperatorError> {
        if self.wanted.is_empty() {
            self.serving();
            stop.await;
            return Ok(());
        }
        let client = self.context.client.clone();
        let settings = Arc::clone(&self.context.settings);
        let all = self.groups.clone();
        let mut backoff = Backoff::endless(&settings.networking.error_backoffs);
        let Some(known) = discover(&client, &all, &mut backoff, stop).await else {
            return Ok(());
        };
        self.known = known;
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

/// What discovery finds of `groups`, retried after each failure; `None`
/// if `stop` completes first.
async fn discover(
    client: &Client,
    groups: &Groups,
    backoff: &mut Backoff,
    stop: &mut Stop<'_>,
) -> Option<Vec<Discovered>> {
    loop {
        let scanned = tokio::select! {
            scanned = scanning::scan(client, groups) => scanned,
            () = &mut *stop => return None,
        };
        match scanned {
            Ok(found) => return Some(found),
            Err(error) => {
                let delay = next_delay(backoff, &error);
                tracing::warn!(%error, ?delay, "discovery of the served resources failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = &mut *stop => return None,
                }
            }
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
