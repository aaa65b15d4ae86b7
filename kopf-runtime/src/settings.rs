//! Operator settings, grouped as in Kopf's `kopf.OperatorSettings`.
//!
//! Every group has Kopf's defaults where they make sense for a Rust runtime;
//! durations are [`Duration`]s instead of float seconds. The groups are plain
//! structs with public fields, set before the operator starts
//! ([`Runner::settings`](crate::Runner::settings),
//! [`Operator::settings`](crate::Operator::settings)):
//!
//! ```
//! use std::time::Duration;
//! use kopf_runtime::settings::OperatorSettings;
//!
//! let mut settings = OperatorSettings::default();
//! settings.watching.inactivity_timeout = Duration::from_secs(120);
//! settings.persistence.finalizer = "example.com/my-finalizer".into();
//! assert_eq!(settings.persistence.progress_prefix, "kopf.zalando.org");
//! ```
//!
//! or by `on_startup` handlers, as in Kopf, through their `settings`
//! parameter (see [`StartupSettings`]):
//!
//! ```
//! use kopf_runtime as kopf;
//!
//! #[kopf::on_startup]
//! async fn configure(settings: &mut kopf::OperatorSettings) {
//!     settings.persistence.finalizer = "example.com/my-finalizer".into();
//!     settings.posting.level = kopf::settings::PostingLevel::Warning;
//! }
//! # fn main() {}
//! ```

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// All settings of one operator; see the per-group structs for the meaning.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperatorSettings {
    /// Watch streams: timeouts, reconnects, inactivity.
    pub watching: WatchingSettings,
    /// Per-object event queues and their workers.
    pub queueing: QueueingSettings,
    /// Handler execution (blocking handlers, default backoff).
    pub execution: ExecutionSettings,
    /// Plain API requests (patches, posts): timeouts and error backoffs.
    pub networking: NetworkingSettings,
    /// Where the operator keeps its state on the objects.
    pub persistence: PersistenceSettings,
    /// Kubernetes Events posted for objects.
    pub posting: PostingSettings,
    /// Daemons and timers.
    pub background: BackgroundSettings,
    /// Leader election among replicas (`--peering`).
    pub peering: PeeringSettings,
}

/// Watch-stream settings (Kopf's `settings.watching`).
#[derive(Debug, Clone, PartialEq)]
pub struct WatchingSettings {
    /// `timeoutSeconds` asked of the server for one watch request; `None`
    /// obeys the server's own (randomised) timeout. Default: `None`.
    pub server_timeout: Option<Duration>,
    /// A client-side limit on the whole duration of one watch request;
    /// `None` for no limit. Default: `None`.
    pub client_timeout: Option<Duration>,
    /// A limit on establishing one watch connection (until the response
    /// headers arrive). Default: `None`.
    pub connect_timeout: Option<Duration>,
    /// The pause between a watch stream ending normally and the next request,
    /// to prevent API flooding. Default: 0.1 s.
    pub reconnect_backoff: Duration,
    /// How long a stream may stay silent (no event, no bookmark) before it is
    /// considered dead and restarted. Kubernetes sends bookmarks every ~60 s
    /// and caches events for ~75 s. Default: 70 s.
    pub inactivity_timeout: Duration,
    /// Delays between consecutive failed list/watch attempts; the last one
    /// repeats. A `retryAfterSeconds` from the server takes precedence.
    /// Default: 1, 1, 2, 3, 5, 8, 13, 21 s (as Kopf's networking backoffs).
    pub error_backoffs: Vec<Duration>,
    /// Page size of a listing (`limit`). Pages are read as fast as their
    /// objects are processed: if the first page's version is compacted
    /// before the last page is read (`410 Expired` on a continue token), the
    /// listing starts over as one list without a limit, as client-go's pager
    /// does. Default: 500.
    pub list_page_size: u32,
    /// How deeply an object's JSON may nest (arrays and objects) for the
    /// operator to decode it. A deeper object is reported once (a warning
    /// and an Event) and skipped; its deletion is still noticed. Handlers
    /// receive bodies as `serde_json::Value`s, whose clone and drop recurse
    /// per level: raise it only with thread stacks to match (a 2 MiB stack
    /// holds about 1,500 levels in a debug build). Default: 1,000 (the API
    /// server accepts 10,000).
    ///
    /// # Caveats
    /// Patch answers and stored diff-bases are read up to the default
    /// depth whatever this says: raising it above 1,000 serves deeper
    /// objects' event and timer handlers, but not their change handlers.
    pub max_depth: usize,
    /// How long a watch may receive nothing (no listing, event or bookmark)
    /// before the liveness endpoint fails, naming it. `None`: three times
    /// the longest a healthy watch request goes without a word: the
    /// `inactivity_timeout`, or the `server_timeout` or `client_timeout`
    /// when shorter (210 s by default). Kubernetes sends a bookmark about
    /// every minute on a quiet watch; set this higher for an API server
    /// that does not. Default: `None`.
    pub silence_limit: Option<Duration>,
}

