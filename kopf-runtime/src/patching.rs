//! Patching objects: merge and JSON patches with Kopf's error semantics.
//!
//! [`Patcher::merge`] and [`Patcher::json`] send one patch to an object of
//! any (dynamic) resource and return the patched object, whose
//! `resourceVersion` is what the engine waits to see on the watch stream
//! before acting on the object again.
//!
//! # Guarantees
//!
//! - A `404` is [`PatchOutcome::Gone`]: the object vanished meanwhile. This
//!   is an answer, not an error, so a task of a deleted object ends quietly.
//! - `429`, `5xx` and transport failures are retried with the configured
//!   backoffs; the server's `retryAfterSeconds` replaces the configured delay.
//! - `409` and `422` are returned at once as [`PatchError::Conflict`] and
//!   [`PatchError::Invalid`]: the caller re-reads the object and decides.
//! - The `status` of a merge patch goes to the `/status` subresource when the
//!   resource has one (a second request, after the main one), inline
//!   otherwise, as Kopf does.
//!
//! The field helpers ([`resolve_field`], [`ensure_field`], [`remove_field`])
//! build merge-patch fragments for [`progress`](crate::progress),
//! [`diffbase`](crate::diffbase) and the engine.

use std::time::Duration;

use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, Status};
use serde_json::{Map, Value};

use crate::retrying::{Backoff, ErrorClass, classify};
use crate::settings::NetworkingSettings;

/// A failure to patch an object.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// `409 Conflict`: a concurrent change; re-read the object and retry.
    #[error("conflict patching {name}: {}", .status.message)]
    Conflict {
        /// The object's name.
        name: String,
        /// The server's answer.
        status: Box<Status>,
    },
    /// `422 Unprocessable Entity`: the patch is invalid for the object now,
    /// e.g. a JSON-patch `test` failed; re-read the object and retry.
    #[error("invalid patch for {name}: {}", .status.message)]
    Invalid {
        /// The object's name.
        name: String,
        /// The server's answer.
        status: Box<Status>,
    },
    /// `429`/`5xx`/transport failures persisted through every backoff.
    #[error("patching {name} failed after {attempts} attempts")]
    RetriesExhausted {
        /// The object's name.
        name: String,
        /// How many requests were made.
        attempts: usize,
        /// The last failure.
        #[source]
        last: kube::Error,
    },
    /// Any other failure (`400`, `403`, a malformed answer, …).
    #[error("patching {name} failed")]
    Request {
        /// The object's name.
        name: String,
        /// The failure.
        #[source]
        source: kube::Error,
    },
    /// The JSON patch targets `/status` on a resource without that subresource
    /// mixed with other paths, which cannot be split.
    #[error("a JSON patch for {name} mixes /status and other paths")]
    MixedJsonPatch {
        /// The object's name.
        name: String,
    },
}

/// The result of a patch that the server answered.
#[derive(Debug, Clone)]
pub enum PatchOutcome {
    /// The object as it is after the patch.
    Patched(Box<DynamicObject>),
    /// The object does not exist any more (`404`).
    Gone,
}

impl PatchOutcome {
    /// The patched object, if it still exists.
    pub fn object(&self) -> Option<&DynamicObject> {
        match self {
            Self::Patched(obj) => Some(obj),
            Self::Gone => None,
        }
    }
}

/// Which object to patch.
#[derive(Debug, Clone)]
pub struct PatchTarget {
    /// The object's resource.
    pub resource: ApiResource,
    /// Whether the resource has a `status` subresource.
    pub status_subresource: bool,
    /// The object's namespace; `None` for cluster-scoped resources.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
}

impl PatchTarget {
    fn api(&self, client: &Client) -> Api<DynamicObject> {
        match &self.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &self.resource),
            None => Api::all_with(client.clone(), &self.resource),
        }
    }
}

/// Sends patches with retries; cheap to clone.
#[derive(Clone)]
pub struct Patcher {
    client: Client,
    backoffs: Vec<Duration>,
    params: PatchParams,
}

impl std::fmt::Debug for Patcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Patcher")
            .field("backoffs", &self.backoffs)
            .finish_non_exhaustive()
    }
}

