//! Which webhooks a request calls: `rules` (operations, groups, versions,
//! resources with their subresources, scope), `matchPolicy`, and the
//! `namespaceSelector` and `objectSelector`, matched as the API server does.

use serde_json::Value;

use super::config::Webhook;
use crate::selectors::LabelSelector;

/// An admission operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    /// A create (POST, or server-side apply of a missing object).
    Create,
    /// An update (PUT) or patch.
    Update,
    /// A delete, or each object of a deletecollection.
    Delete,
}

impl Operation {
    /// The name in rules and reviews.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// Which scope of resources a rule covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// `*` (the default).
    All,
    /// `Namespaced`: resources in namespaces.
    Namespaced,
    /// `Cluster`: cluster-scoped resources (namespaces among them).
    Cluster,
}

/// One of a webhook's `rules`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    operations: Vec<String>,
    api_groups: Vec<String>,
    api_versions: Vec<String>,
    resources: Vec<String>,
    scope: Scope,
}

/// What a request is about, as rules see it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    /// The operation.
    pub(crate) operation: Operation,
    /// API group (empty for core).
    pub(crate) group: &'a str,
    /// API version.
    pub(crate) version: &'a str,
    /// Resource plural.
    pub(crate) resource: &'a str,
    /// Subresource (`status`), empty for the main resource.
    pub(crate) subresource: &'a str,
    /// Whether the resource is namespaced.
    pub(crate) namespaced: bool,
}

impl Rule {
    /// Reads one rule of a stored configuration.
    pub(crate) fn read(rule: &Value) -> Result<Rule, String> {
        let list = |key: &str| -> Result<Vec<String>, String> {
            match rule.get(key) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|i| {
                        i.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| format!("`rules[].{key}` must hold strings"))
                    })
                    .collect(),
                Some(_) => Err(format!("`rules[].{key}` must be a list")),
            }
        };
        let scope = match rule.get("scope").and_then(Value::as_str) {
            None | Some("*") => Scope::All,
            Some("Namespaced") => Scope::Namespaced,
            Some("Cluster") => Scope::Cluster,
            Some(other) => {
                return Err(format!(
                    "`rules[].scope` {other:?} is not *, Namespaced or Cluster"
                ));
            }
        };
        Ok(Rule {
            operations: list("operations")?,
            api_groups: list("apiGroups")?,
            api_versions: list("apiVersions")?,
            resources: list("resources")?,
            scope,
        })
    }

    /// Whether the rule covers a request.
    pub(crate) fn matches(&self, t: &Target<'_>) -> bool {
        let any = |list: &[String], value: &str| list.iter().any(|v| v == "*" || v == value);
        any(&self.operations, t.operation.as_str())
            && any(&self.api_groups, t.group)
            && any(&self.api_versions, t.version)
            && self.resources.iter().any(|r| {
                // `pods` is the main resource only, `pods/status` one
                // subresource, `pods/*` the resource and every subresource,
                // `*/status` a subresource of any resource, `*/*` all.
                let (res, sub) = r.split_once('/').unwrap_or((r, ""));
                (res == "*" || res == t.resource) && (sub == "*" || sub == t.subresource)
            })
            && match self.scope {
                Scope::All => true,
                Scope::Namespaced => t.namespaced,
                Scope::Cluster => !t.namespaced,
            }
    }
}

/// Whether a webhook's rules cover a request in the version asked, or,
/// under `matchPolicy: Equivalent`, in another served version of the same
/// resource: returns that version (`None`: not called).
pub(crate) fn matched_version<'v>(
    hook: &Webhook,
    target: &Target<'_>,
    other_versions: impl Fn() -> Vec<&'v str>,
) -> Option<Option<&'v str>> {
    if hook.rules.iter().any(|r| r.matches(target)) {
        return Some(None);
    }
    if hook.match_policy == super::config::MatchPolicy::Exact {
        return None;
    }
    other_versions().into_iter().find_map(|version| {
        let other = Target { version, ..*target };
        hook.rules
            .iter()
            .any(|r| r.matches(&other))
            .then_some(Some(version))
    })
}