impl WatchingSettings {
    /// The silence limit in force: [`silence_limit`](Self::silence_limit),
    /// or three times the longest quiet a healthy watch request has.
    ///
    /// ```
    /// use std::time::Duration;
    /// use kopf_runtime::settings::WatchingSettings;
    ///
    /// let mut settings = WatchingSettings::default();
    /// assert_eq!(settings.effective_silence_limit(), Duration::from_secs(210));
    /// settings.server_timeout = Some(Duration::from_secs(30));
    /// assert_eq!(settings.effective_silence_limit(), Duration::from_secs(90));
    /// ```
    pub fn effective_silence_limit(&self) -> Duration {
        self.silence_limit.unwrap_or_else(|| {
            let quiet = [self.server_timeout, self.client_timeout]
                .into_iter()
                .flatten()
                .fold(self.inactivity_timeout, Duration::min);
            quiet.saturating_mul(3)
        })
    }
}

impl Default for WatchingSettings {
    fn default() -> Self {
        Self {
            server_timeout: None,
            client_timeout: None,
            connect_timeout: None,
            reconnect_backoff: Duration::from_millis(100),
            inactivity_timeout: Duration::from_secs(70),
            error_backoffs: kopf_error_backoffs(),
            list_page_size: 500,
            max_depth: crate::watching::decoding::DEFAULT_MAX_DEPTH,
            silence_limit: None,
        }
    }
}

/// Per-object queueing settings (Kopf's `settings.queueing`).
#[derive(Debug, Clone, PartialEq)]
pub struct QueueingSettings {
    /// How many per-object workers may run at once; `None` is unlimited.
    /// Default: `None`.
    pub worker_limit: Option<usize>,
    /// How many newly seen objects may wait for (or be in) their first
    /// processing at once; the watch stream waits for room beyond that, so
    /// a listing of 100,000 objects flows through in bounded memory. An
    /// object whose first processing takes over a second stops counting.
    /// Default: 1,024.
    pub backlog_limit: usize,
    /// Of them, how many objects of a resource's initial listing, at most.
    /// Every listed object is new at once: with finalizers, each one's
    /// first processing holds its body and a patch on a connection of its
    /// own, and the allocator keeps what a burst of 1,024 of them used
    /// (about 10 KiB an object). Objects that need no patch go through
    /// without waiting on one. A larger limit lists a large cluster sooner
    /// where patches are slow: about `limit / patch latency` objects a
    /// second. Default: 64.
    pub listing_backlog_limit: usize,
    /// How long an idle per-object worker lingers before it exits (one
    /// waiting for its own patch to come back stays until it does, or for
    /// `persistence.consistency_timeout`). Default: 0, exit at once: a new
    /// worker costs a task spawn, an idle one keeps the object's body.
    /// Kopf's default is 5 s.
    pub idle_timeout: Duration,
    /// How long workers get to finish at operator exit. Default: 2 s.
    pub exit_timeout: Duration,
}

impl Default for QueueingSettings {
    fn default() -> Self {
        Self {
            worker_limit: None,
            backlog_limit: 1_024,
            listing_backlog_limit: 64,
            idle_timeout: Duration::ZERO,
            exit_timeout: Duration::from_secs(2),
        }
    }
}

/// Handler execution settings (Kopf's `settings.execution`).
///
/// Synchronous (blocking) handlers run on tokio's blocking pool; Kopf's
/// `max_workers` is that pool's size, set where the runtime is built
/// (`tokio::runtime::Builder::max_blocking_threads`).
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionSettings {
    /// The retry delay of handlers without a `backoff` of their own, after
    /// an arbitrary error or a temporary one that names no delay (change
    /// handlers, daemons, timers, activities). Default: 60 s.
    pub default_backoff: Duration,
}