impl Patcher {
    /// A patcher retrying as `settings.error_backoffs` says.
    pub fn new(client: Client, settings: &NetworkingSettings) -> Self {
        Self {
            client,
            backoffs: settings.error_backoffs.clone(),
            params: PatchParams::default(),
        }
    }

    /// Apply a JSON merge patch; a `status` key goes to `/status` when the
    /// resource has that subresource. An empty patch sends nothing and reads
    /// the object instead.
    ///
    /// # Errors
    ///
    /// [`PatchError`] as described in the [module docs](self).
    pub async fn merge(
        &self,
        target: &PatchTarget,
        patch: &Value,
    ) -> Result<PatchOutcome, PatchError> {
        let api = target.api(&self.client);
        let (main, status) = split_status(patch, target.status_subresource);
        let mut outcome = None;
        if let Some(main) = main {
            let body = Patch::Merge(&main);
            let sent = self
                .retrying(target, || api.patch(&target.name, &self.params, &body))
                .await?;
            if matches!(sent, PatchOutcome::Gone) {
                return Ok(sent);
            }
            outcome = Some(sent);
        }
        if let Some(status) = status {
            let body = Patch::Merge(&status);
            let sent = self
                .retrying(target, || {
                    api.patch_status(&target.name, &self.params, &body)
                })
                .await?;
            outcome = Some(sent);
        }
        match outcome {
            Some(outcome) => Ok(outcome),
            None => self.retrying(target, || api.get(&target.name)).await,
        }
    }

    /// Apply a JSON patch (RFC 6902). With `status_subresource` and all paths
    /// under `/status`, it goes to `/status` with the prefix kept (the
    /// subresource takes whole-object paths).
    ///
    /// # Errors
    ///
    /// [`PatchError`] as described in the [module docs](self);
    /// [`PatchError::MixedJsonPatch`] if `/status` and other paths are mixed
    /// on a resource with the status subresource.
    pub async fn json(
        &self,
        target: &PatchTarget,
        patch: &json_patch::Patch,
    ) -> Result<PatchOutcome, PatchError> {
        let api = target.api(&self.client);
        let paths: Vec<String> = patch.0.iter().map(|op| op.path().to_string()).collect();
        let on_status = |p: &String| p == "/status" || p.starts_with("/status/");
        let to_status =
            target.status_subresource && !paths.is_empty() && paths.iter().all(on_status);
        if target.status_subresource && !to_status && paths.iter().any(on_status) {
            return Err(PatchError::MixedJsonPatch {
                name: target.name.clone(),
            });
        }
        let body = Patch::<()>::Json(patch.clone());
        if to_status {
            self.retrying(target, || {
                api.patch_status(&target.name, &self.params, &body)
            })
            .await
        } else {
            self.retrying(target, || api.patch(&target.name, &self.params, &body))
                .await
        }
    }

    async fn retrying<F, Fut>(
        &self,
        target: &PatchTarget,
        mut request: F,
    ) -> Result<PatchOutcome, PatchError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<DynamicObject, kube::Error>>,
    {
        let mut backoff = Backoff::limited(&self.backoffs);
        let name = || target.name.clone();
        loop {
            let error = match request().await {
                Ok(obj) => return Ok(PatchOutcome::Patched(Box::new(obj))),
                Err(error) => error,
            };
            match (classify(&error), error) {
                (ErrorClass::NotFound, _) => return Ok(PatchOutcome::Gone),
                (ErrorClass::Conflict, kube::Error::Api(status)) => {
                    return Err(PatchError::Conflict {
                        name: name(),
                        status,
                    });
                }
                (ErrorClass::Invalid, kube::Error::Api(status)) => {
                    return Err(PatchError::Invalid {
                        name: name(),
                        status,
                    });
                }
                (ErrorClass::Transient { retry_after }, error) => {
                    match backoff.next_delay(retry_after) {
                        Some(delay) => {
                            tracing::debug!(name = %target.name, ?delay, %error, "retrying a patch");
                            tokio::time::sleep(delay).await;
                        }
                        None => {
                            let attempts = backoff.attempts() + 1;
                            return Err(PatchError::RetriesExhausted {
                                name: name(),
                                attempts,
                                last: error,
                            });
                        }
                    }
                }
                (_, source) => {
                    return Err(PatchError::Request {
                        name: name(),
                        source,
                    });
                }
            }
        }
    }
}

