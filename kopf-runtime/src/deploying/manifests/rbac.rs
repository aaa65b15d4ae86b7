//! The RBAC objects of the permissions: one ClusterRole and
//! ClusterRoleBinding for the cluster-wide ones, one Role and RoleBinding
//! per namespace for the others, each with its permissions merged into
//! as few rules as say the same ([`rules`]) and the reasons in an
//! annotation.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::layout::{self, Layout};
use crate::deploying::permissions::{Permission, PermissionScope};

/// The annotation that lists why each permission is there, one a line.
pub(crate) const RULES_ANNOTATION: &str = "kopf.dev/rules";

/// The RBAC objects that grant `permissions` to the operator's
/// ServiceAccount: ClusterRole, ClusterRoleBinding, then a Role and a
/// RoleBinding per namespace in name order. Nothing for a scope without
/// permissions.
pub(crate) fn objects(
    layout: &Layout,
    permissions: &[Permission],
) -> Result<Vec<serde_json::Value>, serde_json::Error> {
    granting(&layout.name, &layout.namespace, permissions)
}

/// The RBAC objects, named `name`, that grant `permissions` to the
/// ServiceAccount `name` in `namespace` (see [`objects`]).
pub(crate) fn granting(
    name: &str,
    namespace: &str,
    permissions: &[Permission],
) -> Result<Vec<serde_json::Value>, serde_json::Error> {
    let mut scopes: BTreeMap<&PermissionScope, Vec<&Permission>> = BTreeMap::new();
    for permission in permissions {
        scopes
            .entry(permission.scope())
            .or_default()
            .push(permission);
    }
    let subject = Subject {
        kind: "ServiceAccount".to_owned(),
        name: name.to_owned(),
        namespace: Some(namespace.to_owned()),
        ..Subject::default()
    };
    let mut objects = Vec::new();
    for (scope, permissions) in scopes {
        let meta = |namespace: Option<&str>, why: Option<String>| ObjectMeta {
            name: Some(name.to_owned()),
            namespace: namespace.map(str::to_owned),
            labels: Some(layout::labels(name)),
            annotations: why.map(|why| [(RULES_ANNOTATION.to_owned(), why)].into()),
            ..ObjectMeta::default()
        };
        let rules = Some(rules(permissions.iter().copied()));
        let why = Some(reasons(&permissions));
        match scope {
            PermissionScope::Namespace(namespace) => {
                let namespace = Some(namespace.as_str());
                objects.push(serde_json::to_value(Role {
                    metadata: meta(namespace, why),
                    rules,
                })?);
                objects.push(serde_json::to_value(RoleBinding {
                    metadata: meta(namespace, None),
                    role_ref: role_ref("Role", name),
                    subjects: Some(vec![subject.clone()]),
                })?);
            }
            // `Served` is resolved before: as the cluster, should it slip
            // through, since that grants no less than it needs.
            PermissionScope::Cluster | PermissionScope::Served => {
                objects.push(serde_json::to_value(ClusterRole {
                    metadata: meta(None, why),
                    rules,
                    ..ClusterRole::default()
                })?);
                objects.push(serde_json::to_value(ClusterRoleBinding {
                    metadata: meta(None, None),
                    role_ref: role_ref("ClusterRole", name),
                    subjects: Some(vec![subject.clone()]),
                })?);
            }
        }
    }
    Ok(objects)
}

#[allow(
    clippy::useless_conversion,
    reason = "`apiGroup` is optional from Kubernetes 1.37's schema on, required before: `into` fits either"
)]
fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: "rbac.authorization.k8s.io".to_owned().into(),
        kind: kind.to_owned(),
        name: name.to_owned(),
    }
}

/// The rules that grant `permissions` (of one scope), as few as say the
/// same: the verbs of one resource (or subresource) of a group on the
/// same names are one rule, then the resources of a group with the same
/// verbs and names are one rule. Sorted by group, resources, names.
pub(crate) fn rules<'a>(permissions: impl IntoIterator<Item = &'a Permission>) -> Vec<PolicyRule> {
    type Names = Vec<String>;
    let mut by_resource: BTreeMap<(&str, String, Names), BTreeSet<String>> = BTreeMap::new();
    for p in permissions {
        let names = p.name_list().into_iter().map(str::to_owned).collect();
        by_resource
            .entry((p.group(), p.rbac_resource(), names))
            .or_default()
            .extend(p.verb_list().into_iter().map(str::to_owned));
    }
    // A rule with resourceNames may name one resource only (the API
    // server refuses it otherwise: "resource names cannot apply to
    // multiple resources"), so those are never merged.
    type Alone = Option<String>;
    let mut by_verbs: BTreeMap<(&str, Names, BTreeSet<String>, Alone), BTreeSet<String>> =
        BTreeMap::new();
    for ((group, resource, names), verbs) in by_resource {
        let alone = (!names.is_empty()).then(|| resource.clone());
        by_verbs
            .entry((group, names, verbs, alone))
            .or_default()
            .insert(resource);
    }
    let mut rules: Vec<PolicyRule> = by_verbs
        .into_iter()
        .map(|((group, names, verbs, _), resources)| PolicyRule {
            api_groups: Some(vec![group.to_owned()]),
            resources: Some(resources.into_iter().collect()),
            resource_names: (!names.is_empty()).then_some(names),
            verbs: verbs.into_iter().collect(),
            ..PolicyRule::default()
        })
        .collect();
    rules.sort_by(|a, b| {
        let key = |r: &PolicyRule| {
            (
                r.api_groups.clone(),
                r.resources.clone(),
                r.resource_names.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    rules
}

/// Why each permission is granted: `verbs resource[.group][/subresource]
/// [named …]: why`, one a line, in the permissions' order.
fn reasons(permissions: &[&Permission]) -> String {
    let mut lines: Vec<String> = Vec::new();
    for p in permissions {
        let mut line = format!("{} {}", p.verb_list().join(","), p.resource());
        if !p.group().is_empty() {
            line.push('.');
            line.push_str(p.group());
        }
        if let Some(subresource) = p.subresource() {
            line.push('/');
            line.push_str(subresource);
        }
        if !p.name_list().is_empty() {
            line.push_str(" named ");
            line.push_str(&p.name_list().join(","));
        }
        if !p.reason().is_empty() {
            line.push_str(": ");
            line.push_str(p.reason());
        }
        if !lines.contains(&line) {
            lines.push(line);
        }
    }
    let mut text = lines.join("\n");
    text.push('\n');
    text
}
