//! The ClusterRoles and ClusterRoleBindings a cluster starts with that
//! every user gets (`bootstrappolicy/policy.go`): discovery, asking what
//! one may do, and the public information.

use serde_json::{Value, json};

/// The URLs of discovery and health (`system:discovery`).
const DISCOVERY_URLS: [&str; 11] = [
    "/livez",
    "/readyz",
    "/healthz",
    "/version",
    "/version/",
    "/openapi",
    "/openapi/*",
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
];

/// The URLs anyone may read (`system:public-info-viewer`).
const PUBLIC_INFO_URLS: [&str; 5] = ["/livez", "/readyz", "/healthz", "/version", "/version/"];

fn metadata(name: &str) -> Value {
    json!({
        "name": name,
        "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    })
}

fn cluster_role(name: &str, rules: Value) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": metadata(name),
        "rules": rules,
    })
}

fn binding(name: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": metadata(name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": subjects,
    })
}

/// The objects, to create at start.
pub(crate) fn objects() -> Vec<Value> {
    vec![
        cluster_role(
            "system:discovery",
            json!([{"verbs": ["get"], "nonResourceURLs": DISCOVERY_URLS}]),
        ),
        cluster_role(
            "system:basic-user",
            json!([
                {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
                {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]},
            ]),
        ),
        cluster_role(
            "system:public-info-viewer",
            json!([{"verbs": ["get"], "nonResourceURLs": PUBLIC_INFO_URLS}]),
        ),
        binding("system:discovery", &["system:authenticated"]),
        binding("system:basic-user", &["system:authenticated"]),
        binding(
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
    ]
}
