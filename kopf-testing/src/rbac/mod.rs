//! Authentication and RBAC authorization, when the emulator enforces them
//! ([`EmulatorBuilder::rbac`](crate::EmulatorBuilder::rbac)), as the API
//! server does: `attributes.rs` derives what a request does and words the
//! `403`, `authorizer.rs` decides it from the stored Roles and bindings,
//! `tokens.rs` holds the ServiceAccount tokens the TokenRequest API mints,
//! `impersonation.rs` grants the `Impersonate-*` headers,
//! `escalation.rs` refuses writes of RBAC objects that grant more than
//! their writer holds,
//! `reviews.rs` answers access reviews and token requests, `usage.rs`
//! records which rule allowed what and what was denied, `bootstrap.rs`
//! holds the roles every user gets, and `validation.rs` checks the RBAC
//! objects written.

pub(crate) mod attributes;
pub(crate) mod authorizer;
pub(crate) mod bootstrap;
pub(crate) mod escalation;
pub(crate) mod impersonation;
pub(crate) mod reviews;
pub(crate) mod tokens;
pub(crate) mod usage;
pub(crate) mod validation;

use attributes::{Attributes, User, forbidden};
use authorizer::{Decision, Policy, authorize};

use http::Method;

use crate::failures::ApiError;
use crate::resources::RBAC_GROUP;
use crate::routing::Query;
use crate::shared::{Shared, bearer_token};
use crate::store::Store;

tokio::task_local! {
    /// Who sends the request being served, when RBAC is enforced.
    static USER: User;
}

/// Serves `request` as `user`'s (`None`: without RBAC), for what asks who
/// sends it (reviews, admission webhooks' `userInfo`), as Go's request
/// context carries the user.
pub(crate) async fn serve_as<F: std::future::Future>(user: Option<User>, request: F) -> F::Output {
    match user {
        Some(user) => USER.scope(user, request).await,
        None => request.await,
    }
}

/// Who sends the request being served; `None` without RBAC.
pub(crate) fn current_user() -> Option<User> {
    USER.try_with(User::clone).ok()
}

/// The RBAC state of an emulator.
#[derive(Debug, Default)]
pub(crate) struct Rbac {
    /// Whether requests are authenticated and authorized (set at start).
    pub(crate) enabled: bool,
    /// The ServiceAccount tokens minted.
    pub(crate) tokens: tokens::Tokens,
    /// Which rules allowed what, and what was denied.
    pub(crate) usage: usage::Usage,
}

/// Who sends a request with this `Authorization` header: the
/// administrator (the emulator's token, or no token when none is
/// required), a ServiceAccount (a token the TokenRequest API minted, while
/// the ServiceAccount it was minted for exists), or anonymous (no bearer
/// token while one is required); any other token is `401`.
pub(crate) fn authenticate(
    shared: &Shared,
    authorization: Option<&[u8]>,
) -> Result<User, ApiError> {
    let required = shared.token();
    let Some(given) = authorization.and_then(bearer_token) else {
        return Ok(match required {
            None => User::admin(),
            Some(_) => User::anonymous(),
        });
    };
    if required.as_deref().is_some_and(|t| t.as_bytes() == given) {
        return Ok(User::admin());
    }
    let minted = shared
        .rbac
        .tokens
        .lookup(given)
        .ok_or_else(ApiError::unauthorized)?;
    let uid = {
        let store = shared.store();
        store
            .find_def("", "v1", "serviceaccounts")
            .and_then(|def| store.get(&def, Some(&minted.namespace), &minted.name).ok())
            .and_then(|sa| crate::objects::meta_str(&sa, "uid").map(str::to_string))
    };
    // A token outlives neither its ServiceAccount nor a namesake's.
    match uid {
        Some(uid) if uid == minted.uid => Ok(User::service_account(
            &minted.namespace,
            &minted.name,
            &minted.uid,
        )),
        _ => Err(ApiError::unauthorized()),
    }
}

/// The RBAC objects a decision in `namespace` reads.
pub(crate) fn policy(store: &Store, namespace: &str) -> Policy {
    let objects = |plural: &str, ns: Option<&str>| {
        store
            .find_def(RBAC_GROUP, "v1", plural)
            .and_then(|def| store.list_snapshot(&def, ns, None, None, None).ok())
            .map(|snapshot| snapshot.objects)
            .unwrap_or_default()
    };
    let mut policy = Policy {
        cluster_role_bindings: objects("clusterrolebindings", None),
        cluster_roles: objects("clusterroles", None),
        ..Policy::default()
    };
    if !namespace.is_empty() {
        policy.role_bindings = objects("rolebindings", Some(namespace));
        policy.roles = objects("roles", Some(namespace));
    }
    policy
}

/// Decides whether `user` may do `attrs` (reading the RBAC objects under
/// the store's lock, matching without it).
pub(crate) fn decide(shared: &Shared, user: &User, attrs: &Attributes) -> Decision {
    if user.is_master() {
        return authorize(&Policy::default(), user, attrs);
    }
    let policy = policy(&shared.store(), &attrs.namespace);
    authorize(&policy, user, attrs)
}

/// Authorizes a request, recording the rule that allowed it or the denial;
/// `403 Forbidden` when nothing allows it.
pub(crate) fn authorize_request(
    shared: &Shared,
    user: &User,
    attrs: &Attributes,
) -> Result<(), ApiError> {
    match decide(shared, user, attrs) {
        Decision::Allow {
            grant: Some(grant), ..
        } => {
            shared.rbac.usage.allowed(user, &grant);
            Ok(())
        }
        Decision::Allow { grant: None, .. } => Ok(()),
        Decision::NoOpinion { reason } => {
            shared.rbac.usage.denied(user, attrs);
            Err(forbidden(user, attrs, &reason))
        }
    }
}

/// Authenticates and authorizes a request: without RBAC, only the token
/// the emulator may require (`Ok(None)`); with it, who the request acts
/// as (whom it impersonates, if allowed), once RBAC allows it.
pub(crate) fn access(
    shared: &Shared,
    method: &Method,
    path: &str,
    query: &Query,
    headers: &http::HeaderMap,
) -> Result<Option<User>, ApiError> {
    let authorization = headers
        .get(http::header::AUTHORIZATION)
        .map(http::HeaderValue::as_bytes);
    if !shared.rbac.enabled {
        return if shared.authorized(authorization, path) {
            Ok(None)
        } else {
            Err(ApiError::unauthorized())
        };
    }
    let user = authenticate(shared, authorization)?;
    let user = impersonation::acting_as(shared, user, headers)?;
    let attrs = Attributes::of_request(method.as_str(), path, query);
    authorize_request(shared, &user, &attrs)?;
    Ok(Some(user))
}