/// Split a merge patch into the main part and the `status` part (if the
/// resource has the subresource); empty parts are `None`.
pub fn split_status(patch: &Value, status_subresource: bool) -> (Option<Value>, Option<Value>) {
    let Some(map) = patch.as_object() else {
        return (Some(patch.clone()), None);
    };
    if !status_subresource || !map.contains_key("status") {
        return ((!map.is_empty()).then(|| patch.clone()), None);
    }
    let mut main = map.clone();
    let status = main
        .remove("status")
        .map(|s| Value::Object(Map::from_iter([("status".to_owned(), s)])));
    ((!main.is_empty()).then_some(Value::Object(main)), status)
}

/// The value at `path` (object keys only), if every level is an object.
/// Non-object intermediate values count as absent (Kopf's safe `resolve`).
pub fn resolve_field<'a>(body: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(body, |value, key| value.as_object()?.get(*key))
}

/// Set `path` to `value`, creating intermediate objects (replacing
/// non-object intermediates) as Kopf's `ensure`. An empty path is ignored.
pub fn ensure_field(patch: &mut Value, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = patch;
    for key in parents {
        if !current.is_object() {
            *current = Value::Object(Map::new());
        }
        let map = current
            .as_object_mut()
            .expect("invariant: made an object above");
        current = map
            .entry((*key).to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !current.is_object() {
        *current = Value::Object(Map::new());
    }
    current
        .as_object_mut()
        .expect("invariant: made an object above")
        .insert((*last).to_owned(), value);
}

/// Remove `path` and every parent object left empty by it (Kopf's `remove`).
/// Absent paths are fine.
pub fn remove_field(body: &mut Value, path: &[&str]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let Some(map) = body.as_object_mut() else {
        return;
    };
    if rest.is_empty() {
        map.remove(*first);
        return;
    }
    if let Some(child) = map.get_mut(*first) {
        remove_field(child, rest);
        if child.as_object().is_some_and(Map::is_empty) {
            map.remove(*first);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn resolve_is_safe_on_non_objects() {
        let body = json!({"a": {"b": 1, "c": [1]}});
        assert_eq!(resolve_field(&body, &["a", "b"]), Some(&json!(1)));
        assert_eq!(resolve_field(&body, &["a", "b", "x"]), None);
        assert_eq!(resolve_field(&body, &["a", "c", "0"]), None);
        assert_eq!(resolve_field(&body, &[]), Some(&body));
    }

    #[test]
    fn ensure_creates_parents() {
        let mut patch = json!({});
        ensure_field(&mut patch, &["metadata", "annotations", "x/y"], json!("v"));
        ensure_field(&mut patch, &["metadata", "labels", "l"], Value::Null);
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {"x/y": "v"}, "labels": {"l": null}}})
        );
        let mut scalar = json!({"a": 1});
        ensure_field(&mut scalar, &["a", "b"], json!(2));
        assert_eq!(scalar, json!({"a": {"b": 2}}));
    }

    #[test]
    fn remove_cleans_empty_parents() {
        let mut body = json!({"a": {"b": {"c": 1}}, "d": {"e": 1, "f": 2}});
        remove_field(&mut body, &["a", "b", "c"]);
        remove_field(&mut body, &["d", "e"]);
        remove_field(&mut body, &["x", "y"]);
        assert_eq!(body, json!({"d": {"f": 2}}));
    }

    #[test]
    fn status_is_split_only_with_the_subresource() {
        let patch = json!({"metadata": {"labels": {"a": "b"}}, "status": {"x": 1}});
        assert_eq!(split_status(&patch, false), (Some(patch.clone()), None));
        assert_eq!(
            split_status(&patch, true),
            (
                Some(json!({"metadata": {"labels": {"a": "b"}}})),
                Some(json!({"status": {"x": 1}}))
            )
        );
        assert_eq!(
            split_status(&json!({"status": {"x": 1}}), true),
            (None, Some(json!({"status": {"x": 1}})))
        );
        assert_eq!(split_status(&json!({}), true), (None, None));
    }
}
