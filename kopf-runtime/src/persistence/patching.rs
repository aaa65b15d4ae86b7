//! Patching objects: merge patches with Kopf's error semantics.
//!
//! [`Patcher::merge`] sends one patch to an object of any (dynamic)
//! resource and returns the patched object, whose
//! `resourceVersion` is what the engine waits to see on the watch stream
//! before acting on the object again. [`Patcher::merge_as`] decodes the
//! answer into any type instead, e.g. [`ObjectVersion`] when only the version
//! matters: fields the type does not name are skipped, not built.
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
//! - Each attempt is bounded by `request_timeout`; a timed-out attempt is
//!   retried like a `5xx`.
//! - With a `patch_limit`, the clones of one [`Patcher`] send at most that
//!   many requests at once; an attempt waits for its turn before its time
//!   starts to count, and leaves its turn during a backoff.
//!
//! Merge-patch fragments are built with the helpers of
//! [`fields`](crate::fields).

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::api::{GetParams, Patch, PatchParams};
use kube::core::{ApiResource, Request, Status};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use tokio::sync::Semaphore;

use crate::fields::meta_strs;
use crate::model::retrying::{Backoff, ErrorClass, classify};
use crate::settings::NetworkingSettings;
use crate::watching::decoding;

/// A failure to patch an object.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PatchError {
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
    /// Every attempt took longer than `request_timeout`.
    #[error("patching {name} timed out {attempts} times")]
    TimedOut {
        /// The object's name.
        name: String,
        /// How many requests were made.
        attempts: usize,
    },
    /// Any other failure (`400`, `403`, a malformed answer, …).
    #[error("patching {name} failed: {source}")]
    Request {
        /// The object's name.
        name: String,
        /// The failure.
        #[source]
        source: kube::Error,
    },
}

/// The result of a patch that the server answered: the object decoded as
/// `T` (the whole JSON body by default).
#[derive(Debug, Clone)]
pub(crate) enum PatchOutcome<T = Value> {
    /// The object as it is after the patch, as the server sent it.
    Patched(Box<T>),
    /// The object does not exist any more (`404`).
    Gone,
}

impl<T> PatchOutcome<T> {
    #[cfg(test)]
    /// The patched object, if it still exists.
    pub(crate) fn object(&self) -> Option<&T> {
        match self {
            Self::Patched(obj) => Some(obj),
            Self::Gone => None,
        }
    }
}

/// The `metadata.resourceVersion` of an object, and nothing else of it: the
/// answer to decode with [`Patcher::merge_as`] when only the version matters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct ObjectVersion {
    #[serde(default)]
    metadata: ObjectVersionMeta,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
struct ObjectVersionMeta {
    #[serde(default, rename = "resourceVersion")]
    resource_version: Option<String>,
}

impl ObjectVersion {
    #[cfg(test)]
    /// The object's `resourceVersion`, if it has one.
    pub(crate) fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }

    /// Takes the `resourceVersion` out.
    pub(crate) fn into_resource_version(self) -> Option<String> {
        self.metadata.resource_version
    }
}

/// Which object to patch.
#[derive(Debug, Clone)]
pub(crate) struct PatchTarget {
    /// The object's resource (shared: every patch of every object of it
    /// names it).
    pub resource: Arc<ApiResource>,
    /// Whether the resource has a `status` subresource.
    pub status_subresource: bool,
    /// The object's namespace; `None` for cluster-scoped resources.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
}

impl PatchTarget {
    #[cfg(test)]
    /// The target for `obj` (its namespace and name) of `resource`.
    pub(crate) fn for_object(
        obj: &kube::api::DynamicObject,
        resource: impl Into<Arc<ApiResource>>,
        status_subresource: bool,
    ) -> Option<Self> {
        Some(Self {
            resource: resource.into(),
            status_subresource,
            namespace: obj.metadata.namespace.clone(),
            name: obj.metadata.name.clone()?,
        })
    }

    /// The target for the object whose JSON `body` this is (its namespace
    /// and name) of `resource`; `None` without a name.
    pub(crate) fn for_body(
        body: &Value,
        resource: impl Into<Arc<ApiResource>>,
        status_subresource: bool,
    ) -> Option<Self> {
        let [namespace, name] = meta_strs(body, ["namespace", "name"]);
        Some(Self::named(
            (namespace, name?),
            resource,
            status_subresource,
        ))
    }

