//! Request recording: what clients asked and what they got.

use std::collections::VecDeque;
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

/// A bounded log of requests.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    requests: Mutex<VecDeque<RecordedRequest>>,
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
}
