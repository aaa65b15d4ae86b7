//! Admission reviews, as Kopf's admission engine serves them: one
//! `AdmissionReview` request in, the `on_validate` and `on_mutate` handlers
//! it concerns run once each, one `AdmissionReview` response out.
//!
//! The webhook server ([`webhooks`](crate::webhooks)) hands each request's
//! body here with the webhook id from its URL path, if any: then only the
//! handlers of that id run (Kopf's `webhook` hint); without one, every
//! handler of the resource does.
//!
//! # Guarantees
//! - Every handler that applies runs once, in the registry's order, with one
//!   shared `patch` and one shared `warnings` list; none is retried (Kopf's
//!   `PERMANENT` errors mode for webhooks).
//! - The request is allowed only if no handler failed. A denial carries the
//!   message and code of one failure, preferring an admission error
//!   ([`Error::Admission`](crate::Error::Admission), its own code), then a
//!   permanent error, then a temporary one, then any other (`500`), as Kopf
//!   does. A panicking handler is a failure like any other: `500`.
//! - The warnings the handlers pushed reach the client, denied or not.
//! - What the handlers wrote into `patch` (a merge patch) is answered as a
//!   JSON Patch from the reviewed object to the object with the merge patch
//!   applied, as Kopf's `as_json_patch`; nothing is answered when the merge
//!   patch changes nothing.
//! - A request that is not an `AdmissionReview` (no JSON, no `request`, no
//!   `userInfo`, no object) is refused as malformed; one for a resource no
//!   handler serves, as unknown ([`ReviewError`]), never with a review.
//!
//! # Caveats
//! - Mutating handlers are skipped on `DELETE` unless their `operations`
//!   are `DELETE` alone, as in Kopf.
//! - Unlike Kopf, which leaves it to the webhook configuration, a handler
//!   with `operations` runs only for those operations, even when the
//!   server is called without a webhook id.
//! - Each call's `memo` is a fresh copy of the operator's, as Kopf's for a
//!   `CREATE`: it is not the object's memo of the other handlers.
//! - Handlers that take indexes see them as they are, before they are
//!   filled too: a review cannot wait for the first listing.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::fields::object_name;
use crate::model::errors::HandlerError;
use crate::model::handlers::{Handler, HandlerKind, KindOptions, WebhookOptions};
use crate::model::kwargs::{Admission, Indexes, Kwargs, Logger, MemoBase, Operation, Warnings};
use crate::model::resources::Discovered;
use crate::processing::execution;

/// Why a request got no review at all (Kopf's `WebhookError`s).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReviewError {
    /// The body is not an `AdmissionReview` with what a review needs.
    #[error("not an admission review: {0}")]
    Malformed(String),
    /// No handler serves the resource of the request.
    #[error("no admission handler serves the resource {0}")]
    UnknownResource(String),
}

impl ReviewError {
    /// The HTTP status of the refusal (as Kopf's server answers).
    pub(crate) fn status(&self) -> u16 {
        match self {
            ReviewError::Malformed(_) => 400,
            ReviewError::UnknownResource(_) => 404,
        }
    }
}

/// Whether a review allowed the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Allowed.
    Allowed,
    /// Denied by a handler.
    Denied,
}

/// The webhook server's side of one request.
#[derive(Debug, Default)]
pub(crate) struct Call<'a> {
    /// The webhook id from the URL path, if any.
    pub(crate) webhook: Option<&'a str>,
    /// The HTTP headers.
    pub(crate) headers: BTreeMap<String, String>,
}

/// The admission handlers of an operator and what their calls receive.
#[derive(Clone)]
pub(crate) struct Reviewer {
    handlers: Arc<[Handler]>,
    resources: watch::Receiver<Arc<[Discovered]>>,
    memo: MemoBase,
    indexes: Indexes,
    client: Option<kube::Client>,
}

