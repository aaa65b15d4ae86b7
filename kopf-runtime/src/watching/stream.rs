//! One list-then-watch loop over one scope (the cluster or a namespace).

use std::time::Duration;

use futures::{AsyncBufReadExt, AsyncReadExt, StreamExt};
use kube::api::{Api, DynamicObject, ListParams, WatchParams};
use kube::core::{ApiResource, ListMeta, Request};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::events::{self, Change, Event, Offered};
use super::tracker::{ObjectTracker, WatchInput};
use super::{ObjectEvent, WatchError};
use crate::fields::meta_str;
use crate::model::retrying::{Backoff, ErrorClass, classify, classify_status};
use crate::operations::health::ScopeMonitor;
use crate::operations::metrics::{RestartReason, WatchEventType};
use crate::operator::namespaces::NamespaceSelector;
use crate::peering::sharding::SlotSet;
use crate::settings::WatchingSettings;
use crate::watching::decoding;
use crate::watching::echoes::Echoes;

/// The receiver is gone: nobody listens any more, stop quietly.
struct Closed;

/// How one watch request ended.
enum WatchEnd {
    /// The stream ended or stayed silent: resume from the last version.
    Resume(RestartReason),
    /// `410 Gone`: the version is too old, list again.
    Relist,
    /// A failure: back off, then resume from the last version.
    Failed(WatchError, ErrorClass),
}

/// A list-then-watch loop feeding one [`ObjectTracker`].
///
/// Objects are decoded straight into JSON bodies, which is what handlers
/// and the progress storage work on; nothing decodes them twice. With
/// [`Echoes`], the operator's own patches coming back are not decoded at all.
pub(super) struct ScopeWatch {
    client: kube::Client,
    /// List and watch requests for the scope's URL.
    request: Request,
    scope: String,
    settings: WatchingSettings,
    filter: Option<NamespaceSelector>,
    /// `apiVersion` and `kind`, which list items lack.
    api_version: String,
    kind: String,
    tracker: ObjectTracker,
    /// The operator's own patches to recognise, if the consumer keeps them.
    echoes: Option<Echoes>,
    /// The shard slots served, if not all: other objects are skipped
    /// undecoded, as if they did not exist.
    slots: Option<SlotSet>,
    /// Where the loop reports what it receives, for probes and metrics.
    monitor: Option<ScopeMonitor>,
    out: Vec<ObjectEvent>,
}

impl ScopeWatch {
    /// A loop over `api`; `filter` drops objects of unserved namespaces.
    pub(super) fn new(
        api: Api<DynamicObject>,
        resource: &ApiResource,
        scope: String,
        settings: WatchingSettings,
        filter: Option<NamespaceSelector>,
    ) -> Self {
        Self {
            request: Request::new(api.resource_url()),
            client: api.into_client(),
            scope,
            settings,
            filter,
            api_version: resource.api_version.clone(),
            kind: resource.kind.clone(),
            tracker: ObjectTracker::new(resource.clone()),
            echoes: None,
            slots: None,
            monitor: None,
            out: Vec::new(),
        }
    }

    /// Reports what the loop receives to `monitor`, if any.
    pub(super) fn with_monitor(mut self, monitor: Option<ScopeMonitor>) -> Self {
        self.monitor = monitor;
        self
    }

    /// Events of the operator's own patches that `echoes` expects are
    /// skipped: they only advance the object's version.
    pub(super) fn with_echoes(mut self, echoes: Option<Echoes>) -> Self {
        self.echoes = echoes;
        self
    }

    /// Serves only the objects of `slots`, if given: the others are not
    /// decoded, tracked or sent.
    pub(super) fn with_slots(mut self, slots: Option<SlotSet>) -> Self {
        self.slots = slots;
        self
    }

