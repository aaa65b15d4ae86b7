//! Impersonation (`Impersonate-User`, `Impersonate-Group`,
//! `Impersonate-Uid` headers), as the API server's impersonation filter
//! grants it: the requester must be allowed to `impersonate` each user
//! (a ServiceAccount's user name as `serviceaccounts`), group and UID
//! asked for; the request is then authorized as the impersonated user.

use http::HeaderMap;

use super::attributes::{AUTHENTICATED, Attributes, User};
use super::authorize_request;
use crate::failures::ApiError;
use crate::shared::Shared;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";

fn values<'a>(headers: &'a HeaderMap, name: &str) -> Vec<&'a str> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect()
}

/// What the requester must be allowed to impersonate.
fn impersonate(resource: &str, group: &str, namespace: &str, name: &str) -> Attributes {
    Attributes {
        verb: "impersonate".into(),
        resource_request: true,
        api_group: group.into(),
        resource: resource.into(),
        namespace: namespace.into(),
        name: name.into(),
        ..Attributes::default()
    }
}

/// The user a request acts as: `requester`, or whom it impersonates once
/// RBAC allows the requester to (`403` otherwise).
pub(crate) fn acting_as(
    shared: &Shared,
    requester: User,
    headers: &HeaderMap,
) -> Result<User, ApiError> {
    let users = values(headers, USER);
    let groups: Vec<String> = values(headers, GROUP)
        .into_iter()
        .map(str::to_string)
        .collect();
    let uids = values(headers, UID);
    let Some(name) = users.first().filter(|u| !u.is_empty()) else {
        if groups.is_empty() && uids.is_empty() {
            return Ok(requester);
        }
        return Err(ApiError::internal(
            "requested impersonation of groups or a UID without impersonating a user",
        ));
    };
    let service_account = name
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .filter(|(ns, sa)| !ns.is_empty() && !sa.is_empty() && !sa.contains(':'));
    let mut asked = vec![match service_account {
        Some((ns, sa)) => impersonate("serviceaccounts", "", ns, sa),
        None => impersonate("users", "", "", name),
    }];
    asked.extend(groups.iter().map(|g| impersonate("groups", "", "", g)));
    asked.extend(
        uids.iter()
            .map(|u| impersonate("uids", "authentication.k8s.io", "", u)),
    );
    for attrs in &asked {
        authorize_request(shared, &requester, attrs)?;
    }
    let mut user_groups = match (service_account, groups.is_empty()) {
        (Some((ns, sa)), true) => User::service_account(ns, sa, "").groups,
        _ => groups,
    };
    if *name != "system:anonymous" && !user_groups.iter().any(|g| g == AUTHENTICATED) {
        user_groups.push(AUTHENTICATED.into());
    }
    Ok(User {
        name: (*name).to_string(),
        uid: uids.first().map(|u| u.to_string()).unwrap_or_default(),
        groups: user_groups,
    })
}