impl std::fmt::Debug for Reviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reviewer")
            .field("handlers", &self.handlers.len())
            .finish_non_exhaustive()
    }
}

impl Reviewer {
    /// Reviews with `handlers` (those of other kinds are ignored); the
    /// resources, as discovery finds them, come from `resources`.
    pub(crate) fn new(
        handlers: impl IntoIterator<Item = Handler>,
        resources: watch::Receiver<Arc<[Discovered]>>,
        memo: MemoBase,
        indexes: Indexes,
        client: Option<kube::Client>,
    ) -> Self {
        let handlers = handlers
            .into_iter()
            .filter(|h| matches!(h.kind(), HandlerKind::OnValidate | HandlerKind::OnMutate))
            .collect();
        Self {
            handlers,
            resources,
            memo,
            indexes,
            client,
        }
    }

    /// Whether a handler has this id.
    pub(crate) fn knows(&self, id: &str) -> bool {
        self.handlers.iter().any(|h| h.id() == id)
    }

    /// Reviews one `AdmissionReview` body.
    ///
    /// # Errors
    /// [`ReviewError`] when the body is no review, or no handler serves its
    /// resource.
    pub(crate) async fn review(
        &self,
        body: &[u8],
        call: Call<'_>,
    ) -> Result<(Value, Verdict), ReviewError> {
        let review: Value = serde_json::from_slice(body)
            .map_err(|error| ReviewError::Malformed(format!("the body is not JSON: {error}")))?;
        let request = review
            .get("request")
            .filter(|r| r.is_object())
            .ok_or_else(|| ReviewError::Malformed("`request` is missing".to_owned()))?;
        let resource = self.resource_of(request)?;
        let serving: Vec<&Handler> = self
            .handlers
            .iter()
            .filter(|h| h.resource().is_some_and(|r| r.matches(&resource)))
            .collect();
        if serving.is_empty() {
            return Err(ReviewError::UnknownResource(resource.to_string()));
        }
        let userinfo = request
            .get("userInfo")
            .filter(|u| !u.is_null())
            .cloned()
            .ok_or_else(|| ReviewError::Malformed("`request.userInfo` is missing".to_owned()))?;
        let object = |key: &str| request.get(key).filter(|o| o.is_object()).cloned();
        let (new, old) = (object("object"), object("oldObject"));
        let body = new.clone().or_else(|| old.clone()).ok_or_else(|| {
            ReviewError::Malformed(
                "both `request.object` and `request.oldObject` are missing".to_owned(),
            )
        })?;
        let operation = request
            .get("operation")
            .cloned()
            .and_then(|o| serde_json::from_value::<Operation>(o).ok())
            .ok_or_else(|| {
                ReviewError::Malformed(
                    "`request.operation` is not one of CREATE, UPDATE, DELETE, CONNECT".to_owned(),
                )
            })?;
        let subresource = request
            .get("subResource")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        let dryrun = request.get("dryRun").and_then(Value::as_bool) == Some(true);

        let body = Arc::new(body);
        let (old, new) = (old.map(Arc::new), new.map(Arc::new));
        let logger = Logger::new(object_name(&body));
        let warnings = Warnings::default();
        let admission = Admission {
            operation,
            dryrun,
            warnings: warnings.clone(),
            userinfo,
            subresource: subresource.clone(),
            headers: call.headers,
            ..Admission::default()
        };
        let kwargs = Kwargs::of(Arc::clone(&body), self.memo.fork(), logger)
            .with_cluster(self.client.clone(), self.indexes.clone())
            .with_admission(admission, old, new);

        let mut failures: Vec<(u8, String, u16)> = Vec::new();
        for handler in serving {
            if !applies(handler, call.webhook, operation, subresource.as_deref())
                || !handler.matches(&kwargs)
            {
                continue;
            }
            let outcome = execution::invoke(handler, kwargs.clone(), None).await;
            if let Err(error) = outcome {
                kwargs.logger.info(format!(
                    "admission handler `{}` denied the {} ({}): {error}",
                    handler.id(),
                    operation.as_str(),
                    if dryrun { "dry run" } else { "not a dry run" },
                ));
                failures.push(rank(error));
            }
        }
        failures.sort_by_key(|(rank, ..)| *rank);
        let verdict = if failures.is_empty() {
            Verdict::Allowed
        } else {
            Verdict::Denied
        };
        let mut response = json!({
            "uid": request.get("uid").cloned().unwrap_or_else(|| json!("")),
            "allowed": verdict == Verdict::Allowed,
        });
        let warnings = warnings.to_vec();
        if !warnings.is_empty() {
            response["warnings"] = json!(warnings);
        }
        let operations = json_patch_of(&body, &kwargs.patch.to_value());
        if !operations.is_empty() {
            let text = serde_json::to_vec(&operations).unwrap_or_default();
            response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(text));
            response["patchType"] = json!("JSONPatch");
        }
        if let Some((_, message, code)) = failures.into_iter().next() {
            response["status"] = json!({"message": message, "code": code});
        }
        let answer = json!({
            "apiVersion": review.get("apiVersion").cloned().unwrap_or_else(|| json!("admission.k8s.io/v1")),
            "kind": review.get("kind").cloned().unwrap_or_else(|| json!("AdmissionReview")),
            "response": response,
        });
        Ok((answer, verdict))
    }

    /// The resource of a request: as discovery found it if it did, else as
    /// the request describes it (so that reviews need not wait for
    /// discovery, nor follow it).
    fn resource_of(&self, request: &Value) -> Result<Discovered, ReviewError> {
        let part = |key: &str| {
            request
                .get("resource")
                .and_then(|r| r.get(key))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| {
                    ReviewError::Malformed(format!("`request.resource.{key}` is missing"))
                })
        };
        let (group, version, plural) = (part("group")?, part("version")?, part("resource")?);
        let found = self
            .resources
            .borrow()
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
            .cloned();
        let resource = found.unwrap_or_else(|| {
            let kind = request
                .get("kind")
                .and_then(|k| k.get("kind"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            Discovered {
                singular: kind.to_lowercase(),
                kind,
                namespaced: request
                    .get("namespace")
                    .and_then(Value::as_str)
                    .is_some_and(|ns| !ns.is_empty()),
                group,
                version,
                plural,
                ..Discovered::default()
            }
        });
        // Any version the request names is served: the API server converts
        // to the version of the configuration's rules.
        Ok(Discovered {
            preferred: true,
            ..resource
        })
    }
}