impl Default for ExecutionSettings {
    fn default() -> Self {
        Self {
            default_backoff: Duration::from_secs(60),
        }
    }
}

/// Settings of plain API requests (Kopf's `settings.networking`).
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkingSettings {
    /// A limit on the whole duration of one atomic request (not watches).
    /// Default: 300 s.
    pub request_timeout: Option<Duration>,
    /// A limit on connecting (TCP + TLS) for any request. Default: `None`.
    pub connect_timeout: Option<Duration>,
    /// Delays between retries of a request failing with 429, 5xx or a
    /// transport error; their count is the number of retries. A
    /// `retryAfterSeconds` from the server takes precedence.
    /// Default: 1, 1, 2, 3, 5, 8, 13, 21 s.
    pub error_backoffs: Vec<Duration>,
    /// How many patches the operator sends at once to the objects of one
    /// resource (finalizers, progress, diff-base, status); the others wait
    /// for a turn, which `request_timeout` does not count. `None` is
    /// unlimited. Default: `None`.
    ///
    /// Each patch in flight holds an HTTP/1.1 connection, which the client
    /// keeps open for the next requests, so a limit also bounds the
    /// connections that a burst of patches leaves open (e.g. the deletion of
    /// 10,000 objects with finalizers). It costs throughput when the
    /// operator's threads are busy: each patch then waits for the scheduler
    /// at every step, and only so many are in flight. At 300,000 one-second
    /// timers on one full thread, a limit of 32 let 13–30 finalizers a
    /// second be removed, where hundreds a second were without one.
    pub patch_limit: Option<NonZeroUsize>,
}

impl Default for NetworkingSettings {
    fn default() -> Self {
        Self {
            request_timeout: Some(Duration::from_secs(300)),
            connect_timeout: None,
            error_backoffs: kopf_error_backoffs(),
            patch_limit: None,
        }
    }
}

/// Where the operator keeps its state on the objects (Kopf's
/// `settings.persistence`). The defaults are Kopf's, so an operator migrated
/// from Kopf finds its handlers' progress and diff-base where Kopf left them.
#[derive(Debug, Clone, PartialEq)]
pub struct PersistenceSettings {
    /// The finalizer put on objects that need one.
    /// Default: `kopf.zalando.org/KopfFinalizerMarker`.
    pub finalizer: String,
    /// The annotation prefix of handlers' progress records.
    /// Default: `kopf.zalando.org`.
    pub progress_prefix: String,
    /// Also write (and always read) Kopf's v1 progress keys (a 63-character
    /// limit on the whole key), as Kopf does during its transition. Default:
    /// `true`.
    pub progress_v1_keys: bool,
    /// The annotation holding the last handled essence (the diff-base).
    /// Default: `kopf.zalando.org/last-handled-configuration`.
    pub diffbase_key: String,
    /// How long to wait for the patched `resourceVersion` to arrive on the
    /// watch stream before acting on an object again. Default: 5 s.
    pub consistency_timeout: Duration,
}

impl Default for PersistenceSettings {
    fn default() -> Self {
        Self {
            finalizer: "kopf.zalando.org/KopfFinalizerMarker".into(),
            progress_prefix: "kopf.zalando.org".into(),
            progress_v1_keys: true,
            diffbase_key: "kopf.zalando.org/last-handled-configuration".into(),
            consistency_timeout: Duration::from_secs(5),
        }
    }
}

/// Severity threshold of posted Events (Kopf's `settings.posting.level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum PostingLevel {
    /// Post everything: info, warnings, errors.
    #[default]
    Info,
    /// Post warnings and errors only.
    Warning,
    /// Post errors only.
    Error,
}

