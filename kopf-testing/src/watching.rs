//! Watch streams: newline-delimited JSON events over a chunked response.
//!
//! A stream starts with either synthetic ADDED events (current state) or the
//! recorded events after the requested resourceVersion, each serialized as
//! the client reads (the stream holds the objects and events, shared with
//! the store, not a serialized copy), then follows the live events.
//! Selectors are applied per watcher: an object that starts or stops
//! matching is sent as ADDED or DELETED. A watcher falling too far behind
//! has its stream closed (see [`crate::fanout`]), so the client resumes
//! from its last version.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use serde_json::Value;
use tokio::time::{Instant, Interval};

use crate::conversion;
use crate::events::{self, EventType, WatchEvent};
use crate::failures::ApiError;
use crate::fanout;
use crate::objects;
use crate::resources::ResourceDef;
use crate::selectors::Selectors;
use crate::shared::Shared;
use crate::store::{Subscription, WatchStart};

/// How often BOOKMARK events are sent when the client allows them.
pub(crate) const BOOKMARK_INTERVAL: Duration = Duration::from_secs(1);

/// Chunks are flushed once they reach this size.
const CHUNK: usize = 64 * 1024;

/// Which events a watcher sees and how they are shown.
#[derive(Debug)]
pub(crate) struct Filter {
    /// Only objects in this namespace.
    pub namespace: Option<String>,
    /// Label and field selectors.
    pub selectors: Selectors,
    /// The apiVersion the client asked for (objects are rewritten if they differ).
    pub api_version: String,
}

impl Filter {
    fn in_namespace(&self, obj: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| objects::namespace(obj) == ns)
    }

    /// The line this watcher gets for an event, if any.
    pub(crate) fn apply(&self, ev: &WatchEvent) -> Option<Bytes> {
        if !self.in_namespace(&ev.object) {
            return None;
        }
        let view = conversion::present(&ev.object, &self.api_version);
        let same_version = matches!(view, Cow::Borrowed(_));
        let kind = if self.selectors.is_empty() {
            ev.kind
        } else {
            let now = self.selectors.matches(&view);
            let before = ev.old.as_ref().map(|o| {
                self.selectors
                    .matches(&conversion::present(o, &self.api_version))
            });
            match (ev.kind, before, now) {
                (EventType::Modified, Some(false), true) => EventType::Added,
                (EventType::Modified, Some(true), false) => EventType::Deleted,
                (_, _, true) => ev.kind,
                _ => return None,
            }
        };
        if kind == ev.kind && same_version {
            Some(ev.line().clone())
        } else {
            Some(events::line(kind.as_str(), &ev.restamped(view)))
        }
    }

    /// The line for a synthetic ADDED of a current object, if it matches.
    pub(crate) fn initial(&self, obj: &Value) -> Option<Bytes> {
        if !self.in_namespace(obj) {
            return None;
        }
        let view = conversion::present(obj, &self.api_version);
        self.selectors
            .matches(&view)
            .then(|| events::line("ADDED", &view))
    }
}

/// A watch request's options.
#[derive(Debug)]
pub(crate) struct WatchOptions {
    /// Send BOOKMARK events.
    pub bookmarks: bool,
    /// End the stream after this long.
    pub timeout: Option<Duration>,
    /// Send the initial-events-end BOOKMARK after the synthetic ADDED events.
    pub send_initial_events: bool,
}

/// What a stream sends before the live events, serialized as it is sent.
enum Backlog {
    /// The current objects as ADDED events, then the initial-events-end
    /// BOOKMARK at this resourceVersion, if asked for.
    Snapshot {
        objects: std::vec::IntoIter<Arc<Value>>,
        end_bookmark: Option<u64>,
    },
    /// The recorded events after the requested resourceVersion.
    History(std::vec::IntoIter<Arc<WatchEvent>>),
}

