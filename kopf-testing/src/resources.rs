//! Resource definitions: what the emulator serves and how (built-ins and CRDs).

use serde_json::Value;

/// One served resource in one group/version (`configmaps` in `""/v1`, ...).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResourceDef {
    /// API group, empty for the core group.
    pub group: String,
    /// API version within the group.
    pub version: String,
    /// Plural name used in paths.
    pub plural: String,
    /// Singular name (lowercase kind).
    pub singular: String,
    /// The object kind.
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Short names for kubectl.
    pub short_names: Vec<String>,
    /// Fields usable in field selectors besides `metadata.name`/`metadata.namespace`.
    pub selectable_fields: Vec<String>,
    /// Categories (`all` for pods, services and deployments, as the CRD says for CRs).
    pub categories: Vec<String>,
    /// Whether `/status` is a separate subresource.
    pub status_subresource: bool,
    /// Whether this version is the storage version (for CRDs).
    pub storage: bool,
    /// How the API server keeps `metadata.generation` for it.
    pub generation: Generation,
}

/// How the API server's strategy for a resource keeps `metadata.generation`
/// (its `PrepareForCreate` and `PrepareForUpdate` in
/// `pkg/registry/<group>/<resource>/strategy.go`). On every resource an
/// update keeps the stored generation whatever the request says
/// (`rest.BeforeUpdate`), and marking an object as being deleted adds one
/// to a generation above 0 (`markAsDeleting`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Generation {
    /// None of its own (ConfigMaps, Secrets, Services, RBAC, Leases, ...):
    /// an object keeps the one its creator gave (normally none), and no
    /// write changes it.
    Untracked,
    /// 1 on create, one more on each write that changes the object outside
    /// `metadata` (and outside `status` when that is a subresource): Pods,
    /// PodDisruptionBudgets, CRDs, webhook configurations, custom resources.
    Spec,
    /// As `Spec`, and also on a write that changes its annotations
    /// (Deployments).
    SpecAndAnnotations,
}

impl Generation {
    /// The API server's rule for a built-in resource.
    fn of_builtin(group: &str, plural: &str) -> Self {
        match (group, plural) {
            ("apps", "deployments") => Self::SpecAndAnnotations,
            ("", "pods")
            | ("policy", "poddisruptionbudgets")
            | ("apiextensions.k8s.io", "customresourcedefinitions")
            | (
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations" | "mutatingwebhookconfigurations",
            ) => Self::Spec,
            _ => Self::Untracked,
        }
    }

    /// Whether a write from `old` to `new` adds one to the generation.
    pub(crate) fn bumps(self, old: &Value, new: &Value, status_is_subresource: bool) -> bool {
        let spec = || crate::objects::spec_changed(old, new, status_is_subresource);
        let annotations =
            || old.pointer("/metadata/annotations") != new.pointer("/metadata/annotations");
        match self {
            Self::Untracked => false,
            Self::Spec => spec(),
            Self::SpecAndAnnotations => spec() || annotations(),
        }
    }
}

impl ResourceDef {
    /// `apiVersion` of objects in this group/version.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Key of the storage this resource shares across versions.
    pub(crate) fn store_key(&self) -> StoreKey {
        // events.k8s.io/v1 Events are another view of core/v1 Events.
        let group = if self.group == "events.k8s.io" && self.plural == "events" {
            ""
        } else {
            self.group.as_str()
        };
        StoreKey {
            group: group.to_string(),
            plural: self.plural.clone(),
        }
    }
}

/// Identifies the objects of one resource across all its versions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct StoreKey {
    /// API group.
    pub group: String,
    /// Plural name.
    pub plural: String,
}

fn builtin(
    group: &str,
    version: &str,
    plural: &str,
    kind: &str,
    namespaced: bool,
    short: &[&str],
    status: bool,
) -> ResourceDef {
    ResourceDef {
        group: group.into(),
        version: version.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        kind: kind.into(),
        namespaced,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        selectable_fields: builtin_selectable_fields(group, plural)
            .iter()
            .map(|s| s.to_string())
            .collect(),
        categories: if matches!(
            (group, plural),
            ("", "pods" | "services") | ("apps", "deployments")
        ) {
            vec!["all".into()]
        } else {
            Vec::new()
        },
        status_subresource: status,
        storage: true,
        generation: Generation::of_builtin(group, plural),
    }
}

