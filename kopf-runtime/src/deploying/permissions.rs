//! [`Permission`]: one RBAC rule an operator needs, and [`required`], every
//! permission the handlers of a [`Registry`] and the command line need.
//!
//! # Guarantees
//! - Every request the runtime makes on its own is covered: discovery is
//!   not listed, since every authenticated user may read it
//!   (`system:discovery`).
//! - What handlers do with their own `client` is not known here: it comes
//!   from `#[kopf::rbac]` and [`Runner::rbac`](crate::Runner::rbac).

use std::borrow::Cow;
use std::collections::BTreeSet;

use crate::model::handlers::HandlerKind;
use crate::model::registry::Registry;
use crate::model::resources::{ResourceName, ResourceRef};
use crate::operator::namespaces::NamespaceSelector;

/// Where a [`Permission`] applies.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PermissionScope {
    /// Where the operator serves objects: in each namespace it serves
    /// (a Role per namespace), or cluster-wide with `-A` or namespace
    /// patterns (a ClusterRole).
    Served,
    /// The whole cluster (a ClusterRole): cluster-scoped resources, or
    /// namespaced ones in every namespace.
    Cluster,
    /// One namespace (a Role there).
    Namespace(String),
}

/// One RBAC rule an operator needs: some verbs on a resource (or one of
/// its subresources) of an API group, optionally only on some object
/// names, in a [`PermissionScope`], and why.
///
/// ```
/// use kopf_runtime::{Permission, PermissionScope};
///
/// let rule = Permission::new("", "configmaps")
///     .verbs(["get", "create", "patch"])
///     .why("the create handler keeps a ConfigMap per object");
/// assert_eq!(rule.scope(), &PermissionScope::Served);
/// assert_eq!(rule.verb_list(), ["create", "get", "patch"]);
/// let status = Permission::new("apps", "deployments/status").verbs(["get"]);
/// assert_eq!((status.resource(), status.subresource()), ("deployments", Some("status")));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Permission {
    scope: PermissionScope,
    group: String,
    resource: String,
    subresource: Option<String>,
    names: BTreeSet<String>,
    verbs: BTreeSet<String>,
    why: Cow<'static, str>,
}

impl Permission {
    /// A permission on `resource` of `group` (`""` for the core group),
    /// where the operator serves objects ([`PermissionScope::Served`]), with no verb
    /// yet. `resource` may name a subresource: `"pods/status"`.
    pub fn new(group: impl Into<String>, resource: impl AsRef<str>) -> Self {
        let (resource, subresource) = match resource.as_ref().split_once('/') {
            Some((resource, sub)) => (resource.to_owned(), Some(sub.to_owned())),
            None => (resource.as_ref().to_owned(), None),
        };
        Self {
            scope: PermissionScope::Served,
            group: group.into(),
            resource,
            subresource,
            names: BTreeSet::new(),
            verbs: BTreeSet::new(),
            why: Cow::Borrowed(""),
        }
    }

    /// Adds verbs (`get`, `list`, `watch`, `create`, `update`, `patch`,
    /// `delete`, `deletecollection`, or `*`).
    pub fn verbs<I, S>(mut self, verbs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.verbs.extend(verbs.into_iter().map(Into::into));
        self
    }

