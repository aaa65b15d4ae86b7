//! In-memory indexes: `#[index]` handlers fill them, every other handler
//! reads them by id (Kopf's indexing engine).
//!
//! [`OperatorIndexes`] holds the operator's indexes and whether each is
//! filled. Each served resource with `#[index]` handlers has a
//! [`ResourceIndexer`], which its watch loop feeds with every event before
//! the event is queued for processing: the index handlers run for each new
//! or changed object, and its values leave the indexes when it is deleted
//! (a `DELETED` event, or found missing by a re-list after a watch gap) or
//! stops matching a handler's filters.
//!
//! # Guarantees
//! - An index is *filled* once every resource serving its handler has
//!   listed its objects and indexed every one of them (each of the served
//!   namespaces given by name, or the cluster). The processing of a
//!   resource whose handlers take indexes waits until all of those are
//!   filled ([`IndexGate`]), as in Kopf: no handler runs with an index
//!   still being filled at start-up. Once filled, an index stays so.
//! - Errors of index handlers are handled as in Kopf: by default
//!   (`errors = Ignored`) the object's values stay as they were; a
//!   temporary error removes them and the object is not indexed again by
//!   that handler before the delay has passed (and another event of the
//!   object comes); a permanent one, or a temporary one past `retries` or
//!   `timeout`, removes them until the object is deleted. A handler
//!   returning `null` (or `()`) leaves the object's values as they were.
//! - A resource that stops being served (its CRD deleted) takes its
//!   objects' values out of the indexes.
//!
//! # Caveats
//! - Index handlers run one at a time, in the watch loop of their resource,
//!   before its events are queued: a slow one holds the resource's events
//!   back. Keep them fast and free of requests, as Kopf advises.
//! - With namespace globs, an index is filled once the first matching
//!   namespace has been listed.
//! - Index handlers get a memo of their own at each call, not the object's:
//!   a fork of the operator's memo (the start-up handlers' values shared).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::fields::{meta_str, object_name};
use crate::model::handlers::{Handler, HandlerKind};
use crate::model::kwargs::{Attempt, Index, Indexes, Kwargs, Logger, MemoBase, ObjectKey};
use crate::model::registry::Registry;
use crate::model::retrying::RetryPolicy;
use crate::processing::execution::{self, Disposition};
use crate::watching::{ObjectEvent, Seen};

/// The indexes of an operator, and whether each is filled yet.
#[derive(Clone, Debug, Default)]
pub(crate) struct OperatorIndexes {
    indexes: Indexes,
    filling: Arc<HashMap<String, Filling>>,
}

impl OperatorIndexes {
    /// An empty index for each `#[index]` handler of `registry`, none filled.
    pub(crate) fn new(registry: &Registry) -> Self {
        let ids: Vec<&str> = registry
            .of_kind(HandlerKind::Index)
            .map(|h| h.id())
            .collect();
        if ids.is_empty() {
            return Self::default();
        }
        Self {
            indexes: Indexes::new(ids.iter().copied()),
            filling: Arc::new(
                ids.iter()
                    .map(|id| ((*id).to_owned(), Filling::new()))
                    .collect(),
            ),
        }
    }

    /// Empties every index and marks it unfilled, as before the first
    /// listing: when a replica stops leading, what its watches saw goes
    /// stale, and the next term fills the indexes from a fresh listing.
    pub(crate) fn reset(&self) {
        self.indexes.clear();
        for filling in self.filling.values() {
            filling.0.send_modify(|state| state.filled = false);
        }
    }

    /// The indexes, as handlers take them.
    pub(crate) fn kwarg(&self) -> &Indexes {
        &self.indexes
    }

    /// Holds every index unfilled until the result is dropped: the operator
    /// holds them until it has started serving every resource it finds at
    /// start-up, so that an index whose resource is not served yet does not
    /// count as filled.
    pub(crate) fn hold_all(&self) -> Vec<Hold> {
        self.filling.values().filter_map(Filling::hold).collect()
    }

