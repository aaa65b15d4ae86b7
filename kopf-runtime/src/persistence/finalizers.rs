//! The finalizer lifecycle, as a small state machine ([`Finalizing`]) that
//! the processor asks and that decides: before the handlers run, whether
//! the finalizer is added (a matching handler needs it) or released (none
//! does any more); once a deletion's handlers have run, whether it is kept
//! (handlers, or tasks of finalizer-keeping daemons and timers, are not
//! done) or released. Also the merge patch of each change.
//!
//! # Guarantees
//! - Only objects that a matching handler needs it on get the finalizer
//!   ([`Handler::requires_finalizer`]), and never during their deletion; an
//!   object in deletion without it (others' finalizers only) is left alone.
//! - Kopf's pre-1.0 marker ([`LEGACY_FINALIZER`]) counts as the finalizer,
//!   as in Kopf, and goes with it.
//! - The patch carries the object's `resourceVersion` (a merge patch
//!   replaces the list whole): if anyone changed the object meanwhile, the
//!   server answers `409 Conflict` and the caller rebuilds the patch from
//!   the newer body. Others' finalizers are never clobbered.

use serde_json::Value;

use crate::fields::{ensure_field, resolve_field};
use crate::model::handlers::Handler;
use crate::model::kwargs::Logger;

/// The finalizer written by Kopf versions before 1.0; removed along with ours.
pub(crate) const LEGACY_FINALIZER: &str = "KopfFinalizerMarker";

/// Whether the object is being deleted (`metadata.deletionTimestamp` is set).
pub(crate) fn is_deletion_ongoing(body: &Value) -> bool {
    resolve_field(body, &["metadata", "deletionTimestamp"]).is_some_and(|v| !v.is_null())
}

/// Whether `finalizer` (or the legacy marker, as in Kopf) is on the object.
pub(crate) fn is_deletion_blocked(body: &Value, finalizer: &str) -> bool {
    resolve_field(body, &["metadata", "finalizers"])
        .and_then(Value::as_array)
        .is_some_and(|list| list.iter().any(|f| f == finalizer || f == LEGACY_FINALIZER))
}

/// Adds or removes `finalizer` (and the legacy marker) in a merge patch,
/// conditional on the object's `resourceVersion`.
pub(crate) fn merge_patch(body: &Value, patch: &mut Value, finalizer: &str, present: bool) {
    let mut list: Vec<Value> = resolve_field(body, &["metadata", "finalizers"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f.as_str() != Some(finalizer) && f.as_str() != Some(LEGACY_FINALIZER))
        .collect();
    if present {
        list.push(Value::String(finalizer.to_owned()));
    }
    let list = if list.is_empty() {
        Value::Null
    } else {
        Value::Array(list)
    };
    ensure_field(patch, &["metadata", "finalizers"], list);
    if let Some(version) = resolve_field(body, &["metadata", "resourceVersion"]) {
        ensure_field(patch, &["metadata", "resourceVersion"], version.clone());
    }
}

/// What to do with the operator's finalizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Add it, before any handler runs: the step ends with this patch.
    Add,
    /// Keep it: the deletion waits for handlers or tasks still at work.
    Keep,
    /// Remove it (and the legacy marker).
    Release,
}

/// Where an object stands with the operator's finalizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Finalizing<'a> {
    /// The operator's finalizer.
    finalizer: &'a str,
    /// `metadata.deletionTimestamp` is set.
    deleting: bool,
    /// The operator's finalizer (or the legacy marker) is on the object.
    held: bool,
}

impl<'a> Finalizing<'a> {
    /// The state of `body` with respect to `finalizer`.
    pub(crate) fn of(body: &Value, finalizer: &'a str) -> Self {
        Self {
            finalizer,
            deleting: is_deletion_ongoing(body),
            held: is_deletion_blocked(body, finalizer),
        }
    }

    /// Whether the object is being deleted.
    pub(crate) fn deleting(self) -> bool {
        self.deleting
    }

    /// Whether the object's deletion waits on the operator's finalizer (or
    /// the legacy marker).
    pub(crate) fn holds_deletion(self) -> bool {
        self.deleting && self.held
    }