/// Kubernetes Events posting settings (Kopf's `settings.posting`).
#[derive(Debug, Clone, PartialEq)]
pub struct PostingSettings {
    /// Post Events at all. Default: `true`.
    pub enabled: bool,
    /// The lowest severity posted. Default: [`PostingLevel::Info`].
    pub level: PostingLevel,
    /// Also post the framework's and handlers' log lines about an object
    /// ("Handler 'x' succeeded.", `logger.info(…)` in a handler) as Events,
    /// from [`level`](Self::level) up. Default: `false`, as in Kopf 1.45:
    /// one Event per log line doubles the API traffic of a busy operator.
    /// Explicit [`posting::info`](crate::posting::info) and friends, and the
    /// runtime's reports of tasks that would not stop, are posted either way.
    pub loggers: bool,
    /// `reportingComponent` and `source.component` of Events. Default: `kopf`.
    pub reporting_component: String,
    /// `reportingInstance` of Events. Default: `dev`.
    pub reporting_instance: String,
    /// `metadata.generateName` of Events. Default: `kopf-event-`.
    pub event_name_prefix: String,
    /// How many Events may wait to be posted; more are dropped (with a log
    /// line), so posting never blocks a handler. Default: 1024.
    pub queue_capacity: usize,
}

impl Default for PostingSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            level: PostingLevel::Info,
            loggers: false,
            reporting_component: "kopf".into(),
            reporting_instance: "dev".into(),
            event_name_prefix: "kopf-event-".into(),
            queue_capacity: 1024,
        }
    }
}

/// Daemon and timer settings (Kopf's `settings.background`).
#[derive(Debug, Clone, PartialEq)]
pub struct BackgroundSettings {
    /// How long a stopped daemon or timer with neither `cancellation_backoff`
    /// nor `cancellation_timeout` of its own may take to exit on its own
    /// before it is cancelled (Kopf would wait forever). Default: 60 s.
    pub graceful_exit_limit: Duration,
    /// After cancelling, how long to wait for a task with no
    /// `cancellation_timeout` of its own before it is reported as abandoned.
    /// Default: 10 s.
    pub default_cancellation_timeout: Duration,
    /// At operator exit, how long every daemon and timer gets to stop, in
    /// total, before the rest is abandoned. Default: 30 s.
    pub shutdown_timeout: Duration,
}

impl Default for BackgroundSettings {
    fn default() -> Self {
        Self {
            graceful_exit_limit: Duration::from_secs(60),
            default_cancellation_timeout: Duration::from_secs(10),
            shutdown_timeout: Duration::from_secs(30),
        }
    }
}

/// Leader election among replicas, on the Lease that `--peering` names
/// (Kopf's `settings.peering`, with client-go's timings and defaults).
///
/// The lease duration must be longer than the renew deadline, and the
/// renew deadline longer than the retry period: a leader steps down once
/// it has not renewed for the renew deadline, before its Lease can expire
/// for the other replicas.
#[derive(Debug, Clone, PartialEq)]
pub struct PeeringSettings {
    /// How long a Lease that is not renewed stays its holder's, as the
    /// other replicas count it on their own clocks. Default: 15 s.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it steps down and
    /// pauses. Default: 10 s.
    pub renew_deadline: Duration,
    /// How often candidates try to acquire the Lease and the leader renews
    /// it. Default: 2 s.
    pub retry_period: Duration,
}