    /// The indexer of a resource served by `handlers` (of every kind), if
    /// some of them are `#[index]` handlers. It holds their indexes
    /// unfilled until `scopes` listings (namespaces, or the cluster) are
    /// indexed.
    pub(crate) fn indexer(
        &self,
        handlers: &[Handler],
        scopes: usize,
        client: kube::Client,
        default_backoff: Duration,
        memo: MemoBase,
    ) -> Option<ResourceIndexer> {
        let indexing: Vec<(Handler, Index)> = handlers
            .iter()
            .filter(|h| h.kind() == HandlerKind::Index)
            .filter_map(|h| Some((h.clone(), self.indexes.get(h.id())?.clone())))
            .collect();
        if indexing.is_empty() {
            return None;
        }
        let mut holds: Vec<Hold> = indexing
            .iter()
            .filter_map(|(h, _)| self.filling.get(h.id())?.hold())
            .collect();
        if scopes == 0 {
            holds.clear();
        }
        Some(ResourceIndexer {
            handlers: indexing,
            client,
            holds,
            scopes_to_list: scopes,
            indexed: HashSet::new(),
            failures: HashMap::new(),
            default_backoff,
            memo,
        })
    }

    /// What the processing of a resource served by `handlers` waits for:
    /// the indexes they take, until they are filled; `None` if they take none.
    pub(crate) fn gate(&self, handlers: &[Handler]) -> Option<IndexGate> {
        let mut ids: Vec<&str> = handlers
            .iter()
            .filter(|h| h.kind() != HandlerKind::Index)
            .flat_map(|h| h.index_params().iter().map(AsRef::as_ref))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let waiting: Arc<[(String, Filling)]> = ids
            .into_iter()
            .filter_map(|id| Some((id.to_owned(), self.filling.get(id)?.clone())))
            .filter(|(_, filling)| !filling.is_filled())
            .collect();
        (!waiting.is_empty()).then(|| IndexGate { waiting })
    }
}

/// Whether an index is filled: how many servings and the start-up still
/// hold it unfilled. Filled once nothing holds it, for good.
#[derive(Clone, Debug)]
struct Filling(Arc<watch::Sender<FillingState>>);

#[derive(Debug, Default)]
struct FillingState {
    holds: usize,
    filled: bool,
}

impl Filling {
    fn new() -> Self {
        Self(Arc::new(watch::Sender::new(FillingState::default())))
    }

    /// A hold on the index, `None` if it is filled already.
    fn hold(&self) -> Option<Hold> {
        let mut held = false;
        self.0.send_if_modified(|state| {
            held = !state.filled;
            if held {
                state.holds += 1;
            }
            false
        });
        held.then(|| Hold(self.clone()))
    }

    fn is_filled(&self) -> bool {
        self.0.borrow().filled
    }

    async fn filled(&self) {
        let mut filled = self.0.subscribe();
        // The sender lives as long as `self`: the wait ends only when filled.
        let _ = filled.wait_for(|state| state.filled).await;
    }
}

/// Keeps an index unfilled while it lives.
#[derive(Debug)]
pub(crate) struct Hold(Filling);

impl Drop for Hold {
    fn drop(&mut self) {
        self.0.0.send_if_modified(|state| {
            state.holds = state.holds.saturating_sub(1);
            let filled = state.holds == 0 && !state.filled;
            if filled {
                state.filled = true;
            }
            filled
        });
    }
}

/// The indexes a resource's handlers take that were not filled when its
/// serving started.
#[derive(Clone, Debug)]
pub(crate) struct IndexGate {
    waiting: Arc<[(String, Filling)]>,
}

