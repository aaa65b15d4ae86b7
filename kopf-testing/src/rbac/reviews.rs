//! The reviews the API server answers at once, storing nothing:
//! `SelfSubjectAccessReview`, `SubjectAccessReview` and
//! `SelfSubjectRulesReview` (`pkg/registry/authorization/`),
//! `SelfSubjectReview` (who one is, `kubectl auth whoami`), and
//! `TokenRequest` (`serviceaccounts/NAME/token`,
//! `pkg/registry/core/serviceaccount/storage/token.go`).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{Method, Request, Response};

use serde_json::{Map, Value, json};

use super::attributes::{Attributes, User};
use super::authorizer::{Decision, visit_rules};
use crate::failures::ApiError;
use crate::resources::ResourceDef;
use crate::responses::json_response;
use crate::routing::ObjectPath;
use crate::shared::Shared;
use crate::validation;

/// The audience of tokens that do not ask for one, as a cluster's API server.
const DEFAULT_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
/// A token's lifetime when the request does not say (`expirationSeconds`).
const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// The shortest lifetime a token may ask for.
const MIN_EXPIRATION_SECONDS: i64 = 600;
/// The longest lifetime a token may ask for.
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;

/// `422` for a review, named as the API server names it
/// (`SelfSubjectAccessReview.authorization.k8s.io "" is invalid: ...`).
fn invalid(group: &str, kind: &str, name: &str, field: &str, detail: &str) -> ApiError {
    let mut err = ApiError::invalid(group, kind, name, format!("{field}: {detail}"));
    err.message = format!("{kind}.{group} {name:?} is invalid: {field}: {detail}");
    err
}

