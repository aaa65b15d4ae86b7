//! What the watches tell about the operator's health: whether every served
//! resource has finished its first listing (readiness), and whether some
//! watch has gone silent (liveness); and, for the metrics, how many objects
//! they track and when the last event came.
//!
//! [`Health`] holds one [`ResourceHealth`] per served resource, registered
//! when discovery finds it and forgotten as soon as it stops being served
//! ([`Registered`]); each list-then-watch loop of the resource (a scope:
//! the cluster, or one namespace) reports through its [`ScopeMonitor`] what
//! it receives. A monitor costs a few atomic stores per watch event.
//!
//! # Guarantees
//! - The operator is ready once the start-up handlers are done, the first
//!   discovery has found the resources, and each resource served has
//!   finished its first listing. A resource found later makes it wait for
//!   that resource's first listing; one no longer served is not waited for.
//! - A replica that competes for a Lease (`--peering`) is ready once its
//!   start-up handlers are done, whether it leads or not: readiness never
//!   depends on leadership, and a follower lists nothing. It leads
//!   ([`Health::leading`]) only while it serves; a replica without a Lease
//!   always leads.
//! - A resource is ready once its watcher has started every scope it knows
//!   of at start-up and each has finished a listing; it stays ready.
//! - A scope is silent when it has received no listing, event or bookmark
//!   for the watch's silence limit
//!   ([`WatchingSettings::silence_limit`](crate::settings::WatchingSettings::silence_limit));
//!   the report names the scope and, if its requests are failing, the
//!   last error.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use prometheus_client::metrics::histogram::Histogram;
use tokio::time::Instant;

use crate::operations::metrics::{RestartReason, WatchEventType, WatchMetrics};

/// The served resources' watches; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct Health {
    /// The instant every stored time counts from.
    epoch: Instant,
    /// How far the operator's start has come (a [`Phase`]).
    phase: AtomicU8,
    resources: Mutex<Vec<Arc<ResourceHealth>>>,
    /// Whether the replica competes for a Lease.
    elected: AtomicBool,
    /// Whether the replica acts on objects.
    leading: AtomicBool,
    /// How many shard slots it holds.
    slots: AtomicU32,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            epoch: Instant::now(),
            phase: AtomicU8::new(Phase::Starting as u8),
            resources: Mutex::default(),
            elected: AtomicBool::new(false),
            leading: AtomicBool::new(true),
            slots: AtomicU32::new(0),
        }
    }
}

/// How far the operator's start has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Phase {
    /// The login handlers run, for the first credentials.
    LoggingIn,
    /// The start-up handlers run.
    Starting,
    /// The first discovery of the resources is under way.
    Discovering,
    /// The resources found by the first discovery are registered.
    Serving,
}

/// Why the operator or a resource is not ready yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotReady {
    /// The login handlers run; no resource is served yet.
    LoggingIn,
    /// The start-up handlers run; no resource is served yet.
    Starting,
    /// The first discovery has not answered yet (an API down).
    Discovering,
    /// Its first listing has not finished.
    Listing,
}

impl NotReady {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::LoggingIn => "running the login handlers",
            Self::Starting => "running the start-up handlers",
            Self::Discovering => "discovering the resources",
            Self::Listing => "listing",
        }
    }
}

impl Health {
    fn lock(&self) -> MutexGuard<'_, Vec<Arc<ResourceHealth>>> {
        self.resources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a served resource, labelled `label`, with its silence
    /// limit, and the metrics its watches and queue feed, if any; it is
    /// forgotten when the registration is dropped.
    pub(crate) fn register(
        self: &Arc<Self>,
        label: String,
        silence_limit: Duration,
        watch: Option<WatchMetrics>,
        queue_latency: Option<Histogram>,
    ) -> Registered {
        let resource = Arc::new(ResourceHealth {
            label,
            epoch: self.epoch,
            silence_limit,
            stage: AtomicU8::new(Stage::Waiting as u8),
            ready: AtomicBool::new(false),
            scopes: Mutex::default(),
            queue_depth: OnceLock::new(),
            watch,
            queue_latency,
        });
        self.lock().push(Arc::clone(&resource));
        Registered {
            health: Arc::clone(self),
            resource,
        }
    }

    /// Every served resource, in the order they were registered.
    pub(crate) fn resources(&self) -> Vec<Arc<ResourceHealth>> {
        self.lock().clone()
    }