/// `objectSelector`: the new or the old object must match (either will do).
pub(crate) fn object_selected(
    selector: &LabelSelector,
    object: Option<&Value>,
    old: Option<&Value>,
) -> bool {
    selector.is_empty()
        || object.is_some_and(|o| selector.matches(o))
        || old.is_some_and(|o| selector.matches(o))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(spec: Value) -> Rule {
        Rule::read(&spec).unwrap()
    }

    fn target(
        operation: Operation,
        resource: &'static str,
        subresource: &'static str,
    ) -> Target<'static> {
        Target {
            operation,
            group: "",
            version: "v1",
            resource,
            subresource,
            namespaced: true,
        }
    }

    #[test]
    fn operations_groups_and_versions_match_by_name_or_star() {
        let r = rule(
            json!({"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}),
        );
        assert!(r.matches(&target(Operation::Create, "pods", "")));
        assert!(!r.matches(&target(Operation::Update, "pods", "")));
        assert!(!r.matches(&target(Operation::Create, "configmaps", "")));
        assert!(!r.matches(&Target {
            version: "v2",
            ..target(Operation::Create, "pods", "")
        }));
        let all = rule(
            json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}),
        );
        assert!(all.matches(&target(Operation::Delete, "configmaps", "")));
        assert!(
            !rule(json!({"operations": [], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}))
                .matches(&target(Operation::Create, "pods", ""))
        );
    }

    #[test]
    fn subresources_match_only_when_named() {
        let star = |resources: Value| {
            rule(
                json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": resources}),
            )
        };
        let status = target(Operation::Update, "pods", "status");
        let main = target(Operation::Update, "pods", "");
        assert!(!star(json!(["*"])).matches(&status));
        assert!(!star(json!(["pods"])).matches(&status));
        assert!(star(json!(["pods/status"])).matches(&status));
        assert!(!star(json!(["pods/status"])).matches(&main));
        assert!(star(json!(["*/status"])).matches(&status));
        assert!(!star(json!(["*/status"])).matches(&main));
        assert!(star(json!(["pods/*"])).matches(&status));
        assert!(star(json!(["pods/*"])).matches(&main));
        assert!(star(json!(["*/*"])).matches(&status));
        assert!(!star(json!(["pods/scale"])).matches(&status));
    }

    #[test]
    fn scope_separates_namespaced_and_cluster_resources() {
        let scoped = |scope: &str| {
            rule(
                json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "scope": scope}),
            )
        };
        let namespaced = target(Operation::Create, "pods", "");
        let cluster = Target {
            namespaced: false,
            ..target(Operation::Create, "namespaces", "")
        };
        assert!(scoped("Namespaced").matches(&namespaced));
        assert!(!scoped("Namespaced").matches(&cluster));
        assert!(scoped("Cluster").matches(&cluster));
        assert!(!scoped("Cluster").matches(&namespaced));
        assert!(scoped("*").matches(&cluster) && scoped("*").matches(&namespaced));
        assert!(Rule::read(&json!({"scope": "Galaxy"})).is_err());
    }

    #[test]
    fn equivalent_versions_match_unless_the_policy_is_exact() {
        let config = |policy: &str| {
            json!({"metadata": {"name": "c"}, "webhooks": [{
                "name": "w",
                "clientConfig": {"url": "https://127.0.0.1/"},
                "matchPolicy": policy,
                "rules": [{"operations": ["*"], "apiGroups": ["example.com"], "apiVersions": ["v2"], "resources": ["widgets"]}],
            }]})
        };
        let v1 = Target {
            group: "example.com",
            resource: "widgets",
            ..target(Operation::Create, "", "")
        };
        let equivalent = &crate::admission::config::read(&config("Equivalent"), false)[0];
        assert_eq!(
            matched_version(equivalent, &v1, || vec!["v2"]),
            Some(Some("v2"))
        );
        assert_eq!(matched_version(equivalent, &v1, Vec::new), None);
        let exact = &crate::admission::config::read(&config("Exact"), false)[0];
        assert_eq!(matched_version(exact, &v1, || vec!["v2"]), None);
        let v2 = Target {
            version: "v2",
            ..v1
        };
        assert_eq!(matched_version(exact, &v2, Vec::new), Some(None));
    }

    #[test]
    fn object_selector_matches_the_old_or_the_new_object() {
        let sel = LabelSelector::parse("app=web").unwrap();
        let web = json!({"metadata": {"labels": {"app": "web"}}});
        let db = json!({"metadata": {"labels": {"app": "db"}}});
        assert!(object_selected(&sel, Some(&web), None));
        assert!(object_selected(&sel, Some(&db), Some(&web)));
        assert!(object_selected(&sel, None, Some(&web)));
        assert!(!object_selected(&sel, Some(&db), Some(&db)));
        assert!(!object_selected(&sel, None, None));
        assert!(object_selected(&LabelSelector::default(), None, None));
    }
}
