//! [`ResourceWatcher`]: one resource across the served namespaces.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::ObjectEvent;
use super::stream::ScopeWatch;
use crate::fields::meta_str;
use crate::operations::health::{ResourceHealth, ScopeMonitor};
use crate::operator::namespaces::NamespaceSelector;
use crate::peering::sharding::SlotSet;
use crate::settings::WatchingSettings;
use crate::watching::echoes::Echoes;

/// Watches one resource in the served namespaces; see the
/// [module docs](super) for the scoping and the guarantees.
#[derive(Clone)]
pub(crate) struct ResourceWatcher {
    client: Client,
    resource: ApiResource,
    namespaced: bool,
    selector: NamespaceSelector,
    settings: WatchingSettings,
    echoes: Option<Echoes>,
    slots: Option<SlotSet>,
    health: Option<Arc<ResourceHealth>>,
}

impl std::fmt::Debug for ResourceWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceWatcher")
            .field("resource", &self.resource)
            .field("namespaced", &self.namespaced)
            .field("selector", &self.selector)
            .finish_non_exhaustive()
    }
}

/// Core v1 Namespaces, for following namespaces that match globs.
fn namespaces_resource() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Namespace".into(),
        plural: "namespaces".into(),
    }
}

impl ResourceWatcher {
    /// A watcher of `resource` (`namespaced` says whether its objects live in
    /// namespaces) in the namespaces `selector` serves.
    pub(crate) fn new(
        client: Client,
        resource: ApiResource,
        namespaced: bool,
        selector: NamespaceSelector,
        settings: WatchingSettings,
    ) -> Self {
        Self {
            client,
            resource,
            namespaced,
            selector,
            settings,
            echoes: None,
            slots: None,
            health: None,
        }
    }

    /// Reports every scope's listings, events and failures to `health`
    /// (for the probes and the metrics).
    #[must_use]
    pub(crate) fn with_health(mut self, health: Arc<ResourceHealth>) -> Self {
        self.health = Some(health);
        self
    }

    /// A monitor of the scope `name`, if health is reported.
    fn monitor(&self, name: &str) -> Option<ScopeMonitor> {
        self.health
            .as_ref()
            .map(|health| health.scope(name.to_owned()))
    }

    /// Every scope known at start-up has its monitor.
    fn settled(&self) {
        if let Some(health) = &self.health {
            health.settled();
        }
    }

    /// Skips the events of the operator's own patches that `echoes` expects
    /// (see [`Echoes`]): their objects are not decoded and not sent.
    #[must_use]
    pub(crate) fn with_echoes(mut self, echoes: Echoes) -> Self {
        self.echoes = Some(echoes);
        self
    }

    /// Serves only the objects of the shard `slots`: the others are skipped
    /// as their events come, undecoded and untracked, as if they did not
    /// exist. (Not for resources with indexes, which hold every object.)
    #[must_use]
    pub(crate) fn with_slots(mut self, slots: SlotSet) -> Self {
        self.slots = Some(slots);
        self
    }

    /// Watch until `cancel` fires or `tx`'s receiver is dropped; per-namespace
    /// watches are stopped and awaited before this returns.
    ///
    /// # Guarantees
    ///
    /// Never fails: every API failure is logged and retried (see the
    /// [module docs](super)).
    pub(crate) async fn run(self, tx: mpsc::Sender<ObjectEvent>, cancel: CancellationToken) {
        if let Some(health) = &self.health {
            health.watching();
        }
        if !self.namespaced || self.selector.is_cluster_wide() {
            let filter =
                (self.namespaced && self.selector.has_exclusions()).then(|| self.selector.clone());
            let api = Api::all_with(self.client.clone(), &self.resource);
            let scope = format!("{} (cluster-wide)", self.resource.plural);
            let watch = ScopeWatch::new(api, &self.resource, scope, self.settings.clone(), filter)
                .with_echoes(self.echoes.clone())
                .with_slots(self.slots)
                .with_monitor(self.monitor("cluster-wide"));
            self.settled();
            watch.run(tx, cancel, None).await;
        } else if let Some(names) = self.selector.exact_names() {
            self.run_in_namespaces(names, tx, cancel).await;
        } else if let Some(names) = self.namespaces_forbidden().await {
            self.run_in_namespaces(names, tx, cancel).await;
        } else {
            self.run_following_namespaces(tx, cancel).await;
        }
    }

