//! Watching resources: one object stream per served resource, keyed by UID.
//!
//! [`ResourceWatcher`] lists and watches one resource in the namespaces the
//! [`NamespaceSelector`](crate::operator::namespaces::NamespaceSelector) serves and
//! sends [`ObjectEvent`]s into a channel:
//!
//! - cluster-scoped resources, and cluster-wide selectors: one cluster-wide
//!   watch (objects in excluded namespaces are filtered out);
//! - exact namespace names: one watch per namespace;
//! - globs: Namespace objects are watched too, and a per-namespace watch
//!   starts when a matching namespace appears and stops when it is deleted
//!   (its objects are then reported as [`DeletedBy::Vanished`]); if listing
//!   Namespaces is forbidden, the plainly named namespaces among the patterns
//!   are served instead, as Kopf falls back.
//!
//! Each watch is a [`tracker::ObjectTracker`] (a pure state machine, where
//! the UID bookkeeping and its guarantees live) driven by a list-then-watch
//! loop:
//!
//! # Guarantees
//!
//! - The stream starts with a full (paged) listing, ending in
//!   [`ObjectEvent::Synced`]; then watch events follow.
//! - A watch that ends or stays silent (no event, no bookmark) for
//!   `inactivity_timeout` is resumed from the last seen `resourceVersion`,
//!   after `reconnect_backoff`.
//! - An object that does not decode (nested too deeply, malformed; see
//!   the runtime's `decoding` module) never stops the watch: it is reported as
//!   [`ObjectEvent::Undecodable`] with its identity, and its deletion as
//!   [`DeletedBy::Vanished`]. List pages are decoded item by item, so one
//!   such object spoils nothing but itself.
//! - `410 Gone` (as an answer or an `ERROR` event) triggers a re-list; objects
//!   absent from it are reported as vanished.
//! - `429`, `5xx` and transport failures are retried with
//!   `error_backoffs` (the last one repeating forever), honouring the
//!   server's `retryAfterSeconds`. Other failures (e.g. `403`) are logged and
//!   retried the same way: watching never gives up while the operator runs.
//! - Nothing is spawned detached: per-namespace watches live in a
//!   `TaskTracker` that [`ResourceWatcher::run`] waits for before returning.
//!
//! # Caveats
//!
//! - Vanished objects carry identity metadata only (kind, namespace, name,
//!   UID, last `resourceVersion`), not their last body.
//! - `settings.watching.connect_timeout` bounds the wait for a watch's first
//!   answer; transport-level connect timeouts are the client's configuration.

use std::sync::Arc;

use kube::core::Status;
use serde_json::Value;

use crate::fields::meta_str;

pub(crate) mod decoding;
pub(crate) mod echoes;
mod events;
#[cfg(test)]
mod proptests;
mod resource;
mod stream;
#[cfg(test)]
mod tests;
pub(crate) mod tracker;

pub(crate) use resource::ResourceWatcher;

/// A failure while listing or watching; logged and retried, never fatal.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WatchError {
    /// Listing the objects failed.
    #[error("listing failed")]
    List(#[source] kube::Error),
    /// Starting a watch request failed.
    #[error("starting a watch failed")]
    Connect(#[source] kube::Error),
    /// The watch did not answer within `connect_timeout`.
    #[error("a watch did not answer within the connect timeout")]
    ConnectTimeout,
    /// The watch stream broke midway.
    #[error("the watch stream broke")]
    Stream(#[source] kube::Error),
    /// The server sent an `ERROR` event.
    #[error("the server sent an error event: {} ({})", .0.message, .0.code)]
    ErrorEvent(Box<Status>),
}

/// How a new or updated object was seen, compared with what the watch knew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// The UID was not known.
    New,
    /// The UID was known with another `resourceVersion`.
    Changed,
    /// The UID was known with this very `resourceVersion` (e.g. in a re-list).
    Unchanged,
}

/// How an object was found deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeletedBy {
    /// A watch `DELETED` event; the body is the object's last state.
    Event,
    /// It was absent from a re-list, its name now has another UID, its
    /// namespace stopped being watched, or its `DELETED` event's object did
    /// not decode; the body holds identity metadata only.
    Vanished,
}

/// What a watch reports about the objects of one resource.
#[derive(Debug, Clone)]
pub(crate) enum ObjectEvent {
    /// An object exists in this state (`ADDED`, `MODIFIED`, or listed).
    Upserted {
        /// The object's body, as the API server sent it.
        object: Arc<Value>,
        /// Whether it is new, changed, or as last seen.
        seen: Seen,
    },
    /// An object is gone.
    Deleted {
        /// The object's body (see [`DeletedBy`] for how complete it is).
        object: Arc<Value>,
        /// How the deletion was noticed.
        how: DeletedBy,
    },
    /// An object exists in a state that does not decode (too deep,
    /// malformed): it is tracked by its identity, so that its deletion is
    /// noticed, but nothing handles it.
    Undecodable {
        /// The object's identity: `apiVersion`, `kind` and the identifying
        /// metadata (`uid`, `name`, `namespace`, `resourceVersion`).
        object: Arc<Value>,
        /// Why it does not decode: a short text, never the body.
        reason: Arc<str>,
    },
    /// A listing completed (one per watch scope: the cluster or a namespace);
    /// every live object of that scope was reported before this.
    Synced {
        /// How many objects the scope holds now.
        count: usize,
    },
}

impl ObjectEvent {
    /// The object's UID; `None` for [`ObjectEvent::Synced`].
    pub(crate) fn uid(&self) -> Option<&str> {
        match self {
            Self::Upserted { object, .. }
            | Self::Deleted { object, .. }
            | Self::Undecodable { object, .. } => meta_str(object, "uid"),
            Self::Synced { .. } => None,
        }
    }

    /// The object, if the event is about one.
    pub(crate) fn object(&self) -> Option<&Arc<Value>> {
        match self {
            Self::Upserted { object, .. }
            | Self::Deleted { object, .. }
            | Self::Undecodable { object, .. } => Some(object),
            Self::Synced { .. } => None,
        }
    }
}
