//! Request recording: what clients asked and what they got.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, PoisonError};

/// How many requests are kept; older ones are dropped first.
pub const RECORD_LIMIT: usize = 100_000;

/// One request served by the emulator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// HTTP method (`GET`, `PATCH`, ...).
    pub method: String,
    /// Request path without the query.
    pub path: String,
    /// Raw query string (without `?`), possibly empty.
    pub query: String,
    /// Kubernetes verb: `get`, `list`, `watch`, `create`, `update`, `patch`,
    /// `delete`, `deletecollection` (discovery counts as `get`).
    pub verb: String,
    /// HTTP status answered (200 for watches, even when they end with an ERROR event).
    pub status: u16,
}

/// A bounded log of requests, and unbounded counts per (User-Agent, verb).
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    requests: Mutex<VecDeque<RecordedRequest>>,
    counts: Mutex<BTreeMap<(String, String), u64>>,
}

impl Recorder {
    /// Records one request.
    pub(crate) fn record(&self, request: RecordedRequest) {
        let mut requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        if requests.len() >= RECORD_LIMIT {
            requests.pop_front();
        }
        requests.push_back(request);
    }

    /// A copy of the recorded requests, oldest first.
    pub(crate) fn snapshot(&self) -> Vec<RecordedRequest> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// Counts one request by its `User-Agent` (empty if none) and verb.
    pub(crate) fn count(&self, agent: &str, verb: &str) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        match counts.get_mut(&(agent.to_string(), verb.to_string())) {
            Some(n) => *n += 1,
            None => {
                counts.insert((agent.to_string(), verb.to_string()), 1);
            }
        }
    }

    /// The request counts per (User-Agent, verb) since the last reset.
    pub(crate) fn counts(&self) -> BTreeMap<(String, String), u64> {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Resets the request counts.
    pub(crate) fn clear_counts(&self) {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Forgets all recorded requests.
    pub(crate) fn clear(&self) {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_clears() {
        let rec = Recorder::default();
        rec.record(RecordedRequest {
            method: "GET".into(),
            path: "/api".into(),
            query: String::new(),
            verb: "get".into(),
            status: 200,
        });
        assert_eq!(rec.snapshot().len(), 1);
        rec.clear();
        assert!(rec.snapshot().is_empty());
    }

    #[test]
    fn counts_by_agent_and_verb() {
        let rec = Recorder::default();
        rec.count("kopf/1.45", "list");
        rec.count("kopf/1.45", "list");
        rec.count("", "watch");
        let counts = rec.counts();
        assert_eq!(counts[&("kopf/1.45".into(), "list".into())], 2);
        assert_eq!(counts[&(String::new(), "watch".into())], 1);
        rec.clear_counts();
        assert!(rec.counts().is_empty());
    }
}