fn string(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The attributes a review's spec asks about (`ResourceAttributesFrom`,
/// `NonResourceAttributesFrom`).
fn review_attributes(def: &ResourceDef, spec: &Value) -> Result<Attributes, ApiError> {
    let resource = spec.get("resourceAttributes").filter(|v| !v.is_null());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
    let invalid = |field: &str, detail: &str| invalid(&def.group, &def.kind, "", field, detail);
    match (resource, non_resource) {
        (Some(_), Some(_)) => Err(invalid(
            "spec.nonResourceAttributes",
            "Invalid value: \"object\": cannot be specified in combination with resourceAttributes",
        )),
        (None, None) => Err(invalid(
            "spec.resourceAttributes",
            "Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
        (Some(r), None) => Ok(Attributes {
            verb: string(r, "verb"),
            resource_request: true,
            path: String::new(),
            api_group: string(r, "group"),
            api_version: string(r, "version"),
            namespace: string(r, "namespace"),
            resource: string(r, "resource"),
            subresource: string(r, "subresource"),
            name: string(r, "name"),
        }),
        (None, Some(n)) => Ok(Attributes {
            verb: string(n, "verb"),
            path: string(n, "path"),
            ..Attributes::default()
        }),
    }
}

/// The user a `SubjectAccessReview` asks about.
fn subject(def: &ResourceDef, spec: &Value) -> Result<User, ApiError> {
    let name = string(spec, "user");
    let groups: Vec<String> = spec
        .get("groups")
        .and_then(Value::as_array)
        .map(|g| {
            g.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if name.is_empty() && groups.is_empty() {
        return Err(invalid(
            &def.group,
            &def.kind,
            "",
            "spec.user",
            "Invalid value: \"\": at least one of user or group must be specified",
        ));
    }
    Ok(User {
        name,
        uid: string(spec, "uid"),
        groups,
    })
}

/// The review echoed with its `status`.
fn answered(mut review: Value, def: &ResourceDef, status: Value) -> Value {
    if let Some(map) = review.as_object_mut() {
        map.insert("apiVersion".into(), json!(def.api_version()));
        map.insert("kind".into(), json!(def.kind));
        map.entry("metadata").or_insert_with(|| json!({}));
        map.insert("status".into(), status);
    }
    review
}

fn access_status(decision: &Decision) -> Value {
    let mut status = Map::new();
    status.insert("allowed".into(), json!(decision.allowed()));
    if !decision.reason().is_empty() {
        status.insert("reason".into(), json!(decision.reason()));
    }
    Value::Object(status)
}

/// Answers a review of `def` created by `user` (the administrator when
/// the emulator does not enforce RBAC, as an API server allowing
/// everything answers).
pub(crate) fn review(
    shared: &Shared,
    def: &ResourceDef,
    user: &User,
    body: Value,
) -> Result<Value, ApiError> {
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let status = match def.plural.as_str() {
        "selfsubjectreviews" => {
            let mut user_info = json!({"username": user.name, "groups": user.groups});
            if !user.uid.is_empty() {
                user_info["uid"] = json!(user.uid);
            }
            json!({"userInfo": user_info})
        }
        "selfsubjectaccessreviews" => {
            let attrs = review_attributes(def, &spec)?;
            access_status(&super::decide(shared, user, &attrs))
        }
        "subjectaccessreviews" => {
            let subject = subject(def, &spec)?;
            let attrs = review_attributes(def, &spec)?;
            access_status(&super::decide(shared, &subject, &attrs))
        }
        _ => rules_status(shared, user, &string(&spec, "namespace")),
    };
    Ok(answered(body, def, status))
}

/// What `user` may do in `namespace`, as a `SelfSubjectRulesReview`
/// status lists it.
fn rules_status(shared: &Shared, user: &User, namespace: &str) -> Value {
    if user.is_master() {
        return json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        });
    }
    let policy = super::policy(&shared.store(), namespace);
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    let mut errors = Vec::new();
    visit_rules(
        &policy,
        user,
        namespace,
        |_, _, rule| {
            if !rule.resources.is_empty() {
                let mut r = json!({"verbs": rule.verbs});
                for (key, values) in [
                    ("apiGroups", &rule.api_groups),
                    ("resources", &rule.resources),
                    ("resourceNames", &rule.resource_names),
                ] {
                    if !values.is_empty() {
                        r[key] = json!(values);
                    }
                }
                resource_rules.push(r);
            }
            if !rule.non_resource_urls.is_empty() {
                non_resource_rules
                    .push(json!({"verbs": rule.verbs, "nonResourceURLs": rule.non_resource_urls}));
            }
            true
        },
        |why| errors.push(why),
    );
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": false,
    });
    match errors.as_slice() {
        [] => {}
        [one] => status["evaluationError"] = json!(one),
        many => status["evaluationError"] = json!(format!("[{}]", many.join(", "))),
    }
    status
}

/// Answers a `TokenRequest` for the ServiceAccount `namespace/name`:
/// a token that authenticates as it until it expires or the
/// ServiceAccount is gone.
pub(crate) fn token_request(
    shared: &Shared,
    namespace: &str,
    name: &str,
    body: Value,
) -> Result<Value, ApiError> {
    let sa = {
        let store = shared.store();
        let def = store
            .find_def("", "v1", "serviceaccounts")
            .ok_or_else(|| ApiError::internal("serviceaccounts are not served"))?;
        store.get(&def, Some(namespace), name)?
    };
    let uid = crate::objects::meta_str(&sa, "uid")
        .unwrap_or_default()
        .to_string();
    let mut request = body;
    if !request.is_object() {
        request = json!({});
    }
    let seconds = match request.pointer("/spec/expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRATION_SECONDS,
        Some(v) => v.as_i64().ok_or_else(|| {
            ApiError::bad_request(format!(
                "TokenRequest in version \"v1\" cannot be handled as a TokenRequest: spec.expirationSeconds: expected an integer, got {v}"
            ))
        })?,
    };
    let too = |detail: &str| {
        invalid(
            "authentication.k8s.io",
            "TokenRequest",
            name,
            "spec.expirationSeconds",
            &format!("Invalid value: {seconds}: {detail}"),
        )
    };
    if seconds < MIN_EXPIRATION_SECONDS {
        return Err(too("may not specify a duration less than 10 minutes"));
    }
    if seconds > MAX_EXPIRATION_SECONDS {
        return Err(too("may not specify a duration larger than 2^32 seconds"));
    }
    let valid = Duration::from_secs(seconds.unsigned_abs());
    let (token, _) = shared.rbac.tokens.mint(namespace, name, &uid, valid);
    let expires = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(seconds))
        .unwrap_or(jiff::Timestamp::MAX)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let audiences = match request.pointer("/spec/audiences").and_then(Value::as_array) {
        Some(a) if !a.is_empty() => json!(a),
        _ => json!([DEFAULT_AUDIENCE]),
    };
    let map = request
        .as_object_mut()
        .expect("invariant: made an object above");
    map.insert("apiVersion".into(), json!("authentication.k8s.io/v1"));
    map.insert("kind".into(), json!("TokenRequest"));
    map.entry("metadata").or_insert_with(|| json!({}));
    let spec = map.entry("spec").or_insert_with(|| json!({}));
    if !spec.is_object() {
        *spec = json!({});
    }
    spec["audiences"] = audiences;
    spec["expirationSeconds"] = json!(seconds);
    spec.as_object_mut()
        .expect("invariant: made an object above")
        .entry("boundObjectRef")
        .or_insert(Value::Null);
    map.insert(
        "status".into(),
        json!({"token": token, "expirationTimestamp": expires}),
    );
    Ok(request)
}

