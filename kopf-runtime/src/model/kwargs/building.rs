//! How the engine fills [`Kwargs`]: one constructor for each kind of
//! context (an object, or the operator itself), then one method for each
//! part a kind of handler has (a change, a watch event, an attempt, a
//! task, the start-up settings). What a handler kind does not get stays at
//! its default.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{Admission, Diff, EventType, Indexes, Kwargs, LiveBody, Logger, Memo, Patch, Reason};
use super::{NULL_BODY, Stopped};
use crate::settings::StartupSettings;

/// Where a call stands in its handler's retries (Kopf's `retry`,
/// `started` and `runtime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attempt {
    /// The attempts made before this one.
    pub(crate) retry: u32,
    /// When the first attempt started.
    pub(crate) started: jiff::Timestamp,
    /// How long ago that was.
    pub(crate) runtime: Duration,
}

impl Kwargs {
    /// The kwargs of a handler of the operator itself (activities, login,
    /// probes): no object, the operator's `memo`, a `logger` named for the
    /// handler.
    pub(crate) fn of_operator(memo: Memo, logger: Logger) -> Self {
        Kwargs::of(Arc::clone(&NULL_BODY), memo, logger)
    }

    /// With what the operator shares with its handlers: its client (none
    /// for login handlers) and its indexes.
    #[must_use]
    pub(crate) fn with_cluster(mut self, client: Option<kube::Client>, indexes: Indexes) -> Self {
        self.client = client;
        self.indexes = indexes;
        self
    }

    /// With the attempt this call is.
    #[must_use]
    pub(crate) fn with_attempt(mut self, attempt: Attempt) -> Self {
        self.retry = attempt.retry;
        self.started = Some(attempt.started);
        self.runtime = attempt.runtime;
        self
    }

    /// With the change a change handler (or its filters) sees: why it
    /// runs, and the object's essence before and after.
    #[must_use]
    pub(crate) fn with_change(
        mut self,
        reason: Reason,
        diff: Diff,
        old: Option<Arc<Value>>,
        new: Option<Arc<Value>>,
    ) -> Self {
        self.reason = Some(reason);
        self.diff = diff;
        self.old = old;
        self.new = new;
        self
    }

    /// With an admission request: its details, and the object before and
    /// after the request with their diff.
    #[must_use]
    pub(crate) fn with_admission(
        mut self,
        admission: Admission,
        old: Option<Arc<Value>>,
        new: Option<Arc<Value>>,
    ) -> Self {
        self.diff = Diff::between_shared(old.clone(), new.clone());
        self.old = old;
        self.new = new;
        self.admission = Some(admission);
        self
    }

    /// With the raw watch event an `on_event` handler receives, and the
    /// patch the handlers of the event share.
    #[must_use]
    pub(crate) fn with_event(
        mut self,
        raw: Arc<Value>,
        event_type: Option<EventType>,
        patch: Patch,
    ) -> Self {
        self.event = Some(raw);
        self.event_type = event_type;
        self.patch = patch;
        self
    }

    /// With what a daemon or timer has: its stop flag and the live body.
    #[must_use]
    pub(crate) fn with_task(mut self, stopped: Stopped, live: LiveBody) -> Self {
        self.stopped = Some(stopped);
        self.live = Some(live);
        self
    }

    /// With the operator's settings, which `on_startup` handlers may change.
    #[must_use]
    pub(crate) fn with_settings(mut self, settings: StartupSettings) -> Self {
        self.settings = Some(settings);
        self
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_operators_handler_has_no_object_and_the_operators_memo() {
        let memo = Memo::new();
        memo.insert(7_u8);
        let attempt = Attempt {
            retry: 2,
            started: jiff::Timestamp::UNIX_EPOCH,
            runtime: Duration::from_secs(3),
        };
        let kwargs = Kwargs::of_operator(memo, Logger::new("login")).with_attempt(attempt);
        assert!(kwargs.body.is_null());
        assert_eq!(kwargs.memo.get::<u8>().as_deref(), Some(&7));
        assert_eq!(kwargs.logger.object(), "login");
        assert_eq!(
            (kwargs.retry, kwargs.started, kwargs.runtime),
            (2, Some(attempt.started), attempt.runtime)
        );
        assert!(kwargs.client.is_none() && kwargs.reason.is_none());
    }

    #[test]
    fn a_change_and_an_admission_set_their_values_and_diff() {
        let (old, new) = (json!({"a": 1}), json!({"a": 2}));
        let shared = |v: &Value| Some(Arc::new(v.clone()));
        let diff = Diff::between(Some(&old), Some(&new));
        let change = Kwargs::new(new.clone()).with_change(
            Reason::Update,
            diff.clone(),
            shared(&old),
            shared(&new),
        );
        assert_eq!(change.reason, Some(Reason::Update));
        let admission = Kwargs::new(new.clone()).with_admission(
            Admission::default(),
            shared(&old),
            shared(&new),
        );
        assert_eq!(admission.diff, diff);
        assert_eq!(admission.old, change.old);
        assert_eq!(admission.new, change.new);
        assert!(admission.admission.is_some() && admission.reason.is_none());
    }

    #[test]
    fn an_event_shares_the_patch_of_its_handlers() {
        let patch = Patch::new();
        let raw = Arc::new(json!({"type": "ADDED"}));
        let kwargs = Kwargs::new(json!({})).with_event(raw, Some(EventType::Added), patch.clone());
        kwargs.patch.set("status.seen", json!(true));
        assert!(!patch.is_empty());
        assert_eq!(kwargs.event_type, Some(EventType::Added));
    }
}
