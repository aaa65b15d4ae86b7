//! Kubernetes Events about objects, posted from handlers as Kopf's
//! `kopf.info`, `kopf.warn`, `kopf.exception` and `kopf.event` post them.
//!
//! [`info`], [`warn`], [`exception`] and [`event`] queue an Event about an
//! object (a body, or anything with an [`ObjectReference`]) and return at
//! once: they find the poster of the operator that runs the handler, and
//! its task creates core/v1 Events in the background (`source.component:
//! kopf`, `involvedObject` built from the object, messages longer than 1024
//! characters cut in the middle with `...`), as `settings.posting` says.
//!
//! ```
//! use kopf_runtime as kopf;
//! use kopf_runtime::posting;
//!
//! #[kopf::on_create("", "v1", "configmaps")]
//! async fn created(body: &serde_json::Value) -> kopf::Result<()> {
//!     posting::info(body, "Created", "All good.");
//!     Ok(())
//! }
//! # fn main() {}
//! ```
//!
//! # Guarantees
//!
//! - Posting never blocks and never fails the caller: when the queue is full
//!   or the task is gone, the Event is dropped with a log line; outside a
//!   handler of a running operator, it is dropped with a debug line.
//! - A failed POST is logged as a warning and the task goes on.
//! - Events about core/v1 Events are never posted (no event explosions).

use std::sync::Arc;

use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::fields::resolve_field;
use crate::settings::{PostingLevel, PostingSettings};

/// Kopf's limit on Event messages.
pub(crate) const MAX_MESSAGE_LENGTH: usize = 1024;
/// What replaces the middle of a cut message.
pub(crate) const CUT_MESSAGE_INFIX: &str = "...";

/// A failure to post an Event; logged by the [`PosterTask`], never returned
/// to the code that asked for the Event.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PostError {
    /// The API rejected the Event or could not be reached.
    #[error("posting an event failed")]
    Create(#[source] kube::Error),
    /// The queue was full; the Event was dropped.
    #[error("the event queue is full")]
    QueueFull,
    /// The poster task is not running any more.
    #[error("the event poster has stopped")]
    Stopped,
}

/// How serious an Event is: its `type`, `Normal` or `Warning`.
///
/// Not [`EventType`](crate::EventType), the `type` of a watch event that
/// `on_event` handlers receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Severity {
    /// Something ordinary happened.
    Normal,
    /// Something went wrong or needs attention.
    Warning,
}

/// Who an Event is about: the `involvedObject`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// `apiVersion` of the object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `kind` of the object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `metadata.name`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `metadata.uid`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// `metadata.namespace`; `None` for cluster-scoped objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl ObjectReference {
    /// The reference to an object given as a JSON body.
    pub fn from_body(body: &Value) -> Self {
        let text = |v: Option<&Value>| {
            v.and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        Self {
            api_version: text(body.get("apiVersion")),
            kind: text(body.get("kind")),
            name: text(resolve_field(body, &["metadata", "name"])),
            uid: text(resolve_field(body, &["metadata", "uid"])),
            namespace: text(resolve_field(body, &["metadata", "namespace"])),
        }
    }

    /// The reference to any typed or dynamic Kubernetes object.
    pub fn from_resource<K: kube::Resource>(obj: &K, dt: &K::DynamicType) -> Self {
        let meta = obj.meta();
        Self {
            api_version: Some(K::api_version(dt).into_owned()),
            kind: Some(K::kind(dt).into_owned()),
            name: meta.name.clone(),
            uid: meta.uid.clone(),
            namespace: meta.namespace.clone(),
        }
    }

    fn is_core_event(&self) -> bool {
        self.api_version.as_deref() == Some("v1") && self.kind.as_deref() == Some("Event")
    }
}

impl From<&Value> for ObjectReference {
    fn from(body: &Value) -> Self {
        Self::from_body(body)
    }
}

