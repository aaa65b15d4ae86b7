//! Fault injection: failing requests, latency, held requests, dropped
//! watches and compaction.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

use crate::failures::ApiError;
use crate::shared::Shared;

/// The most failure rules set at once; a rule is used up once it has
/// failed its `n` requests, or removed by [`Faults::clear`].
pub const MAX_FAULT_RULES: usize = 1_000;

/// The longest `path_contains` or `body_contains` fragment of a rule.
pub const MAX_FRAGMENT_BYTES: usize = 16 * 1024;

/// Which requests a [`Faults::fail_next`] rule fails, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailRule {
    /// Only requests of this verb (`get`, `list`, `watch`, `create`, `update`,
    /// `patch`, `delete`, `deletecollection`); `None` matches any.
    pub verb: Option<String>,
    /// Only requests whose path contains this string; `None` matches any.
    pub path_contains: Option<String>,
    /// Only requests whose body contains this string; `None` matches any.
    /// E.g. `"holderIdentity":"a"` matches the writes of a Lease that name
    /// the holder `a` (the JSON that kube's clients send has no spaces).
    /// While such a rule is set, the emulator reads each request's body
    /// before it decides whether to fail it.
    pub body_contains: Option<String>,
    /// The HTTP status to answer (a `Status` object with the matching reason).
    pub status: u16,
    /// Seconds for `Retry-After` and `details.retryAfterSeconds` (429 gets 1 if unset).
    pub retry_after: Option<u32>,
}

impl Default for FailRule {
    /// Any request, 500 InternalError.
    fn default() -> Self {
        Self {
            verb: None,
            path_contains: None,
            body_contains: None,
            status: 500,
            retry_after: None,
        }
    }
}

impl FailRule {
    /// A rule failing any request with `status`.
    pub fn status(status: u16) -> Self {
        Self {
            status,
            ..Self::default()
        }
    }

    /// Restricts the rule to one verb.
    pub fn verb(mut self, verb: &str) -> Self {
        self.verb = Some(verb.into());
        self
    }

    /// Restricts the rule to paths containing `fragment`.
    pub fn path_contains(mut self, fragment: &str) -> Self {
        self.path_contains = Some(fragment.into());
        self
    }

    /// Restricts the rule to requests whose body contains `fragment`:
    /// e.g. fail the renewals of a Lease by its leader `a` alone, as if
    /// only that replica were cut off from the API:
    ///
    /// ```
    /// use kopf_testing::FailRule;
    ///
    /// let partition = FailRule::status(500)
    ///     .verb("update")
    ///     .path_contains("/leases/")
    ///     .body_contains(r#""holderIdentity":"a""#);
    /// assert_eq!(partition.body_contains.as_deref(), Some(r#""holderIdentity":"a""#));
    /// ```
    pub fn body_contains(mut self, fragment: &str) -> Self {
        self.body_contains = Some(fragment.into());
        self
    }

    /// Why the rule cannot be answered, if its status is not an HTTP error
    /// status (400-599) or a fragment is longer than [`MAX_FRAGMENT_BYTES`].
    pub fn check(&self) -> Result<(), String> {
        if !(400..=599).contains(&self.status) {
            return Err(format!(
                "a fault rule's status must be an HTTP error status (400-599), not {}; \
                 use 429, 500 or 503 for retryable failures",
                self.status
            ));
        }
        let fragments = [
            ("path_contains", &self.path_contains),
            ("body_contains", &self.body_contains),
        ];
        for (field, fragment) in fragments {
            if let Some(fragment) = fragment
                && fragment.len() > MAX_FRAGMENT_BYTES
            {
                return Err(format!(
                    "a fault rule's {field} may be at most {MAX_FRAGMENT_BYTES} bytes, not {}; \
                     match a shorter, distinctive part of the request",
                    fragment.len()
                ));
            }
        }
        Ok(())
    }

    /// Whether the rule fails this request; `body` is `None` when it was
    /// not read (no rule looks into bodies), and matches no body rule.
    fn matches(&self, verb: &str, path: &str, body: Option<&[u8]>) -> bool {
        self.verb.as_deref().is_none_or(|v| v == verb)
            && self
                .path_contains
                .as_deref()
                .is_none_or(|p| path.contains(p))
            && self.body_contains.as_deref().is_none_or(|fragment| {
                body.is_some_and(|body| memchr::memmem::find(body, fragment.as_bytes()).is_some())
            })
    }
}

/// Fault rules and latency, shared with the request handlers.
#[derive(Debug, Default)]
pub(crate) struct FaultState {
    rules: Mutex<Vec<(usize, FailRule)>>,
    latency_nanos: AtomicU64,
    holds: Mutex<Vec<Arc<Held>>>,
}

