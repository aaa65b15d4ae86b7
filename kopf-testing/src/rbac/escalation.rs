//! The API server's escalation check on writing RBAC objects
//! (`pkg/registry/rbac/*/policybased`): a user may write a Role or
//! ClusterRole only with rules it holds itself (or the `escalate` verb on
//! it), and bind a role only if it holds the role's rules (or the `bind`
//! verb on it); `system:masters` may do anything.

use std::collections::{BTreeSet, HashMap};

use serde::Deserialize;
use serde_json::{Value, json};

use super::attributes::{Attributes, User};
use super::authorizer::{Decision, PolicyRule, visit_rules};
use crate::failures::ApiError;
use crate::resources::{RBAC_GROUP, ResourceDef};
use crate::shared::Shared;

/// A list of strings as Go's `%q` prints it: `["a" "b"]`.
fn quoted(values: &[String]) -> String {
    let items: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    format!("[{}]", items.join(" "))
}

/// A rule as the API server prints it in an escalation error (`CompactString`).
fn compact_string(rule: &PolicyRule) -> String {
    let mut parts = Vec::new();
    for (name, values) in [
        ("APIGroups", &rule.api_groups),
        ("Resources", &rule.resources),
        ("NonResourceURLs", &rule.non_resource_urls),
        ("ResourceNames", &rule.resource_names),
        ("Verbs", &rule.verbs),
    ] {
        if !values.is_empty() {
            parts.push(format!("{name}:{}", quoted(values)));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

fn one(value: &str) -> Vec<String> {
    vec![value.to_string()]
}

/// A rule broken into rules of one group, resource, verb and name each
/// (`BreakdownRule`).
fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let mut rules = Vec::new();
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let simple = PolicyRule {
                    api_groups: one(group),
                    resources: one(resource),
                    verbs: one(verb),
                    ..PolicyRule::default()
                };
                if rule.resource_names.is_empty() {
                    rules.push(simple);
                } else {
                    for name in &rule.resource_names {
                        rules.push(PolicyRule {
                            resource_names: one(name),
                            ..simple.clone()
                        });
                    }
                }
            }
        }
    }
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            rules.push(PolicyRule {
                non_resource_urls: one(url),
                verbs: one(verb),
                ..PolicyRule::default()
            });
        }
    }
    rules
}

fn has_all(set: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| set.contains(w))
}

fn star_or_all(set: &[String], wanted: &[String]) -> bool {
    set.iter().any(|s| s == "*") || has_all(set, wanted)
}

/// Whether `owner` covers the broken-down rule `sub` (`ruleCovers`).
fn covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let resources = star_or_all(&owner.resources, &sub.resources)
        || sub.resources.iter().all(|r| {
            owner.resources.contains(r)
                || r.split_once('/')
                    .is_some_and(|(_, s)| owner.resources.contains(&format!("*/{s}")))
        });
    let urls = sub.non_resource_urls.iter().all(|path| {
        owner.non_resource_urls.iter().any(|o| {
            o == path
                || o.strip_suffix('*')
                    .is_some_and(|_| path.starts_with(o.trim_end_matches('*')))
        })
    });
    let names = if sub.resource_names.is_empty() {
        owner.resource_names.is_empty()
    } else {
        owner.resource_names.is_empty() || has_all(&owner.resource_names, &sub.resource_names)
    };
    star_or_all(&owner.verbs, &sub.verbs)
        && star_or_all(&owner.api_groups, &sub.api_groups)
        && resources
        && names
        && urls
}

/// The broken-down rules of `rules` that no rule of `owner` covers,
/// rules of one group, resource and name merged across verbs
/// (`Covers`, then `CompactRules`), each as the API server prints it,
/// sorted.
fn missing(owner: &[PolicyRule], rules: &[PolicyRule]) -> Vec<String> {
    let mut merged: Vec<PolicyRule> = Vec::new();
    let mut simple: HashMap<(String, String, Option<String>), usize> = HashMap::new();
    let uncovered = rules
        .iter()
        .flat_map(breakdown)
        .filter(|sub| !owner.iter().any(|o| covers(o, sub)));
    for sub in uncovered {
        if sub.non_resource_urls.is_empty() {
            let key = (
                sub.api_groups[0].clone(),
                sub.resources[0].clone(),
                sub.resource_names.first().cloned(),
            );
            if let Some(&i) = simple.get(&key) {
                if !merged[i].verbs.contains(&sub.verbs[0]) {
                    merged[i].verbs.push(sub.verbs[0].clone());
                }
                continue;
            }
            simple.insert(key, merged.len());
        }
        merged.push(sub);
    }
    let described: BTreeSet<String> = merged.iter().map(compact_string).collect();
    described.into_iter().collect()
}

fn rules_of(value: &Value) -> Vec<PolicyRule> {
    value
        .get("rules")
        .and_then(|r| Vec::<PolicyRule>::deserialize(r).ok())
        .unwrap_or_default()
}

/// Whether `user` holds `verb` on the role `resource/name`, recording the
/// rule that grants it.
fn allowed(
    shared: &Shared,
    user: &User,
    verb: &str,
    resource: &str,
    namespace: &str,
    name: &str,
) -> bool {
    let attrs = Attributes {
        verb: verb.into(),
        resource_request: true,
        api_group: RBAC_GROUP.into(),
        api_version: "*".into(),
        resource: resource.into(),
        namespace: namespace.into(),
        name: name.into(),
        ..Attributes::default()
    };
    match super::decide(shared, user, &attrs) {
        Decision::Allow { grant, .. } => {
            if let Some(grant) = grant {
                shared.rbac.usage.allowed(user, &grant);
            }
            true
        }
        Decision::NoOpinion { .. } => false,
    }
}