impl From<&DynamicObject> for ObjectReference {
    fn from(obj: &DynamicObject) -> Self {
        let types = obj.types.as_ref();
        Self {
            api_version: types
                .map(|t| t.api_version.clone())
                .filter(|s| !s.is_empty()),
            kind: types.map(|t| t.kind.clone()).filter(|s| !s.is_empty()),
            name: obj.metadata.name.clone(),
            uid: obj.metadata.uid.clone(),
            namespace: obj.metadata.namespace.clone(),
        }
    }
}

impl From<&Arc<DynamicObject>> for ObjectReference {
    fn from(obj: &Arc<DynamicObject>) -> Self {
        Self::from(obj.as_ref())
    }
}

/// One queued Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueuedEvent {
    /// Who it is about.
    pub reference: ObjectReference,
    /// `Normal` or `Warning`.
    pub severity: Severity,
    /// A short CamelCase reason.
    pub reason: String,
    /// The human-readable message (cut when posted).
    pub message: String,
}

/// Cut a message longer than [`MAX_MESSAGE_LENGTH`] characters in the middle,
/// exactly as Kopf does.
pub(crate) fn truncate_message(message: &str) -> String {
    let chars: Vec<char> = message.chars().collect();
    if chars.len() <= MAX_MESSAGE_LENGTH {
        return message.to_owned();
    }
    let infix_len = CUT_MESSAGE_INFIX.len();
    let head = MAX_MESSAGE_LENGTH / 2 - infix_len / 2;
    let tail = MAX_MESSAGE_LENGTH / 2 - (infix_len - infix_len / 2);
    let mut out: String = chars[..head].iter().collect();
    out.push_str(CUT_MESSAGE_INFIX);
    out.extend(&chars[chars.len() - tail..]);
    out
}

/// The core/v1 Event body Kopf posts, for `now`, in `namespace`.
pub(crate) fn event_body(
    event: &QueuedEvent,
    namespace: &str,
    settings: &PostingSettings,
    now: jiff::Timestamp,
) -> Value {
    let mut involved = event.reference.clone();
    involved.namespace = Some(namespace.to_owned());
    let seconds = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let micros = now.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"namespace": namespace, "generateName": settings.event_name_prefix},
        "action": "Action?",
        "type": event.severity,
        "reason": event.reason,
        "message": truncate_message(&event.message),
        "reportingComponent": settings.reporting_component,
        "reportingInstance": settings.reporting_instance,
        "source": {"component": settings.reporting_component},
        "involvedObject": involved,
        "firstTimestamp": seconds,
        "lastTimestamp": seconds,
        "eventTime": micros,
    })
}

/// Queues Events for the [`PosterTask`]; cheap to clone, never blocks.
///
/// One poster and its task, owned by the runtime, serve an operator; the
/// runtime enters [`scope`] around each handler call, so that the free
/// functions find it. The same calls on a poster work anywhere.
#[derive(Debug, Clone)]
pub(crate) struct EventPoster {
    tx: mpsc::Sender<QueuedEvent>,
    settings: Arc<PostingSettings>,
}

impl EventPoster {
    /// A poster and the task that posts its Events (for the runtime to own).
    pub(crate) fn new(client: Client, settings: PostingSettings) -> (Self, PosterTask) {
        let (tx, rx) = mpsc::channel(settings.queue_capacity.max(1));
        let settings = Arc::new(settings);
        (
            Self {
                tx,
                settings: settings.clone(),
            },
            PosterTask {
                rx,
                client,
                settings,
            },
        )
    }

    /// Queue an Event of any type, if posting is enabled at that level.
    pub(crate) fn event(
        &self,
        obj: impl Into<ObjectReference>,
        severity: Severity,
        reason: &str,
        message: &str,
    ) {
        let level = match severity {
            Severity::Normal => PostingLevel::Info,
            Severity::Warning => PostingLevel::Warning,
        };
        self.enqueue(obj.into(), severity, level, reason, message);
    }