/// Which requests a [`Faults::hold`] holds, and whether they are released.
#[derive(Debug)]
struct Held {
    verb: Option<String>,
    path_contains: Option<String>,
    released: watch::Sender<bool>,
    waiting: AtomicUsize,
}

impl FaultState {
    /// Whether a rule looks into request bodies: then each request's body
    /// is read before [`FaultState::take`], and handed to it.
    pub(crate) fn inspects_bodies(&self) -> bool {
        self.rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|(_, rule)| rule.body_contains.is_some())
    }

    /// The failure to answer instead of serving this request, if a rule
    /// matches; `body` is the request's, if it was read.
    pub(crate) fn take(&self, verb: &str, path: &str, body: Option<&[u8]>) -> Option<ApiError> {
        let mut rules = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
        if rules.is_empty() {
            return None;
        }
        let idx = rules
            .iter()
            .position(|(n, r)| *n > 0 && r.matches(verb, path, body))?;
        let rule = rules[idx].1.clone();
        rules[idx].0 -= 1;
        if rules[idx].0 == 0 {
            rules.remove(idx);
        }
        let retry_after = rule.retry_after.or((rule.status == 429).then_some(1));
        Some(ApiError::injected(rule.status, retry_after))
    }

    /// The latency to add to each request.
    pub(crate) fn latency(&self) -> Duration {
        Duration::from_nanos(self.latency_nanos.load(Ordering::Relaxed))
    }

    /// Waits while a [`Faults::hold`] holds requests like this one.
    pub(crate) async fn held(&self, verb: &str, path: &str) {
        let holds: Vec<Arc<Held>> = {
            let holds = self.holds.lock().unwrap_or_else(PoisonError::into_inner);
            if holds.is_empty() {
                return;
            }
            holds
                .iter()
                .filter(|held| {
                    held.verb.as_deref().is_none_or(|v| v == verb)
                        && held
                            .path_contains
                            .as_deref()
                            .is_none_or(|p| path.contains(p))
                })
                .cloned()
                .collect()
        };
        for held in holds {
            let mut released = held.released.subscribe();
            held.waiting.fetch_add(1, Ordering::SeqCst);
            // The sender lives in `held`: the wait ends only on release.
            let _ = released.wait_for(|released| *released).await;
            held.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Requests held back by [`Faults::hold`]: they wait, unanswered, until
/// [`release`](HeldRequests::release) (or until this is dropped).
#[derive(Debug)]
#[must_use = "the requests are released when this is dropped"]
pub struct HeldRequests {
    shared: Arc<Shared>,
    held: Arc<Held>,
}

impl HeldRequests {
    /// How many requests are held now.
    pub fn waiting(&self) -> usize {
        self.held.waiting.load(Ordering::SeqCst)
    }

    /// Lets the held requests go on, and holds no more.
    pub fn release(self) {}
}

impl Drop for HeldRequests {
    fn drop(&mut self) {
        self.shared
            .faults
            .holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|held| !Arc::ptr_eq(held, &self.held));
        self.held.released.send_replace(true);
    }
}

/// The fault-injection handle of a running [`Emulator`](crate::Emulator).
#[derive(Debug, Clone)]
pub struct Faults {
    pub(crate) shared: Arc<Shared>,
}

impl Faults {
    /// Ends every open watch stream now (cleanly, as a server-side timeout would);
    /// clients resume from their last resourceVersion.
    pub fn drop_watches(&self) {
        self.shared.drop_watches();
    }

    /// Silences every watch stream, open or opened later: the connection
    /// stays open and sends nothing, neither events nor bookmarks, whatever
    /// its `timeoutSeconds`, as a stalled connection does. Events that
    /// happen meanwhile are sent once [`Faults::resume_watches`] (or
    /// [`Faults::clear`]) lets the streams carry on (a stream that fell too
    /// far behind is ended, and its client resumes).
    pub fn silence_watches(&self) {
        self.shared.silence_watches(true);
    }

    /// Lets silenced watch streams carry on (see [`Faults::silence_watches`]).
    pub fn resume_watches(&self) {
        self.shared.silence_watches(false);
    }

    /// Forgets all watch history: a watch, list or continue token from an older
    /// resourceVersion gets `410 Gone` (`Expired`), forcing clients to re-list.
    pub fn compact(&self) {
        self.shared.store().compact();
    }

    /// Answers the next `n` requests matching `rule` with `rule.status` (a `Status`
    /// object; 429 carries a `Retry-After` header and `details.retryAfterSeconds`).
    /// Rules are checked in the order they were added.
    ///
    /// # Panics
    /// If `rule.status` is not an HTTP error status (400-599); see
    /// [`Faults::try_fail_next`] for a version that returns the error.
    pub fn fail_next(&self, n: usize, rule: FailRule) {
        if let Err(why) = self.try_fail_next(n, rule) {
            panic!("Faults::fail_next: {why}");
        }
    }

    /// As [`Faults::fail_next`], refusing with a message saying why a rule
    /// whose status is not an HTTP error status (400-599), whose fragment
    /// is longer than [`MAX_FRAGMENT_BYTES`], or that would make more than
    /// [`MAX_FAULT_RULES`] rules.
    pub fn try_fail_next(&self, n: usize, rule: FailRule) -> Result<(), String> {
        rule.check()?;
        if n == 0 {
            return Ok(());
        }
        let mut rules = self
            .shared
            .faults
            .rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if rules.len() >= MAX_FAULT_RULES {
            return Err(format!(
                "at most {MAX_FAULT_RULES} fault rules may be set at once; \
                 remove them with `Faults::clear` (POST /_emulator/faults/clear) \
                 or give one rule a larger `n`"
            ));
        }
        rules.push((n, rule));
        Ok(())
    }

    /// Holds every request of `verb` (any if `None`) whose path contains
    /// `path_contains` (any if `None`) until the result is released or
    /// dropped: e.g. `hold(Some("list"), Some("/pods"))` keeps the listings
    /// of pods from being answered, so that a test can see what a client
    /// does meanwhile.
    pub fn hold(&self, verb: Option<&str>, path_contains: Option<&str>) -> HeldRequests {
        let held = Arc::new(Held {
            verb: verb.map(str::to_owned),
            path_contains: path_contains.map(str::to_owned),
            released: watch::Sender::new(false),
            waiting: AtomicUsize::new(0),
        });
        self.shared
            .faults
            .holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::clone(&held));
        HeldRequests {
            shared: Arc::clone(&self.shared),
            held,
        }
    }

    /// Delays every request (including the start of watches) by `latency`.
    pub fn set_latency(&self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.shared
            .faults
            .latency_nanos
            .store(nanos, Ordering::Relaxed);
    }

    /// Removes all failure rules and latency, and resumes silenced watches.
    pub fn clear(&self) {
        self.shared.silence_watches(false);
        self.shared
            .faults
            .rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.shared.faults.latency_nanos.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_fail_only_matching_requests_n_times() {
        let state = FaultState::default();
        state.rules.lock().unwrap().push((
            2,
            FailRule::status(503)
                .verb("get")
                .path_contains("configmaps"),
        ));
        assert!(state.take("list", "/api/v1/configmaps", None).is_none());
        assert!(state.take("get", "/api/v1/pods/x", None).is_none());
        assert_eq!(
            state
                .take("get", "/api/v1/namespaces/d/configmaps/x", None)
                .map(|e| e.code),
            Some(503)
        );
        assert!(
            state
                .take("get", "/api/v1/namespaces/d/configmaps/x", None)
                .is_some()
        );
        assert!(
            state
                .take("get", "/api/v1/namespaces/d/configmaps/x", None)
                .is_none()
        );
    }

    #[test]
    fn body_rules_fail_only_requests_whose_body_contains_the_fragment() {
        let state = FaultState::default();
        assert!(!state.inspects_bodies());
        let lease = "/apis/coordination.k8s.io/v1/namespaces/d/leases/op";
        let rule = FailRule::status(503)
            .verb("update")
            .body_contains(r#""holderIdentity":"a""#);
        state.rules.lock().unwrap().push((usize::MAX, rule));
        assert!(state.inspects_bodies());
        let by = |holder: &str| format!(r#"{{"spec":{{"holderIdentity":"{holder}"}}}}"#);
        let failed = state.take("update", lease, Some(by("a").as_bytes()));
        assert_eq!(failed.map(|e| e.code), Some(503));
        assert!(
            state
                .take("update", lease, Some(by("b").as_bytes()))
                .is_none()
        );
        assert!(
            state
                .take("update", lease, Some(by("ab").as_bytes()))
                .is_none()
        );
        assert!(state.take("get", lease, Some(by("a").as_bytes())).is_none());
        // A body that was not read matches no body rule.
        assert!(state.take("update", lease, None).is_none());
    }

    #[test]
    fn only_error_statuses_make_rules() {
        for status in [400, 429, 500, 599] {
            assert_eq!(FailRule::status(status).check(), Ok(()));
        }
        for status in [0, 101, 200, 304, 399, 600, 999] {
            let why = FailRule::status(status).check().unwrap_err();
            assert!(why.contains("400-599"), "{why}");
        }
    }

    #[test]
    fn too_many_requests_defaults_to_a_retry_after() {
        let state = FaultState::default();
        state.rules.lock().unwrap().push((1, FailRule::status(429)));
        let err = state.take("get", "/", None).unwrap();
        assert_eq!(err.retry_after, Some(1));
        assert_eq!(err.reason, "TooManyRequests");
    }
}
