//! The RBAC authorizer, as the API server's (`plugin/pkg/auth/authorizer/rbac`
//! and `pkg/registry/rbac/validation/rule.go`): the rules of the Roles and
//! ClusterRoles that bindings grant a user, visited ClusterRoleBindings
//! first, then the RoleBindings of the request's namespace; the first rule
//! that allows the request decides.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::attributes::{Attributes, User};

/// One rule of a Role or ClusterRole.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct PolicyRule {
    pub(crate) verbs: Vec<String>,
    pub(crate) api_groups: Vec<String>,
    pub(crate) resources: Vec<String>,
    pub(crate) resource_names: Vec<String>,
    #[serde(rename = "nonResourceURLs")]
    pub(crate) non_resource_urls: Vec<String>,
}

impl PolicyRule {
    /// Whether this rule allows the request (`RuleAllows`).
    pub(crate) fn allows(&self, attrs: &Attributes) -> bool {
        if !any_or_star(&self.verbs, &attrs.verb) {
            return false;
        }
        if !attrs.resource_request {
            return self.non_resource_urls.iter().any(|url| {
                url == "*"
                    || *url == attrs.path
                    || url
                        .strip_suffix('*')
                        .is_some_and(|_| attrs.path.starts_with(url.trim_end_matches('*')))
            });
        }
        any_or_star(&self.api_groups, &attrs.api_group)
            && self.resource_matches(&attrs.combined_resource(), &attrs.subresource)
            && (self.resource_names.is_empty() || self.resource_names.contains(&attrs.name))
    }

    /// `*`, the resource exactly (`pods/status`), or `*/SUB` for a request
    /// of the subresource SUB; `pods/*` matches nothing special.
    fn resource_matches(&self, combined: &str, subresource: &str) -> bool {
        self.resources.iter().any(|r| {
            r == "*"
                || r == combined
                || (!subresource.is_empty() && r.strip_prefix("*/") == Some(subresource))
        })
    }
}

fn any_or_star(values: &[String], wanted: &str) -> bool {
    values.iter().any(|v| v == "*" || v == wanted)
}

/// A subject of a binding.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub(crate) struct Subject {
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) namespace: String,
}

impl Subject {
    /// Whether the subject is `user` (`appliesToUser`); a ServiceAccount
    /// without a namespace is of the binding's namespace.
    fn applies_to(&self, user: &User, binding_namespace: &str) -> bool {
        match self.kind.as_str() {
            "User" => user.name == self.name,
            "Group" => user.groups.contains(&self.name),
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    binding_namespace
                } else {
                    &self.namespace
                };
                !ns.is_empty()
                    && user.name == super::attributes::service_account_user(ns, &self.name)
            }
            _ => false,
        }
    }

    /// As the API server describes it in a reason.
    fn describe(&self, binding_namespace: &str) -> String {
        match self.kind.as_str() {
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    binding_namespace
                } else {
                    &self.namespace
                };
                format!("{} {:?}", self.kind, format!("{}/{ns}", self.name))
            }
            _ => format!("{} {:?}", self.kind, self.name),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct Metadata {
    name: String,
    namespace: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct RoleRef {
    kind: String,
    name: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Binding {
    metadata: Metadata,
    role_ref: RoleRef,
    subjects: Vec<Subject>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct Role {
    metadata: Metadata,
    rules: Vec<PolicyRule>,
}

/// The RBAC objects a decision reads, copied out of the store (cheap: the
/// objects are shared), so that rules are matched without its lock.
#[derive(Debug, Default)]
pub(crate) struct Policy {
    pub(crate) cluster_role_bindings: Vec<Arc<Value>>,
    pub(crate) cluster_roles: Vec<Arc<Value>>,
    /// The RoleBindings of the request's namespace.
    pub(crate) role_bindings: Vec<Arc<Value>>,
    /// The Roles of the request's namespace.
    pub(crate) roles: Vec<Arc<Value>>,
}

/// A binding or role, by kind, namespace (empty at the cluster scope) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct ObjectRef {
    /// `ClusterRoleBinding`, `RoleBinding`, `ClusterRole` or `Role`.
    pub kind: String,
    /// The namespace, empty for cluster-scoped objects.
    pub namespace: String,
    /// The object's name.
    pub name: String,
}

/// The rule that allowed a request: which binding granted which role's rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Grant {
    /// The binding.
    pub binding: ObjectRef,
    /// The role it refers to.
    pub role: ObjectRef,
    /// The rule's index in the role's `rules`.
    pub rule: usize,
}

/// What the authorizer decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Allowed, by `system:masters` (no grant) or by a rule.
    Allow {
        reason: String,
        grant: Option<Grant>,
    },
    /// No rule allows it; the reason names bindings that refer to missing roles.
    NoOpinion { reason: String },
}

