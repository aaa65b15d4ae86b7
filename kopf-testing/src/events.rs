//! Watch events: each change is serialized once into a newline-terminated JSON
//! line and shared (as `Arc`) by the history and every watcher.
//!
//! The line is serialized by the first watcher that sends it, not when the
//! change is made under the store's lock: serializing large objects there
//! stalled every other client, and an event no watcher sends is never
//! serialized at all. Likewise a removal keeps the object's last state as
//! it was stored, and its watchers see it with the removal's
//! resourceVersion (copied then, not under the lock).

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use serde_json::{Value, json};

/// The `type` of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    /// Object created (or came into view).
    Added,
    /// Object changed.
    Modified,
    /// Object removed (or left the view).
    Deleted,
}

impl EventType {
    /// The wire name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change to one object.
#[derive(Debug)]
pub(crate) struct WatchEvent {
    /// The resourceVersion of the change.
    pub rv: u64,
    /// What happened.
    pub kind: EventType,
    /// The object after the change (for DELETED: its last state).
    pub object: Arc<Value>,
    /// The object before the change (MODIFIED only), for selector transitions.
    pub old: Option<Arc<Value>>,
    /// About the bytes of the serialized line (escapes not counted).
    pub size: usize,
    /// Whether `object` is shown with `rv` as its resourceVersion (a
    /// removal, stored with its last state's).
    restamp: bool,
    /// The serialized line, once a watcher needed it.
    line: OnceLock<Bytes>,
}

impl WatchEvent {
    /// Builds an event; its line is serialized when first needed.
    pub(crate) fn new(
        rv: u64,
        kind: EventType,
        object: Arc<Value>,
        old: Option<Arc<Value>>,
    ) -> Self {
        let size = crate::limits::value_size(&object, usize::MAX).unwrap_or(usize::MAX);
        Self {
            rv,
            kind,
            object,
            old,
            size: size.saturating_add(32),
            restamp: false,
            line: OnceLock::new(),
        }
    }

    /// The DELETED event of an object whose last state was `last`; it is
    /// shown with `rv`, the removal's resourceVersion.
    pub(crate) fn removed(rv: u64, last: Arc<Value>) -> Self {
        let stamped = crate::objects::resource_version(&last) == Some(rv.to_string().as_str());
        Self {
            restamp: !stamped,
            ..Self::new(rv, EventType::Deleted, last, None)
        }
    }

    /// `view` (of this event's object) as watchers see it: with the
    /// removal's resourceVersion for a removal.
    pub(crate) fn restamped<'a>(&self, view: Cow<'a, Value>) -> Cow<'a, Value> {
        if !self.restamp {
            return view;
        }
        let mut view = view.into_owned();
        crate::objects::meta_mut(&mut view)
            .insert("resourceVersion".into(), self.rv.to_string().into());
        Cow::Owned(view)
    }

    /// The serialized line `{"type":..,"object":..}\n`.
    pub(crate) fn line(&self) -> &Bytes {
        self.line.get_or_init(|| {
            let view = self.restamped(Cow::Borrowed(&*self.object));
            line(self.kind.as_str(), &view)
        })
    }
}

/// Serializes `{"type":TYPE,"object":OBJ}\n`.
pub(crate) fn line(kind: &str, object: &Value) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(b"{\"type\":\"");
    buf.extend_from_slice(kind.as_bytes());
    buf.extend_from_slice(b"\",\"object\":");
    if serde_json::to_writer(&mut buf, object).is_err() {
        buf.extend_from_slice(b"null");
    }
    buf.extend_from_slice(b"}\n");
    Bytes::from(buf)
}

/// A BOOKMARK line for a resource at a resourceVersion.
pub(crate) fn bookmark(api_version: &str, kind: &str, rv: u64, initial_events_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        &json!({"apiVersion": api_version, "kind": kind, "metadata": metadata}),
    )
}

/// An ERROR line carrying a `Status`.
pub(crate) fn error(status: &Value) -> Bytes {
    line("ERROR", status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_newline_terminated_json() {
        let ev = WatchEvent::new(5, EventType::Added, Arc::new(json!({"a": 1})), None);
        let text = std::str::from_utf8(ev.line()).unwrap();
        assert!(text.ends_with('\n'));
        let v: Value = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(v, json!({"type": "ADDED", "object": {"a": 1}}));
    }

    #[test]
    fn removals_show_the_last_state_at_the_removal_version() {
        let last = Arc::new(json!({"metadata": {"name": "a", "resourceVersion": "3"}}));
        let ev = WatchEvent::removed(9, last.clone());
        let v: Value = serde_json::from_slice(ev.line()).unwrap();
        assert_eq!(v["type"], "DELETED");
        assert_eq!(v["object"]["metadata"]["resourceVersion"], "9");
        assert_eq!(
            last["metadata"]["resourceVersion"], "3",
            "the stored state stays"
        );
        let stamped = Arc::new(json!({"metadata": {"name": "a", "resourceVersion": "9"}}));
        assert!(!WatchEvent::removed(9, stamped).restamp);
    }

    #[test]
    fn bookmarks_carry_only_the_resource_version() {
        let b = bookmark("v1", "ConfigMap", 7, true);
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["type"], "BOOKMARK");
        assert_eq!(v["object"]["metadata"]["resourceVersion"], "7");
        assert_eq!(
            v["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
            "true"
        );
        assert_eq!(v["object"]["kind"], "ConfigMap");
    }
}