    /// The target of the object named `name` in `namespace`.
    pub(crate) fn named(
        (namespace, name): (Option<&str>, &str),
        resource: impl Into<Arc<ApiResource>>,
        status_subresource: bool,
    ) -> Self {
        Self {
            resource: resource.into(),
            status_subresource,
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    /// Requests to the object's collection.
    fn request(&self) -> Request {
        Request::new(self.url_path())
    }

    /// The path of the object's collection, as [`kube::Resource::url_path`]
    /// writes it (`/api/v1/namespaces/{ns}/configmaps`), written in one
    /// piece: every patch needs it.
    fn url_path(&self) -> String {
        let api = &*self.resource;
        let namespace = self.namespace.as_deref().unwrap_or_default();
        let mut path =
            String::with_capacity(api.api_version.len() + namespace.len() + api.plural.len() + 20);
        path.push_str(if api.group.is_empty() {
            "/api/"
        } else {
            "/apis/"
        });
        path.push_str(&api.api_version);
        path.push('/');
        if let Some(namespace) = &self.namespace {
            path.push_str("namespaces/");
            path.push_str(namespace);
            path.push('/');
        }
        path.push_str(&api.plural);
        path
    }
}

/// Sends patches with retries; cheap to clone, and its clones share its
/// turns (`patch_limit`), if it has any.
#[derive(Clone)]
pub(crate) struct Patcher {
    client: Client,
    backoffs: Vec<Duration>,
    request_timeout: Option<Duration>,
    params: PatchParams,
    turns: Option<Arc<Semaphore>>,
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
    pub(crate) fn new(client: Client, settings: &NetworkingSettings) -> Self {
        Self {
            client,
            backoffs: settings.error_backoffs.clone(),
            request_timeout: settings.request_timeout,
            params: PatchParams::default(),
            turns: settings
                .patch_limit
                .map(|limit| Arc::new(Semaphore::new(limit.get()))),
        }
    }

    /// Apply a JSON merge patch; a `status` key goes to `/status` when the
    /// resource has that subresource. An empty patch sends nothing and reads
    /// the object instead.
    ///
    /// # Errors
    ///
    /// [`PatchError`] as described in the [module docs](self).
    pub(crate) async fn merge(
        &self,
        target: &PatchTarget,
        patch: &Value,
    ) -> Result<PatchOutcome, PatchError> {
        self.merge_as(target, patch).await
    }

    /// [`merge`](Self::merge), with the answer decoded as `T`: e.g.
    /// [`ObjectVersion`] for the version only, or [`serde::de::IgnoredAny`] when
    /// the answer does not matter.
    ///
    /// # Errors
    ///
    /// [`PatchError`] as described in the [module docs](self); an answer
    /// that does not decode as `T` is [`PatchError::Request`].
    pub(crate) async fn merge_as<T: DeserializeOwned>(
        &self,
        target: &PatchTarget,
        patch: &Value,
    ) -> Result<PatchOutcome<T>, PatchError> {
        let answer = self.merge_text(target, patch).await?;
        decode(target, answer)
    }

    /// [`merge`](Self::merge) with the answer undecoded: one body for every
    /// `T` of [`merge_as`](Self::merge_as).
    async fn merge_text(
        &self,
        target: &PatchTarget,
        patch: &Value,
    ) -> Result<PatchOutcome<String>, PatchError> {
        let request = target.request();
        let (main, status) = split_status(patch, target.status_subresource);
        let mut outcome = None;
        if let Some(main) = main {
            let body = Patch::Merge(&*main);
            let sent = self
                .retrying(target, &|| request.patch(&target.name, &self.params, &body))
                .await?;
            if matches!(sent, PatchOutcome::Gone) {
                return Ok(sent);
            }
            outcome = Some(sent);
        }
        if let Some(status) = status {
            let body = Patch::Merge(&status);
            let sent = self
                .retrying(target, &|| {
                    request.patch_subresource("status", &target.name, &self.params, &body)
                })
                .await?;
            outcome = Some(sent);
        }
        match outcome {
            Some(outcome) => Ok(outcome),
            None => {
                self.retrying(target, &|| request.get(&target.name, &GetParams::default()))
                    .await
            }
        }
    }

    #[cfg(test)]
    #[cfg(test)]
    /// Apply a JSON patch (RFC 6902). With `status_subresource`, operations
    /// on `/status…` go to the `/status` subresource (whole-object paths, in a
    /// second request after the rest), as Kopf splits them; the two requests
    /// are not atomic together. An empty patch reads the object instead.
    ///
    /// # Errors
    ///
    /// [`PatchError`] as described in the [module docs](self).
    pub(crate) async fn json(
        &self,
        target: &PatchTarget,
        patch: &json_patch::Patch,
    ) -> Result<PatchOutcome, PatchError> {
        let request = target.request();
        let on_status = |op: &json_patch::PatchOperation| {
            let path = op.path().to_string();
            target.status_subresource && (path == "/status" || path.starts_with("/status/"))
        };
        let (status_ops, main_ops): (Vec<_>, Vec<_>) = patch.0.iter().cloned().partition(on_status);
        let mut outcome = None;
        if !main_ops.is_empty() {
            let body = Patch::<()>::Json(json_patch::Patch(main_ops));
            let sent = self
                .retrying(target, &|| request.patch(&target.name, &self.params, &body))
                .await?;
            if matches!(sent, PatchOutcome::Gone) {
                return Ok(PatchOutcome::Gone);
            }
            outcome = Some(sent);
        }
        if !status_ops.is_empty() {
            let body = Patch::<()>::Json(json_patch::Patch(status_ops));
            let sent = self
                .retrying(target, &|| {
                    request.patch_subresource("status", &target.name, &self.params, &body)
                })
                .await?;
            outcome = Some(sent);
        }
        let answer = match outcome {
            Some(outcome) => outcome,
            None => {
                self.retrying(target, &|| request.get(&target.name, &GetParams::default()))
                    .await?
            }
        };
        decode(target, answer)
    }

    /// Send the request built by `build` until the server answers, or the
    /// retries run out; the answer is the server's text, to [`decode`].
    fn retrying<'a>(
        &'a self,
        target: &'a PatchTarget,
        build: &'a (dyn Fn() -> Result<http::Request<Vec<u8>>, kube::core::request::Error> + Sync),
    ) -> Pin<Box<dyn Future<Output = Result<PatchOutcome<String>, PatchError>> + Send + 'a>> {
        // Boxed: polled through one vtable, the retry loop is one body
        // however many places await it.
        Box::pin(async move {
            let request = || async {
                let request = build().map_err(kube::Error::BuildRequest)?;
                self.client.request_text(request).await
            };
            let mut backoff = Backoff::limited(&self.backoffs);
            let name = || target.name.clone();
            loop {
                // Never closed: no turn is only a closed semaphore's answer.
                let turn = match &self.turns {
                    Some(turns) => turns.acquire().await.ok(),
                    None => None,
                };
                let answer = match self.request_timeout {
                    Some(limit) => tokio::time::timeout(limit, request()).await,
                    None => Ok(request().await),
                };
                drop(turn);
                let error = match answer {
                    Ok(Ok(obj)) => return Ok(PatchOutcome::Patched(Box::new(obj))),
                    Ok(Err(error)) => error,
                    Err(_elapsed) => match backoff.next_delay(None) {
                        Some(delay) => {
                            tracing::debug!(name = %target.name, ?delay, "a patch timed out; retrying");
                            tokio::time::sleep(delay).await;
                            continue;
                        }
                        None => {
                            return Err(PatchError::TimedOut {
                                name: name(),
                                attempts: backoff.attempts() + 1,
                            });
                        }
                    },
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
        })
    }
}

/// The server's answer decoded as `T` (objects as deep as the watch
/// decodes by default); an answer that does not decode is a
/// [`PatchError::Request`], as the client reports it.
fn decode<T: DeserializeOwned>(
    target: &PatchTarget,
    answer: PatchOutcome<String>,
) -> Result<PatchOutcome<T>, PatchError> {
    match answer {
        PatchOutcome::Patched(text) => match decoding::from_str(&text, decoding::DEFAULT_MAX_DEPTH)
        {
            Ok(obj) => Ok(PatchOutcome::Patched(Box::new(obj))),
            Err(error) => Err(PatchError::Request {
                name: target.name.clone(),
                source: kube::Error::SerdeError(serde::de::Error::custom(error)),
            }),
        },
        PatchOutcome::Gone => Ok(PatchOutcome::Gone),
    }
}

/// Split a merge patch into the main part and the `status` part (if the
/// resource has the subresource); empty parts are `None`. A patch that is
/// not split is its own main part, borrowed rather than copied.
pub(crate) fn split_status(
    patch: &Value,
    status_subresource: bool,
) -> (Option<Cow<'_, Value>>, Option<Value>) {
    let Some(map) = patch.as_object() else {
        return (Some(Cow::Borrowed(patch)), None);
    };
    if !status_subresource || !map.contains_key("status") {
        return ((!map.is_empty()).then_some(Cow::Borrowed(patch)), None);
    }
    let mut main = map.clone();
    // A UID in the patch is a precondition (the object must be the same
    // instance): both requests carry it, so that neither lands on an object
    // re-created under the same name in between.
    let uid = main
        .get("metadata")
        .and_then(|m| m.get("uid"))
        .cloned()
        .map(|uid| Value::Object(Map::from_iter([("uid".to_owned(), uid)])));
    let status = main.remove("status").map(|s| {
        let mut part = Map::from_iter([("status".to_owned(), s)]);
        if let Some(uid) = &uid {
            part.insert("metadata".to_owned(), uid.clone());
        }
        Value::Object(part)
    });
    // Nothing but the precondition left: no change to send.
    let only_uid = uid.is_some() && main.len() == 1 && main.get("metadata") == uid.as_ref();
    let main = (!main.is_empty() && !only_uid).then_some(Cow::Owned(Value::Object(main)));
    (main, status)
}

/// Where a resource's objects live, as discovery says.
#[derive(Debug, Clone)]
pub(crate) struct ResourceTarget {
    /// The API resource (shared with the patches of its objects).
    pub api: Arc<kube::core::ApiResource>,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Whether `status` is a subresource.
    pub status_subresource: bool,
}

#[cfg(test)]
mod tests {
    use kube::api::DynamicObject;
    use serde_json::json;

    use super::*;

    #[test]
    fn an_object_version_is_the_resource_version_of_any_answer() {
        let answer = r#"{"kind": "ConfigMap", "metadata": {"name": "x", "resourceVersion": "42"}}"#;
        let version: ObjectVersion = serde_json::from_str(answer).expect("an object");
        assert_eq!(version.resource_version(), Some("42"));
    }

    #[test]
    fn the_collection_path_is_the_clients() {
        use kube::Resource;

        let core = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let grouped = ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
        let cluster = ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&());
        for resource in [core, grouped, cluster] {
            for namespace in [Some("ns-1"), None] {
                let target = PatchTarget {
                    resource: Arc::new(resource.clone()),
                    status_subresource: false,
                    namespace: namespace.map(str::to_owned),
                    name: "x".to_owned(),
                };
                assert_eq!(
                    target.url_path(),
                    DynamicObject::url_path(&resource, namespace),
                    "{} in {namespace:?}",
                    resource.plural
                );
            }
        }
    }

    mod api {
        use std::sync::atomic::{AtomicUsize, Ordering};

        use kube::api::DynamicObject;
        use serde_json::json;

        use super::super::*;
        use crate::fields::meta_str;
        use crate::mock_api::{self, Reply, example};

        const LIMIT: Duration = Duration::from_secs(600);

        fn target(status_subresource: bool) -> PatchTarget {
            PatchTarget {
                resource: mock_api::example_resource().into(),
                status_subresource,
                namespace: Some("ns".into()),
                name: "a".into(),
            }
        }

        fn patcher(client: Client) -> Patcher {
            Patcher::new(client, &NetworkingSettings::default())
        }

        async fn merge(
            patcher: &Patcher,
            target: &PatchTarget,
            patch: Value,
        ) -> Result<PatchOutcome, PatchError> {
            tokio::time::timeout(LIMIT, patcher.merge(target, &patch))
                .await
                .expect("answered in time")
        }

        #[tokio::test(start_paused = true)]
        async fn status_goes_to_the_subresource() {
            let (client, log) = mock_api::client(|r| {
                let rv = if r.uri.contains("/status") { "3" } else { "2" };
                Reply::Json(200, example("ns", "a", "u1", rv))
            });
            let patch = json!({"metadata": {"labels": {"x": "y"}}, "status": {"s": 1}});
            let outcome = merge(&patcher(client), &target(true), patch)
                .await
                .expect("patched");
            assert_eq!(
                outcome
                    .object()
                    .and_then(|o| meta_str(o, "resourceVersion")),
                Some("3")
            );
            let log = log.lock().expect("not poisoned");
            assert_eq!(log.len(), 2);
            assert_eq!(log[0].method, "PATCH");
            assert!(
                log[0]
                    .uri
                    .starts_with("/apis/kopf.dev/v1/namespaces/ns/kopfexamples/a?"),
                "{}",
                log[0].uri
            );
            assert_eq!(log[0].body, json!({"metadata": {"labels": {"x": "y"}}}));
            assert!(
                log[1]
                    .uri
                    .starts_with("/apis/kopf.dev/v1/namespaces/ns/kopfexamples/a/status?"),
                "{}",
                log[1].uri
            );
            assert_eq!(log[1].body, json!({"status": {"s": 1}}));
        }

        #[tokio::test(start_paused = true)]
        async fn status_is_inline_without_the_subresource() {
            let (client, log) =
                mock_api::client(|_| Reply::Json(200, example("ns", "a", "u1", "2")));
            let patch = json!({"metadata": {"labels": {"x": "y"}}, "status": {"s": 1}});
            merge(&patcher(client), &target(false), patch.clone())
                .await
                .expect("patched");
            let log = log.lock().expect("not poisoned");
            assert_eq!(log.len(), 1);
            assert_eq!(log[0].body, patch);
        }

        #[tokio::test(start_paused = true)]
        async fn an_answer_decodes_as_the_version_alone_or_not_at_all() {
            let (client, log) =
                mock_api::client(|_| Reply::Json(200, example("ns", "a", "u1", "7")));
            let patcher = patcher(client);
            let patch = json!({"metadata": {"labels": {"x": "y"}}});
            let outcome = patcher
                .merge_as::<ObjectVersion>(&target(false), &patch)
                .await
                .expect("patched");
            let version = outcome.object().and_then(ObjectVersion::resource_version);
            assert_eq!(version, Some("7"));
            let ignored = patcher
                .merge_as::<serde::de::IgnoredAny>(&target(false), &patch)
                .await;
            assert!(
                matches!(ignored, Ok(PatchOutcome::Patched(_))),
                "{ignored:?}"
            );
            let log = log.lock().expect("not poisoned");
            assert_eq!(log.len(), 2);
            assert!(log.iter().all(|r| r.method == "PATCH" && r.body == patch));
        }

        #[tokio::test(start_paused = true)]
        async fn an_answer_that_is_not_an_object_is_a_request_error() {
            let (client, _) =
                mock_api::client(|_| Reply::Json(200, json!(["not", "an", "object"])));
            let outcome = patcher(client)
                .merge_as::<ObjectVersion>(&target(false), &json!({"spec": {}}))
                .await;
            assert!(
                matches!(outcome, Err(PatchError::Request { .. })),
                "{outcome:?}"
            );
        }

        #[tokio::test(start_paused = true)]
        async fn missing_object_is_gone_not_an_error() {
            let (client, _) =
                mock_api::client(|_| Reply::Json(404, mock_api::status(404, "NotFound", 0)));
            let outcome = merge(&patcher(client), &target(true), json!({"status": {"s": 1}})).await;
            assert!(matches!(outcome, Ok(PatchOutcome::Gone)), "{outcome:?}");
        }

        #[tokio::test(start_paused = true)]
        async fn conflicts_and_invalid_patches_are_classified() {
            let (client, _) =
                mock_api::client(|_| Reply::Json(409, mock_api::status(409, "Conflict", 0)));
            let outcome = merge(&patcher(client), &target(false), json!({"spec": {}})).await;
            assert!(
                matches!(outcome, Err(PatchError::Conflict { .. })),
                "{outcome:?}"
            );

            let (client, _) =
                mock_api::client(|_| Reply::Json(422, mock_api::status(422, "Invalid", 0)));
            let ops: json_patch::Patch = serde_json::from_value(
                json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "x"}]),
            )
            .expect("valid");
            let outcome = tokio::time::timeout(LIMIT, patcher(client).json(&target(false), &ops))
                .await
                .expect("in time");
            assert!(
                matches!(outcome, Err(PatchError::Invalid { .. })),
                "{outcome:?}"
            );

