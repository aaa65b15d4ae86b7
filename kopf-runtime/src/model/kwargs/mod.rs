//! The values handlers receive: [`Kwargs`] and the types of its parts.
//!
//! The engine fills one [`Kwargs`] per invocation; the generated code (or a
//! builder closure) takes from it the parameters a handler asks for by name,
//! as Kopf does with its keyword arguments. Which parameters each handler kind
//! accepts is listed in the crate documentation.

mod body;
mod diff;
mod index;
mod live;
mod logger;
mod memo;
mod patch;
mod stopped;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::fields::resolve_field;
use crate::settings::StartupSettings;

pub use body::Body;
pub(crate) use body::EncodedBody;
pub use diff::{Diff, DiffItem, DiffOp};
pub(crate) use index::ObjectKey;
pub use index::{Index, IndexError, IndexKey, Indexes, Store};
pub use live::LiveBody;
pub(crate) use live::{BodyCell, BodyReader};
pub(crate) use logger::LogSink;
pub use logger::{Level, Logger};
pub use memo::Memo;
pub(crate) use memo::MemoBase;
pub use patch::Patch;
pub use stopped::Stopped;

/// Why a change handler is called (Kopf's `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// The object was created.
    Create,
    /// The object was updated.
    Update,
    /// The object is being deleted.
    Delete,
    /// The operator (re)started and found the object.
    Resume,
    /// Nothing changed (field handlers on unrelated changes).
    Noop,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reason::Create => "create",
            Reason::Update => "update",
            Reason::Delete => "delete",
            Reason::Resume => "resume",
            Reason::Noop => "noop",
        })
    }
}

/// The type of a raw watch event (Kopf's `type`; `None` for the initial listing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum EventType {
    /// `ADDED`.
    Added,
    /// `MODIFIED`.
    Modified,
    /// `DELETED`.
    Deleted,
}

impl EventType {
    /// The wire name: `ADDED`, `MODIFIED`, `DELETED`.
    pub fn as_str(&self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// An admission operation, as in `AdmissionReview.request.operation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    /// `CREATE`.
    Create,
    /// `UPDATE`.
    Update,
    /// `DELETE`.
    Delete,
    /// `CONNECT`.
    Connect,
}

impl Operation {
    /// The wire name: `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// Warnings an admission handler returns to the client (Kopf's `warnings` list).
#[derive(Debug, Clone, Default)]
pub struct Warnings {
    items: Arc<Mutex<Vec<String>>>,
}

impl Warnings {
    /// Adds a warning.
    pub fn push(&self, warning: impl Into<String>) {
        self.items
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(warning.into());
    }

