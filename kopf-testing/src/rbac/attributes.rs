//! What a request asks to do, as the API server's authorizers see it
//! (`requestinfo.go`): a resource request (verb, group, resource,
//! subresource, namespace, name) or a non-resource one (verb, path), and the
//! `403 Forbidden` answered when nobody allows it (`errors.go`).

use serde_json::{Map, Value, json};

use crate::failures::ApiError;
use crate::routing::{Query, percent_decode};

/// Who makes a request, as an authenticator says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct User {
    /// `system:admin`, `system:serviceaccount:NS:NAME`, ...
    pub(crate) name: String,
    /// The user's UID (a ServiceAccount's), empty if none.
    pub(crate) uid: String,
    /// `system:authenticated`, `system:masters`, ...
    pub(crate) groups: Vec<String>,
}

/// The group every authenticated user is in.
pub(crate) const AUTHENTICATED: &str = "system:authenticated";
/// The group a request without credentials is in.
pub(crate) const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The group allowed everything, before any authorizer is asked.
pub(crate) const MASTERS: &str = "system:masters";

impl User {
    /// The emulator's administrator, in `system:masters`.
    pub(crate) fn admin() -> Self {
        Self {
            name: "system:admin".into(),
            uid: String::new(),
            groups: vec![MASTERS.into(), AUTHENTICATED.into()],
        }
    }

    /// A request that carried no credentials.
    pub(crate) fn anonymous() -> Self {
        Self {
            name: "system:anonymous".into(),
            uid: String::new(),
            groups: vec![UNAUTHENTICATED.into()],
        }
    }

    /// A ServiceAccount, as its tokens authenticate it.
    pub(crate) fn service_account(namespace: &str, name: &str, uid: &str) -> Self {
        Self {
            name: service_account_user(namespace, name),
            uid: uid.into(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                AUTHENTICATED.into(),
            ],
        }
    }

    /// Whether the user is in `system:masters`.
    pub(crate) fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == MASTERS)
    }
}

/// The user name of a ServiceAccount.
pub(crate) fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// What a request does, for the authorizer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Attributes {
    /// `get`, `list`, `watch`, `create`, ... (for a non-resource request,
    /// the method in lower case).
    pub(crate) verb: String,
    /// Whether it addresses an API resource (else a path such as `/api`).
    pub(crate) resource_request: bool,
    /// The request path.
    pub(crate) path: String,
    /// API group, empty for core.
    pub(crate) api_group: String,
    /// API version.
    pub(crate) api_version: String,
    /// The namespace, empty at the cluster scope.
    pub(crate) namespace: String,
    /// The resource (plural).
    pub(crate) resource: String,
    /// The subresource, if any.
    pub(crate) subresource: String,
    /// The object's name, if any.
    pub(crate) name: String,
}

/// Subresources of a namespace addressed as `/namespaces/NAME/SUB`.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

impl Attributes {
    /// A request's attributes, derived as `RequestInfoFactory` derives them.
    pub(crate) fn of_request(method: &str, path: &str, query: &Query) -> Self {
        let decoded = percent_decode(path);
        let mut attrs = Self {
            verb: method.to_ascii_lowercase(),
            path: decoded.clone(),
            ..Self::default()
        };
        let parts: Vec<&str> = decoded.trim_matches('/').split('/').collect();
        if parts.len() < 3 {
            return attrs;
        }
        let mut rest: &[&str] = match parts[0] {
            "api" => &parts[1..],
            "apis" if parts.len() >= 4 => {
                attrs.api_group = parts[1].into();
                &parts[2..]
            }
            _ => return attrs,
        };
        attrs.resource_request = true;
        attrs.api_version = rest[0].into();
        rest = &rest[1..];
        attrs.verb = match method {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "",
        }
        .into();
        if rest.first() == Some(&"namespaces") && rest.len() > 1 {
            attrs.namespace = rest[1].into();
            if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
                rest = &rest[2..];
            }
        }
        if let Some(resource) = rest.first() {
            attrs.resource = (*resource).into();
        }
        if let Some(name) = rest.get(1) {
            attrs.name = (*name).into();
        }
        if let Some(sub) = rest.get(2) {
            attrs.subresource = (*sub).into();
        }
        if attrs.name.is_empty() && attrs.verb == "get" {
            attrs.verb = if query.watch { "watch" } else { "list" }.into();
            // A list of one name (`metadata.name=N`) is asked of that name.
            if let Some(name) = exact_name(&query.field_selector)
                && is_path_segment(name)
            {
                attrs.name = name.into();
            }
        }
        if attrs.name.is_empty() && attrs.verb == "delete" {
            attrs.verb = "deletecollection".into();
        }
        attrs
    }

    /// The resource with its subresource (`pods/status`).
    pub(crate) fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// The name a field selector requires exactly (`metadata.name=N` or `==`).
fn exact_name(selector: &str) -> Option<&str> {
    selector.split(',').find_map(|term| {
        let term = term.trim();
        term.strip_prefix("metadata.name==")
            .or_else(|| term.strip_prefix("metadata.name="))
    })
}

/// Whether a name may be a path segment (`IsValidPathSegmentName`).
fn is_path_segment(name: &str) -> bool {
    name != "." && name != ".." && !name.contains('/') && !name.contains('%')
}