            let (client, log) =
                mock_api::client(|_| Reply::Json(403, mock_api::status(403, "Forbidden", 0)));
            let outcome = merge(&patcher(client), &target(false), json!({"spec": {}})).await;
            assert!(
                matches!(outcome, Err(PatchError::Request { .. })),
                "{outcome:?}"
            );
            assert_eq!(
                log.lock().expect("not poisoned").len(),
                1,
                "a 403 is not retried"
            );
        }

        #[tokio::test(start_paused = true)]
        async fn throttling_is_retried_after_the_servers_hint() {
            let calls = AtomicUsize::new(0);
            let (client, _) =
                mock_api::client(move |_| match calls.fetch_add(1, Ordering::SeqCst) {
                    0 => Reply::Json(429, mock_api::status(429, "TooManyRequests", 5)),
                    _ => Reply::Json(200, example("ns", "a", "u1", "9")),
                });
            let started = tokio::time::Instant::now();
            let outcome = merge(&patcher(client), &target(false), json!({"spec": {}}))
                .await
                .expect("patched");
            assert_eq!(
                outcome
                    .object()
                    .and_then(|o| meta_str(o, "resourceVersion")),
                Some("9")
            );
            let elapsed = started.elapsed();
            assert!(
                elapsed >= Duration::from_secs(5) && elapsed < Duration::from_secs(6),
                "{elapsed:?}"
            );
        }

        #[tokio::test(start_paused = true)]
        async fn persistent_server_errors_exhaust_the_retries() {
            let (client, log) =
                mock_api::client(|_| Reply::Json(500, mock_api::status(500, "InternalError", 0)));
            let settings = NetworkingSettings {
                error_backoffs: vec![Duration::from_secs(1), Duration::from_secs(2)],
                ..NetworkingSettings::default()
            };
            let outcome = tokio::time::timeout(
                LIMIT,
                Patcher::new(client, &settings).merge(&target(false), &json!({"spec": {}})),
            )
            .await
            .expect("in time");
            assert!(
                matches!(
                    outcome,
                    Err(PatchError::RetriesExhausted { attempts: 3, .. })
                ),
                "{outcome:?}"
            );
            assert_eq!(log.lock().expect("not poisoned").len(), 3);
        }

        #[tokio::test(start_paused = true)]
        async fn json_patches_on_status_go_to_the_subresource() {
            let (client, log) =
                mock_api::client(|_| Reply::Json(200, example("ns", "a", "u1", "2")));
            let ops: json_patch::Patch =
                serde_json::from_value(json!([{"op": "add", "path": "/status/x", "value": 1}]))
                    .expect("valid");
            tokio::time::timeout(LIMIT, patcher(client.clone()).json(&target(true), &ops))
                .await
                .expect("in time")
                .expect("patched");
            assert!(
                log.lock().expect("not poisoned")[0]
                    .uri
                    .contains("/kopfexamples/a/status?")
            );

            let mixed: json_patch::Patch = serde_json::from_value(json!([
                {"op": "add", "path": "/status/x", "value": 1},
                {"op": "add", "path": "/spec/x", "value": 1},
            ]))
            .expect("valid");
            tokio::time::timeout(LIMIT, patcher(client).json(&target(true), &mixed))
                .await
                .expect("in time")
                .expect("patched");
            let log = log.lock().expect("not poisoned");
            assert_eq!(
                log.len(),
                3,
                "one status patch, then main and status halves"
            );
            assert!(log[1].uri.contains("/kopfexamples/a?"), "{}", log[1].uri);
            assert_eq!(
                log[1].body,
                json!([{"op": "add", "path": "/spec/x", "value": 1}])
            );
            assert!(
                log[2].uri.contains("/kopfexamples/a/status?"),
                "{}",
                log[2].uri
            );
            assert_eq!(
                log[2].body,
                json!([{"op": "add", "path": "/status/x", "value": 1}])
            );
        }

        #[tokio::test(start_paused = true)]
        async fn slow_answers_time_out_and_are_retried() {
            let (client, log) = mock_api::client(|_| Reply::EventsThenHang(vec![]));
            let settings = NetworkingSettings {
                request_timeout: Some(Duration::from_secs(10)),
                error_backoffs: vec![Duration::from_secs(1)],
                ..NetworkingSettings::default()
            };
            let started = tokio::time::Instant::now();
            let outcome = tokio::time::timeout(
                LIMIT,
                Patcher::new(client, &settings).merge(&target(false), &json!({"spec": {}})),
            )
            .await
            .expect("in time");
            assert!(
                matches!(outcome, Err(PatchError::TimedOut { attempts: 2, .. })),
                "{outcome:?}"
            );
            assert_eq!(log.lock().expect("not poisoned").len(), 2);
            assert_eq!(started.elapsed(), Duration::from_secs(21));
        }

        #[tokio::test(start_paused = true)]
        async fn patches_take_turns_and_wait_for_them_off_the_clock() {
            let second = Duration::from_secs(1);
            let (client, log) = mock_api::client(move |_| {
                let answer = Reply::Json(200, example("ns", "a", "u1", "2"));
                Reply::After(second, Box::new(answer))
            });
            let settings = NetworkingSettings {
                // Each answer takes 1 s: only a wait for a turn counted
                // against it would time out.
                request_timeout: Some(Duration::from_millis(1_500)),
                error_backoffs: vec![],
                patch_limit: std::num::NonZeroUsize::new(2),
                ..NetworkingSettings::default()
            };
            let patcher = Patcher::new(client, &settings);
            let started = tokio::time::Instant::now();
            let target = target(false);
            let patches = (0..6).map(|_| merge(&patcher, &target, json!({"spec": {}})));
            for outcome in futures::future::join_all(patches).await {
                assert!(
                    matches!(outcome, Ok(PatchOutcome::Patched(_))),
                    "{outcome:?}"
                );
            }
            assert_eq!(log.lock().expect("not poisoned").len(), 6, "no retries");
            assert_eq!(started.elapsed(), 3 * second, "two at a time");
        }

        #[test]
        fn targets_come_from_objects() {
            let obj: DynamicObject =
                serde_json::from_value(example("ns", "a", "u1", "1")).expect("valid");
            let target =
                PatchTarget::for_object(&obj, mock_api::example_resource(), true).expect("named");
            assert_eq!(
                (target.namespace.as_deref(), target.name.as_str()),
                (Some("ns"), "a")
            );
            let body = example("ns", "a", "u1", "1");
            let target =
                PatchTarget::for_body(&body, mock_api::example_resource(), true).expect("named");
            assert_eq!(
                (target.namespace.as_deref(), target.name.as_str()),
                (Some("ns"), "a")
            );
            let nameless = json!({"metadata": {"namespace": "ns"}});
            assert!(PatchTarget::for_body(&nameless, mock_api::example_resource(), true).is_none());
        }

        #[tokio::test(start_paused = true)]
        async fn an_empty_merge_patch_reads_the_object() {
            let (client, log) =
                mock_api::client(|_| Reply::Json(200, example("ns", "a", "u1", "4")));
            merge(&patcher(client), &target(true), json!({}))
                .await
                .expect("read");
            assert_eq!(log.lock().expect("not poisoned")[0].method, "GET");
        }
    }

    /// [`split_status`] with its parts owned, to compare.
    fn split_status(patch: &Value, status_subresource: bool) -> (Option<Value>, Option<Value>) {
        let (main, status) = super::split_status(patch, status_subresource);
        (main.map(Cow::into_owned), status)
    }

    #[test]
    fn status_is_split_only_with_the_subresource() {
        let patch = json!({"metadata": {"labels": {"a": "b"}}, "status": {"x": 1}});
        let (unsplit, _) = super::split_status(&patch, false);
        assert!(matches!(unsplit, Some(Cow::Borrowed(_))), "sent as it is");
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

    #[test]
    fn a_uid_precondition_guards_both_parts_of_a_split_patch() {
        let patch = json!({"metadata": {"uid": "u1", "labels": {"a": "b"}}, "status": {"x": 1}});
        assert_eq!(
            split_status(&patch, true),
            (
                Some(json!({"metadata": {"uid": "u1", "labels": {"a": "b"}}})),
                Some(json!({"metadata": {"uid": "u1"}, "status": {"x": 1}}))
            )
        );
        // The precondition alone is no change: only the status is sent.
        let patch = json!({"metadata": {"uid": "u1"}, "status": {"x": 1}});
        assert_eq!(
            split_status(&patch, true),
            (
                None,
                Some(json!({"metadata": {"uid": "u1"}, "status": {"x": 1}}))
            )
        );
        // Without the subresource, one patch carries both.
        assert_eq!(split_status(&patch, false), (Some(patch.clone()), None));
    }
}
