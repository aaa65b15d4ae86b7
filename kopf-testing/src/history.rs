//! The watch history of one resource: the recent events a watcher may resume
//! after, each with the time it happened and the memory it holds.
//!
//! The store bounds all histories together by event count (per resource),
//! by bytes (over every resource) and by age, dropping the oldest events first;
//! a watcher resuming from before the oldest kept event gets `410 Gone`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::events::WatchEvent;

/// How long watch events are kept by default (the API server compacts etcd
/// every 5 minutes).
pub(crate) const DEFAULT_HISTORY_AGE: Duration = Duration::from_secs(5 * 60);

/// How many bytes of watch events are kept by default, over all resources.
pub(crate) const DEFAULT_HISTORY_BYTES: usize = 128 * 1024 * 1024;

/// About the memory an event holds: its serialized line (once a watcher
/// sent it), and the object itself (which, once deleted or replaced, only
/// the history keeps alive).
pub(crate) fn weight(event: &WatchEvent) -> usize {
    event.size.saturating_mul(2).saturating_add(128)
}

#[derive(Debug)]
struct Entry {
    event: Arc<WatchEvent>,
    at: Instant,
    weight: usize,
}

/// The kept events of one resource, oldest first.
#[derive(Debug, Default)]
pub(crate) struct History {
    entries: VecDeque<Entry>,
    bytes: usize,
}

impl History {
    /// Appends an event that happened now; returns its weight.
    pub(crate) fn push(&mut self, event: Arc<WatchEvent>) -> usize {
        let weight = weight(&event);
        self.bytes += weight;
        self.entries.push_back(Entry {
            event,
            at: Instant::now(),
            weight,
        });
        weight
    }

    /// Takes the oldest event out; returns it and its weight.
    pub(crate) fn pop_front(&mut self) -> Option<(Arc<WatchEvent>, usize)> {
        let entry = self.entries.pop_front()?;
        self.bytes -= entry.weight;
        Some((entry.event, entry.weight))
    }

    /// The resourceVersion and time of the oldest event.
    pub(crate) fn front(&self) -> Option<(u64, Instant)> {
        self.entries.front().map(|e| (e.event.rv, e.at))
    }

    /// How many events are kept.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The weight of every kept event.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The events after a resourceVersion, oldest first.
    pub(crate) fn after(&self, rv: u64) -> Vec<Arc<WatchEvent>> {
        let idx = self.entries.partition_point(|e| e.event.rv <= rv);
        self.entries.range(idx..).map(|e| e.event.clone()).collect()
    }
}