    /// Queue a `Normal` Event (Kopf's `kopf.info`).
    pub(crate) fn info(&self, obj: impl Into<ObjectReference>, reason: &str, message: &str) {
        self.enqueue(
            obj.into(),
            Severity::Normal,
            PostingLevel::Info,
            reason,
            message,
        );
    }

    /// Queue a `Warning` Event (Kopf's `kopf.warn`).
    pub(crate) fn warn(&self, obj: impl Into<ObjectReference>, reason: &str, message: &str) {
        self.enqueue(
            obj.into(),
            Severity::Warning,
            PostingLevel::Warning,
            reason,
            message,
        );
    }

    /// Queue a `Warning` Event about an error (Kopf's `kopf.exception`): the
    /// message is `"{message} {error}"` (or just the error), the reason
    /// defaults to `Error`. Kubernetes accepts only `Normal`/`Warning`, so
    /// Kopf's `Error` type becomes `Warning` at the `Error` posting level.
    pub(crate) fn exception(
        &self,
        obj: impl Into<ObjectReference>,
        reason: Option<&str>,
        message: &str,
        error: &dyn std::error::Error,
    ) {
        let message = if message.is_empty() {
            error.to_string()
        } else {
            format!("{message} {error}")
        };
        let reason = reason.filter(|r| !r.is_empty()).unwrap_or("Error");
        self.enqueue(
            obj.into(),
            Severity::Warning,
            PostingLevel::Error,
            reason,
            &message,
        );
    }

    fn enqueue(
        &self,
        reference: ObjectReference,
        severity: Severity,
        level: PostingLevel,
        reason: &str,
        message: &str,
    ) {
        if !self.settings.enabled || level < self.settings.level {
            return;
        }
        let event = QueuedEvent {
            reference,
            severity,
            reason: reason.to_owned(),
            message: message.to_owned(),
        };
        if let Err(error) = self.tx.try_send(event) {
            let error = match error {
                mpsc::error::TrySendError::Full(_) => PostError::QueueFull,
                mpsc::error::TrySendError::Closed(_) => PostError::Stopped,
            };
            tracing::warn!(%error, %reason, "dropping a Kubernetes event");
        }
    }
}

/// Drains an [`EventPoster`]'s queue; owned and awaited by the runtime.
pub(crate) struct PosterTask {
    rx: mpsc::Receiver<QueuedEvent>,
    client: Client,
    settings: Arc<PostingSettings>,
}

impl std::fmt::Debug for PosterTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PosterTask")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

fn events_resource() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Event".into(),
        plural: "events".into(),
    }
}

impl PosterTask {
    /// Post queued Events one by one until `cancel` fires or every poster
    /// handle is dropped.
    ///
    /// # Guarantees
    ///
    /// Returns promptly on `cancel` (an in-flight POST is abandoned; queued
    /// Events are dropped). Failures are logged, never returned.
    pub(crate) async fn run(mut self, cancel: CancellationToken) {
        let events = events_resource();
        loop {
            let event = tokio::select! {
                _ = cancel.cancelled() => break,
                event = self.rx.recv() => event,
            };
            let Some(event) = event else { break };
            if event.reference.is_core_event() {
                continue;
            }
            let namespace = event
                .reference
                .namespace
                .clone()
                .unwrap_or_else(|| self.client.default_namespace().to_owned());
            let body = event_body(&event, &namespace, &self.settings, jiff::Timestamp::now());
            let obj: DynamicObject = match serde_json::from_value(body) {
                Ok(obj) => obj,
                Err(error) => {
                    tracing::warn!(%error, "failed to build an event; ignoring");
                    continue;
                }
            };
            let api =
                Api::<DynamicObject>::namespaced_with(self.client.clone(), &namespace, &events);
            let params = PostParams::default();
            let result = tokio::select! {
                _ = cancel.cancelled() => break,
                result = api.create(&params, &obj) => result,
            };
            if let Err(error) = result {
                let error = PostError::Create(error);
                tracing::warn!(
                    error = %error, source = ?std::error::Error::source(&error),
                    kind = ?event.reference.kind, name = ?event.reference.name,
                    reason = %event.reason, "failed to post an event; ignoring and continuing"
                );
            }
        }
    }
}