    /// Only on objects of these names (RBAC's `resourceNames`; they never
    /// narrow `create`, nor `list`/`watch` without a name).
    pub fn names<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.names.extend(names.into_iter().map(Into::into));
        self
    }

    /// In this scope instead of [`PermissionScope::Served`].
    pub fn scope(&self) -> &PermissionScope {
        &self.scope
    }

    /// In this scope instead of [`PermissionScope::Served`].
    pub fn in_scope(mut self, scope: PermissionScope) -> Self {
        self.scope = scope;
        self
    }

    /// Cluster-wide ([`PermissionScope::Cluster`]).
    pub fn cluster(self) -> Self {
        self.in_scope(PermissionScope::Cluster)
    }

    /// In one namespace ([`PermissionScope::Namespace`]).
    pub fn namespace(self, namespace: impl Into<String>) -> Self {
        self.in_scope(PermissionScope::Namespace(namespace.into()))
    }

    /// Says why the operator needs it (shown in manifests and reports).
    pub fn why(mut self, why: impl Into<Cow<'static, str>>) -> Self {
        self.why = why.into();
        self
    }

    /// The API group (`""` for the core group).
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The resource's plural name.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The subresource, if the permission is on one.
    pub fn subresource(&self) -> Option<&str> {
        self.subresource.as_deref()
    }

    /// `resource` or `resource/subresource`, as RBAC rules write it.
    pub fn rbac_resource(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.clone(),
        }
    }

    /// The object names it is limited to (none: every object).
    pub fn name_list(&self) -> Vec<&str> {
        self.names.iter().map(String::as_str).collect()
    }

    /// The verbs, sorted.
    pub fn verb_list(&self) -> Vec<&str> {
        self.verbs.iter().map(String::as_str).collect()
    }

    /// Why the operator needs it.
    pub fn reason(&self) -> &str {
        &self.why
    }

    /// The same permission in another scope.
    pub(crate) fn scoped(&self, scope: PermissionScope) -> Self {
        Self {
            scope,
            ..self.clone()
        }
    }

    /// What is wrong with it, if anything: no verb, or no resource.
    pub(crate) fn problem(&self) -> Option<String> {
        if self.resource.is_empty() {
            return Some(format!("a permission names no resource ({self})"));
        }
        if self.verbs.is_empty() {
            return Some(format!("a permission names no verb ({self})"));
        }
        None
    }
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verbs = self.verb_list().join(",");
        write!(f, "{verbs} {}", self.rbac_resource())?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if !self.names.is_empty() {
            write!(f, " named {}", self.name_list().join(","))?;
        }
        match &self.scope {
            PermissionScope::Served => write!(f, " where objects are served"),
            PermissionScope::Cluster => write!(f, " cluster-wide"),
            PermissionScope::Namespace(ns) => write!(f, " in namespace {ns}"),
        }
    }
}

/// Why the permissions cannot be derived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PermissionError {
    /// A handler's resource is named in a way that gives no API group or
    /// plural name without discovery.
    #[error(
        "the resource `{resource}` names no {missing}: RBAC rules need the API group and the plural name; select it as (group, version, plural), e.g. `\"kopf.dev\", \"v1\", \"kopfexamples\"`, or add its rules with `#[kopf::rbac]`"
    )]
    Unnamed {
        /// The selector as written.
        resource: String,
        /// What is missing: `API group` or `plural name`.
        missing: &'static str,
    },
    /// A permission given by `#[kopf::rbac]` or `Runner::rbac` is incomplete.
    #[error("{0}")]
    Invalid(String),
}

/// What of the command line decides the permissions.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// The namespaces served (`-n`, `-A`).
    pub(crate) namespaces: NamespaceSelector,
    /// The Lease's namespace and name, with the number of shards, if any.
    pub(crate) peering: Option<(String, String, u32)>,
    /// Whether admission webhooks are served.
    pub(crate) webhooks: bool,
    /// The name of the managed webhook configurations, if any.
    pub(crate) webhooks_managed: Option<String>,
    /// Whether Events are posted (`settings.posting.enabled`).
    pub(crate) events: bool,
    /// The operator's own namespace: where Events of cluster-scoped
    /// objects go (the client's default namespace).
    pub(crate) home: String,
    /// The permissions declared for what handlers do themselves
    /// (`#[kopf::rbac]`, `Runner::rbac`).
    pub(crate) declared: Vec<Permission>,
}

impl Plan {
    /// A plan for these namespaces, at `home`, with no peering, webhooks
    /// or declared permissions.
    pub(crate) fn new(namespaces: NamespaceSelector, home: impl Into<String>) -> Self {
        Self {
            namespaces,
            peering: None,
            webhooks: false,
            webhooks_managed: None,
            events: true,
            home: home.into(),
            declared: Vec::new(),
        }
    }
}

/// A resource that rules can name: its group, plural and scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Named {
    pub(crate) group: String,
    pub(crate) plural: String,
    /// `None` when unknown: treated as namespaced.
    pub(crate) namespaced: Option<bool>,
}

impl Named {
    /// [`Named::of`], as the one resource `required` takes.
    pub(crate) fn offline(resource: &ResourceRef) -> Result<Vec<Self>, PermissionError> {
        Self::of(resource).map(|named| vec![named])
    }

    /// The group and plural of a selector, as written (no discovery): a
    /// positional name is taken as the plural.
    pub(crate) fn of(resource: &ResourceRef) -> Result<Self, PermissionError> {
        let unnamed = |missing| PermissionError::Unnamed {
            resource: resource.to_string(),
            missing,
        };
        let group = resource.group().ok_or_else(|| unnamed("API group"))?;
        let plural = match resource.name() {
            ResourceName::Any(name) | ResourceName::Plural(name) => name.to_string(),
            _ => return Err(unnamed("plural name")),
        };
        Ok(Self {
            group: group.to_owned(),
            plural,
            namespaced: resource.namespaced(),
        })
    }
}