/// Answers an access review or a TokenRequest: created, answered at
/// once, never stored.
pub(crate) async fn serve<B>(
    shared: &Arc<Shared>,
    method: &Method,
    def: &ResourceDef,
    route: &ObjectPath,
    req: Request<B>,
) -> Result<Response<Body>, ApiError>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    if *method != Method::POST {
        return Err(ApiError::method_not_allowed());
    }
    // Without RBAC every request is the administrator's, as with an API
    // server that allows everything.
    let user = super::current_user().unwrap_or_else(User::admin);
    let (ct, body) = crate::handlers::read_body(req).await?;
    let obj = crate::handlers::parse_object(ct.as_deref(), &body)?;
    let answer = match (
        def.is_review(),
        route.namespace.as_deref(),
        route.name.as_deref(),
    ) {
        (true, None, None) => {
            validation::body_matches_request(def, None, &obj)?;
            review(shared, def, &user, obj)?
        }
        (false, Some(ns), Some(name)) => token_request(shared, ns, name, obj)?,
        _ => return Err(ApiError::no_route(&route_path(route))),
    };
    Ok(json_response(201, &answer))
}

/// A route's path, for a `404`.
fn route_path(route: &ObjectPath) -> String {
    let mut path = if route.group.is_empty() {
        format!("/api/{}", route.version)
    } else {
        format!("/apis/{}/{}", route.group, route.version)
    };
    if let Some(ns) = &route.namespace {
        path.push_str(&format!("/namespaces/{ns}"));
    }
    path.push_str(&format!("/{}", route.plural));
    for part in [&route.name, &route.subresource].into_iter().flatten() {
        path.push_str(&format!("/{part}"));
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_review_asks_about_resources_or_paths_but_not_both() {
        let def = crate::resources::builtins()
            .into_iter()
            .find(|d| d.plural == "selfsubjectaccessreviews")
            .expect("served");
        let err = review_attributes(&def, &json!({})).unwrap_err();
        assert_eq!(
            err.message,
            "SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified"
        );
        let attrs = review_attributes(
            &def,
            &json!({"nonResourceAttributes": {"verb": "get", "path": "/x"}}),
        )
        .unwrap();
        assert!(!attrs.resource_request);
        let attrs = review_attributes(
            &def,
            &json!({"resourceAttributes": {"verb": "list", "resource": "pods", "namespace": "a"}}),
        )
        .unwrap();
        assert_eq!(
            (attrs.verb.as_str(), attrs.namespace.as_str()),
            ("list", "a")
        );
    }
}