tokio::task_local! {
    static CURRENT: EventPoster;
}

std::thread_local! {
    /// The poster of the task whose blocking call runs on this thread.
    static ON_THREAD: std::cell::RefCell<Option<EventPoster>> = const { std::cell::RefCell::new(None) };
}

/// Run `fut` with `poster` as the one [`info`], [`warn`] and [`exception`]
/// use (the runtime wraps every handler call in this).
pub(crate) fn scope<F: Future>(poster: EventPoster, fut: F) -> impl Future<Output = F::Output> {
    // Not an `async fn`: its future would hold `fut` twice, once as the
    // argument and once inside the scope it is moved into.
    CURRENT.scope(poster, fut)
}

/// The poster of the current task's [`scope`], if any: for a blocking call
/// the task starts on another thread (see [`on_thread`]).
pub(crate) fn current() -> Option<EventPoster> {
    CURRENT.try_with(EventPoster::clone).ok()
}

/// Runs `f` on this thread with `poster` as the one [`info`], [`warn`] and
/// [`exception`] use: a plain-`fn` handler runs on a blocking thread, out
/// of its task's [`scope`]. The thread's previous poster is back
/// afterwards, even if `f` panics.
pub(crate) fn on_thread<R>(poster: Option<EventPoster>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<EventPoster>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            ON_THREAD.with(|slot| *slot.borrow_mut() = previous);
        }
    }
    if poster.is_none() {
        return f();
    }
    let _restore = Restore(ON_THREAD.with(|slot| slot.replace(poster)));
    f()
}

fn with_current(f: impl FnOnce(&EventPoster)) {
    let poster = current().or_else(|| ON_THREAD.with(|slot| slot.borrow().clone()));
    match poster {
        Some(poster) => f(&poster),
        None => tracing::debug!("no event poster in this task; the event is not posted"),
    }
}

/// Post a `Normal` Event about `obj` from a handler (Kopf's `kopf.info`).
pub fn info(obj: impl Into<ObjectReference>, reason: &str, message: &str) {
    let reference = obj.into();
    with_current(|p| p.info(reference, reason, message));
}

/// Post a `Warning` Event about `obj` from a handler (Kopf's `kopf.warn`).
pub fn warn(obj: impl Into<ObjectReference>, reason: &str, message: &str) {
    let reference = obj.into();
    with_current(|p| p.warn(reference, reason, message));
}

/// Post an error Event about `obj` from a handler (Kopf's `kopf.exception`).
pub fn exception(
    obj: impl Into<ObjectReference>,
    reason: Option<&str>,
    message: &str,
    error: &dyn std::error::Error,
) {
    let reference = obj.into();
    with_current(|p| p.exception(reference, reason, message, error));
}