/// The webhook options of a handler (defaults for other kinds).
pub(crate) fn options_of(handler: &Handler) -> WebhookOptions {
    match handler.kind_options() {
        KindOptions::Webhook(options) => options.clone(),
        _ => WebhookOptions::default(),
    }
}

/// Whether a handler applies to a request, before its filters: the webhook
/// id, the operation, the subresource (Kopf's `iter_handlers` and
/// `_matches_subresource`).
fn applies(
    handler: &Handler,
    webhook: Option<&str>,
    operation: Operation,
    subresource: Option<&str>,
) -> bool {
    let options = options_of(handler);
    if webhook.is_some_and(|id| id != handler.id()) {
        return false;
    }
    // Mutations of objects being deleted only when asked for explicitly.
    let deletion_only = !options.operations.is_empty()
        && options.operations.iter().all(|o| *o == Operation::Delete);
    if handler.kind() == HandlerKind::OnMutate && operation == Operation::Delete && !deletion_only {
        return false;
    }
    if !options.operations.is_empty() && !options.operations.contains(&operation) {
        return false;
    }
    options.subresource.as_deref() == Some("*") || options.subresource.as_deref() == subresource
}

/// A failure's preference (lower first), message and code, as Kopf sorts
/// them: admission errors, then permanent, then temporary, then others.
fn rank(error: HandlerError) -> (u8, String, u16) {
    match error {
        HandlerError::Admission { message, code } => {
            (0, message, if code == 0 { 500 } else { code })
        }
        HandlerError::Permanent { message } => (1, message, 500),
        HandlerError::Temporary { message, .. } => (2, message, 500),
        HandlerError::Regular { message } => (9, message, 500),
        other => (9, other.to_string(), 500),
    }
}