/// The kind-specific field selectors the API server supports for built-ins.
fn builtin_selectable_fields(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "events") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        _ => &[],
    }
}

impl ResourceDef {
    /// Every field usable in a field selector on this resource.
    pub(crate) fn field_selectors(&self) -> Vec<String> {
        let mut fields = vec![
            "metadata.name".to_string(),
            "metadata.namespace".to_string(),
        ];
        fields.extend(self.selectable_fields.iter().cloned());
        fields
    }
}

/// The built-in resources every emulator serves.
pub(crate) fn builtins() -> Vec<ResourceDef> {
    vec![
        builtin("", "v1", "namespaces", "Namespace", false, &["ns"], true),
        builtin("", "v1", "configmaps", "ConfigMap", true, &["cm"], false),
        builtin("", "v1", "secrets", "Secret", true, &[], false),
        builtin("", "v1", "pods", "Pod", true, &["po"], true),
        builtin("", "v1", "events", "Event", true, &["ev"], false),
        builtin("", "v1", "services", "Service", true, &["svc"], true),
        builtin(
            "",
            "v1",
            "serviceaccounts",
            "ServiceAccount",
            true,
            &["sa"],
            false,
        ),
        builtin(
            "events.k8s.io",
            "v1",
            "events",
            "Event",
            true,
            &["ev"],
            false,
        ),
        builtin(
            "coordination.k8s.io",
            "v1",
            "leases",
            "Lease",
            true,
            &[],
            false,
        ),
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            false,
            &[],
            false,
        ),
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            false,
            &[],
            false,
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            &["crd", "crds"],
            true,
        ),
        builtin(RBAC_GROUP, "v1", "roles", "Role", true, &[], false),
        builtin(
            RBAC_GROUP,
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
            &[],
            false,
        ),
        builtin(
            RBAC_GROUP,
            "v1",
            "clusterroles",
            "ClusterRole",
            false,
            &[],
            false,
        ),
        builtin(
            RBAC_GROUP,
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
            &[],
            false,
        ),
        builtin(
            AUTHORIZATION_GROUP,
            "v1",
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            false,
            &[],
            false,
        ),
        builtin(
            AUTHORIZATION_GROUP,
            "v1",
            "selfsubjectrulesreviews",
            "SelfSubjectRulesReview",
            false,
            &[],
            false,
        ),
        builtin(
            AUTHORIZATION_GROUP,
            "v1",
            "subjectaccessreviews",
            "SubjectAccessReview",
            false,
            &[],
            false,
        ),
        builtin(
            AUTHENTICATION_GROUP,
            "v1",
            "selfsubjectreviews",
            "SelfSubjectReview",
            false,
            &[],
            false,
        ),
        builtin(
            "apps",
            "v1",
            "deployments",
            "Deployment",
            true,
            &["deploy"],
            true,
        ),
        builtin(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
            &["pdb"],
            true,
        ),
    ]
}

/// The group of Roles, ClusterRoles and their bindings.
pub(crate) const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The group of the access reviews.
pub(crate) const AUTHORIZATION_GROUP: &str = "authorization.k8s.io";

/// The group of `SelfSubjectReview` and `TokenRequest`.
pub(crate) const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";

/// Every verb of a resource stored and served in full.
const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// A subresource served besides `status`, as discovery lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Subresource {
    /// The subresource's name (`token`).
    pub name: &'static str,
    /// The group of the object it answers with.
    pub group: &'static str,
    /// The version of the object it answers with.
    pub version: &'static str,
    /// The kind of the object it answers with.
    pub kind: &'static str,
    /// Its verbs.
    pub verbs: &'static [&'static str],
}

/// `serviceaccounts/token`: the TokenRequest API.
const SERVICE_ACCOUNT_TOKEN: Subresource = Subresource {
    name: "token",
    group: AUTHENTICATION_GROUP,
    version: "v1",
    kind: "TokenRequest",
    verbs: &["create"],
};