    /// The operator's start has come to `phase`.
    pub(crate) fn enter(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::Release);
    }

    /// The replica competes for a Lease, and leads on it (`true`) or not,
    /// holding `slots` shard slots.
    pub(crate) fn lead(&self, leading: bool, slots: u32) {
        self.elected.store(true, Ordering::Release);
        self.leading.store(leading, Ordering::Release);
        self.slots.store(slots, Ordering::Release);
    }

    /// How many shard slots the replica holds.
    pub(crate) fn slots(&self) -> u32 {
        self.slots.load(Ordering::Acquire)
    }

    /// Whether this replica acts on objects: not while another replica
    /// leads on the Lease.
    pub(crate) fn leading(&self) -> bool {
        self.leading.load(Ordering::Acquire)
    }

    /// The resources that are not ready, with why (the operator itself
    /// while it starts).
    pub(crate) fn not_ready(&self) -> Vec<(String, NotReady)> {
        let starting = match self.phase.load(Ordering::Acquire) {
            phase if phase == Phase::LoggingIn as u8 => Some(NotReady::LoggingIn),
            phase if phase == Phase::Starting as u8 => Some(NotReady::Starting),
            phase if phase == Phase::Discovering as u8 => Some(NotReady::Discovering),
            _ => None,
        };
        if let Some(why) = starting {
            return vec![("operator".to_owned(), why)];
        }
        if self.elected.load(Ordering::Acquire) {
            return Vec::new();
        }
        self.resources()
            .iter()
            .filter_map(|r| Some((r.label.clone(), r.not_ready()?)))
            .collect()
    }

    /// The silent scopes, each named with its resource, and what is known
    /// of why.
    pub(crate) fn silent(&self) -> Vec<(String, String)> {
        let now = Instant::now();
        let mut silent = Vec::new();
        for resource in self.resources() {
            for scope in resource.lock().iter() {
                if let Some(why) = scope.silence(now, resource.epoch, resource.silence_limit) {
                    silent.push((format!("{} ({})", resource.label, scope.name), why));
                }
            }
        }
        silent
    }
}

/// Where a resource's watcher is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Stage {
    /// Not started yet (its previous serving is still ending).
    Waiting,
    /// Started; more scopes may come.
    Watching,
    /// Every scope known at its start is registered.
    Settled,
}

/// A served resource's place in [`Health`]: dropping it forgets the
/// resource (it leaves readiness, the silence check and the metrics read
/// at scrape time).
#[derive(Debug)]
pub(crate) struct Registered {
    health: Arc<Health>,
    resource: Arc<ResourceHealth>,
}

impl Registered {
    /// What the resource's watches and queue report to.
    pub(crate) fn resource(&self) -> &Arc<ResourceHealth> {
        &self.resource
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.health
            .lock()
            .retain(|resource| !Arc::ptr_eq(resource, &self.resource));
    }
}

/// One served resource; see the [module docs](self).
pub(crate) struct ResourceHealth {
    label: String,
    epoch: Instant,
    silence_limit: Duration,
    stage: AtomicU8,
    /// Latched once every scope listed.
    ready: AtomicBool,
    scopes: Mutex<Vec<Arc<ScopeHealth>>>,
    queue_depth: OnceLock<Box<dyn Fn() -> usize + Send + Sync>>,
    watch: Option<WatchMetrics>,
    queue_latency: Option<Histogram>,
}

impl std::fmt::Debug for ResourceHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceHealth")
            .field("label", &self.label)
            .field("ready", &self.ready)
            .finish_non_exhaustive()
    }
}