    /// One scope per namespace in `names`.
    async fn run_in_namespaces(
        &self,
        names: BTreeSet<String>,
        tx: mpsc::Sender<ObjectEvent>,
        cancel: CancellationToken,
    ) {
        let tasks = TaskTracker::new();
        for ns in names {
            let scope = self.namespace_scope(&ns);
            tasks.spawn(scope.run(tx.clone(), cancel.clone(), None));
        }
        self.settled();
        tasks.close();
        tasks.wait().await;
    }

    /// If listing Namespaces is forbidden (`403`) and some patterns are plain
    /// names, those names to serve instead (as Kopf falls back); else `None`
    /// and namespaces are followed (retrying on errors).
    async fn namespaces_forbidden(&self) -> Option<BTreeSet<String>> {
        let api = Api::<DynamicObject>::all_with(self.client.clone(), &namespaces_resource());
        match api.list(&ListParams::default().limit(1)).await {
            Err(kube::Error::Api(status)) if status.code == 403 => {
                let names = self.selector.literal_names();
                if names.is_empty() {
                    tracing::warn!(resource = %self.resource.plural, "namespaces cannot be listed (403) and no plain namespace names are given; retrying");
                    None
                } else {
                    tracing::warn!(resource = %self.resource.plural, ?names, "namespaces cannot be listed (403); serving the plainly named namespaces only");
                    Some(names)
                }
            }
            _ => None,
        }
    }

    fn namespace_scope(&self, ns: &str) -> ScopeWatch {
        let api = Api::namespaced_with(self.client.clone(), ns, &self.resource);
        let scope = format!("{} in {ns}", self.resource.plural);
        ScopeWatch::new(api, &self.resource, scope, self.settings.clone(), None)
            .with_echoes(self.echoes.clone())
            .with_slots(self.slots)
            .with_monitor(self.monitor(&format!("in {ns}")))
    }

    /// Glob mode: watch Namespaces; run a scope per matching namespace.
    async fn run_following_namespaces(
        self,
        tx: mpsc::Sender<ObjectEvent>,
        cancel: CancellationToken,
    ) {
        // Children stop with the caller's token, or with this one when we return.
        let local = cancel.child_token();
        let tasks = TaskTracker::new();
        let ns_resource = namespaces_resource();
        let (ns_tx, mut ns_rx) = mpsc::channel(64);
        let ns_api = Api::<DynamicObject>::all_with(self.client.clone(), &ns_resource);
        let ns_watch = ScopeWatch::new(
            ns_api,
            &ns_resource,
            "namespaces".into(),
            self.settings.clone(),
            None,
        )
        .with_monitor(self.monitor("namespaces"));
        tasks.spawn(ns_watch.run(ns_tx, local.clone(), None));

        let mut running: HashMap<String, CancellationToken> = HashMap::new();
        loop {
            let event = tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tx.closed() => break,
                event = ns_rx.recv() => event,
            };
            let Some(event) = event else { break };
            // By the end of the Namespaces' first listing, a scope has
            // started for every matching namespace.
            if let ObjectEvent::Synced { .. } = event {
                self.settled();
            }
            let Some(name) = event
                .object()
                .and_then(|ns| meta_str(ns, "name"))
                .map(str::to_owned)
            else {
                continue;
            };
            match event {
                ObjectEvent::Upserted { .. }
                    if self.selector.matches(&name) && !running.contains_key(&name) =>
                {
                    tracing::debug!(namespace = %name, resource = %self.resource.plural, "namespace appeared; watching it");
                    let gone = CancellationToken::new();
                    tasks.spawn(self.namespace_scope(&name).run(
                        tx.clone(),
                        local.clone(),
                        Some(gone.clone()),
                    ));
                    running.insert(name, gone);
                }
                ObjectEvent::Deleted { .. } => {
                    if let Some(gone) = running.remove(&name) {
                        tracing::debug!(namespace = %name, resource = %self.resource.plural, "namespace deleted; unwatching it");
                        gone.cancel();
                    }
                }
                _ => {}
            }
        }
        // Stop quietly: the objects are not gone, the watcher is.
        local.cancel();
        tasks.close();
        tasks.wait().await;
    }
}