    /// Run until `cancel` (stop quietly), `gone` (report every object as
    /// vanished, then stop) or the receiver is dropped.
    pub(super) async fn run(
        mut self,
        tx: mpsc::Sender<ObjectEvent>,
        cancel: CancellationToken,
        gone: Option<CancellationToken>,
    ) {
        let gone_token = gone.unwrap_or_default();
        let drain = tokio::select! {
            _ = cancel.cancelled() => false,
            _ = gone_token.cancelled() => true,
            Closed = self.watch_forever(&tx) => false,
        };
        if drain {
            tracing::debug!(scope = %self.scope, objects = self.tracker.len(), "scope gone; objects vanish");
            self.tracker.drain(&mut self.out);
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = flush(&mut self.out, &tx) => {}
            }
        }
    }

    async fn watch_forever(&mut self, tx: &mpsc::Sender<ObjectEvent>) -> Closed {
        let mut backoff = Backoff::endless(&self.settings.error_backoffs);
        let mut version: Option<String> = None;
        loop {
            let rv = match version.take() {
                Some(rv) => rv,
                None => match self.list(tx).await {
                    Ok(Ok(rv)) => {
                        backoff.reset();
                        rv
                    }
                    Ok(Err(Closed)) => return Closed,
                    Err(error) => {
                        let class = match &error {
                            WatchError::List(e) => classify(e),
                            _ => ErrorClass::Permanent,
                        };
                        self.pause(&error, class, &mut backoff).await;
                        continue;
                    }
                },
            };
            let mut rv = rv;
            match self.watch_once(tx, &mut rv, &mut backoff).await {
                Err(Closed) => return Closed,
                Ok(WatchEnd::Resume(reason)) => {
                    if let Some(monitor) = &self.monitor {
                        monitor.restart(reason);
                    }
                    tokio::time::sleep(self.settings.reconnect_backoff).await;
                    version = Some(rv);
                }
                Ok(WatchEnd::Relist) => {
                    if let Some(monitor) = &self.monitor {
                        monitor.restart(RestartReason::Expired);
                    }
                    tracing::debug!(scope = %self.scope, "resource version expired; re-listing");
                }
                Ok(WatchEnd::Failed(error, class)) => {
                    self.pause(&error, class, &mut backoff).await;
                    version = Some(rv);
                }
            }
        }
    }

    async fn pause(&self, error: &WatchError, class: ErrorClass, backoff: &mut Backoff) {
        let hint = match class {
            ErrorClass::Transient { retry_after } => retry_after,
            _ => None,
        };
        let delay = backoff.next_delay(hint).unwrap_or(Duration::from_secs(1));
        if let Some(monitor) = &self.monitor {
            monitor.restart(restart_reason(error));
            monitor.failing(error_chain(error));
        }
        if matches!(class, ErrorClass::Transient { .. }) {
            tracing::info!(scope = %self.scope, ?delay, error = %error_chain(error), "watch failed; retrying");
        } else {
            tracing::warn!(scope = %self.scope, ?delay, error = %error_chain(error), "watch failed; retrying");
        }
        tokio::time::sleep(delay).await;
    }

    /// Give the object its `apiVersion` and `kind` if the answer omitted
    /// them (list items never have them), as Kopf does.
    fn complete(&self, obj: &mut Value) {
        let Some(map) = obj.as_object_mut() else {
            return;
        };
        let blank = |v: Option<&Value>| v.and_then(Value::as_str).is_none_or(str::is_empty);
        if blank(map.get("kind")) || blank(map.get("apiVersion")) {
            map.insert("apiVersion".into(), Value::from(self.api_version.as_str()));
            map.insert("kind".into(), Value::from(self.kind.as_str()));
        }
    }

    fn accepts(&self, obj: &Value) -> bool {
        match (&self.filter, meta_str(obj, "namespace")) {
            (Some(selector), Some(ns)) => selector.matches(ns),
            _ => true,
        }
    }

    /// A full paged listing; the version to watch from.
    ///
    /// Pages are read at the pace of processing (the channel is short), so
    /// the version of the first page may be compacted before the last one is
    /// read: its continue token then gets `410 Expired`. As client-go's pager
    /// does, the listing then starts over as one request without a limit,
    /// which has no token to expire; paging again from the start could
    /// expire again, forever, on a large collection whose processing writes.
    async fn list(
        &mut self,
        tx: &mpsc::Sender<ObjectEvent>,
    ) -> Result<Result<String, Closed>, WatchError> {
        self.tracker.feed(WatchInput::ListStarted, &mut self.out);
        let mut params = ListParams::default().limit(self.settings.list_page_size.max(1));
        let version = loop {
            let text = match self.list_page(&params).await {
                Ok(text) => text,
                Err(error)
                    if params.continue_token.is_some()
                        && matches!(classify(&error), ErrorClass::Expired) =>
                {
                    tracing::info!(
                        scope = %self.scope,
                        objects = self.tracker.len(),
                        "the listing's continue token expired; listing everything in one request"
                    );
                    // A fresh listing: what the pages before listed and the
                    // whole list lacks has vanished.
                    self.tracker.feed(WatchInput::ListStarted, &mut self.out);
                    params = ListParams::default();
                    continue;
                }
                Err(error) => return Err(WatchError::List(error)),
            };
            let page: Page<'_> = serde_json::from_str(&text)
                .map_err(|e| WatchError::List(kube::Error::SerdeError(e)))?;
            for item in page.items {
                if self.skips_listed(item.get()) {
                    continue;
                }
                let input = match decoding::body(item.get(), self.settings.max_depth) {
                    Ok(obj) => WatchInput::Listed(obj),
                    Err(reason) => match self.undecodable(item.get(), false, &reason) {
                        Some(input) => input,
                        None => continue,
                    },
                };
                self.feed(input);
                // Each object goes on as it is decoded, at the pace of its
                // processing: a whole list's decoded bodies held here took
                // about 400 MiB at 300,000 objects, and stayed resident.
                if flush(&mut self.out, tx).await.is_err() {
                    return Ok(Err(Closed));
                }
            }
            if let Some(monitor) = &self.monitor {
                monitor.page();
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params.continue_token = Some(token),
                None => break page.metadata.resource_version.unwrap_or_default(),
            }
        };
        self.tracker.feed(WatchInput::ListDone, &mut self.out);
        if let Some(monitor) = &self.monitor {
            monitor.listed(self.tracker.len());
        }
        if flush(&mut self.out, tx).await.is_err() {
            return Ok(Err(Closed));
        }
        tracing::debug!(scope = %self.scope, objects = self.tracker.len(), %version, "listed");
        Ok(Ok(version))
    }

    /// Whether a listed object is skipped undecoded: another replica's, or,
    /// in a re-list, one the consumer has at this version already (the
    /// version last seen, or its own patch coming back, see
    /// [`ObjectTracker::relisted`]). A re-list after `410 Gone` at 300,000
    /// objects is then a scan of their texts, not 300,000 bodies decoded and
    /// handled again while their timers tick.
    fn skips_listed(&mut self, text: &str) -> bool {
        let relisting = self.tracker.has_listed();
        if self.slots.is_none() && !relisting {
            return false;
        }
        let Some((uid, version)) = events::identity_of(text) else {
            return false;
        };
        if let Some(slots) = self.slots
            && !slots.serve(&uid)
        {
            return true;
        }
        let (Some(version), true) = (version, relisting) else {
            return false;
        };
        let echoes = self.echoes.as_ref();
        self.tracker.relisted(&uid, &version, || {
            echoes.is_some_and(|echoes| echoes.take(&uid, &version))
        })
    }

    /// One page of a listing, as text: its items are decoded one by one,
    /// so that one that does not decode spoils nothing but itself (and the
    /// client never logs a whole page that failed to decode).
    ///
    /// The body is read into one buffer as it comes, chunk by chunk, rather
    /// than collected whole and then copied twice (`request_text`): a list
    /// without a limit may be hundreds of megabytes.
    async fn list_page(&self, params: &ListParams) -> Result<String, kube::Error> {
        let mut request = self
            .request
            .list(params)
            .map_err(kube::Error::BuildRequest)?;
        request.extensions_mut().insert("list");
        let mut body = self.client.request_stream(request).await?;
        let mut bytes = Vec::new();
        body.read_to_end(&mut bytes)
            .await
            .map_err(kube::Error::ReadEvents)?;
        String::from_utf8(bytes).map_err(kube::Error::FromUtf8)
    }

    /// Completes an object and feeds it to the tracker if its namespace is
    /// served.
    fn feed(&mut self, mut input: WatchInput) {
        let accepted = match &mut input {
            WatchInput::Listed(obj)
            | WatchInput::Applied(obj)
            | WatchInput::Deleted(obj)
            | WatchInput::DeletedUndecodable(obj)
            | WatchInput::Undecodable { identity: obj, .. } => {
                self.complete(obj);
                self.accepts(obj)
            }
            WatchInput::ListStarted | WatchInput::ListDone => true,
        };
        if accepted {
            self.tracker.feed(input, &mut self.out);
            if let Some(monitor) = &self.monitor {
                monitor.objects(self.tracker.len());
            }
        }
    }

    /// What the tracker learns of an object that does not decode: its
    /// identity, or nothing (with a warning) if even that is unreadable.
    fn undecodable(
        &self,
        text: &str,
        deleted: bool,
        reason: &decoding::Undecodable,
    ) -> Option<WatchInput> {
        match decoding::identity(text) {
            Some(identity) if deleted => Some(WatchInput::DeletedUndecodable(identity)),
            Some(identity) => Some(WatchInput::Undecodable {
                identity,
                reason: reason.as_str().into(),
            }),
            None => {
                tracing::warn!(scope = %self.scope, %reason, "skipping an object without a readable uid and name");
                None
            }
        }
    }

    /// One watch request, from `rv` on; `rv` follows the events.
    async fn watch_once(
        &mut self,
        tx: &mpsc::Sender<ObjectEvent>,
        rv: &mut String,
        backoff: &mut Backoff,
    ) -> Result<WatchEnd, Closed> {
        let stream = match self.connect(rv).await {
            Ok(stream) => stream,
            Err(end) => return Ok(end),
        };
        let mut stream = std::pin::pin!(stream.lines());
        let deadline = self
            .settings
            .client_timeout
            .map(|limit| tokio::time::Instant::now() + limit);
        loop {
            let next = tokio::time::timeout(self.settings.inactivity_timeout, stream.next());
            let item = match deadline {
                Some(deadline) => tokio::select! {
                    item = next => item,
                    () = tokio::time::sleep_until(deadline) => return Ok(WatchEnd::Resume(RestartReason::Timeout)),
                },
                None => next.await,
            };
            let line = match item {
                Err(_) => {
                    tracing::debug!(scope = %self.scope, "watch stream inactive; reconnecting");
                    return Ok(WatchEnd::Resume(RestartReason::Timeout));
                }
                Ok(None) => return Ok(WatchEnd::Resume(RestartReason::Closed)),
                Ok(Some(Err(error))) if ended_early(&error) => {
                    tracing::debug!(scope = %self.scope, %error, "watch stream cut off; resuming");
                    return Ok(WatchEnd::Resume(RestartReason::Closed));
                }
                Ok(Some(Err(error))) => {
                    let error = kube::Error::ReadEvents(error);
                    let class = classify(&error);
                    return Ok(WatchEnd::Failed(WatchError::Stream(error), class));
                }
                Ok(Some(Ok(line))) => line,
            };
            let event = match self.decode(&line) {
                Ok(event) => event,
                Err(end) => return Ok(end),
            };
            backoff.reset();
            if let Some(monitor) = &self.monitor {
                monitor.event(event_type(&event, &line));
            }
            match self.input_of(event, rv) {
                Ok(Some(input)) => self.feed(input),
                Ok(None) => continue,
                Err(end) => return Ok(end),
            }
            flush(&mut self.out, tx).await?;
        }
    }

    /// Opens a watch request from `rv`; how the request ends if it cannot.
    async fn connect(&self, rv: &str) -> Result<impl futures::AsyncBufRead + use<>, WatchEnd> {
        let mut params = WatchParams::default();
        if let Some(timeout) = self.settings.server_timeout {
            params = params.timeout(u32::try_from(timeout.as_secs()).unwrap_or(u32::MAX).max(1));
        }
        let started = async {
            let mut request = self
                .request
                .watch(&params, rv)
                .map_err(kube::Error::BuildRequest)?;
            request.extensions_mut().insert("watch");
            self.client.request_stream(request).await
        };
        let connected = match self.settings.connect_timeout {
            Some(limit) => match tokio::time::timeout(limit, started).await {
                Ok(result) => result,
                Err(_) => {
                    return Err(WatchEnd::Failed(
                        WatchError::ConnectTimeout,
                        ErrorClass::Transient { retry_after: None },
                    ));
                }
            },
            None => started.await,
        };
        connected.map_err(|error| match classify(&error) {
            ErrorClass::Expired => WatchEnd::Relist,
            class => WatchEnd::Failed(WatchError::Connect(error), class),
        })
    }

    /// Decodes one line of the watch, skipping undecoded the objects of
    /// other replicas and the operator's own patches coming back; how the
    /// request ends if the line says so.
    fn decode(&mut self, line: &str) -> Result<Event, WatchEnd> {
        let (echoes, slots) = (self.echoes.as_ref(), self.slots);
        let tracker = &mut self.tracker;
        let mut skip = |change: Change, uid: &str, version: &str| {
            // Another replica's object: never tracked here.
            slots.is_some_and(|slots| !slots.serve(uid))
                // The operator's own patch, expected back: the object is known.
                || (change == Change::Modified
                    && echoes.is_some_and(|e| e.take(uid, version))
                    && tracker.advance(uid, version))
        };
        let offered = match (slots, echoes) {
            (Some(_), _) => Some(Offered::All),
            // No patch in flight: no event to look into before decoding it.
            (None, Some(echoes)) if !echoes.is_empty() => Some(Offered::Modified),
            (None, _) => None,
        };
        let skip = offered.map(|offered| (offered, &mut skip));
        match events::decode(line, self.settings.max_depth, skip) {
            Ok(Some(event)) => Ok(event),
            // A truncated last line: resume from the last whole event.
            Ok(None) => Err(WatchEnd::Resume(RestartReason::Closed)),
            Err(error) => Err(match classify(&error) {
                ErrorClass::Expired => WatchEnd::Relist,
                class => WatchEnd::Failed(WatchError::Stream(error), class),
            }),
        }
    }

    /// What the tracker is fed of `event`, if anything; `rv` follows it.
    /// How the request ends if the event is an error.
    fn input_of(&self, event: Event, rv: &mut String) -> Result<Option<WatchInput>, WatchEnd> {
        let input = match event {
            Event::Applied(obj) => {
                remember_version(rv, &obj);
                WatchInput::Applied(obj)
            }
            Event::Skipped { version, .. } | Event::Bookmark(version) => {
                *rv = version;
                return Ok(None);
            }
            Event::Deleted(obj) => {
                remember_version(rv, &obj);
                WatchInput::Deleted(obj)
            }
            Event::Undecodable {
                deleted,
                identity: Some(identity),
                reason,
            } => {
                remember_version(rv, &identity);
                if deleted {
                    WatchInput::DeletedUndecodable(identity)
                } else {
                    WatchInput::Undecodable {
                        identity,
                        reason: reason.as_str().into(),
                    }
                }
            }
            Event::Undecodable {
                identity: None,
                reason,
                ..
            } => {
                tracing::warn!(scope = %self.scope, %reason, "skipping an object without a readable uid and name");
                return Ok(None);
            }
            Event::Error(status) => {
                return Err(match classify_status(&status) {
                    ErrorClass::Expired => WatchEnd::Relist,
                    class => WatchEnd::Failed(WatchError::ErrorEvent(status), class),
                });
            }
        };
        Ok(Some(input))
    }
}