    /// Before the handlers run, given the handlers that match the object:
    /// [`Action::Add`] if one needs the finalizer and it is missing,
    /// [`Action::Release`] if it is there and none needs it any more.
    /// Nothing during a deletion (see [`on_cleanup`](Self::on_cleanup)).
    pub(crate) fn on_apply<'h>(
        self,
        serving: impl IntoIterator<Item = &'h Handler>,
    ) -> Option<Action> {
        if self.deleting {
            return None;
        }
        let required = serving.into_iter().any(|h| h.requires_finalizer());
        match (self.held, required) {
            (false, true) => Some(Action::Add),
            (true, false) => Some(Action::Release),
            _ => None,
        }
    }

    /// Once a deletion's handlers have run: [`Action::Keep`] while they are
    /// not done or tasks of finalizer-keeping daemons and timers still run,
    /// then [`Action::Release`]. Nothing when the object is not being
    /// deleted or does not hold the finalizer.
    pub(crate) fn on_cleanup(self, handlers_done: bool, tasks_running: bool) -> Option<Action> {
        if !self.deleting || !self.held {
            return None;
        }
        if handlers_done && !tasks_running {
            Some(Action::Release)
        } else {
            Some(Action::Keep)
        }
    }

    /// Writes an [`Action::Add`] or [`Action::Release`] into `patch` (built
    /// against `body`), and says why in the object's log.
    pub(crate) fn enact(self, action: Action, body: &Value, patch: &mut Value, logger: &Logger) {
        let message = match (action, self.deleting) {
            (Action::Keep, _) => return,
            (Action::Add, _) => "Adding the finalizer, thus preventing the actual deletion.",
            (Action::Release, false) => {
                "Removing the finalizer, as there are no handlers requiring it."
            }
            (Action::Release, true) => "Removing the finalizer, thus allowing the actual deletion.",
        };
        logger.debug(message);
        merge_patch(body, patch, self.finalizer, action == Action::Add);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_deletion_keeps_the_finalizer_until_done_then_releases_only_ours() {
        let body = json!({"metadata": {"resourceVersion": "7", "finalizers": ["other", "mine"],
                                       "deletionTimestamp": "2020-01-01T00:00:00Z"}});
        let lifecycle = Finalizing::of(&body, "mine");
        assert_eq!(lifecycle.on_cleanup(false, false), Some(Action::Keep));
        assert_eq!(lifecycle.on_cleanup(true, false), Some(Action::Release));
        let mut patch = json!({});
        merge_patch(&body, &mut patch, "mine", false);
        assert_eq!(
            patch,
            json!({"metadata": {"finalizers": ["other"], "resourceVersion": "7"}})
        );
    }

    const F: &str = "kopf.zalando.org/KopfFinalizerMarker";

    #[test]
    fn detection() {
        let body = json!({"metadata": {"finalizers": ["a", F]}});
        assert!(is_deletion_blocked(&body, F));
        assert!(!is_deletion_blocked(&body, "b"));
        assert!(!is_deletion_blocked(&json!({}), F));
        assert!(!is_deletion_ongoing(&body));
        assert!(is_deletion_ongoing(
            &json!({"metadata": {"deletionTimestamp": "2020-01-01T00:00:00Z"}})
        ));
    }

    #[test]
    fn finalizers_are_added_and_removed_with_a_version_precondition() {
        let body = json!({"metadata": {"resourceVersion": "7", "finalizers": ["other/x"]}});
        let mut patch = json!({});
        merge_patch(&body, &mut patch, "ours/f", true);
        assert_eq!(
            patch,
            json!({"metadata": {"finalizers": ["other/x", "ours/f"], "resourceVersion": "7"}})
        );
        let body = json!({"metadata": {"resourceVersion": "8", "finalizers": ["ours/f", "KopfFinalizerMarker"]}});
        let mut patch = json!({});
        merge_patch(&body, &mut patch, "ours/f", false);
        assert_eq!(
            patch,
            json!({"metadata": {"finalizers": null, "resourceVersion": "8"}})
        );
    }

    mod lifecycle {
        use super::*;
        use crate::model::handlers::Handler;
        use crate::model::kwargs::Kwargs;
        use crate::model::resources::ResourceRef;

        fn res() -> ResourceRef {
            ResourceRef::dynamic("", "v1", "pods")
        }

        fn on_delete() -> Handler {
            Handler::on_delete(res(), "del", |_: Kwargs| async {})
        }

        fn on_create() -> Handler {
            Handler::on_create(res(), "new", |_: Kwargs| async {})
        }

        fn timer() -> Handler {
            Handler::timer(res(), "tick", |_: Kwargs| async {})
        }

        fn object(finalizers: &[&str], deleting: bool) -> Value {
            let mut body = json!({"metadata": {"resourceVersion": "5", "finalizers": finalizers}});
            if deleting {
                body["metadata"]["deletionTimestamp"] = json!("2020-01-01T00:00:00Z");
            }
            body
        }

        fn state(finalizers: &[&str], deleting: bool) -> Finalizing<'static> {
            Finalizing::of(&object(finalizers, deleting), F)
        }

        #[test]
        fn a_handler_that_needs_the_finalizer_has_it_added_once() {
            assert_eq!(
                state(&[], false).on_apply([&on_delete()]),
                Some(Action::Add)
            );
            assert_eq!(state(&[], false).on_apply([&timer()]), Some(Action::Add));
            assert_eq!(
                state(&["other"], false).on_apply([&timer()]),
                Some(Action::Add)
            );
            assert_eq!(
                state(&[F], false).on_apply([&timer()]),
                None,
                "already there"
            );
        }

        #[test]
        fn handlers_that_need_no_finalizer_never_get_one() {
            assert_eq!(state(&[], false).on_apply([]), None);
            assert_eq!(state(&[], false).on_apply([&on_create()]), None);
            let quiet = timer().no_finalizers();
            assert_eq!(state(&[], false).on_apply([&quiet]), None);
            let optional = on_delete().optional(true);
            assert_eq!(state(&[], false).on_apply([&optional]), None);
        }

        #[test]
        fn a_finalizer_that_only_a_no_finalizers_handler_needed_is_released() {
            let quiet = timer().no_finalizers();
            assert_eq!(state(&[F], false).on_apply([&quiet]), Some(Action::Release));
            assert_eq!(
                state(&[F, "other"], false).on_apply([]),
                Some(Action::Release)
            );
        }

        #[test]
        fn both_kinds_of_handlers_on_one_resource_need_the_finalizer() {
            let quiet = timer().no_finalizers();
            let serving = [&quiet, &on_delete()];
            assert_eq!(state(&[], false).on_apply(serving), Some(Action::Add));
            assert_eq!(state(&[F], false).on_apply(serving), None, "kept");
            let serving = [&on_create(), &timer()];
            assert_eq!(state(&[], false).on_apply(serving), Some(Action::Add));
        }

        #[test]
        fn a_deletion_keeps_the_finalizer_until_handlers_and_tasks_are_done() {
            let deleting = state(&[F], true);
            assert_eq!(
                deleting.on_apply([&timer()]),
                None,
                "never added or released early"
            );
            assert_eq!(deleting.on_apply([]), None);
            assert_eq!(deleting.on_cleanup(false, false), Some(Action::Keep));
            assert_eq!(deleting.on_cleanup(true, true), Some(Action::Keep));
            assert_eq!(deleting.on_cleanup(false, true), Some(Action::Keep));
            assert_eq!(deleting.on_cleanup(true, false), Some(Action::Release));
        }

        #[test]
        fn an_object_in_deletion_with_a_foreign_finalizer_is_left_alone() {
            let foreign = state(&["other"], true);
            assert!(foreign.deleting());
            assert_eq!(
                foreign.on_apply([&on_delete()]),
                None,
                "never added during a deletion"
            );
            assert_eq!(foreign.on_cleanup(true, false), None);
            assert_eq!(foreign.on_cleanup(false, true), None);
            assert_eq!(state(&[], true).on_cleanup(true, false), None);
        }

        #[test]
        fn outside_a_deletion_there_is_nothing_to_clean_up() {
            assert_eq!(state(&[F], false).on_cleanup(true, false), None);
            assert_eq!(state(&[], false).on_cleanup(false, true), None);
        }

        #[test]
        fn the_legacy_marker_counts_as_ours_and_goes_with_it() {
            assert_eq!(state(&[LEGACY_FINALIZER], false).on_apply([&timer()]), None);
            assert_eq!(
                state(&[LEGACY_FINALIZER], false).on_apply([]),
                Some(Action::Release)
            );
            let deleting = state(&["other", LEGACY_FINALIZER], true);
            assert_eq!(deleting.on_cleanup(true, false), Some(Action::Release));
            let body = object(&["other", LEGACY_FINALIZER, F], true);
            let mut patch = json!({});
            let logger = Logger::new("ns/a");
            Finalizing::of(&body, F).enact(Action::Release, &body, &mut patch, &logger);
            assert_eq!(
                patch,
                json!({"metadata": {"finalizers": ["other"], "resourceVersion": "5"}})
            );
        }

        #[test]
        fn a_deletion_is_held_by_our_finalizer_or_the_legacy_marker_only() {
            assert!(state(&[F], true).holds_deletion());
            assert!(state(&["other", LEGACY_FINALIZER], true).holds_deletion());
            assert!(!state(&["other"], true).holds_deletion());
            assert!(!state(&[F, LEGACY_FINALIZER], false).holds_deletion());
        }

        #[test]
        fn enacting_writes_the_patch_and_keeping_writes_nothing() {
            let logger = Logger::new("ns/a");
            let body = object(&["other"], false);
            let mut patch = json!({});
            state(&["other"], false).enact(Action::Add, &body, &mut patch, &logger);
            assert_eq!(
                patch,
                json!({"metadata": {"finalizers": ["other", F], "resourceVersion": "5"}})
            );
            let mut patch = json!({});
            state(&[F], true).enact(Action::Keep, &object(&[F], true), &mut patch, &logger);
            assert_eq!(patch, json!({}));
        }
    }
}