impl Default for PeeringSettings {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// The operator's settings while its start-up handlers run, which they may
/// change (Kopf's `settings` of `on_startup` handlers): what the `settings`
/// parameter lends them (`settings: &mut kopf::OperatorSettings`, or
/// `&kopf::OperatorSettings` to read them), and what
/// [`Kwargs::settings`](crate::Kwargs::settings) holds for handlers built
/// without the macros. Only `on_startup` handlers have it: the macros
/// refuse the parameter elsewhere.
///
/// # Guarantees
/// - The start-up handlers run one after another, never at once; each one
///   sees what the ones before it changed, and a retried one what its
///   earlier attempts changed.
/// - What a handler changes is kept however its call ends (success, error,
///   panic or time-out), as Kopf's changes in place are; the `settings`
///   parameter is written back when the call ends.
/// - Everything the operator does after the start-up runs with the settings
///   as the start-up handlers left them: the watches, the queues, the
///   processing of objects and their patches, the daemons and timers, the
///   posting of Events (a new poster is started if `posting` changed), and
///   the clean-up handlers.
///
/// # Caveats
/// - `networking.connect_timeout` cannot change: the client is connected
///   before the start-up handlers run. A handler that changes it fails for
///   good (the change undone), so the operator does not start
///   ([`OperatorError::Startup`](crate::OperatorError::Startup)); set it
///   before the operator starts instead.
/// - What starts before the start-up handlers keeps the settings the
///   operator started with: the `on_login` handlers, which run first (their
///   retries and re-logins, after `execution.default_backoff` and
///   `networking.error_backoffs`), and the posting of the Events that the
///   start-up handlers themselves post. The retries of the start-up
///   handlers wait as `execution.default_backoff` says when they are due.
/// - A blocking (plain `fn`) handler cut short by its `timeout` goes on
///   running on its thread: what it changes (the `settings` parameter when
///   it returns) is applied if the start-up is still going on, and refused
///   otherwise (ignored with a warning, or [`SettingsClosed`] from
///   [`update`](Self::update)).
///
/// ```
/// use kopf_runtime::settings::{OperatorSettings, StartupSettings};
///
/// // A handler built without the macros, and how a test may call it.
/// let configure = |kw: kopf_runtime::Kwargs| async move {
///     if let Some(settings) = &kw.settings {
///         settings.update(|s| s.persistence.finalizer = "example.com/mine".into())?;
///     }
///     Ok::<_, kopf_runtime::Error>(())
/// };
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let settings = StartupSettings::new(OperatorSettings::default());
/// let mut kwargs = kopf_runtime::Kwargs::default();
/// kwargs.settings = Some(settings.clone());
/// configure(kwargs).await.unwrap();
/// assert_eq!(settings.get().persistence.finalizer, "example.com/mine");
/// # });
/// ```
#[derive(Clone)]
pub struct StartupSettings {
    shared: Arc<Mutex<Shared>>,
}

struct Shared {
    settings: OperatorSettings,
    /// What the operator started with: what cannot change is checked against it.
    initial: OperatorSettings,
    /// Whether the start-up is still going on.
    open: bool,
}

/// The start-up handlers have ended: the operator's settings can no longer
/// change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the operator's start-up is over and its settings can no longer change; change them in an `on_startup` handler or before the operator starts"
)]
pub struct SettingsClosed;

impl fmt::Debug for StartupSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = self.lock();
        f.debug_struct("StartupSettings")
            .field("settings", &shared.settings)
            .field("open", &shared.open)
            .finish()
    }
}