/// The type of a watch event, for the metrics.
fn event_type(event: &Event, line: &str) -> WatchEventType {
    let applied = || {
        if events::is_added(line) {
            WatchEventType::Added
        } else {
            WatchEventType::Modified
        }
    };
    match event {
        Event::Applied(_) => applied(),
        Event::Skipped { change, .. } => match change {
            Change::Added => WatchEventType::Added,
            Change::Modified => WatchEventType::Modified,
            Change::Deleted => WatchEventType::Deleted,
        },
        Event::Undecodable { deleted: false, .. } => applied(),
        Event::Deleted(_) | Event::Undecodable { deleted: true, .. } => WatchEventType::Deleted,
        Event::Bookmark(_) => WatchEventType::Bookmark,
        Event::Error(_) => WatchEventType::Error,
    }
}

/// Why a failed request restarts the loop, for the metrics.
fn restart_reason(error: &WatchError) -> RestartReason {
    let code = match error {
        WatchError::List(kube::Error::Api(status))
        | WatchError::Connect(kube::Error::Api(status))
        | WatchError::Stream(kube::Error::Api(status)) => status.code,
        WatchError::ErrorEvent(status) => status.code,
        _ => 0,
    };
    match code {
        429 => RestartReason::Throttled,
        410 => RestartReason::Expired,
        _ => RestartReason::Error,
    }
}

/// Whether a broken watch stream only ended before its time (a connection
/// cut mid-chunk, as proxies and API servers do after minutes of watching):
/// it is resumed at once rather than retried as a failure.
fn ended_early(error: &std::io::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = source {
        if error
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::UnexpectedEof)
        {
            return true;
        }
        if error.to_string().contains("unexpected EOF") {
            return true;
        }
        source = error.source();
    }
    false
}

/// A page of a listing, its items still as text.
#[derive(Deserialize)]
struct Page<'a> {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(borrow, default)]
    items: Vec<&'a RawValue>,
}

fn remember_version(rv: &mut String, obj: &Value) {
    if let Some(version) = meta_str(obj, "resourceVersion") {
        version.clone_into(rv);
    }
}

async fn flush(out: &mut Vec<ObjectEvent>, tx: &mpsc::Sender<ObjectEvent>) -> Result<(), Closed> {
    for event in out.drain(..) {
        tx.send(event).await.map_err(|_| Closed)?;
    }
    Ok(())
}

/// The error with its sources, for one log line.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
