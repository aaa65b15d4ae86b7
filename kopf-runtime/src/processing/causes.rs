//! Why the change handlers of an object run now: Kopf's cause detection.
//!
//! The cause follows from the object alone, not from the event that brought
//! it: a stored diff-base (the object's "essence" when it was last handled)
//! tells an update from a create, a `deletionTimestamp` tells a deletion, and
//! the first sighting in the operator's initial listing tells a resume.

use serde_json::Value;

use crate::model::kwargs::{Diff, Reason};
use crate::persistence::finalizers;

/// What the change handlers are to do with an object now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeCause {
    /// Run the handlers of this reason (`create`, `update`, `delete`, `resume`).
    Handle(Reason),
    /// Nothing essential changed: store nothing, run nothing.
    Noop,
    /// Deletion is under way, but our finalizer is not on the object: nothing
    /// to do (Kopf's `FREE`).
    Free,
    /// The object is gone from the cluster (Kopf's `GONE`).
    Gone,
}

/// The facts about one object that decide its cause.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CauseInput<'a> {
    /// The object's current body.
    pub body: &'a Value,
    /// Whether the object is gone (a `DELETED` event, or missing after a re-list).
    pub gone: bool,
    /// The finalizer this operator puts on objects.
    pub finalizer: &'a str,
    /// The stored essence (`None`: the object was never handled).
    pub old: Option<&'a Value>,
    /// The difference between the stored and the current essence.
    pub diff: &'a Diff,
    /// Whether the object was first seen in the operator's initial listing and
    /// has not been fully handled since (resume handlers are due).
    pub initial: bool,
}

/// Detects the cause as Kopf does.
///
/// Creation never mixes with resuming: an object without a diff-base is
/// created even if first seen at start-up. An object with essential changes
/// seen at start-up is updated, and the resume handlers run with the update
/// handlers (see [`resume_mixes_in`]).
pub(crate) fn detect(input: CauseInput<'_>) -> ChangeCause {
    if input.gone {
        return ChangeCause::Gone;
    }
    let deleting = finalizers::is_deletion_ongoing(input.body);
    let blocked = finalizers::is_deletion_blocked(input.body, input.finalizer);
    if deleting && !blocked {
        return ChangeCause::Free;
    }
    if deleting {
        return ChangeCause::Handle(Reason::Delete);
    }
    if input.old.is_none() {
        return ChangeCause::Handle(Reason::Create);
    }
    if input.diff.is_empty() {
        return if input.initial {
            ChangeCause::Handle(Reason::Resume)
        } else {
            ChangeCause::Noop
        };
    }
    ChangeCause::Handle(Reason::Update)
}

/// Whether resume handlers run along with the handlers of `reason` (Kopf's
/// "cuckoo" resuming: an object changed while the operator was down is both
/// resumed and updated).
pub(crate) fn resume_mixes_in(reason: Reason, initial: bool) -> bool {
    initial && matches!(reason, Reason::Update | Reason::Resume)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FINALIZER: &str = "kopf.zalando.org/KopfFinalizerMarker";

    fn cause(
        body: Value,
        gone: bool,
        old: Option<Value>,
        diff: Diff,
        initial: bool,
    ) -> ChangeCause {
        detect(CauseInput {
            body: &body,
            gone,
            finalizer: FINALIZER,
            old: old.as_ref(),
            diff: &diff,
            initial,
        })
    }

    fn changed() -> Diff {
        Diff::between(
            Some(&json!({"spec": {"a": 1}})),
            Some(&json!({"spec": {"a": 2}})),
        )
    }

    #[test]
    fn an_object_never_handled_is_created_even_at_startup() {
        assert_eq!(
            cause(json!({}), false, None, Diff::default(), true),
            ChangeCause::Handle(Reason::Create)
        );
        assert_eq!(
            cause(json!({}), false, None, Diff::default(), false),
            ChangeCause::Handle(Reason::Create)
        );
    }

    #[test]
    fn essential_changes_are_updates_and_none_are_noops() {
        let old = Some(json!({"spec": {"a": 1}}));
        assert_eq!(
            cause(json!({}), false, old.clone(), changed(), false),
            ChangeCause::Handle(Reason::Update)
        );
        assert_eq!(
            cause(json!({}), false, old, Diff::default(), false),
            ChangeCause::Noop
        );
    }

    #[test]
    fn an_unchanged_object_first_seen_at_startup_is_resumed() {
        let old = Some(json!({"spec": {"a": 1}}));
        assert_eq!(
            cause(json!({}), false, old.clone(), Diff::default(), true),
            ChangeCause::Handle(Reason::Resume)
        );
        assert_eq!(
            cause(json!({}), false, old, changed(), true),
            ChangeCause::Handle(Reason::Update)
        );
        assert!(resume_mixes_in(Reason::Update, true));
        assert!(!resume_mixes_in(Reason::Update, false));
        assert!(!resume_mixes_in(Reason::Create, true));
    }

    #[test]
    fn deletion_is_handled_only_while_our_finalizer_holds_the_object() {
        let ours = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": [FINALIZER]}});
        let theirs = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["x/y"]}});
        let old = Some(json!({}));
        assert_eq!(
            cause(ours, false, old.clone(), Diff::default(), false),
            ChangeCause::Handle(Reason::Delete)
        );
        assert_eq!(
            cause(theirs, false, old, Diff::default(), false),
            ChangeCause::Free
        );
    }

    #[test]
    fn a_gone_object_is_gone_whatever_its_body_says() {
        let ours = json!({"metadata": {"finalizers": [FINALIZER]}});
        assert_eq!(
            cause(ours, true, None, Diff::default(), true),
            ChangeCause::Gone
        );
    }
}