    /// All warnings so far (for the engine).
    pub fn to_vec(&self) -> Vec<String> {
        self.items.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The admission-specific parts of [`Kwargs`] (for `on_validate` and `on_mutate`).
#[derive(Debug, Clone)]
pub struct Admission {
    /// The requested operation.
    pub operation: Operation,
    /// Whether the request is a dry run (handlers must not have side effects then).
    pub dryrun: bool,
    /// Warnings to return to the client.
    pub warnings: Warnings,
    /// `request.userInfo` of the AdmissionReview.
    pub userinfo: Value,
    /// `request.subResource`, if any.
    pub subresource: Option<String>,
    /// The HTTP headers of the admission request, their names in lowercase.
    pub headers: BTreeMap<String, String>,
    /// The client's TLS certificate, as Kopf's `sslpeer`: an empty object,
    /// as the webhook server asks clients for no certificate.
    pub sslpeer: Value,
}

impl Default for Admission {
    fn default() -> Self {
        Admission {
            operation: Operation::Create,
            dryrun: false,
            warnings: Warnings::default(),
            userinfo: Value::Null,
            subresource: None,
            headers: BTreeMap::new(),
            sslpeer: Value::Object(serde_json::Map::new()),
        }
    }
}

/// Everything a handler may receive, filled by the engine for one invocation.
///
/// Cheap to clone: the object and shared handles sit behind `Arc`s. Fields that
/// do not apply to a handler kind stay at their defaults (`None`, `Null`, empty);
/// asking for them in a handler is rejected at compile time by the macros, and
/// yields [`KwargError::Missing`](crate::KwargError::Missing) at run time for
/// builder handlers.
///
/// ```
/// use serde_json::json;
/// let kwargs = kopf_runtime::Kwargs::new(json!({
///     "metadata": {"name": "x", "namespace": "ns", "labels": {"app": "a"}},
///     "spec": {"size": 1},
/// }));
/// assert_eq!(kwargs.name(), Some("x"));
/// assert_eq!(kwargs.namespace(), Some("ns"));
/// assert_eq!(kwargs.label("app"), Some("a"));
/// assert_eq!(kwargs.spec(), &json!({"size": 1}));
/// assert!(kwargs.status().is_null());
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct Kwargs {
    /// The object's body (`Null` for activity handlers), a `Value` behind
    /// [`Deref`](std::ops::Deref) (see [`Body`]).
    pub body: Body,
    /// Why a change handler runs.
    pub reason: Option<Reason>,
    /// The changes (reduced to `field` for field-scoped handlers).
    pub diff: Diff,
    /// The old value (object, or the field's value for field-scoped handlers).
    pub old: Option<Arc<Value>>,
    /// The new value (object, or the field's value for field-scoped handlers).
    pub new: Option<Arc<Value>>,
    /// The raw watch event (`{"type": …, "object": …}`) for `on_event`.
    pub event: Option<Arc<Value>>,
    /// The watch event type for `on_event` (`None` for the initial listing).
    pub event_type: Option<EventType>,
    /// The attempt number, from 0.
    pub retry: u32,
    /// When the first attempt started.
    pub started: Option<jiff::Timestamp>,
    /// How long since the first attempt started.
    pub runtime: Duration,
    /// The patch applied to the object after the handler.
    pub patch: Patch,
    /// The per-object logger.
    pub logger: Logger,
    /// The memo: the object's, or the operator's for activities (see [`Memo`]).
    pub memo: Memo,
    /// The handler's `param` option.
    pub param: Option<Value>,
    /// The stop flag, for daemons and timers.
    pub stopped: Option<Stopped>,
    /// The object as it is now, for daemons and timers.
    pub live: Option<LiveBody>,
    /// The Kubernetes client (absent for `on_login`, in unit tests, and for
    /// a handler that takes none: see
    /// [`Handler::takes_client`](crate::Handler::takes_client)).
    pub client: Option<kube::Client>,
    /// The operator's indexes.
    pub indexes: Indexes,
    /// Admission details, for `on_validate` and `on_mutate`.
    pub admission: Option<Admission>,
    /// The call's sub-handlers, for change handlers: read them with
    /// [`Kwargs::subhandlers`]. Kept erased, so that the kwargs know nothing
    /// of the engine that runs the children.
    pub(crate) subhandlers: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// The operator's settings, which `on_startup` handlers may change
    /// (absent for every other kind).
    pub settings: Option<StartupSettings>,
}

static NULL: Value = Value::Null;

/// The `Null` body; shared by every [`Kwargs::default`].
static NULL_BODY: LazyLock<Arc<Value>> = LazyLock::new(|| Arc::new(Value::Null));

impl Default for Kwargs {
    fn default() -> Self {
        Kwargs::of(Arc::clone(&NULL_BODY), Memo::new(), Logger::default())
    }
}

impl fmt::Debug for Kwargs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kwargs")
            .field("body", &self.body)
            .field("reason", &self.reason)
            .field("diff", &self.diff)
            .field("old", &self.old)
            .field("new", &self.new)
            .field("event_type", &self.event_type)
            .field("retry", &self.retry)
            .field("started", &self.started)
            .field("runtime", &self.runtime)
            .field("param", &self.param)
            .field("stopped", &self.stopped)
            .field("client", &self.client.as_ref().map(|_| ".."))
            .field("admission", &self.admission)
            .field("settings", &self.settings.as_ref().map(|_| ".."))
            .finish_non_exhaustive()
    }
}

impl Kwargs {
    /// Kwargs for an object body, everything else at defaults.
    pub fn new(body: Value) -> Self {
        Kwargs::of(Arc::new(body), Memo::new(), Logger::default())
    }

    /// Kwargs for a shared body with its memo and logger; everything else at
    /// defaults. The engine makes kwargs for every handler call and filter
    /// check: none of the parts it sets is made only to be replaced.
    pub(crate) fn of(body: impl Into<Body>, memo: Memo, logger: Logger) -> Self {
        Kwargs {
            body: body.into(),
            reason: None,
            diff: Diff::default(),
            old: None,
            new: None,
            event: None,
            event_type: None,
            retry: 0,
            started: None,
            runtime: Duration::ZERO,
            patch: Patch::new(),
            logger,
            memo,
            param: None,
            stopped: None,
            live: None,
            client: None,
            indexes: Indexes::default(),
            admission: None,
            subhandlers: None,
            settings: None,
        }
    }