/// Post an Event of any type about `obj` from a handler (Kopf's `kopf.event`).
pub fn event(obj: impl Into<ObjectReference>, severity: Severity, reason: &str, message: &str) {
    let reference = obj.into();
    with_current(|p| p.event(reference, severity, reason, message));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poster(settings: PostingSettings) -> (EventPoster, mpsc::Receiver<QueuedEvent>) {
        let (tx, rx) = mpsc::channel(settings.queue_capacity);
        (
            EventPoster {
                tx,
                settings: Arc::new(settings),
            },
            rx,
        )
    }

    fn pod() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u1"}})
    }

    #[test]
    fn short_messages_are_kept() {
        assert_eq!(truncate_message("hello"), "hello");
        let exact = "x".repeat(1024);
        assert_eq!(truncate_message(&exact), exact);
    }

    #[test]
    fn long_messages_are_cut_like_kopf() {
        let message: String = (0..2000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let cut = truncate_message(&message);
        assert_eq!(cut.chars().count(), 1024);
        assert_eq!(&cut[..511], &message[..511]);
        assert_eq!(&cut[511..514], "...");
        assert_eq!(&cut[514..], &message[2000 - 510..]);
        let wide = "é".repeat(2000);
        assert_eq!(truncate_message(&wide).chars().count(), 1024);
    }

    #[test]
    fn references_come_from_bodies_and_objects() {
        let reference = ObjectReference::from_body(&pod());
        assert_eq!(reference.kind.as_deref(), Some("Pod"));
        assert_eq!(reference.uid.as_deref(), Some("u1"));
        let cluster = ObjectReference::from_body(
            &json!({"kind": "Node", "metadata": {"name": "n", "namespace": ""}}),
        );
        assert_eq!(cluster.namespace, None);
        assert_eq!(cluster.api_version, None);
        let obj: DynamicObject = serde_json::from_value(pod()).expect("valid object");
        assert_eq!(ObjectReference::from(&obj), reference);
    }

    #[test]
    fn event_body_matches_kopf() {
        let event = QueuedEvent {
            reference: ObjectReference::from_body(&pod()),
            severity: Severity::Normal,
            reason: "Created".into(),
            message: "ok".into(),
        };
        let now: jiff::Timestamp = "2020-02-14T16:58:25.396364Z".parse().expect("valid");
        let body = event_body(&event, "ns", &PostingSettings::default(), now);
        assert_eq!(
            body,
            json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"namespace": "ns", "generateName": "kopf-event-"},
                "action": "Action?", "type": "Normal", "reason": "Created", "message": "ok",
                "reportingComponent": "kopf", "reportingInstance": "dev",
                "source": {"component": "kopf"},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1", "namespace": "ns"},
                "firstTimestamp": "2020-02-14T16:58:25Z",
                "lastTimestamp": "2020-02-14T16:58:25Z",
                "eventTime": "2020-02-14T16:58:25.396364Z",
            })
        );
    }

    #[test]
    fn levels_and_enabled_filter_events() {
        let (p, mut rx) = poster(PostingSettings {
            level: PostingLevel::Warning,
            ..Default::default()
        });
        p.info(&pod(), "R", "info");
        p.warn(&pod(), "R", "warn");
        p.exception(&pod(), None, "failed:", &std::io::Error::other("boom"));
        assert_eq!(
            rx.try_recv().map(|e| e.message).ok().as_deref(),
            Some("warn")
        );
        let error = rx.try_recv().expect("the exception is posted");
        assert_eq!(
            (
                error.severity,
                error.reason.as_str(),
                error.message.as_str()
            ),
            (Severity::Warning, "Error", "failed: boom")
        );
        assert!(rx.try_recv().is_err());

        let (p, mut rx) = poster(PostingSettings {
            enabled: false,
            ..Default::default()
        });
        p.warn(&pod(), "R", "warn");
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_full_queue_drops_instead_of_blocking() {
        let (p, mut rx) = poster(PostingSettings {
            queue_capacity: 1,
            ..Default::default()
        });
        p.info(&pod(), "R", "1");
        p.info(&pod(), "R", "2");
        assert_eq!(rx.try_recv().map(|e| e.message).ok().as_deref(), Some("1"));
        assert!(rx.try_recv().is_err());
        drop(rx);
        p.info(&pod(), "R", "3"); // closed: dropped, no panic
    }

    mod api {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::time::Duration;

        use tokio_util::task::TaskTracker;

        use super::super::*;
        use super::pod;
        use crate::mock_api::{self, Reply};

        const LIMIT: Duration = Duration::from_secs(600);

        #[tokio::test(start_paused = true)]
        async fn events_are_posted_and_failures_do_not_stop_the_task() {
            let calls = AtomicUsize::new(0);
            let (client, log) =
                mock_api::client(move |r| match calls.fetch_add(1, Ordering::SeqCst) {
                    0 => Reply::Json(500, mock_api::status(500, "InternalError", 0)),
                    _ => Reply::Json(201, r.body.clone()),
                });
            let (poster, task) = EventPoster::new(client, PostingSettings::default());
            let cancel = CancellationToken::new();
            let tracker = TaskTracker::new();
            tracker.spawn(task.run(cancel.clone()));

            poster.warn(&pod(), "First", "fails");
            poster.info(&pod(), "Second", "succeeds");
            let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u9"}});
            poster.info(&node, "Third", "cluster-scoped");
            poster.info(
                &json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"}}),
                "Loop",
                "skipped",
            );

            tokio::time::timeout(LIMIT, async {
                while log.lock().expect("not poisoned").len() < 3 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .expect("posted in time");
            drop(poster);
            tracker.close();
            tokio::time::timeout(LIMIT, tracker.wait())
                .await
                .expect("the task ends when posters are gone");

            let log = log.lock().expect("not poisoned");
            assert_eq!(log.len(), 3, "the event about an Event is never posted");
            assert!(log.iter().all(|r| r.method == "POST"));
            assert!(
                log[1].uri.starts_with("/api/v1/namespaces/ns/events"),
                "{}",
                log[1].uri
            );
            assert_eq!(log[1].body["reason"], "Second");
            assert_eq!(log[1].body["source"]["component"], "kopf");
            assert_eq!(log[1].body["involvedObject"]["uid"], "u1");
            assert!(
                log[2].uri.starts_with("/api/v1/namespaces/default/events"),
                "{}",
                log[2].uri
            );
            assert_eq!(log[2].body["involvedObject"]["namespace"], "default");
        }

        #[tokio::test(start_paused = true)]
        async fn cancellation_stops_the_task_promptly() {
            let (client, _) = mock_api::client(|_| Reply::EventsThenHang(vec![]));
            let (poster, task) = EventPoster::new(client, PostingSettings::default());
            let cancel = CancellationToken::new();
            let tracker = TaskTracker::new();
            tracker.spawn(task.run(cancel.clone()));
            poster.info(&pod(), "Hangs", "the server never answers");
            tokio::time::sleep(Duration::from_secs(1)).await;
            cancel.cancel();
            tracker.close();
            tokio::time::timeout(Duration::from_secs(1), tracker.wait())
                .await
                .expect("stopped promptly");
        }
    }

    #[tokio::test]
    async fn free_functions_use_the_scoped_poster() {
        let (p, mut rx) = poster(PostingSettings::default());
        scope(p, async {
            info(&pod(), "Created", "in scope");
            event(&pod(), Severity::Warning, "Odd", "typed");
        })
        .await;
        info(&pod(), "Created", "out of scope"); // no poster: dropped quietly
        assert_eq!(
            rx.try_recv().map(|e| e.message).ok().as_deref(),
            Some("in scope")
        );
        assert_eq!(
            rx.try_recv().map(|e| e.severity).ok(),
            Some(Severity::Warning)
        );
        assert!(rx.try_recv().is_err());
    }

    #[tokio::test]
    async fn a_blocking_call_posts_with_the_poster_of_its_task() {
        let (p, mut rx) = poster(PostingSettings::default());
        scope(p, async {
            let poster = current();
            tokio::task::spawn_blocking(move || {
                on_thread(poster, || info(&pod(), "Synced", "from a thread"));
                info(&pod(), "Synced", "after the call"); // the thread forgot it
            })
            .await
            .expect("no panic");
        })
        .await;
        assert_eq!(
            rx.try_recv().map(|e| e.message).ok().as_deref(),
            Some("from a thread")
        );
        assert!(rx.try_recv().is_err());
    }
}