impl ResourceDef {
    /// The verbs the resource has, as discovery lists them: the access
    /// reviews are created and answered, never stored.
    pub(crate) fn verbs(&self) -> &'static [&'static str] {
        if self.is_review() {
            &["create"]
        } else {
            ALL_VERBS
        }
    }

    /// Whether this is a review (of access, or of who one is), answered
    /// at once and not stored.
    pub(crate) fn is_review(&self) -> bool {
        self.group == AUTHORIZATION_GROUP || self.group == AUTHENTICATION_GROUP
    }

    /// The subresources served besides `status`.
    pub(crate) fn extra_subresources(&self) -> &'static [Subresource] {
        if self.group.is_empty() && self.plural == "serviceaccounts" {
            std::slice::from_ref(&SERVICE_ACCOUNT_TOKEN)
        } else {
            &[]
        }
    }
}

/// Why a CRD object cannot be served.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum CrdError {
    /// A required field is missing or has the wrong type.
    #[error("spec.{0} is required")]
    Missing(&'static str),
    /// The object name must be `<plural>.<group>`.
    #[error("metadata.name must be spec.names.plural + \".\" + spec.group ({0:?})")]
    BadName(String),
    /// No version is served.
    #[error("spec.versions must contain at least one served version")]
    NoVersions,
    /// Scope is neither Namespaced nor Cluster.
    #[error("spec.scope must be \"Namespaced\" or \"Cluster\", not {0:?}")]
    BadScope(String),
}

/// The served resource definitions of a CRD object (one per served version).
pub(crate) fn defs_from_crd(crd: &Value) -> Result<Vec<ResourceDef>, CrdError> {
    let spec = crd.get("spec").ok_or(CrdError::Missing("group"))?;
    let group = spec
        .get("group")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or(CrdError::Missing("group"))?;
    let names = spec.get("names").ok_or(CrdError::Missing("names"))?;
    let plural = names
        .get("plural")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or(CrdError::Missing("names.plural"))?;
    let kind = names
        .get("kind")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or(CrdError::Missing("names.kind"))?;
    let singular = names
        .get("singular")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let categories: Vec<String> = names
        .get("categories")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let short_names: Vec<String> = names
        .get("shortNames")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let scope = spec
        .get("scope")
        .and_then(Value::as_str)
        .unwrap_or("Namespaced");
    let namespaced = match scope {
        "Namespaced" => true,
        "Cluster" => false,
        other => return Err(CrdError::BadScope(other.into())),
    };
    let expected = format!("{plural}.{group}");
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if name != expected {
        return Err(CrdError::BadName(expected));
    }
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .ok_or(CrdError::Missing("versions"))?;
    let defs: Vec<ResourceDef> = versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(true))
        .filter_map(|v| {
            let version = v.get("name").and_then(Value::as_str)?;
            Some(ResourceDef {
                group: group.into(),
                version: version.into(),
                plural: plural.into(),
                singular: singular.clone(),
                kind: kind.into(),
                namespaced,
                short_names: short_names.clone(),
                categories: categories.clone(),
                selectable_fields: v
                    .get("selectableFields")
                    .and_then(Value::as_array)
                    .map(|fs| {
                        fs.iter()
                            .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
                            .map(|p| p.trim_start_matches('.').to_string())
                            .collect()
                    })
                    .unwrap_or_default(),
                status_subresource: v.pointer("/subresources/status").is_some(),
                storage: v.get("storage").and_then(Value::as_bool).unwrap_or(false),
                generation: Generation::Spec,
            })
        })
        .collect();
    if defs.is_empty() {
        return Err(CrdError::NoVersions);
    }
    Ok(defs)
}

/// A minimal CRD object for a group/version/plural/kind (used by the builder and `--crd`).
pub(crate) fn crd_object(
    group: &str,
    version: &str,
    plural: &str,
    kind: &str,
    namespaced: bool,
) -> Value {
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind, "listKind": format!("{kind}List")},
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "versions": [{
                "name": version,
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}},
            }],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crd_object_round_trips_into_defs() {
        let crd = crd_object("example.com", "v1", "widgets", "Widget", true);
        let defs = defs_from_crd(&crd).expect("valid crd");
        assert_eq!(defs.len(), 1);
        assert_eq!(defs[0].kind, "Widget");
        assert!(defs[0].namespaced);
        assert!(defs[0].status_subresource);
        assert_eq!(defs[0].api_version(), "example.com/v1");
    }

    #[test]
    fn crd_with_wrong_name_is_rejected() {
        let mut crd = crd_object("example.com", "v1", "widgets", "Widget", true);
        crd["metadata"]["name"] = "nope".into();
        assert!(matches!(defs_from_crd(&crd), Err(CrdError::BadName(_))));
    }
}