impl ResourceHealth {
    fn lock(&self) -> MutexGuard<'_, Vec<Arc<ScopeHealth>>> {
        self.scopes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The resource's label, as in the metrics.
    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// Its watcher has started.
    pub(crate) fn watching(&self) {
        let _ = self.stage.compare_exchange(
            Stage::Waiting as u8,
            Stage::Watching as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Every scope known at start-up has been registered: once they have
    /// listed, the resource is ready.
    pub(crate) fn settled(&self) {
        self.stage.store(Stage::Settled as u8, Ordering::Release);
    }

    /// Reads the resource's queue depth at scrape time.
    pub(crate) fn set_queue_depth(&self, read: impl Fn() -> usize + Send + Sync + 'static) {
        let _ = self.queue_depth.set(Box::new(read));
    }

    /// The histogram of the time events wait in the queue, if metrics are on.
    pub(crate) fn queue_latency(&self) -> Option<&Histogram> {
        self.queue_latency.as_ref()
    }

    /// A new scope of the resource (e.g. `cluster-wide`, `in default`),
    /// watched from now until the monitor is dropped.
    pub(crate) fn scope(self: &Arc<Self>, name: String) -> ScopeMonitor {
        let scope = Arc::new(ScopeHealth {
            name,
            last_seen: AtomicU64::new(self.now()),
            last_event: AtomicU64::new(0),
            listed: AtomicBool::new(false),
            objects: AtomicUsize::new(0),
            failing: AtomicBool::new(false),
            error: Mutex::new(None),
        });
        self.lock().push(Arc::clone(&scope));
        ScopeMonitor {
            scope,
            resource: Arc::clone(self),
        }
    }

    /// Milliseconds since the epoch, now.
    fn now(&self) -> u64 {
        millis(Instant::now().saturating_duration_since(self.epoch))
    }

    fn not_ready(&self) -> Option<NotReady> {
        if self.ready.load(Ordering::Acquire) {
            return None;
        }
        let stage = self.stage.load(Ordering::Acquire);
        let listed = stage == Stage::Settled as u8
            && self.lock().iter().all(|s| s.listed.load(Ordering::Acquire));
        if listed {
            self.ready.store(true, Ordering::Release);
            None
        } else {
            Some(NotReady::Listing)
        }
    }

    /// Objects the watches track.
    pub(crate) fn objects(&self) -> usize {
        self.lock()
            .iter()
            .map(|s| s.objects.load(Ordering::Relaxed))
            .sum()
    }

    /// Objects with work in the queue.
    pub(crate) fn queue_depth(&self) -> usize {
        self.queue_depth.get().map_or(0, |read| read())
    }

    /// When the last watch event (not a bookmark) arrived, if one has.
    pub(crate) fn last_event(&self) -> Option<Instant> {
        let last = self
            .lock()
            .iter()
            .map(|s| s.last_event.load(Ordering::Relaxed))
            .max()
            .filter(|at| *at > 0)?;
        Some(self.epoch + Duration::from_millis(last))
    }
}

/// One scope of a resource.
#[derive(Debug)]
struct ScopeHealth {
    name: String,
    /// Milliseconds since the epoch of the last listing page, event or
    /// bookmark (or of the scope's start).
    last_seen: AtomicU64,
    /// Milliseconds since the epoch of the last event; 0 for none.
    last_event: AtomicU64,
    listed: AtomicBool,
    objects: AtomicUsize,
    /// Whether `error` holds something, to read without the lock.
    failing: AtomicBool,
    error: Mutex<Option<String>>,
}

impl ScopeHealth {
    fn error(&self) -> MutexGuard<'_, Option<String>> {
        self.error.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Why the scope is silent, if it is.
    fn silence(&self, now: Instant, epoch: Instant, limit: Duration) -> Option<String> {
        let last = epoch + Duration::from_millis(self.last_seen.load(Ordering::Relaxed));
        let quiet = now.saturating_duration_since(last);
        if quiet <= limit {
            return None;
        }
        let mut why = format!(
            "no listing, event or bookmark for {} s (limit {} s)",
            quiet.as_secs(),
            limit.as_secs()
        );
        if let Some(error) = self.error().as_deref() {
            why.push_str("; retrying after errors, the last: ");
            why.push_str(error);
        }
        Some(why)
    }
}

/// What one list-then-watch loop reports; dropping it forgets the scope.
#[derive(Debug)]
pub(crate) struct ScopeMonitor {
    scope: Arc<ScopeHealth>,
    resource: Arc<ResourceHealth>,
}

impl ScopeMonitor {
    /// Something arrived: the scope is alive, and no longer failing.
    fn alive(&self) -> u64 {
        let now = self.resource.now();
        self.scope.last_seen.store(now, Ordering::Relaxed);
        if self.scope.failing.load(Ordering::Relaxed) {
            self.scope.failing.store(false, Ordering::Relaxed);
            *self.scope.error() = None;
        }
        now
    }

    /// A page of a listing arrived.
    pub(crate) fn page(&self) {
        self.alive();
    }

    /// A listing is complete; the scope tracks `objects`.
    pub(crate) fn listed(&self, objects: usize) {
        self.alive();
        self.scope.objects.store(objects, Ordering::Relaxed);
        self.scope.listed.store(true, Ordering::Release);
    }

    /// A watch event arrived.
    pub(crate) fn event(&self, kind: WatchEventType) {
        let now = self.alive();
        if kind != WatchEventType::Bookmark {
            // Never 0, which means no event.
            self.scope.last_event.store(now.max(1), Ordering::Relaxed);
        }
        if let Some(watch) = &self.resource.watch {
            watch.event(kind);
        }
    }

    /// The scope tracks `objects` now.
    pub(crate) fn objects(&self, objects: usize) {
        self.scope.objects.store(objects, Ordering::Relaxed);
    }

    /// The loop starts another request, for `reason`.
    pub(crate) fn restart(&self, reason: RestartReason) {
        if let Some(watch) = &self.resource.watch {
            watch.restart(reason);
        }
    }

    /// A request failed with `error`; the loop retries.
    pub(crate) fn failing(&self, error: String) {
        *self.scope.error() = Some(error);
        self.scope.failing.store(true, Ordering::Relaxed);
    }
}

impl Drop for ScopeMonitor {
    fn drop(&mut self) {
        self.resource
            .lock()
            .retain(|scope| !Arc::ptr_eq(scope, &self.scope));
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn register(health: &Arc<Health>, label: &str) -> Registered {
        health.register(label.into(), Duration::from_secs(10), None, None)
    }

    #[tokio::test(start_paused = true)]
    async fn a_resource_is_ready_once_every_scope_known_at_start_has_listed() {
        let health = Arc::new(Health::default());
        let operator = |why| vec![("operator".to_owned(), why)];
        assert_eq!(health.not_ready(), operator(NotReady::Starting));
        health.enter(Phase::LoggingIn);
        assert_eq!(health.not_ready(), operator(NotReady::LoggingIn));
        health.enter(Phase::Discovering);
        assert_eq!(health.not_ready(), operator(NotReady::Discovering));
        let registered = register(&health, "v1/configmaps");
        let configmaps = registered.resource();
        health.enter(Phase::Serving);
        let not_ready = |why| vec![("v1/configmaps".to_owned(), why)];
        assert_eq!(
            health.not_ready(),
            not_ready(NotReady::Listing),
            "its watcher has not started yet"
        );
        configmaps.watching();
        let one = configmaps.scope("in a".into());
        let two = configmaps.scope("in b".into());
        assert_eq!(health.not_ready(), not_ready(NotReady::Listing));
        one.listed(3);
        two.listed(0);
        assert_eq!(
            health.not_ready(),
            not_ready(NotReady::Listing),
            "more scopes may come until settled"
        );
        configmaps.settled();
        assert_eq!(health.not_ready(), []);
        let three = configmaps.scope("in c".into());
        assert_eq!(health.not_ready(), [], "ready stays ready");
        three.objects(2);
        assert_eq!(configmaps.objects(), 5);
        drop(three);
        assert_eq!(configmaps.objects(), 3, "a dropped scope is forgotten");
    }

    #[tokio::test(start_paused = true)]
    async fn resources_join_and_leave_readiness_and_the_silence_check_as_they_are_served() {
        let health = Arc::new(Health::default());
        health.enter(Phase::Discovering);
        let configmaps = register(&health, "v1/configmaps");
        health.enter(Phase::Serving);
        configmaps.resource().watching();
        let cm_scope = configmaps.resource().scope("cluster-wide".into());
        configmaps.resource().settled();
        cm_scope.listed(0);
        assert_eq!(health.not_ready(), []);

        let examples = register(&health, "kopf.dev/v1/kopfexamples");
        assert_eq!(
            health.not_ready(),
            [("kopf.dev/v1/kopfexamples".to_owned(), NotReady::Listing)],
            "a resource found later is waited for"
        );
        examples.resource().watching();
        let _ex_scope = examples.resource().scope("cluster-wide".into());
        tokio::time::advance(Duration::from_secs(11)).await;
        let silent: Vec<String> = health.silent().into_iter().map(|(name, _)| name).collect();
        assert_eq!(
            silent,
            [
                "v1/configmaps (cluster-wide)",
                "kopf.dev/v1/kopfexamples (cluster-wide)"
            ]
        );

        drop(examples);
        assert_eq!(health.not_ready(), [], "one no longer served is not");
        assert_eq!(health.silent().len(), 1, "nor checked for silence");
        assert_eq!(health.resources().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_scope_is_silent_after_its_limit_without_anything_and_names_its_error() {
        let health = Arc::new(Health::default());
        let registered = register(&health, "v1/configmaps");
        let configmaps = registered.resource();
        let scope = configmaps.scope("cluster-wide".into());
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(health.silent(), []);
        scope.event(WatchEventType::Bookmark);
        assert!(configmaps.last_event().is_none(), "bookmarks are no events");
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(health.silent(), []);
        tokio::time::advance(Duration::from_secs(1)).await;
        let silent = health.silent();
        assert_eq!(silent.len(), 1, "{silent:?}");
        assert_eq!(silent[0].0, "v1/configmaps (cluster-wide)");
        assert!(
            silent[0]
                .1
                .starts_with("no listing, event or bookmark for 11 s (limit 10 s)")
        );

        scope.failing("429 Too Many Requests".into());
        assert!(
            health.silent()[0]
                .1
                .ends_with("retrying after errors, the last: 429 Too Many Requests"),
            "{:?}",
            health.silent()
        );
        scope.event(WatchEventType::Added);
        assert_eq!(health.silent(), []);
        assert!(configmaps.last_event().is_some());
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(
            !health.silent()[0].1.contains("retrying"),
            "an event clears the error"
        );
    }
}