impl Backlog {
    /// The next line to send, if any is left.
    fn next_line(&mut self, filter: &Filter, kind: &str) -> Option<Bytes> {
        match self {
            Self::Snapshot {
                objects,
                end_bookmark,
            } => objects.find_map(|o| filter.initial(&o)).or_else(|| {
                end_bookmark
                    .take()
                    .map(|rv| events::bookmark(&filter.api_version, kind, rv, true))
            }),
            Self::History(evs) => evs.find_map(|ev| filter.apply(&ev)),
        }
    }
}

struct WatchStream {
    shared: Arc<Shared>,
    backlog: Backlog,
    rx: fanout::Receiver,
    filter: Filter,
    def: Arc<ResourceDef>,
    epoch: tokio::sync::watch::Receiver<u64>,
    /// Whether the stream must send nothing for now (a fault).
    silence: tokio::sync::watch::Receiver<bool>,
    deadline: Option<Instant>,
    ticker: Option<Interval>,
    last_rv: u64,
    done: bool,
}

impl WatchStream {
    /// The next chunk of the backlog, if any is left.
    fn take_pending(&mut self) -> Option<Bytes> {
        let mut buf = BytesMut::new();
        while buf.len() < CHUNK {
            match self.backlog.next_line(&self.filter, &self.def.kind) {
                Some(line) => buf.extend_from_slice(&line),
                None => break,
            }
        }
        (!buf.is_empty()).then(|| buf.freeze())
    }

    /// Moves every event already queued for this watcher into `buf`;
    /// returns false if the watcher lagged or the resource went away.
    fn drain(&mut self, buf: &mut BytesMut, limit: usize) -> bool {
        while buf.len() < limit {
            match self.rx.try_recv() {
                Ok(Some(ev)) => self.push(buf, &ev),
                Ok(None) => return true,
                Err(_) => return false,
            }
        }
        true
    }

    fn push(&mut self, buf: &mut BytesMut, ev: &WatchEvent) {
        if ev.rv <= self.last_rv {
            return;
        }
        self.last_rv = ev.rv;
        if let Some(line) = self.filter.apply(ev) {
            buf.extend_from_slice(&line);
        }
    }

    async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        'silenced: loop {
            // A silenced stream stays open and sends nothing, deadline or
            // not, as a stalled connection does; only the end of every
            // watch ends it.
            while *self.silence.borrow_and_update() {
                tokio::select! {
                    _ = self.epoch.changed() => return None,
                    changed = self.silence.changed() => changed.ok()?,
                }
            }
            if let Some(chunk) = self.take_pending() {
                return Some(chunk);
            }
            loop {
                let deadline = self.deadline;
                let ticker = self.ticker.as_mut();
                tokio::select! {
                    biased;
                    _ = self.epoch.changed() => return None,
                    changed = self.silence.changed() => {
                        changed.ok()?;
                        continue 'silenced;
                    }
                    _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => return None,
                    ev = self.rx.recv() => {
                        let Ok(ev) = ev else {
                            return None;
                        };
                        let mut buf = BytesMut::new();
                        self.push(&mut buf, &ev);
                        if !self.drain(&mut buf, CHUNK) {
                            self.done = true;
                        }
                        if !buf.is_empty() {
                            return Some(buf.freeze());
                        }
                        if self.done {
                            return None;
                        }
                    }
                    _ = async { match ticker { Some(t) => { t.tick().await; } None => std::future::pending().await } } => {
                        // Events up to the current revision are already queued: send them, then the bookmark.
                        let rv = self.shared.store().current_rv();
                        let mut buf = BytesMut::new();
                        if !self.drain(&mut buf, usize::MAX) {
                            self.done = true;
                            return (!buf.is_empty()).then(|| buf.freeze());
                        }
                        self.last_rv = self.last_rv.max(rv);
                        buf.extend_from_slice(&events::bookmark(&self.filter.api_version, &self.def.kind, self.last_rv, false));
                        return Some(buf.freeze());
                    }
                }
            }
        }
    }
}