    /// `body.spec` (`Null` if absent).
    pub fn spec(&self) -> &Value {
        self.body.get("spec").unwrap_or(&NULL)
    }

    /// `body.status` (`Null` if absent).
    pub fn status(&self) -> &Value {
        self.body.get("status").unwrap_or(&NULL)
    }

    /// `body.metadata` (`Null` if absent).
    pub fn meta(&self) -> &Value {
        self.body.get("metadata").unwrap_or(&NULL)
    }

    /// `metadata.name`.
    pub fn name(&self) -> Option<&str> {
        self.body.name()
    }

    /// `metadata.namespace` (`None` for cluster-scoped objects).
    pub fn namespace(&self) -> Option<&str> {
        self.body.namespace()
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> Option<&str> {
        self.body.uid()
    }

    /// `metadata.labels` (`Null` if absent).
    pub fn labels(&self) -> &Value {
        self.meta().get("labels").unwrap_or(&NULL)
    }

    /// `metadata.annotations` (`Null` if absent).
    pub fn annotations(&self) -> &Value {
        self.meta().get("annotations").unwrap_or(&NULL)
    }

    /// One label's value.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels().get(key)?.as_str()
    }

    /// One annotation's value.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations().get(key)?.as_str()
    }

    /// The value at a dot-separated field path of the body (e.g. `spec.size`).
    pub fn field(&self, path: &str) -> Option<&Value> {
        let parts: Vec<&str> = path.split('.').collect();
        resolve_field(&self.body, &parts)
    }
}

// How the engine fills [`Kwargs`]: one constructor for each kind of
// context (an object, or the operator itself), then one method for each
// part a kind of handler has (a change, a watch event, an attempt, a
// task, the start-up settings). What a handler kind does not get stays at
// its default.

/// Where a call stands in its handler's retries (Kopf's `retry`,
/// `started` and `runtime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attempt {
    /// The attempts made before this one.
    pub(crate) retry: u32,
    /// When the first attempt started.
    pub(crate) started: jiff::Timestamp,
    /// How long ago that was.
    pub(crate) runtime: Duration,
}

impl Kwargs {
    /// The kwargs of a handler of the operator itself (activities, login,
    /// probes): no object, the operator's `memo`, a `logger` named for the
    /// handler.
    pub(crate) fn of_operator(memo: Memo, logger: Logger) -> Self {
        Kwargs::of(Arc::clone(&NULL_BODY), memo, logger)
    }

    /// With what the operator shares with its handlers: its client (none
    /// for login handlers) and its indexes.
    #[must_use]
    pub(crate) fn with_cluster(mut self, client: Option<kube::Client>, indexes: Indexes) -> Self {
        self.set_cluster(client, indexes);
        self
    }

    /// [`with_cluster`](Self::with_cluster) in place (each `with_*` moves
    /// the half a kilobyte of `Kwargs`: calls made every tick fill them in
    /// place).
    pub(crate) fn set_cluster(&mut self, client: Option<kube::Client>, indexes: Indexes) {
        self.client = client;
        self.indexes = indexes;
    }

    /// With the attempt this call is.
    #[must_use]
    pub(crate) fn with_attempt(mut self, attempt: Attempt) -> Self {
        self.set_attempt(attempt);
        self
    }

    /// [`with_attempt`](Self::with_attempt) in place.
    pub(crate) fn set_attempt(&mut self, attempt: Attempt) {
        self.retry = attempt.retry;
        self.started = Some(attempt.started);
        self.runtime = attempt.runtime;
    }

    /// With the change a change handler (or its filters) sees: why it
    /// runs, and the object's essence before and after.
    #[must_use]
    pub(crate) fn with_change(
        mut self,
        reason: Reason,
        diff: Diff,
        old: Option<Arc<Value>>,
        new: Option<Arc<Value>>,
    ) -> Self {
        self.reason = Some(reason);
        self.diff = diff;
        self.old = old;
        self.new = new;
        self
    }

    /// With an admission request: its details, and the object before and
    /// after the request with their diff.
    #[cfg(feature = "webhooks")]
    #[must_use]
    pub(crate) fn with_admission(
        mut self,
        admission: Admission,
        old: Option<Arc<Value>>,
        new: Option<Arc<Value>>,
    ) -> Self {
        self.diff = Diff::between_shared(old.clone(), new.clone());
        self.old = old;
        self.new = new;
        self.admission = Some(admission);
        self
    }

    /// With the raw watch event an `on_event` handler receives, and the
    /// patch the handlers of the event share.
    #[must_use]
    pub(crate) fn with_event(
        mut self,
        raw: Arc<Value>,
        event_type: Option<EventType>,
        patch: Patch,
    ) -> Self {
        self.event = Some(raw);
        self.event_type = event_type;
        self.patch = patch;
        self
    }