/// Every permission the handlers and the command line need, with
/// [`PermissionScope::Served`] resolved: each namespace served, or the cluster.
/// `name` gives the group and plural of each handler's resource
/// ([`Named::of`] without a cluster, discovery with one).
pub(crate) fn required(
    registry: &Registry,
    plan: &Plan,
    name: &dyn Fn(&ResourceRef) -> Result<Vec<Named>, PermissionError>,
) -> Result<Vec<Permission>, PermissionError> {
    let mut needed = Vec::new();
    let mut serves = false;
    for resource in registry.resources() {
        for named in name(&resource)? {
            serves = true;
            needed.extend(serving(registry, &resource, &named, plan));
        }
    }
    if serves {
        if plan.events {
            needed.push(
                Permission::new("", "events")
                    .verbs(["create"])
                    .why("handlers' outcomes are posted as Events on their objects"),
            );
        }
        needed.push(
            Permission::new("apiextensions.k8s.io", "customresourcedefinitions")
                .verbs(["list", "watch"])
                .cluster()
                .why("resources appearing or changing are noticed by watching the CRDs (else they are re-scanned every 10 s)"),
        );
    }
    let namespaces = &plan.namespaces;
    if namespaces.exact_names().is_none() && !namespaces.is_cluster_wide()
        || namespaces.has_exclusions()
    {
        needed.push(
            Permission::new("", "namespaces")
                .verbs(["list", "watch"])
                .cluster()
                .why("namespace patterns are matched against the cluster's namespaces"),
        );
    }
    if let Some((namespace, name, shards)) = &plan.peering {
        needed.extend(electing(namespace, name, *shards));
    }
    if let (true, Some(managed)) = (plan.webhooks, plan.webhooks_managed.as_deref()) {
        needed.extend(configuring(managed));
    }
    for declared in &plan.declared {
        if let Some(problem) = declared.problem() {
            return Err(PermissionError::Invalid(problem));
        }
        needed.push(declared.clone());
    }
    Ok(resolve_scopes(needed, namespaces))
}

/// What serving `resource` (as `named`) needs: every resource with
/// handlers is listed and watched, admission ones included; where the
/// operator keeps state or handlers may patch, it is patched, its
/// `status` subresource too.
fn serving(
    registry: &Registry,
    resource: &ResourceRef,
    named: &Named,
    plan: &Plan,
) -> Vec<Permission> {
    let kinds: BTreeSet<HandlerKind> = registry
        .handlers()
        .iter()
        .filter(|h| h.resource() == Some(resource))
        .map(|h| h.kind())
        .collect();
    let patches = registry.requires_finalizer(resource)
        || kinds.iter().any(|k| {
            k.is_changing()
                || matches!(
                    k,
                    HandlerKind::OnEvent | HandlerKind::Timer | HandlerKind::Daemon
                )
        });
    let cluster_scoped = named.namespaced == Some(false);
    let scope = if cluster_scoped {
        PermissionScope::Cluster
    } else {
        PermissionScope::Served
    };
    let mut needed = vec![
        Permission::new(&named.group, &named.plural)
            .verbs(["list", "watch"])
            .in_scope(scope.clone())
            .why("the handlers' objects are listed and watched"),
    ];
    if patches {
        needed.push(
            Permission::new(&named.group, &named.plural)
                .verbs(["patch"])
                .in_scope(scope.clone())
                .why("progress, the last handled state, finalizers and handlers' patches are stored on the objects"),
        );
        needed.push(
            Permission::new(&named.group, format!("{}/status", named.plural))
                .verbs(["patch"])
                .in_scope(scope)
                .why("handlers' results and patches of `status` go through the `status` subresource where the resource has one"),
        );
    }
    if plan.events && cluster_scoped {
        needed.push(
            Permission::new("", "events")
                .verbs(["create"])
                .namespace(&plan.home)
                .why("Events about cluster-scoped objects are posted in the operator's namespace"),
        );
    }
    needed
}

