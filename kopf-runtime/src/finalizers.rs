//! Finalizers: checking and the patches that add or remove one.
//!
//! The patches are JSON patches (RFC 6902) with `test` operations, so they
//! never clobber finalizers that others add or remove concurrently:
//!
//! - adding to an existing list tests that the list is still exactly as seen,
//!   then appends; adding the first finalizer tests the `resourceVersion`,
//!   then creates the list;
//! - removing tests that our finalizer is still at the index seen, then
//!   removes that index (every occurrence, highest index first).
//!
//! # Errors
//!
//! If the object changed meanwhile, a `test` fails and the server answers
//! `422` (some servers `409`); [`patching`](crate::patching) returns that as
//! [`PatchError::Invalid`](crate::patching::PatchError::Invalid) or
//! [`PatchError::Conflict`](crate::patching::PatchError::Conflict). The caller
//! re-reads the object (or waits for the next watch event) and rebuilds the
//! patch from the fresh body. A `404` means the object is gone, and so is the
//! need for the finalizer.
//!
//! ```
//! use kopf_runtime::finalizers::{allow_deletion, block_deletion, is_deletion_blocked};
//! use serde_json::json;
//!
//! let body = json!({"metadata": {"resourceVersion": "7", "finalizers": ["other", "mine"]}});
//! assert!(is_deletion_blocked(&body, "mine"));
//! assert!(block_deletion(&body, "mine").is_none());
//! let patch = allow_deletion(&body, "mine").expect("present");
//! assert_eq!(
//!     serde_json::to_value(&patch)?,
//!     json!([{"op": "test", "path": "/metadata/finalizers/1", "value": "mine"},
//!            {"op": "remove", "path": "/metadata/finalizers/1"}]),
//! );
//! # Ok::<(), serde_json::Error>(())
//! ```

use serde_json::{Value, json};

/// The finalizer written by Kopf versions before 1.0; removed along with ours.
pub const LEGACY_FINALIZER: &str = "KopfFinalizerMarker";

fn finalizers(body: &Value) -> Vec<&str> {
    body.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Whether the object is being deleted (`metadata.deletionTimestamp` is set).
pub fn is_deletion_ongoing(body: &Value) -> bool {
    body.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// Whether `finalizer` is on the object.
pub fn is_deletion_blocked(body: &Value, finalizer: &str) -> bool {
    finalizers(body).contains(&finalizer)
}

/// Whether the finalizer should be added now: some handler needs it
/// (`required`), it is absent, and the object is not being deleted
/// (Kubernetes rejects new finalizers on deleted objects).
pub fn needs_adding(body: &Value, finalizer: &str, required: bool) -> bool {
    required && !is_deletion_blocked(body, finalizer) && !is_deletion_ongoing(body)
}

/// Whether the finalizer should be removed now: it is present and either no
/// handler needs it any more, or the object is being deleted and
/// `done` (every deletion handler has finished).
pub fn needs_removal(body: &Value, finalizer: &str, required: bool, done: bool) -> bool {
    is_deletion_blocked(body, finalizer) && (!required || (is_deletion_ongoing(body) && done))
}

/// The patch that adds `finalizer`; `None` if it is already there.
pub fn block_deletion(body: &Value, finalizer: &str) -> Option<json_patch::Patch> {
    if is_deletion_blocked(body, finalizer) {
        return None;
    }
    let ops = match body.pointer("/metadata/finalizers") {
        Some(list @ Value::Array(_)) => json!([
            {"op": "test", "path": "/metadata/finalizers", "value": list},
            {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
        ]),
        _ => {
            let rv = body
                .pointer("/metadata/resourceVersion")
                .cloned()
                .unwrap_or(Value::Null);
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
            ])
        }
    };
    Some(serde_json::from_value(ops).expect("invariant: well-formed JSON patch operations"))
}

/// The patch that removes every occurrence of `finalizer` (and of Kopf's
/// [`LEGACY_FINALIZER`]); `None` if neither is there.
pub fn allow_deletion(body: &Value, finalizer: &str) -> Option<json_patch::Patch> {
    let mut ops = Vec::new();
    for (index, name) in finalizers(body).iter().enumerate().rev() {
        if *name == finalizer || *name == LEGACY_FINALIZER {
            let path = format!("/metadata/finalizers/{index}");
            ops.push(json!({"op": "test", "path": path, "value": name}));
            ops.push(json!({"op": "remove", "path": path}));
        }
    }
    if ops.is_empty() {
        return None;
    }
    Some(
        serde_json::from_value(Value::Array(ops))
            .expect("invariant: well-formed JSON patch operations"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: &str = "kopf.zalando.org/KopfFinalizerMarker";

    fn apply(body: &Value, patch: &json_patch::Patch) -> Result<Value, json_patch::PatchError> {
        let mut doc = body.clone();
        json_patch::patch(&mut doc, patch).map(|()| doc)
    }

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
    fn adding_the_first_finalizer_tests_the_resource_version() {
        let body = json!({"metadata": {"resourceVersion": "5"}});
        let patch = block_deletion(&body, F).expect("absent");
        assert_eq!(
            apply(&body, &patch).expect("applies"),
            json!({"metadata": {"resourceVersion": "5", "finalizers": [F]}})
        );
        let changed = json!({"metadata": {"resourceVersion": "6", "finalizers": ["x"]}});
        assert!(
            apply(&changed, &patch).is_err(),
            "a concurrent change must fail the test"
        );
    }

    #[test]
    fn adding_to_a_list_keeps_others() {
        let body = json!({"metadata": {"finalizers": ["x"]}});
        let patch = block_deletion(&body, F).expect("absent");
        assert_eq!(
            apply(&body, &patch).expect("applies"),
            json!({"metadata": {"finalizers": ["x", F]}})
        );
        let concurrent = json!({"metadata": {"finalizers": ["x", "y"]}});
        assert!(apply(&concurrent, &patch).is_err());
    }

    #[test]
    fn removing_keeps_others_and_tests_the_index() {
        let body = json!({"metadata": {"finalizers": ["x", F, "y", F, LEGACY_FINALIZER]}});
        let patch = allow_deletion(&body, F).expect("present");
        assert_eq!(
            apply(&body, &patch).expect("applies"),
            json!({"metadata": {"finalizers": ["x", "y"]}})
        );
        let shifted = json!({"metadata": {"finalizers": [F, "y", F, LEGACY_FINALIZER]}});
        assert!(
            apply(&shifted, &patch).is_err(),
            "a shifted list must fail the test"
        );
        assert!(allow_deletion(&json!({"metadata": {"finalizers": ["x"]}}), F).is_none());
    }

    #[test]
    fn decisions() {
        let plain = json!({"metadata": {}});
        let blocked = json!({"metadata": {"finalizers": [F]}});
        let deleting = json!({"metadata": {"finalizers": [F], "deletionTimestamp": "t"}});
        assert!(needs_adding(&plain, F, true));
        assert!(!needs_adding(&plain, F, false));
        assert!(!needs_adding(&blocked, F, true));
        assert!(!needs_adding(
            &json!({"metadata": {"deletionTimestamp": "t"}}),
            F,
            true
        ));
        assert!(needs_removal(&blocked, F, false, false));
        assert!(!needs_removal(&blocked, F, true, true));
        assert!(!needs_removal(&deleting, F, true, false));
        assert!(needs_removal(&deleting, F, true, true));
        assert!(!needs_removal(&plain, F, false, true));
    }
}