impl Decision {
    /// Whether the request is allowed.
    pub(crate) fn allowed(&self) -> bool {
        matches!(self, Decision::Allow { .. })
    }

    /// The reason the API server gives.
    pub(crate) fn reason(&self) -> &str {
        match self {
            Decision::Allow { reason, .. } | Decision::NoOpinion { reason } => reason,
        }
    }
}

/// The rules a binding grants, or why they cannot be read.
fn role_rules<'a>(
    policy: &'a [Role],
    cluster_roles: &'a [Role],
    role_ref: &RoleRef,
) -> Result<(ObjectRef, &'a [PolicyRule]), String> {
    let (roles, what) = match role_ref.kind.as_str() {
        "Role" => (policy, "role"),
        "ClusterRole" => (cluster_roles, "clusterrole"),
        other => return Err(format!("unsupported role reference kind: {other:?}")),
    };
    roles
        .iter()
        .find(|r| r.metadata.name == role_ref.name)
        .map(|r| {
            let role = ObjectRef {
                kind: role_ref.kind.clone(),
                namespace: r.metadata.namespace.clone(),
                name: r.metadata.name.clone(),
            };
            (role, r.rules.as_slice())
        })
        .ok_or_else(|| {
            format!(
                "{what}.rbac.authorization.k8s.io {:?} not found",
                role_ref.name
            )
        })
}

fn parse<T: for<'de> Deserialize<'de> + Default>(objects: &[Arc<Value>]) -> Vec<T> {
    objects
        .iter()
        .filter_map(|o| T::deserialize(o.as_ref()).ok())
        .collect()
}

/// Visits every rule `policy` grants `user` in `namespace` (the cluster
/// scope when empty), with where it comes from and a description of it,
/// until `visit` returns `false`; unreadable role references are passed to
/// `error`, as `VisitRulesFor` does.
pub(crate) fn visit_rules(
    policy: &Policy,
    user: &User,
    namespace: &str,
    mut visit: impl FnMut(&Grant, &str, &PolicyRule) -> bool,
    mut error: impl FnMut(String),
) {
    let cluster_roles: Vec<Role> = parse(&policy.cluster_roles);
    let roles: Vec<Role> = parse(&policy.roles);
    let mut bindings: Vec<(&str, Binding)> = parse::<Binding>(&policy.cluster_role_bindings)
        .into_iter()
        .map(|b| ("ClusterRoleBinding", b))
        .collect();
    if !namespace.is_empty() {
        bindings.extend(
            parse::<Binding>(&policy.role_bindings)
                .into_iter()
                .filter(|b| b.metadata.namespace == namespace)
                .map(|b| ("RoleBinding", b)),
        );
    }
    for (kind, binding) in &bindings {
        let binding_ns = if *kind == "RoleBinding" {
            namespace
        } else {
            ""
        };
        let Some(subject) = binding
            .subjects
            .iter()
            .find(|s| s.applies_to(user, binding_ns))
        else {
            continue;
        };
        let (role, rules) = match role_rules(&roles, &cluster_roles, &binding.role_ref) {
            Ok(found) => found,
            Err(why) => {
                error(why);
                continue;
            }
        };
        let binding_name = if binding_ns.is_empty() {
            binding.metadata.name.clone()
        } else {
            format!("{}/{binding_ns}", binding.metadata.name)
        };
        let source = format!(
            "{kind} {binding_name:?} of {} {:?} to {}",
            binding.role_ref.kind,
            binding.role_ref.name,
            subject.describe(binding_ns)
        );
        for (index, rule) in rules.iter().enumerate() {
            let grant = Grant {
                binding: ObjectRef {
                    kind: (*kind).into(),
                    namespace: binding_ns.into(),
                    name: binding.metadata.name.clone(),
                },
                role: role.clone(),
                rule: index,
            };
            if !visit(&grant, &source, rule) {
                return;
            }
        }
    }
}