    /// Gives what a daemon or timer has: its stop flag and the live body.
    pub(crate) fn set_task(&mut self, stopped: Stopped, live: LiveBody) {
        self.stopped = Some(stopped);
        self.live = Some(live);
    }

    /// With the operator's settings, which `on_startup` handlers may change.
    #[must_use]
    pub(crate) fn with_settings(mut self, settings: StartupSettings) -> Self {
        self.settings = Some(settings);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accessors_read_the_body_and_tolerate_absence() {
        let kwargs =
            Kwargs::new(json!({"metadata": {"annotations": {"a": "b"}}, "spec": {"x": {"y": 1}}}));
        assert_eq!(kwargs.annotation("a"), Some("b"));
        assert_eq!(kwargs.label("a"), None);
        assert_eq!(kwargs.name(), None);
        assert_eq!(kwargs.field("spec.x.y"), Some(&json!(1)));
        assert_eq!(Kwargs::default().spec(), &Value::Null);
    }

    #[test]
    fn default_kwargs_share_nothing_that_handlers_change() {
        let (a, b) = (Kwargs::default(), Kwargs::default());
        a.memo.insert(1_u8);
        a.patch.set("spec.x", json!(1));
        assert!(b.memo.get::<u8>().is_none());
        assert!(b.patch.is_empty());
        assert!(a.diff.is_empty() && b.diff.is_empty());
        assert!(a.indexes.get("any").is_none());

        let body = Arc::new(json!({"metadata": {"name": "x"}}));
        let kwargs = Kwargs::of(Arc::clone(&body), a.memo.clone(), Logger::new("ns/x"));
        assert!(Arc::ptr_eq(&kwargs.body.to_arc(), &body));
        assert_eq!(kwargs.memo.get::<u8>().as_deref(), Some(&1));
        assert_eq!(kwargs.logger.object(), "ns/x");
    }

    #[test]
    fn wire_names_match_kubernetes() {
        assert_eq!(
            serde_json::to_value(EventType::Added).ok(),
            Some(json!("ADDED"))
        );
        assert_eq!(Operation::Connect.as_str(), "CONNECT");
        assert_eq!(Reason::Resume.to_string(), "resume");
    }

    #[test]
    fn an_operators_handler_has_no_object_and_the_operators_memo() {
        let memo = Memo::new();
        memo.insert(7_u8);
        let attempt = Attempt {
            retry: 2,
            started: jiff::Timestamp::UNIX_EPOCH,
            runtime: Duration::from_secs(3),
        };
        let kwargs = Kwargs::of_operator(memo, Logger::new("login")).with_attempt(attempt);
        assert!(kwargs.body.is_null());
        assert_eq!(kwargs.memo.get::<u8>().as_deref(), Some(&7));
        assert_eq!(kwargs.logger.object(), "login");
        assert_eq!(
            (kwargs.retry, kwargs.started, kwargs.runtime),
            (2, Some(attempt.started), attempt.runtime)
        );
        assert!(kwargs.client.is_none() && kwargs.reason.is_none());
    }

    #[test]
    #[cfg(feature = "webhooks")]
    fn a_change_and_an_admission_set_their_values_and_diff() {
        let (old, new) = (json!({"a": 1}), json!({"a": 2}));
        let shared = |v: &Value| Some(Arc::new(v.clone()));
        let diff = Diff::between(Some(&old), Some(&new));
        let change = Kwargs::new(new.clone()).with_change(
            Reason::Update,
            diff.clone(),
            shared(&old),
            shared(&new),
        );
        assert_eq!(change.reason, Some(Reason::Update));
        let admission = Kwargs::new(new.clone()).with_admission(
            Admission::default(),
            shared(&old),
            shared(&new),
        );
        assert_eq!(admission.diff, diff);
        assert_eq!(admission.old, change.old);
        assert_eq!(admission.new, change.new);
        assert!(admission.admission.is_some() && admission.reason.is_none());
    }

    #[test]
    fn an_event_shares_the_patch_of_its_handlers() {
        let patch = Patch::new();
        let raw = Arc::new(json!({"type": "ADDED"}));
        let kwargs = Kwargs::new(json!({})).with_event(raw, Some(EventType::Added), patch.clone());
        kwargs.patch.set("status.seen", json!(true));
        assert!(!patch.is_empty());
        assert_eq!(kwargs.event_type, Some(EventType::Added));
    }
}