/// `403` unless `user` holds every rule of `rules` in `namespace`
/// (`ConfirmNoEscalation`).
fn confirm_no_escalation(
    shared: &Shared,
    user: &User,
    def: &ResourceDef,
    namespace: &str,
    name: &str,
    rules: &[PolicyRule],
) -> Result<(), ApiError> {
    let policy = super::policy(&shared.store(), namespace);
    let mut owner = Vec::new();
    let mut errors = Vec::new();
    visit_rules(
        &policy,
        user,
        namespace,
        |_, _, rule| {
            owner.push(rule.clone());
            true
        },
        |why| errors.push(why),
    );
    let missing = missing(&owner, rules);
    if missing.is_empty() {
        return Ok(());
    }
    let mut why = format!(
        "user {:?} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        quoted(&user.groups),
        missing.join("\n")
    );
    match errors.as_slice() {
        [] => {}
        [one] => why.push_str(&format!("; resolution errors: [{one}]")),
        many => why.push_str(&format!("; resolution errors: [[{}]]", many.join(", "))),
    }
    Err(forbidden(def, name, &why))
}

/// `403` for writing `name` of `def`, worded as `NewForbidden`.
fn forbidden(def: &ResourceDef, name: &str, why: &str) -> ApiError {
    let resource = format!("{}.{}", def.plural, def.group);
    let message = if name.is_empty() {
        format!("{resource} is forbidden: {why}")
    } else {
        format!("{resource} {name:?} is forbidden: {why}")
    };
    let mut err = ApiError::new(403, "Forbidden", message);
    err.details = Some(json!({"name": name, "group": def.group, "kind": def.plural}));
    if name.is_empty()
        && let Some(details) = err.details.as_mut().and_then(Value::as_object_mut)
    {
        details.remove("name");
    }
    err
}

/// Checks a write of the RBAC object `obj` in `namespace` by the request's
/// user, when RBAC is enforced: nothing for other objects or for
/// `system:masters`.
pub(crate) fn check(
    shared: &Shared,
    def: &ResourceDef,
    namespace: Option<&str>,
    obj: &Value,
) -> Result<(), ApiError> {
    if !shared.rbac.enabled || def.group != RBAC_GROUP {
        return Ok(());
    }
    let Some(user) = super::current_user() else {
        return Ok(());
    };
    if user.is_master() {
        return Ok(());
    }
    let namespace = namespace.unwrap_or("");
    let name = crate::objects::name(obj);
    match def.plural.as_str() {
        "roles" | "clusterroles" => {
            if allowed(shared, &user, "escalate", &def.plural, namespace, "") {
                return Ok(());
            }
            confirm_no_escalation(shared, &user, def, namespace, name, &rules_of(obj))
        }
        "rolebindings" | "clusterrolebindings" => {
            let role_ref = obj.get("roleRef").cloned().unwrap_or(Value::Null);
            let kind = role_ref.get("kind").and_then(Value::as_str).unwrap_or("");
            let role = role_ref.get("name").and_then(Value::as_str).unwrap_or("");
            let resource = if kind == "Role" {
                "roles"
            } else {
                "clusterroles"
            };
            if allowed(shared, &user, "bind", resource, namespace, role) {
                return Ok(());
            }
            let rules = {
                let store = shared.store();
                let policy = super::policy(&store, namespace);
                let roles = if kind == "Role" {
                    &policy.roles
                } else {
                    &policy.cluster_roles
                };
                roles
                    .iter()
                    .find(|r| crate::objects::name(r) == role)
                    .map(|r| rules_of(r))
            };
            let Some(rules) = rules else {
                let what = if kind == "Role" {
                    "role"
                } else {
                    "clusterrole"
                };
                return Err(forbidden(
                    def,
                    name,
                    &format!("{what}.rbac.authorization.k8s.io {role:?} not found"),
                ));
            };
            confirm_no_escalation(shared, &user, def, namespace, name, &rules)
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(value: Value) -> PolicyRule {
        serde_json::from_value(value).expect("a rule")
    }

    #[test]
    fn missing_rules_are_broken_down_and_merged_by_verb() {
        let owner = [rule(
            json!({"verbs": ["get"], "apiGroups": [""], "resources": ["secrets", "*/status"]}),
        )];
        let wanted = [
            rule(
                json!({"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["secrets", "pods/status"]}),
            ),
            rule(json!({"verbs": ["get"], "nonResourceURLs": ["/metrics"]})),
        ];
        assert_eq!(
            missing(&owner, &wanted),
            [
                "{APIGroups:[\"\"], Resources:[\"pods/status\"], Verbs:[\"list\" \"watch\"]}",
                "{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"list\" \"watch\"]}",
                "{NonResourceURLs:[\"/metrics\"], Verbs:[\"get\"]}",
            ]
        );
        let all = [rule(
            json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "nonResourceURLs": ["*"]}),
        )];
        assert!(missing(&all, &wanted).is_empty());
    }

    #[test]
    fn named_rules_cover_only_their_names() {
        let owner = [rule(
            json!({"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"]}),
        )];
        let named = [rule(
            json!({"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"]}),
        )];
        assert!(missing(&owner, &named).is_empty());
        let unnamed = [rule(
            json!({"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}),
        )];
        assert_eq!(
            missing(&owner, &unnamed),
            ["{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"]
        );
    }
}