impl IndexGate {
    /// Waits until every index is filled; logs once per object (`body`)
    /// that waits.
    pub(crate) async fn wait(&self, body: Option<&Value>) {
        let Some(unfilled) = self.unfilled() else {
            return;
        };
        let name = body.map(object_name).unwrap_or_default();
        Logger::new(name).debug(format_args!(
            "Waiting for the indexes to be filled before handling: {unfilled}."
        ));
        for (_, filling) in self.waiting.iter() {
            filling.filled().await;
        }
    }

    /// The ids of the indexes not filled yet, if any.
    fn unfilled(&self) -> Option<String> {
        let ids: Vec<&str> = self
            .waiting
            .iter()
            .filter(|(_, filling)| !filling.is_filled())
            .map(|(id, _)| id.as_str())
            .collect();
        (!ids.is_empty()).then(|| ids.join(", "))
    }
}

/// An object that an index handler failed for (Kopf keeps this in memory
/// only, as here).
#[derive(Debug, Clone, Copy)]
struct Failure {
    attempts: u32,
    started: jiff::Timestamp,
    first_failed: Instant,
    /// When the handler may index the object again; `None`: never.
    retry_at: Option<Instant>,
}

/// The `#[index]` handlers of one served resource, fed by its watch loop.
pub(crate) struct ResourceIndexer {
    handlers: Vec<(Handler, Index)>,
    client: kube::Client,
    /// Keep the indexes unfilled until the listings are indexed.
    holds: Vec<Hold>,
    scopes_to_list: usize,
    /// The objects that put values in the indexes, by UID.
    indexed: HashSet<ObjectKey>,
    /// Failed index handlers, by the object's UID and the handler's position.
    failures: HashMap<(String, usize), Failure>,
    /// The retry delay of index handlers without a `backoff` of their own.
    default_backoff: Duration,
    /// What the memo of each call starts as: the operator's memo, as the
    /// start-up handlers left it.
    memo: MemoBase,
}

impl std::fmt::Debug for ResourceIndexer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceIndexer")
            .field("handlers", &self.handlers.len())
            .field("indexed", &self.indexed.len())
            .finish_non_exhaustive()
    }
}

impl ResourceIndexer {
    /// Brings the indexes up to date with `event`.
    pub(crate) async fn observe(&mut self, event: &ObjectEvent) {
        match event {
            ObjectEvent::Upserted {
                seen: Seen::Unchanged,
                ..
            } => {}
            ObjectEvent::Upserted { object, .. } => self.index(object).await,
            ObjectEvent::Deleted { object, .. } => self.forget(object),
            ObjectEvent::Synced { .. } => {
                self.scopes_to_list = self.scopes_to_list.saturating_sub(1);
                if self.scopes_to_list == 0 {
                    self.holds.clear();
                }
            }
            // Its values stay as they were, until it decodes again or goes.
            ObjectEvent::Undecodable { .. } => {}
        }
    }

    /// Takes every object's values out of the indexes (the resource is no
    /// longer served).
    pub(crate) fn clear(&mut self) {
        for key in self.indexed.drain() {
            for (_, index) in &self.handlers {
                index.discard(&key);
            }
        }
        self.failures.clear();
    }

    fn forget(&mut self, body: &Value) {
        let key = object_key(body);
        for (_, index) in &self.handlers {
            index.discard(&key);
        }
        self.indexed.remove(&key);
        if let Some(uid) = meta_str(body, "uid") {
            self.failures.retain(|(failed, _), _| failed != uid);
        }
    }