/// The body of a watch: a stream of chunks.
pub(crate) type WatchBody =
    futures::stream::BoxStream<'static, Result<Bytes, std::convert::Infallible>>;

/// Starts a watch stream for a subscription.
pub(crate) fn stream(
    shared: Arc<Shared>,
    def: Arc<ResourceDef>,
    filter: Filter,
    sub: Subscription,
    opts: WatchOptions,
) -> WatchBody {
    // Recorded events are all at or before the subscription's version,
    // live ones after it.
    let last_rv = sub.rv;
    let backlog = match sub.start {
        WatchStart::Snapshot(objs) => Backlog::Snapshot {
            objects: objs.into_iter(),
            end_bookmark: opts.send_initial_events.then_some(sub.rv),
        },
        WatchStart::History(evs) => Backlog::History(evs.into_iter()),
    };
    let ticker = opts.bookmarks.then(|| {
        let mut t = tokio::time::interval_at(Instant::now() + BOOKMARK_INTERVAL, BOOKMARK_INTERVAL);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    let epoch = shared.watch_epoch();
    let silence = shared.watch_silence();
    let state = WatchStream {
        shared,
        backlog,
        rx: sub.rx,
        filter,
        def,
        epoch,
        silence,
        deadline: opts.timeout.and_then(|t| Instant::now().checked_add(t)),
        ticker,
        last_rv,
        done: false,
    };
    Box::pin(futures::stream::unfold(state, |mut s| async move {
        s.next_chunk().await.map(|c| (Ok(c), s))
    }))
}

/// A stream that reports one error (e.g. 410 Gone) as an ERROR event, then ends.
pub(crate) fn error_stream(err: &ApiError) -> WatchBody {
    let line = events::error(&err.to_status());
    Box::pin(futures::stream::iter([Ok(line)]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selectors::LabelSelector;
    use serde_json::json;

    fn filter(sel: &str) -> Filter {
        Filter {
            namespace: Some("a".into()),
            selectors: Selectors {
                labels: LabelSelector::parse(sel).unwrap(),
                ..Default::default()
            },
            api_version: "v1".into(),
        }
    }

    fn obj(ns: &str, app: &str) -> Arc<Value> {
        Arc::new(json!({"apiVersion": "v1", "metadata": {"namespace": ns, "labels": {"app": app}}}))
    }

    fn kind_of(line: &Bytes) -> String {
        let v: Value = serde_json::from_slice(line).unwrap();
        v["type"].as_str().unwrap().to_string()
    }

    #[test]
    fn other_namespaces_are_filtered() {
        let ev = WatchEvent::new(1, EventType::Added, obj("b", "x"), None);
        assert!(filter("").apply(&ev).is_none());
    }

    #[test]
    fn selector_transitions_become_added_and_deleted() {
        let f = filter("app=x");
        let leave = WatchEvent::new(2, EventType::Modified, obj("a", "y"), Some(obj("a", "x")));
        assert_eq!(kind_of(&f.apply(&leave).unwrap()), "DELETED");
        let enter = WatchEvent::new(3, EventType::Modified, obj("a", "x"), Some(obj("a", "y")));
        assert_eq!(kind_of(&f.apply(&enter).unwrap()), "ADDED");
        let outside = WatchEvent::new(4, EventType::Modified, obj("a", "y"), Some(obj("a", "z")));
        assert!(f.apply(&outside).is_none());
        let inside = WatchEvent::new(5, EventType::Modified, obj("a", "x"), Some(obj("a", "x")));
        assert_eq!(&f.apply(&inside).unwrap(), inside.line());
    }

    #[test]
    fn other_versions_are_rewritten() {
        let mut f = filter("");
        f.api_version = "example.com/v2".into();
        let ev = WatchEvent::new(1, EventType::Added, obj("a", "x"), None);
        let v: Value = serde_json::from_slice(&f.apply(&ev).unwrap()).unwrap();
        assert_eq!(v["object"]["apiVersion"], "example.com/v2");
    }
}