impl StartupSettings {
    /// Settings for start-up handlers to change, starting as `settings`
    /// (the operator makes one; tests of handlers may too).
    pub fn new(settings: OperatorSettings) -> Self {
        Self {
            shared: Arc::new(Mutex::new(Shared {
                initial: settings.clone(),
                settings,
                open: true,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // Plain data: a panicking holder leaves settings, maybe half changed,
        // as a panicking handler leaves its own changes (see the guarantees).
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A copy of the settings as they are now.
    pub fn get(&self) -> OperatorSettings {
        self.lock().settings.clone()
    }

    /// Changes the settings with `change`.
    ///
    /// # Errors
    /// [`SettingsClosed`] once the start-up is over; nothing is changed then.
    pub fn update<R>(
        &self,
        change: impl FnOnce(&mut OperatorSettings) -> R,
    ) -> Result<R, SettingsClosed> {
        let mut shared = self.lock();
        if !shared.open {
            return Err(SettingsClosed);
        }
        Ok(change(&mut shared.settings))
    }

    /// Applies what a handler made of `loaded` (a copy it was lent), unless
    /// it changed nothing; once the start-up is over, warns instead.
    pub(crate) fn write_back(&self, loaded: &OperatorSettings, lent: OperatorSettings) {
        if lent == *loaded {
            return;
        }
        let mut shared = self.lock();
        if shared.open {
            shared.settings = lent;
        } else {
            tracing::warn!(
                "a start-up handler changed the operator's settings after the start-up was over (a blocking handler that outlived its timeout?); the change is ignored"
            );
        }
    }

    /// If a setting that cannot change after the operator started was
    /// changed, undoes that and says why it cannot change.
    pub(crate) fn refuse_fixed(&self) -> Option<String> {
        let mut shared = self.lock();
        let initial = shared.initial.networking.connect_timeout;
        if shared.settings.networking.connect_timeout == initial {
            return None;
        }
        shared.settings.networking.connect_timeout = initial;
        Some(
            "`networking.connect_timeout` cannot change in a start-up handler: the client is connected before the start-up handlers run; set it before the operator starts (`Runner::settings`), or on the client given to `Operator::client`".into(),
        )
    }

    /// Ends the start-up: the settings as the handlers left them, which can
    /// no longer change.
    pub(crate) fn close(&self) -> OperatorSettings {
        let mut shared = self.lock();
        shared.open = false;
        shared.settings.clone()
    }
}

/// Kopf's `settings.networking.error_backoffs`: 1, 1, 2, 3, 5, 8, 13, 21 s.
fn kopf_error_backoffs() -> Vec<Duration> {
    [1, 1, 2, 3, 5, 8, 13, 21]
        .into_iter()
        .map(Duration::from_secs)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_kopf_storage_layout() {
        let settings = OperatorSettings::default();
        assert_eq!(
            settings.persistence.finalizer,
            "kopf.zalando.org/KopfFinalizerMarker"
        );
        assert_eq!(settings.persistence.progress_prefix, "kopf.zalando.org");
        assert_eq!(
            settings.persistence.diffbase_key,
            "kopf.zalando.org/last-handled-configuration"
        );
        assert!(settings.persistence.progress_v1_keys);
    }

    #[test]
    fn defaults_match_kopf_timings() {
        let settings = OperatorSettings::default();
        assert_eq!(
            settings.watching.reconnect_backoff,
            Duration::from_millis(100)
        );
        assert_eq!(
            settings.watching.inactivity_timeout,
            Duration::from_secs(70)
        );
        assert_eq!(
            settings.networking.request_timeout,
            Some(Duration::from_secs(300))
        );
        assert_eq!(settings.networking.error_backoffs.len(), 8);
        assert_eq!(settings.execution.default_backoff, Duration::from_secs(60));
        assert_eq!(settings.posting.level, PostingLevel::Info);
        assert!(settings.posting.enabled);
        assert!(!settings.posting.loggers, "log lines are not Events");
    }

    #[test]
    fn posting_levels_are_ordered_by_severity() {
        assert!(PostingLevel::Info < PostingLevel::Warning);
        assert!(PostingLevel::Warning < PostingLevel::Error);
    }

    #[test]
    fn startup_settings_change_until_the_start_up_is_over() {
        let settings = StartupSettings::new(OperatorSettings::default());
        let other = settings.clone();
        assert_eq!(
            other.update(|s| {
                s.persistence.finalizer = "example.com/f".into();
                1
            }),
            Ok(1)
        );
        assert_eq!(settings.get().persistence.finalizer, "example.com/f");
        let finalized = settings.close();
        assert_eq!(finalized.persistence.finalizer, "example.com/f");
        assert_eq!(
            other.update(|s| s.persistence.finalizer = "late".into()),
            Err(SettingsClosed)
        );
        assert_eq!(settings.get(), finalized, "nothing changed after");
    }

    #[test]
    fn a_lent_copy_is_written_back_only_if_changed_and_open() {
        let settings = StartupSettings::new(OperatorSettings::default());
        let loaded = settings.get();
        settings
            .update(|s| s.queueing.backlog_limit = 7)
            .expect("open");
        settings.write_back(&loaded, loaded.clone());
        assert_eq!(
            settings.get().queueing.backlog_limit,
            7,
            "an unchanged copy does not undo what another handler changed"
        );
        let mut lent = settings.get();
        lent.posting.level = PostingLevel::Error;
        settings.write_back(&settings.get(), lent.clone());
        assert_eq!(settings.get(), lent);
        settings.close();
        let mut late = lent.clone();
        late.posting.level = PostingLevel::Warning;
        settings.write_back(&lent, late);
        assert_eq!(settings.get().posting.level, PostingLevel::Error);
    }

    #[test]
    fn the_connect_timeout_is_refused_and_undone() {
        let settings = StartupSettings::new(OperatorSettings::default());
        settings
            .update(|s| s.watching.list_page_size = 10)
            .expect("open");
        assert_eq!(settings.refuse_fixed(), None);
        settings
            .update(|s| s.networking.connect_timeout = Some(Duration::from_secs(1)))
            .expect("open");
        let refusal = settings.refuse_fixed().expect("refused");
        assert!(refusal.contains("networking.connect_timeout"), "{refusal}");
        assert_eq!(settings.get().networking.connect_timeout, None);
        assert_eq!(settings.get().watching.list_page_size, 10, "the rest stays");
    }
}
