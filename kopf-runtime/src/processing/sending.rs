//! How a processing step's patch goes out: conditional on the handled
//! body's `resourceVersion` when its echo is to be known, and re-sent on a
//! `409 Conflict` when it carries handler outcomes; what a failed patch
//! leaves to do.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::fields::{ensure_field, meta_str, remove_field, resolve_field};
use crate::model::kwargs::Logger;
use crate::persistence::finalizers;
use crate::persistence::patching::{PatchError, PatchOutcome, PatchTarget, Patcher};
use crate::processing::queueing::Processed;

/// How often a patch carrying handler outcomes is re-sent after a `409`.
const CONFLICT_RESENDS: usize = 3;
/// The pause before re-sending a conflicting patch.
const CONFLICT_PAUSE: Duration = Duration::from_millis(200);

/// How long to wait before processing an object again after its patch was
/// rejected (the object changed meanwhile, or the API server failed).
const PATCH_RETRY: Duration = Duration::from_secs(1);
/// How long to wait after an unexpected patch failure.
const PATCH_FAILURE_BACKOFF: Duration = Duration::from_secs(10);

/// What is left to do when the object to patch is gone: nothing.
pub(super) fn gone(logger: &Logger) -> Processed {
    logger.debug("The object is gone; nothing to patch.");
    Processed::default()
}

/// What is left to do after a patch failed: the object again, later.
pub(super) fn unpatched(error: &PatchError, logger: &Logger) -> Processed {
    let retry_after = match error {
        PatchError::Conflict { .. } => {
            logger.debug("The object changed meanwhile; processing it again.");
            PATCH_RETRY
        }
        error => {
            logger.error(format_args!("Patching failed: {error}"));
            PATCH_FAILURE_BACKOFF
        }
    };
    Processed {
        expect_version: None,
        retry_after: Some(retry_after),
    }
}

/// Sends the patches of one resource's processing steps.
pub(super) struct PatchSender {
    patcher: Patcher,
    /// The operator's finalizer (`settings.persistence.finalizer`), whose
    /// change a re-sent patch rebuilds.
    finalizer: String,
}

impl PatchSender {
    /// A sender through `patcher`, for objects that carry `finalizer`.
    pub(super) fn new(patcher: Patcher, finalizer: String) -> Self {
        PatchSender { patcher, finalizer }
    }

    /// Sends the step's patch. A patch that carries the outcome of a handler
    /// (`ran`) is not given up on a `409 Conflict`: the outcome would be lost
    /// and the handler run again. It is re-sent instead, its finalizer change
    /// (the only part guarded by a `resourceVersion`) rebuilt from the object
    /// as it is now. Other patches (e.g. adding the finalizer) are not
    /// re-sent: the object is processed again from its newer body.
    ///
    /// `precondition` says how the patch carries the handled body's
    /// version: one added only to know its echo ([`Precondition::Added`]) is
    /// dropped on a conflict, and the patch re-sent at once, as it would
    /// have been sent without it. Also returns whether the patch was
    /// accepted under the handled body's version.
    ///
    /// The answer is decoded as `T`: [`ObjectVersion`] when only the new
    /// version matters (the object is processed again from its watch
    /// event), the whole object when it is handled on from here.
    ///
    /// [`ObjectVersion`]: crate::persistence::patching::ObjectVersion
    pub(super) async fn send<T: DeserializeOwned>(
        &self,
        target: &PatchTarget,
        patch: &mut Value,
        ran: bool,
        mut precondition: Option<Precondition>,
        logger: &Logger,
    ) -> Result<(PatchOutcome<T>, bool), PatchError> {
        let finalizer = self.finalizer.as_str();
        let mut resends = 0;
        loop {
            match self.patcher.merge_as::<T>(target, patch).await {
                Err(PatchError::Conflict { .. }) if precondition == Some(Precondition::Added) => {
                    precondition = None;
                    remove_field(patch, &["metadata", "resourceVersion"]);
                }
                Err(PatchError::Conflict { .. }) if ran && resends < CONFLICT_RESENDS => {
                    precondition = None;
                    resends += 1;
                    logger.debug("The patch conflicted; re-sending it to keep the outcomes.");
                    tokio::time::sleep(CONFLICT_PAUSE).await;
                    if resolve_field(patch, &["metadata", "resourceVersion"]).is_some() {
                        let fresh = match self.patcher.merge(target, &json!({})).await? {
                            PatchOutcome::Patched(fresh) => *fresh,
                            PatchOutcome::Gone => return Ok((PatchOutcome::Gone, false)),
                        };
                        refresh_finalizer(patch, &fresh, finalizer);
                    }
                }
                outcome => return outcome.map(|outcome| (outcome, precondition.is_some())),
            }
        }
    }
}

/// How a patch carries the handled body's `resourceVersion`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Precondition {
    /// It had it already (a finalizer change).
    Had,
    /// It was added, to know the patch's echo.
    Added,
}

/// Makes `patch` conditional on the version of `body`; `None` if the body
/// has no version, or the patch is already conditional on another one.
pub(super) fn require_version(patch: &mut Value, body: &Value) -> Option<Precondition> {
    let version = meta_str(body, "resourceVersion")?;
    match resolve_field(patch, &["metadata", "resourceVersion"]) {
        Some(had) => (had.as_str() == Some(version)).then_some(Precondition::Had),
        None => {
            ensure_field(
                patch,
                &["metadata", "resourceVersion"],
                Value::from(version),
            );
            Some(Precondition::Added)
        }
    }
}

/// Rebuilds the finalizer change of `patch` (adding or removing
/// `finalizer`) against `fresh`, the object as it is now, with its
/// `resourceVersion` as the new precondition.
pub(super) fn refresh_finalizer(patch: &mut Value, fresh: &Value, finalizer: &str) {
    let present = resolve_field(patch, &["metadata", "finalizers"])
        .and_then(Value::as_array)
        .is_some_and(|list| list.iter().any(|f| f.as_str() == Some(finalizer)));
    finalizers::merge_patch(fresh, patch, finalizer, present);
}