    async fn index(&mut self, body: &Arc<Value>) {
        let key = object_key(body);
        let uid = meta_str(body, "uid").unwrap_or_default().to_owned();
        let logger = Logger::new(object_name(body));
        let memo = self.memo.fork();
        for position in 0..self.handlers.len() {
            let (handler, index) = &self.handlers[position];
            let mut kwargs = Kwargs::of(Arc::clone(body), memo.clone(), logger.clone());
            if !handler.filters().matches_object(&kwargs) {
                index.discard(&key);
                self.failures.remove(&(uid.clone(), position));
                continue;
            }
            let failure = self.failures.get(&(uid.clone(), position)).copied();
            if let Some(failure) = failure {
                match failure.retry_at {
                    None => continue,
                    Some(at) if at > Instant::now() => continue,
                    Some(_) => {
                        kwargs = kwargs.with_attempt(Attempt {
                            retry: failure.attempts,
                            started: failure.started,
                            runtime: failure.first_failed.elapsed(),
                        });
                    }
                }
            }
            kwargs = kwargs.with_cluster(Some(self.client.clone()), Indexes::default());
            let policy = RetryPolicy::of(handler.options(), self.default_backoff);
            let runtime = failure.map_or(Duration::ZERO, |f| f.first_failed.elapsed());
            let outcome = execution::invoke(handler, kwargs, policy.limit(runtime)).await;
            let attempt = (failure.map_or(0, |f| f.attempts), runtime);
            let resolution =
                execution::resolve_attempt(handler, outcome, &policy, attempt, &logger);
            let failed = |retry_at| {
                let (attempts, started, first_failed) = failure.map_or_else(
                    || (1, jiff::Timestamp::now(), Instant::now()),
                    |f| (f.attempts + 1, f.started, f.first_failed),
                );
                Failure {
                    attempts,
                    started,
                    first_failed,
                    retry_at,
                }
            };
            match resolution {
                Disposition::Succeeded(Some(result)) => {
                    index.replace(&key, &result);
                    self.indexed.insert(key.clone());
                    self.failures.remove(&(uid.clone(), position));
                }
                Disposition::Succeeded(None) => {
                    self.failures.remove(&(uid.clone(), position));
                }
                Disposition::Ignored => {}
                Disposition::Retry { delay, .. } => {
                    index.discard(&key);
                    let failure = failed(Some(Instant::now() + delay));
                    self.failures.insert((uid.clone(), position), failure);
                }
                Disposition::Failed { .. } => {
                    index.discard(&key);
                    self.failures.insert((uid.clone(), position), failed(None));
                }
            }
        }
    }
}