/// What electing on the Lease `namespace/name` needs, with `shards` slots.
fn electing(namespace: &str, name: &str, shards: u32) -> Vec<Permission> {
    let leases = || Permission::new("coordination.k8s.io", "leases").namespace(namespace);
    let keeping = if shards > 1 {
        leases()
            .verbs(["get", "list", "update", "delete"])
            .why("each replica keeps a member Lease and elects on one Lease per shard slot")
    } else {
        leases()
            .verbs(["get", "update"])
            .names([name])
            .why("the serving replica is elected on the peering Lease")
    };
    vec![
        leases()
            .verbs(["create"])
            .why("the peering Lease is created if missing"),
        keeping,
    ]
}

/// What keeping the webhook configurations named `managed` needs.
fn configuring(managed: &str) -> Vec<Permission> {
    [
        "validatingwebhookconfigurations",
        "mutatingwebhookconfigurations",
    ]
    .into_iter()
    .flat_map(|plural| {
        [
            Permission::new("admissionregistration.k8s.io", plural)
                .verbs(["create"])
                .cluster()
                .why("the managed webhook configurations are created if missing"),
            Permission::new("admissionregistration.k8s.io", plural)
                .verbs(["patch"])
                .names([managed])
                .cluster()
                .why("the managed webhook configurations are kept up to date"),
        ]
    })
    .collect()
}