/// `403 Forbidden` for `user` doing `attrs`, with the authorizer's reason,
/// worded and detailed as the API server's `responsewriters.Forbidden`:
/// the message names the subresource, the details do not.
pub(crate) fn forbidden(user: &User, attrs: &Attributes, reason: &str) -> ApiError {
    let what = if attrs.resource_request {
        let scope = if attrs.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace {:?}", attrs.namespace)
        };
        format!(
            "User {:?} cannot {} resource {:?} in API group {:?} {scope}",
            user.name,
            attrs.verb,
            attrs.combined_resource(),
            attrs.api_group
        )
    } else {
        format!(
            "User {:?} cannot {} path {:?}",
            user.name, attrs.verb, attrs.path
        )
    };
    // Nothing that looks like HTML; quotes are fine.
    let what = what
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let why = if reason.is_empty() {
        what
    } else {
        format!("{what}: {reason}")
    };
    let mut details = Map::new();
    let message = if attrs.resource_request {
        let qualified = if attrs.api_group.is_empty() {
            attrs.resource.clone()
        } else {
            format!("{}.{}", attrs.resource, attrs.api_group)
        };
        if !attrs.name.is_empty() {
            details.insert("name".into(), json!(attrs.name));
        }
        if !attrs.api_group.is_empty() {
            details.insert("group".into(), json!(attrs.api_group));
        }
        if !attrs.resource.is_empty() {
            details.insert("kind".into(), json!(attrs.resource));
        }
        match (qualified.is_empty(), attrs.name.is_empty()) {
            (true, _) => format!("forbidden: {why}"),
            (false, true) => format!("{qualified} is forbidden: {why}"),
            (false, false) => format!("{qualified} {:?} is forbidden: {why}", attrs.name),
        }
    } else {
        format!("forbidden: {why}")
    };
    let mut err = ApiError::new(403, "Forbidden", message);
    err.details = Some(Value::Object(details));
    err
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::parse_query;

    fn attrs(method: &str, path: &str, query: &str) -> Attributes {
        Attributes::of_request(method, path, &parse_query(query))
    }

    #[test]
    fn discovery_paths_are_not_resources() {
        for path in [
            "/api",
            "/api/v1",
            "/apis",
            "/apis/apps/v1",
            "/version",
            "/healthz",
        ] {
            let a = attrs("GET", path, "");
            assert!(!a.resource_request, "{path}");
            assert_eq!((a.verb.as_str(), a.path.as_str()), ("get", path));
        }
        assert_eq!(attrs("POST", "/foo", "").verb, "post");
    }

    #[test]
    fn verbs_and_scopes_are_derived_as_the_api_server_derives_them() {
        let a = attrs("GET", "/api/v1/namespaces/ns/pods", "");
        assert_eq!(
            (a.verb.as_str(), a.namespace.as_str(), a.resource.as_str()),
            ("list", "ns", "pods")
        );
        assert_eq!(attrs("GET", "/api/v1/pods", "watch=true").verb, "watch");
        assert_eq!(
            attrs("DELETE", "/api/v1/namespaces/ns/pods", "").verb,
            "deletecollection"
        );
        let a = attrs(
            "PATCH",
            "/apis/apps/v1/namespaces/ns/deployments/d/status",
            "",
        );
        assert_eq!(
            (
                a.verb.as_str(),
                a.api_group.as_str(),
                a.name.as_str(),
                a.subresource.as_str()
            ),
            ("patch", "apps", "d", "status")
        );
        // A namespace is in its own namespace.
        let a = attrs("GET", "/api/v1/namespaces/ns", "");
        assert_eq!(
            (a.namespace.as_str(), a.resource.as_str(), a.name.as_str()),
            ("ns", "namespaces", "ns")
        );
        let a = attrs("PUT", "/api/v1/namespaces/ns/finalize", "");
        assert_eq!(
            (a.resource.as_str(), a.subresource.as_str()),
            ("namespaces", "finalize")
        );
        let a = attrs("GET", "/api/v1/namespaces", "");
        assert_eq!((a.verb.as_str(), a.namespace.as_str()), ("list", ""));
        // A list of one name is asked of that name.
        let a = attrs(
            "GET",
            "/api/v1/namespaces/ns/secrets",
            "fieldSelector=metadata.name%3Ds1",
        );
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("list", "s1"));
    }

    #[test]
    fn forbidden_messages_are_the_api_servers() {
        let user = User::service_account("ns", "op", "u");
        let err = forbidden(&user, &attrs("GET", "/api/v1/secrets", ""), "");
        assert_eq!(
            err.message,
            "secrets is forbidden: User \"system:serviceaccount:ns:op\" cannot list resource \"secrets\" in API group \"\" at the cluster scope"
        );
        assert_eq!(err.details, Some(json!({"kind": "secrets"})));
        let err = forbidden(
            &user,
            &attrs("GET", "/apis/apps/v1/namespaces/x/deployments/d/status", ""),
            "",
        );
        assert_eq!(
            err.message,
            "deployments.apps \"d\" is forbidden: User \"system:serviceaccount:ns:op\" cannot get resource \"deployments/status\" in API group \"apps\" in the namespace \"x\""
        );
        assert_eq!(
            err.details,
            Some(json!({"name": "d", "group": "apps", "kind": "deployments"}))
        );
        let err = forbidden(&user, &attrs("GET", "/foo", ""), "");
        assert_eq!(
            err.message,
            "forbidden: User \"system:serviceaccount:ns:op\" cannot get path \"/foo\""
        );
        assert_eq!(err.details, Some(json!({})));
    }
}