/// The JSON Patch from `body` to `body` with the merge patch `merge`
/// applied; empty when it changes nothing.
pub(crate) fn json_patch_of(body: &Value, merge: &Value) -> Vec<json_patch::PatchOperation> {
    if merge.as_object().is_none_or(serde_json::Map::is_empty) {
        return Vec::new();
    }
    let mut patched = body.clone();
    json_patch::merge(&mut patched, merge);
    json_patch::diff(body, &patched).0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::errors::Error;
    use crate::model::resources::ResourceRef;

    fn kopfexamples() -> ResourceRef {
        ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples")
    }

    fn reviewer(handlers: Vec<Handler>) -> Reviewer {
        let (_, resources) = watch::channel(Arc::from(Vec::new()));
        Reviewer::new(
            handlers,
            resources,
            MemoBase::default(),
            Indexes::default(),
            None,
        )
    }

    fn request(operation: &str, object: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "kopf.dev", "version": "v1", "kind": "KopfExample"},
                "resource": {"group": "kopf.dev", "version": "v1", "resource": "kopfexamples"},
                "operation": operation,
                "namespace": "ns",
                "userInfo": {"username": "someone"},
                "object": object,
                "dryRun": true,
            }
        }))
        .expect("JSON")
    }

    fn object(spec: Value) -> Value {
        json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
               "metadata": {"name": "kex", "namespace": "ns"}, "spec": spec})
    }

    async fn review(reviewer: &Reviewer, body: &[u8], webhook: Option<&str>) -> Value {
        let call = Call {
            webhook,
            ..Call::default()
        };
        reviewer.review(body, call).await.expect("a review").0
    }

    #[tokio::test]
    async fn an_admission_error_denies_with_its_code_over_other_failures() {
        let handlers = vec![
            Handler::on_validate(kopfexamples(), "plain", |_: Kwargs| async {
                Err::<(), _>(Error::regular("plain failure"))
            }),
            Handler::on_validate(kopfexamples(), "picky", |_: Kwargs| async {
                Err::<(), _>(Error::admission("size must be positive", 422))
            }),
        ];
        let answer = review(
            &reviewer(handlers),
            &request("CREATE", object(json!({}))),
            None,
        )
        .await;
        assert_eq!(answer["response"]["uid"], "u-1");
        assert_eq!(answer["response"]["allowed"], false);
        assert_eq!(
            answer["response"]["status"],
            json!({"message": "size must be positive", "code": 422})
        );
        assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    }

    #[tokio::test]
    async fn a_plain_error_or_a_panic_denies_with_500() {
        let failing = Handler::on_validate(kopfexamples(), "f", |_: Kwargs| async {
            Err::<(), _>(Error::permanent("broken"))
        });
        let answer = review(
            &reviewer(vec![failing]),
            &request("CREATE", object(json!({}))),
            None,
        )
        .await;
        assert_eq!(
            answer["response"]["status"],
            json!({"message": "broken", "code": 500})
        );

        let panicking = Handler::on_validate(kopfexamples(), "p", |_: Kwargs| async {
            panic!("boom");
            #[allow(unreachable_code)]
            Ok::<(), Error>(())
        });
        let answer = review(
            &reviewer(vec![panicking]),
            &request("CREATE", object(json!({}))),
            None,
        )
        .await;
        assert_eq!(answer["response"]["allowed"], false);
        assert_eq!(answer["response"]["status"]["code"], 500);
        let message = answer["response"]["status"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(message.contains("boom"), "{message}");
    }

    #[tokio::test]
    async fn warnings_and_a_json_patch_are_answered_and_the_id_hint_narrows() {
        let handlers = vec![
            Handler::on_mutate(kopfexamples(), "defaults", |kw: Kwargs| async move {
                kw.patch.set("spec.size", json!(1));
                kw.patch.set("spec.gone", Value::Null);
                if let Some(admission) = &kw.admission {
                    admission
                        .warnings
                        .push(format!("dryrun={}", admission.dryrun));
                }
                Ok::<(), Error>(())
            }),
            Handler::on_validate(kopfexamples(), "deny", |_: Kwargs| async {
                Err::<(), _>(Error::admission("no", 400))
            }),
        ];
        let reviewer = reviewer(handlers);
        let body = request("CREATE", object(json!({"gone": true})));
        let answer = review(&reviewer, &body, Some("defaults")).await;
        let response = &answer["response"];
        assert_eq!(response["allowed"], true);
        assert_eq!(response["warnings"], json!(["dryrun=true"]));
        assert_eq!(response["patchType"], "JSONPatch");
        let patch = base64::engine::general_purpose::STANDARD
            .decode(response["patch"].as_str().expect("a patch"))
            .expect("base64");
        let patch: Value = serde_json::from_slice(&patch).expect("JSON");
        assert_eq!(
            patch,
            json!([
                {"op": "add", "path": "/spec/size", "value": 1},
                {"op": "remove", "path": "/spec/gone"},
            ])
        );
        // Without the hint, the validating handler runs too.
        let answer = review(&reviewer, &body, None).await;
        assert_eq!(answer["response"]["allowed"], false);
    }

    #[test]
    fn mutations_skip_deletions_and_operations_and_subresources_narrow() {
        let mutate = Handler::on_mutate(kopfexamples(), "m", |_: Kwargs| async {});
        assert!(applies(&mutate, None, Operation::Create, None));
        assert!(!applies(&mutate, None, Operation::Delete, None));
        assert!(!applies(&mutate, Some("other"), Operation::Create, None));
        assert!(!applies(&mutate, None, Operation::Create, Some("status")));
        let deleting = mutate
            .clone()
            .operations([Operation::Delete])
            .subresource("*");
        assert!(applies(&deleting, None, Operation::Delete, Some("status")));
        assert!(!applies(&deleting, None, Operation::Create, None));
    }

    #[tokio::test]
    async fn malformed_requests_and_unknown_resources_get_no_review() {
        let handler = Handler::on_validate(kopfexamples(), "v", |_: Kwargs| async {});
        let reviewer = reviewer(vec![handler]);
        let error = reviewer
            .review(b"{", Call::default())
            .await
            .expect_err("not JSON");
        assert_eq!(error.status(), 400);
        let mut no_user: Value =
            serde_json::from_slice(&request("CREATE", object(json!({})))).expect("JSON");
        no_user["request"]["userInfo"] = Value::Null;
        let body = serde_json::to_vec(&no_user).expect("JSON");
        let error = reviewer
            .review(&body, Call::default())
            .await
            .expect_err("no user");
        assert_eq!(error.status(), 400);
        let mut pods = no_user.clone();
        pods["request"]["resource"] = json!({"group": "", "version": "v1", "resource": "pods"});
        let body = serde_json::to_vec(&pods).expect("JSON");
        let error = reviewer
            .review(&body, Call::default())
            .await
            .expect_err("unknown");
        assert_eq!(error.status(), 404);
    }

    #[test]
    fn a_merge_patch_that_changes_nothing_gives_no_json_patch() {
        let body = json!({"spec": {"a": 1}});
        assert!(json_patch_of(&body, &json!({"spec": {"a": 1, "b": null}})).is_empty());
        assert!(json_patch_of(&body, &json!({})).is_empty());
    }
}