/// [`PermissionScope::Served`] made concrete: one permission per namespace served
/// when they are all named, else cluster-wide.
fn resolve_scopes(needed: Vec<Permission>, namespaces: &NamespaceSelector) -> Vec<Permission> {
    let exact = namespaces.exact_names();
    let mut resolved = BTreeSet::new();
    for permission in needed {
        match (&permission.scope, &exact) {
            (PermissionScope::Served, Some(names)) => {
                resolved.extend(
                    names
                        .iter()
                        .map(|ns| permission.scoped(PermissionScope::Namespace(ns.clone()))),
                );
            }
            (PermissionScope::Served, None) => {
                resolved.insert(permission.scoped(PermissionScope::Cluster));
            }
            _ => {
                resolved.insert(permission);
            }
        }
    }
    resolved.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};

    use super::*;
    use crate::model::errors::Outcome;
    use crate::model::kwargs::Kwargs;

    async fn noop(_: Kwargs) -> Outcome {
        Outcome::Ok(None)
    }

    fn configmaps() -> ResourceRef {
        ResourceRef::of::<ConfigMap>()
    }

    fn rules(registry: &Registry, plan: &Plan) -> Vec<String> {
        required(registry, plan, &|r| Named::of(r).map(|n| vec![n]))
            .expect("permissions")
            .iter()
            .map(|p| {
                let mut text = p.to_string();
                if let Some(end) = text.find(" (") {
                    text.truncate(end);
                }
                text
            })
            .collect()
    }

    fn plan(patterns: &[&str], all: bool) -> Plan {
        Plan::new(
            NamespaceSelector::new(patterns, all).expect("a selector"),
            "ops",
        )
    }

    #[test]
    fn change_handlers_need_list_watch_patch_status_and_events_in_each_namespace() {
        let registry = Registry::builder()
            .on_create(configmaps(), "c", noop)
            .build()
            .expect("a registry");
        let rules = rules(&registry, &plan(&["a", "b"], false));
        for ns in ["a", "b"] {
            for expected in [
                format!("list,watch configmaps in namespace {ns}"),
                format!("patch configmaps in namespace {ns}"),
                format!("patch configmaps/status in namespace {ns}"),
                format!("create events in namespace {ns}"),
            ] {
                assert!(rules.contains(&expected), "{expected} in {rules:#?}");
            }
        }
        assert!(
            rules.contains(
                &"list,watch customresourcedefinitions.apiextensions.k8s.io cluster-wide"
                    .to_owned()
            ),
            "{rules:#?}"
        );
        assert_eq!(rules.len(), 9, "{rules:#?}");
    }

    #[test]
    fn all_namespaces_and_patterns_need_cluster_rules_and_patterns_namespaces() {
        let registry = Registry::builder()
            .timer(configmaps(), "t", noop)
            .interval(Duration::from_secs(1))
            .no_finalizers()
            .build()
            .expect("a registry");
        let everywhere = rules(&registry, &plan(&[], true));
        assert!(everywhere.contains(&"list,watch configmaps cluster-wide".to_owned()));
        assert!(everywhere.contains(&"patch configmaps cluster-wide".to_owned()));
        assert!(everywhere.contains(&"patch configmaps/status cluster-wide".to_owned()));
        assert!(
            !everywhere.iter().any(|r| r.contains("namespaces ")),
            "{everywhere:#?}"
        );
        let globbed = rules(&registry, &plan(&["dev-*"], false));
        assert!(globbed.contains(&"list,watch namespaces cluster-wide".to_owned()));
        assert!(globbed.contains(&"list,watch configmaps cluster-wide".to_owned()));
        let excluded = rules(&registry, &plan(&["!kube-*"], true));
        assert!(excluded.contains(&"list,watch namespaces cluster-wide".to_owned()));
    }

    #[test]
    fn cluster_scoped_resources_are_cluster_wide_with_events_at_home() {
        let registry = Registry::builder()
            .on_event(ResourceRef::of::<Namespace>(), "e", noop)
            .build()
            .expect("a registry");
        let rules = rules(&registry, &plan(&["a"], false));
        assert!(
            rules.contains(&"list,watch namespaces cluster-wide".to_owned()),
            "{rules:#?}"
        );
        assert!(
            rules.contains(&"create events in namespace ops".to_owned()),
            "{rules:#?}"
        );
    }

    #[test]
    fn peering_needs_its_lease_and_shards_every_slot() {
        let registry = Registry::builder()
            .on_event(configmaps(), "e", noop)
            .build()
            .expect("a registry");
        let mut single = plan(&["a"], false);
        single.peering = Some(("ops".into(), "op".into(), 1));
        let rules_1 = rules(&registry, &single);
        assert!(rules_1.contains(&"create leases.coordination.k8s.io in namespace ops".to_owned()));
        assert!(rules_1.contains(
            &"get,update leases.coordination.k8s.io named op in namespace ops".to_owned()
        ));
        let mut sharded = single.clone();
        sharded.peering = Some(("ops".into(), "op".into(), 4));
        let rules_4 = rules(&registry, &sharded);
        assert!(
            rules_4.contains(
                &"delete,get,list,update leases.coordination.k8s.io in namespace ops".to_owned()
            ),
            "{rules_4:#?}"
        );
    }

    #[test]
    #[cfg(feature = "webhooks")]
    fn admission_only_resources_are_watched_not_patched_and_configurations_written() {
        let registry = Registry::builder()
            .on_validate(configmaps(), "v", noop)
            .build()
            .expect("a registry");
        let mut webhooks = plan(&[], true);
        webhooks.webhooks = true;
        webhooks.webhooks_managed = Some("op.example.com".into());
        let rules = rules(&registry, &webhooks);
        assert!(
            rules.contains(&"list,watch configmaps cluster-wide".to_owned()),
            "{rules:#?}"
        );
        assert!(
            !rules.iter().any(|r| r.contains("patch configmaps")),
            "{rules:#?}"
        );
        assert!(rules.contains(
            &"patch validatingwebhookconfigurations.admissionregistration.k8s.io named op.example.com cluster-wide".to_owned()
        ), "{rules:#?}");
        assert_eq!(rules.len(), 7, "{rules:#?}");
    }

    #[test]
    fn declared_permissions_follow_the_served_namespaces_unless_scoped() {
        let registry = Registry::default();
        let mut declared = plan(&["a", "b"], false);
        declared.declared = vec![
            Permission::new("", "secrets").verbs(["get"]),
            Permission::new("apps", "deployments")
                .verbs(["get"])
                .cluster(),
            Permission::new("", "pods").verbs(["delete"]).namespace("x"),
        ];
        let rules = rules(&registry, &declared);
        assert_eq!(
            rules,
            [
                "get deployments.apps cluster-wide",
                "get secrets in namespace a",
                "get secrets in namespace b",
                "delete pods in namespace x",
            ]
        );
        declared.declared = vec![Permission::new("", "secrets")];
        let error = required(&registry, &declared, &|r| Named::of(r).map(|n| vec![n]));
        assert!(
            matches!(error, Err(PermissionError::Invalid(_))),
            "{error:?}"
        );
    }

    #[test]
    fn a_resource_without_group_or_plural_cannot_be_named_offline() {
        let error = Named::of(&ResourceRef::by_kind("KopfExample")).expect_err("no group");
        assert!(error.to_string().contains("names no API group"), "{error}");
        let error = Named::of(&ResourceRef::by_kind("KopfExample").with_group("kopf.dev"))
            .expect_err("no plural");
        assert!(
            error.to_string().contains("names no plural name"),
            "{error}"
        );
    }
}