/// An object's key in the indexes: its namespace, name and UID.
fn object_key(body: &Value) -> ObjectKey {
    let part = |key| meta_str(body, key).map(str::to_owned);
    (part("namespace"), part("name"), part("uid"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::model::errors::Error;
    use crate::model::handlers::{DEFAULT_BACKOFF, ErrorsMode};
    use crate::model::registry::RegistryBuilder;
    use crate::model::resources::ResourceRef;
    use crate::watching::DeletedBy;

    fn pods() -> ResourceRef {
        ResourceRef::dynamic("", "v1", "pods")
    }

    fn pod(name: &str, node: &str) -> Arc<Value> {
        Arc::new(json!({
            "metadata": {"namespace": "ns", "name": name, "uid": format!("uid-{name}"), "labels": {"app": "x"}},
            "spec": {"nodeName": node},
        }))
    }

    fn upserted(body: &Arc<Value>) -> ObjectEvent {
        ObjectEvent::Upserted {
            object: Arc::clone(body),
            seen: Seen::Changed,
        }
    }

    fn client() -> kube::Client {
        crate::mock_api::client(|_| crate::mock_api::Reply::Json(200, json!({}))).0
    }

    /// The pods by node, through the handler `by_node`.
    fn by_node(registry: RegistryBuilder) -> RegistryBuilder {
        registry.index(pods(), "by_node", |kw: Kwargs| async move {
            let node = kw.field("spec.nodeName").cloned().unwrap_or_default();
            match node.as_str() {
                Some("bad") => Err(Error::temporary("bad node", Duration::from_secs(10))),
                Some("worse") => Err(Error::permanent("worse node")),
                Some("none") => Ok(Value::Null),
                Some(node) => Ok(json!({ node: kw.name() })),
                None => Ok(Value::Null),
            }
        })
    }

    fn setup(registry: RegistryBuilder) -> (OperatorIndexes, ResourceIndexer, Index) {
        let registry = registry.build().expect("a valid registry");
        let indexes = OperatorIndexes::new(&registry);
        let indexer = indexes
            .indexer(
                registry.handlers(),
                1,
                client(),
                DEFAULT_BACKOFF,
                MemoBase::default(),
            )
            .expect("index handlers");
        let index = indexes.kwarg().get("by_node").expect("the index").clone();
        (indexes, indexer, index)
    }

    fn names(index: &Index, node: &str) -> Vec<Value> {
        index
            .get(Some(node))
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default()
    }

    #[tokio::test(start_paused = true)]
    async fn objects_are_indexed_moved_and_forgotten() {
        let (_indexes, mut indexer, index) =
            setup(by_node(crate::model::registry::Registry::builder()));
        indexer.observe(&upserted(&pod("a", "n1"))).await;
        indexer.observe(&upserted(&pod("b", "n1"))).await;
        assert_eq!(names(&index, "n1"), [json!("a"), json!("b")]);

        indexer.observe(&upserted(&pod("a", "n2"))).await;
        assert_eq!(names(&index, "n1"), [json!("b")]);
        assert_eq!(names(&index, "n2"), [json!("a")]);

        for how in [DeletedBy::Event, DeletedBy::Vanished] {
            let name = if how == DeletedBy::Event { "a" } else { "b" };
            indexer
                .observe(&ObjectEvent::Deleted {
                    object: pod(name, "any"),
                    how,
                })
                .await;
        }
        assert!(index.is_empty(), "{index:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn index_handlers_see_the_operators_memo_in_one_of_their_own() {
        let registry = crate::model::registry::Registry::builder()
            .index(pods(), "by_node", |kw: Kwargs| async move {
                let from_startup = kw.memo.get::<String>().map(|s| s.to_string());
                let before = kw.memo.insert(kw.name().map(str::to_owned));
                let node = kw.field("spec.nodeName").cloned().unwrap_or_default();
                Ok::<_, Error>(
                    json!({ node.as_str().unwrap_or("?"): [from_startup, before.is_some()] }),
                )
            })
            .build()
            .expect("a valid registry");
        let operator = crate::model::kwargs::Memo::new();
        operator.insert(String::from("from start-up"));
        let indexes = OperatorIndexes::new(&registry);
        let mut indexer = indexes
            .indexer(
                registry.handlers(),
                1,
                client(),
                DEFAULT_BACKOFF,
                operator.freeze(),
            )
            .expect("index handlers");
        let index = indexes.kwarg().get("by_node").expect("the index").clone();
        indexer.observe(&upserted(&pod("a", "n1"))).await;
        indexer.observe(&upserted(&pod("b", "n1"))).await;
        assert_eq!(
            names(&index, "n1"),
            [
                json!(["from start-up", false]),
                json!(["from start-up", false])
            ],
            "each call's own insertion is not seen by the next"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_index_handler_out_of_retries_leaves_the_object_unindexed() {
        let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = Arc::clone(&calls);
        let registry = crate::model::registry::Registry::builder()
            .index(pods(), "by_node", move |_kw: Kwargs| {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { Err::<Value, _>(Error::temporary("down", Duration::from_secs(1))) }
            })
            .retries(2);
        let (_indexes, mut indexer, index) = setup(registry);
        for _ in 0..4 {
            indexer.observe(&upserted(&pod("a", "n1"))).await;
            tokio::time::advance(Duration::from_secs(2)).await;
        }
        assert!(index.is_empty());
        assert_eq!(
            calls.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "the second failure is final"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn null_keeps_the_values_and_errors_follow_the_errors_mode() {
        let (_indexes, mut indexer, index) =
            setup(by_node(crate::model::registry::Registry::builder()));
        indexer.observe(&upserted(&pod("a", "n1"))).await;
        indexer.observe(&upserted(&pod("a", "none"))).await;
        assert_eq!(names(&index, "n1"), [json!("a")], "null keeps the values");

        // A temporary error takes them out, and the object is not indexed
        // again before its delay.
        indexer.observe(&upserted(&pod("a", "bad"))).await;
        assert!(index.is_empty());
        indexer.observe(&upserted(&pod("a", "n3"))).await;
        assert!(index.is_empty(), "too early: {index:?}");
        tokio::time::advance(Duration::from_secs(10)).await;
        indexer.observe(&upserted(&pod("a", "n3"))).await;
        assert_eq!(names(&index, "n3"), [json!("a")]);

        // A permanent error excludes the object until it is deleted.
        indexer.observe(&upserted(&pod("a", "worse"))).await;
        tokio::time::advance(Duration::from_secs(3600)).await;
        indexer.observe(&upserted(&pod("a", "n4"))).await;
        assert!(index.is_empty());
        indexer
            .observe(&ObjectEvent::Deleted {
                object: pod("a", "n4"),
                how: DeletedBy::Event,
            })
            .await;
        indexer.observe(&upserted(&pod("a", "n4"))).await;
        assert_eq!(names(&index, "n4"), [json!("a")], "indexed afresh");
    }

    #[tokio::test(start_paused = true)]
    async fn regular_errors_are_ignored_by_default_and_keep_the_values() {
        let registry = crate::model::registry::Registry::builder().index(
            pods(),
            "by_node",
            |kw: Kwargs| async move {
                match kw.field("spec.nodeName").and_then(Value::as_str) {
                    Some("bad") => Err(Error::regular("oops")),
                    node => Ok(json!({ node.unwrap_or_default(): kw.name() })),
                }
            },
        );
        let (_indexes, mut indexer, index) = setup(registry);
        assert_eq!(indexer.handlers[0].0.options().errors, ErrorsMode::Ignored);
        indexer.observe(&upserted(&pod("a", "n1"))).await;
        indexer.observe(&upserted(&pod("a", "bad"))).await;
        assert_eq!(names(&index, "n1"), [json!("a")]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_object_that_stops_matching_the_filters_leaves_the_index() {
        let registry = by_node(crate::model::registry::Registry::builder())
            .label("app", crate::model::filters::MetaValue::Equals("x".into()));
        let (_indexes, mut indexer, index) = setup(registry);
        indexer.observe(&upserted(&pod("a", "n1"))).await;
        assert!(!index.is_empty());
        let mut unlabelled = (*pod("a", "n1")).clone();
        unlabelled["metadata"]["labels"] = json!({});
        indexer.observe(&upserted(&Arc::new(unlabelled))).await;
        assert!(index.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_index_is_filled_once_the_start_up_and_every_listing_let_go() {
        let registry = by_node(crate::model::registry::Registry::builder())
            .on_create(pods(), "reader", |_kw: Kwargs| async { Ok::<_, Error>(()) })
            .uses_index("by_node".into())
            .build()
            .expect("a valid registry");
        let indexes = OperatorIndexes::new(&registry);
        let start_up = indexes.hold_all();
        let mut indexer = indexes
            .indexer(
                registry.handlers(),
                2,
                client(),
                DEFAULT_BACKOFF,
                MemoBase::default(),
            )
            .expect("index handlers");
        let gate = indexes.gate(registry.handlers()).expect("a reader");
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.wait(None).await }
        });
        drop(start_up);
        indexer.observe(&ObjectEvent::Synced { count: 0 }).await;
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "one namespace is not listed yet");
        indexer.observe(&ObjectEvent::Synced { count: 0 }).await;
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("filled")
            .expect("no panic");
        assert!(
            indexes.gate(registry.handlers()).is_none(),
            "filled for good"
        );
        assert!(indexes.hold_all().is_empty());
    }
}