/// Decides a request as the API server's authorizer chain does:
/// `system:masters` is allowed everything, anyone else what RBAC allows.
pub(crate) fn authorize(policy: &Policy, user: &User, attrs: &Attributes) -> Decision {
    if user.is_master() {
        return Decision::Allow {
            reason: String::new(),
            grant: None,
        };
    }
    let mut allowed = None;
    let mut errors = Vec::new();
    visit_rules(
        policy,
        user,
        &attrs.namespace,
        |grant, source, rule| {
            if rule.allows(attrs) {
                allowed = Some((grant.clone(), format!("RBAC: allowed by {source}")));
                return false;
            }
            true
        },
        |why| errors.push(why),
    );
    match allowed {
        Some((grant, reason)) => Decision::Allow {
            reason,
            grant: Some(grant),
        },
        None => Decision::NoOpinion {
            reason: match errors.as_slice() {
                [] => String::new(),
                [one] => format!("RBAC: {one}"),
                many => format!("RBAC: [{}]", many.join(", ")),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::routing::parse_query;

    fn rule(value: Value) -> PolicyRule {
        serde_json::from_value(value).expect("a rule")
    }

    fn attrs(method: &str, path: &str, query: &str) -> Attributes {
        Attributes::of_request(method, path, &parse_query(query))
    }

    #[test]
    fn resources_match_exactly_or_by_wildcard() {
        let pods = rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}));
        assert!(pods.allows(&attrs("GET", "/api/v1/namespaces/a/pods/p", "")));
        assert!(!pods.allows(&attrs("GET", "/api/v1/namespaces/a/pods/p/status", "")));
        assert!(!pods.allows(&attrs("GET", "/api/v1/namespaces/a/pods", "")));
        let any_status =
            rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*/status"]}));
        assert!(any_status.allows(&attrs(
            "PATCH",
            "/apis/apps/v1/namespaces/a/deployments/d/status",
            ""
        )));
        assert!(!any_status.allows(&attrs(
            "PATCH",
            "/apis/apps/v1/namespaces/a/deployments/d",
            ""
        )));
        // `pods/*` is not a wildcard to the API server.
        let pods_any = rule(json!({"verbs": ["*"], "apiGroups": [""], "resources": ["pods/*"]}));
        assert!(!pods_any.allows(&attrs("GET", "/api/v1/namespaces/a/pods/p/status", "")));
    }

    #[test]
    fn resource_names_never_match_an_unnamed_request() {
        let named = rule(
            json!({"verbs": ["*"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s"]}),
        );
        assert!(named.allows(&attrs("GET", "/api/v1/namespaces/a/secrets/s", "")));
        assert!(!named.allows(&attrs("GET", "/api/v1/namespaces/a/secrets/t", "")));
        assert!(!named.allows(&attrs("GET", "/api/v1/namespaces/a/secrets", "")));
        assert!(!named.allows(&attrs("POST", "/api/v1/namespaces/a/secrets", "")));
        assert!(named.allows(&attrs(
            "GET",
            "/api/v1/namespaces/a/secrets",
            "fieldSelector=metadata.name=s"
        )));
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix() {
        let urls = rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz", "/apis/*"]}));
        assert!(urls.allows(&attrs("GET", "/healthz", "")));
        assert!(!urls.allows(&attrs("GET", "/healthz/ping", "")));
        assert!(urls.allows(&attrs("GET", "/apis/apps/v1", "")));
        assert!(!urls.allows(&attrs("POST", "/apis/apps/v1", "")));
        assert!(!urls.allows(&attrs("GET", "/api/v1/pods", "")));
    }
}
