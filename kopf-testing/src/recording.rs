//! Request recording: what clients asked and what they got.
//!
//! Both the log and the counts are bounded, whatever clients send: the log
//! keeps at most [`RECORD_LIMIT`] requests and [`RECORD_BYTES`] bytes of paths
//! and queries (each cut at [`FIELD_LIMIT`] bytes); the counts keep at most
//! [`AGENT_LIMIT`] distinct (User-Agent, verb) pairs, agents cut at
//! [`FIELD_LIMIT`] bytes, later agents counted together as [`OTHER_AGENTS`].

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, PoisonError};

/// How many requests are kept; older ones are dropped first.
pub(crate) const RECORD_LIMIT: usize = 100_000;

/// How many bytes of paths and queries the log keeps; older requests are
/// dropped first.
pub(crate) const RECORD_BYTES: usize = 32 * 1024 * 1024;

/// How long a recorded path, query or counted User-Agent may be; longer ones
/// are cut (at a character boundary) and end with `…`.
pub(crate) const FIELD_LIMIT: usize = 1024;

/// How many distinct (User-Agent, verb) pairs are counted.
pub(crate) const AGENT_LIMIT: usize = 1000;

/// The agent under which requests are counted once [`AGENT_LIMIT`] is reached.
pub(crate) const OTHER_AGENTS: &str = "(other agents)";

/// `s` cut to at most [`FIELD_LIMIT`] bytes (plus the `…` marking the cut).
/// A fresh string, so that no capacity of a long original is kept.
fn truncate(s: &str) -> String {
    if s.len() <= FIELD_LIMIT {
        return s.to_string();
    }
    let mut end = FIELD_LIMIT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = String::with_capacity(end + '…'.len_utf8());
    cut.push_str(&s[..end]);
    cut.push('…');
    cut
}

/// One request served by the emulator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// HTTP method (`GET`, `PATCH`, ...).
    ///
    /// `path` and `query` are cut at [`FIELD_LIMIT`] bytes.
    pub method: String,
    /// Request path without the query.
    pub path: String,
    /// Raw query string (without `?`), possibly empty.
    pub query: String,
    /// Kubernetes verb: `get`, `list`, `watch`, `create`, `update`, `patch`,
    /// `delete`, `deletecollection` (discovery counts as `get`); `admission`
    /// for a call the emulator made to an admission webhook, recorded
    /// before the request it served, with the webhook's URL as `path`, its
    /// configuration, name, the operation and resource as `query`, and its
    /// HTTP status (0 when no answer came).
    pub verb: String,
    /// HTTP status answered (200 for watches, even when they end with an ERROR event).
    pub status: u16,
}

/// A bounded log of requests, and bounded counts per (User-Agent, verb).
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    requests: Mutex<Log>,
    counts: Mutex<BTreeMap<(String, String), u64>>,
}

/// The recorded requests and the bytes of their paths and queries.
#[derive(Debug, Default)]
struct Log {
    entries: VecDeque<RecordedRequest>,
    bytes: usize,
}

fn weight(r: &RecordedRequest) -> usize {
    r.path.len() + r.query.len()
}

impl Recorder {
    /// Records one request.
    pub(crate) fn record(&self, mut request: RecordedRequest) {
        request.path = truncate(&request.path);
        request.query = truncate(&request.query);
        let mut log = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        log.bytes += weight(&request);
        log.entries.push_back(request);
        while log.entries.len() > RECORD_LIMIT || log.bytes > RECORD_BYTES {
            let Some(old) = log.entries.pop_front() else {
                break;
            };
            log.bytes -= weight(&old);
        }
    }

    /// A copy of the recorded requests, oldest first.
    pub(crate) fn snapshot(&self) -> Vec<RecordedRequest> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entries
            .iter()
            .cloned()
            .collect()
    }

    /// Counts one request by its `User-Agent` (empty if none) and verb.
    pub(crate) fn count(&self, agent: &str, verb: &str) {
        let agent = truncate(agent);
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let mut key = (agent, verb.to_string());
        if !counts.contains_key(&key) && counts.len() >= AGENT_LIMIT {
            key.0 = OTHER_AGENTS.to_string();
        }
        *counts.entry(key).or_insert(0) += 1;
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
        *self.requests.lock().unwrap_or_else(PoisonError::into_inner) = Log::default();
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

    #[test]
    fn counts_are_bounded_in_keys_and_length() {
        let rec = Recorder::default();
        for i in 0..AGENT_LIMIT + 500 {
            rec.count(&format!("{i}{}", "é".repeat(10_000)), "get");
        }
        let counts = rec.counts();
        assert!(counts.len() <= AGENT_LIMIT + 1, "{}", counts.len());
        assert_eq!(counts[&(OTHER_AGENTS.into(), "get".into())], 500);
        assert!(
            counts
                .keys()
                .all(|(a, _)| a.len() <= FIELD_LIMIT + '…'.len_utf8())
        );
    }

    #[test]
    fn the_log_is_bounded_in_bytes() {
        let rec = Recorder::default();
        let n = RECORD_BYTES / FIELD_LIMIT + 100;
        for _ in 0..n {
            rec.record(RecordedRequest {
                method: "GET".into(),
                path: "/api".into(),
                query: "q".repeat(2 * FIELD_LIMIT),
                verb: "list".into(),
                status: 200,
            });
        }
        let log = rec.snapshot();
        assert!(log.len() < n);
        let bytes: usize = log.iter().map(weight).sum();
        assert!(bytes <= RECORD_BYTES);
        assert!(log[0].query.capacity() <= FIELD_LIMIT + '…'.len_utf8());
    }
}
