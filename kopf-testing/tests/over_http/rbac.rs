//! RBAC enforced over real HTTP (`EmulatorBuilder::rbac`), as the API
//! server's authenticator and RBAC authorizer decide: ServiceAccount tokens
//! from the TokenRequest API, Roles and ClusterRoles through bindings, the
//! `403` `Status` bodies, the access reviews, and the record of which rule
//! allowed what.

use crate::common::{RawResponse, raw_request, send_json, within};
use k8s_openapi::api::core::v1::Secret;
use kopf_testing::{Emulator, Grant, ObjectRef};
use kube::Api;
use kube::api::ListParams;
use serde_json::{Value, json};

async fn emulator() -> Emulator {
    within("the emulator to start", Emulator::builder().rbac().start())
        .await
        .expect("the emulator starts")
}

/// Creates `obj` at `path` as the administrator (no token is required, so
/// a request without one is `system:admin`).
async fn admin_create(emulator: &Emulator, path: &str, obj: Value) {
    let resp = send_json(emulator.addr(), "POST", path, "application/json", &obj).await;
    assert_eq!(
        resp.status,
        201,
        "{path}: {}",
        String::from_utf8_lossy(&resp.body)
    );
}

/// A ServiceAccount `ns/name` and a token for it.
async fn service_account(emulator: &Emulator, ns: &str, name: &str) -> String {
    admin_create(
        emulator,
        &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
        json!({"metadata": {"name": name}}),
    )
    .await;
    emulator
        .service_account_token(ns, name)
        .expect("a token for an existing ServiceAccount")
}

async fn cluster_role(emulator: &Emulator, name: &str, rules: Value) {
    admin_create(
        emulator,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({"metadata": {"name": name}, "rules": rules}),
    )
    .await;
}

async fn role(emulator: &Emulator, ns: &str, name: &str, rules: Value) {
    admin_create(
        emulator,
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles"),
        json!({"metadata": {"name": name}, "rules": rules}),
    )
    .await;
}

fn role_ref(kind: &str, name: &str) -> Value {
    json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name})
}

fn sa_subject(ns: &str, name: &str) -> Value {
    json!({"kind": "ServiceAccount", "name": name, "namespace": ns})
}

async fn role_binding(emulator: &Emulator, ns: &str, name: &str, role: Value, subjects: Value) {
    admin_create(
        emulator,
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"),
        json!({"metadata": {"name": name}, "roleRef": role, "subjects": subjects}),
    )
    .await;
}

async fn cluster_role_binding(emulator: &Emulator, name: &str, role: Value, subjects: Value) {
    admin_create(
        emulator,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        json!({"metadata": {"name": name}, "roleRef": role, "subjects": subjects}),
    )
    .await;
}

/// Sends a request with `token`.
async fn request(
    emulator: &Emulator,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> RawResponse {
    let auth = format!("Bearer {token}");
    let body = body
        .map(|b| serde_json::to_vec(&b).expect("JSON"))
        .unwrap_or_default();
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    raw_request(emulator.addr(), method, path, &headers, &body).await
}

async fn status_of(emulator: &Emulator, token: &str, method: &str, path: &str) -> u16 {
    request(emulator, token, method, path, None).await.status
}

fn forbidden(message: &str, details: Value) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": "Forbidden", "details": details, "code": 403,
    })
}

const OP: &str = "system:serviceaccount:default:op";

#[tokio::test]
async fn denials_answer_the_api_servers_forbidden_status() {
    let emulator = emulator().await;
    let token = service_account(&emulator, "default", "op").await;
    let cases = [
        (
            "/api/v1/secrets",
            format!(
                "secrets is forbidden: User \"{OP}\" cannot list resource \"secrets\" in API group \"\" at the cluster scope"
            ),
            json!({"kind": "secrets"}),
        ),
        (
            "/api/v1/namespaces/kube-system/secrets",
            format!(
                "secrets is forbidden: User \"{OP}\" cannot list resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
            ),
            json!({"kind": "secrets"}),
        ),
        (
            "/apis/apps/v1/namespaces/default/deployments/d/status",
            format!(
                "deployments.apps \"d\" is forbidden: User \"{OP}\" cannot get resource \"deployments/status\" in API group \"apps\" in the namespace \"default\""
            ),
            json!({"name": "d", "group": "apps", "kind": "deployments"}),
        ),
        (
            "/metrics",
            format!("forbidden: User \"{OP}\" cannot get path \"/metrics\""),
            json!({}),
        ),
    ];
    for (path, message, details) in cases {
        let resp = request(&emulator, &token, "GET", path, None).await;
        resp.assert_status_object(403);
        assert_eq!(resp.json(), forbidden(&message, details), "{path}");
    }
    // Discovery is every authenticated user's.
    assert_eq!(status_of(&emulator, &token, "GET", "/api/v1").await, 200);
    assert_eq!(status_of(&emulator, &token, "GET", "/apis").await, 200);
}

#[tokio::test]
async fn a_role_binding_grants_a_cluster_role_in_its_namespace_only() {
    let emulator = emulator().await;
    let token = service_account(&emulator, "default", "op").await;
    cluster_role(
        &emulator,
        "secret-reader",
        json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}]),
    )
    .await;
    role_binding(
        &emulator,
        "default",
        "op-reads",
        role_ref("ClusterRole", "secret-reader"),
        json!([{"kind": "ServiceAccount", "name": "op"}]),
    )
    .await;
    assert_eq!(
        status_of(
            &emulator,
            &token,
            "GET",
            "/api/v1/namespaces/default/secrets"
        )
        .await,
        200
    );
    assert_eq!(
        status_of(
            &emulator,
            &token,
            "GET",
            "/api/v1/namespaces/default/secrets?watch=1&timeoutSeconds=1"
        )
        .await,
        200
    );
    assert_eq!(
        status_of(
            &emulator,
            &token,
            "GET",
            "/api/v1/namespaces/kube-system/secrets"
        )
        .await,
        403
    );
    assert_eq!(
        status_of(&emulator, &token, "GET", "/api/v1/secrets").await,
        403
    );
    assert_eq!(
        status_of(
            &emulator,
            &token,
            "DELETE",
            "/api/v1/namespaces/default/secrets"
        )
        .await,
        403
    );
    // The binding refers to a role that does not exist: said in the reason.
    role_binding(
        &emulator,
        "kube-system",
        "dangling",
        role_ref("Role", "nope"),
        json!([sa_subject("default", "op")]),
    )
    .await;
    let resp = request(
        &emulator,
        &token,
        "GET",
        "/api/v1/namespaces/kube-system/secrets",
        None,
    )
    .await;
    assert_eq!(
        resp.json()["message"],
        format!(
            "secrets is forbidden: User \"{OP}\" cannot list resource \"secrets\" in API group \"\" in the namespace \"kube-system\": RBAC: role.rbac.authorization.k8s.io \"nope\" not found"
        )
    );
}

#[tokio::test]
async fn wildcards_match_as_the_api_server_matches_them() {
    let emulator = emulator().await;
    let token = service_account(&emulator, "default", "op").await;
    cluster_role(
        &emulator,
        "statuses",
        json!([
            {"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["*"]},
            {"apiGroups": ["apps"], "resources": ["*"], "verbs": ["list"]},
            {"apiGroups": [""], "resources": ["configmaps/*"], "verbs": ["*"]},
        ]),
    )
    .await;
    cluster_role_binding(
        &emulator,
        "op-statuses",
        role_ref("ClusterRole", "statuses"),
        json!([sa_subject("default", "op")]),
    )
    .await;
    // Allowed, then not found: authorization comes first.
    assert_eq!(
        status_of(
            &emulator,
            &token,
            "GET",
            "/api/v1/namespaces/default/pods/p/status"
        )
        .await,
        404
    );
    assert_eq!(
        status_of(
            &emulator,
            &token,
            "GET",
            "/apis/apps/v1/namespaces/default/deployments/d/status"
        )
        .await,
        404
    );
    assert_eq!(
        status_of(
            &emulator,
            &token,
            "GET",
            "/api/v1/namespaces/default/pods/p"
        )
        .await,
        403
    );
    assert_eq!(
        status_of(&emulator, &token, "GET", "/apis/apps/v1/deployments").await,
        200
    );
    assert_eq!(
        status_of(
            &emulator,
            &token,
            "GET",
            "/apis/apps/v1/namespaces/default/deployments/d"
        )
        .await,
        403
    );
    // `configmaps/*` names no subresource wildcard to the API server.
    assert_eq!(
        status_of(
            &emulator,
            &token,
            "GET",
            "/api/v1/namespaces/default/configmaps"
        )
        .await,
        403
    );
}

#[tokio::test]
async fn resource_names_allow_named_requests_only() {
    let emulator = emulator().await;
    let token = service_account(&emulator, "default", "op").await;
    for name in ["s1", "s2"] {
        admin_create(
            &emulator,
            "/api/v1/namespaces/default/secrets",
            json!({"metadata": {"name": name}}),
        )
        .await;
    }
    role(&emulator, "default", "one-secret", json!([{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s1"], "verbs": ["get", "list", "watch", "create", "delete"]}])).await;
    role_binding(
        &emulator,
        "default",
        "op-one",
        role_ref("Role", "one-secret"),
        json!([sa_subject("default", "op")]),
    )
    .await;
    let base = "/api/v1/namespaces/default/secrets";
    assert_eq!(
        status_of(&emulator, &token, "GET", &format!("{base}/s1")).await,
        200
    );
    assert_eq!(
        status_of(&emulator, &token, "GET", &format!("{base}/s2")).await,
        403
    );
    assert_eq!(status_of(&emulator, &token, "GET", base).await, 403);
    // A list of that one name is asked of it.
    assert_eq!(
        status_of(
            &emulator,
            &token,
            "GET",
            &format!("{base}?fieldSelector=metadata.name%3Ds1")
        )
        .await,
        200
    );
    let created = request(
        &emulator,
        &token,
        "POST",
        base,
        Some(json!({"metadata": {"name": "s1"}})),
    )
    .await;
    assert_eq!(created.status, 403, "a create has no name to match");
    assert_eq!(
        status_of(&emulator, &token, "DELETE", &format!("{base}/s1")).await,
        200
    );
}

#[tokio::test]
async fn non_resource_urls_are_granted_by_cluster_role_bindings_only() {
    let emulator = emulator().await;
    let bound = service_account(&emulator, "default", "op").await;
    let local = service_account(&emulator, "default", "local").await;
    cluster_role(
        &emulator,
        "metrics",
        json!([{"nonResourceURLs": ["/metrics", "/logs/*"], "verbs": ["get"]}]),
    )
    .await;
    cluster_role_binding(
        &emulator,
        "op-metrics",
        role_ref("ClusterRole", "metrics"),
        json!([sa_subject("default", "op")]),
    )
    .await;
    role_binding(
        &emulator,
        "default",
        "local-metrics",
        role_ref("ClusterRole", "metrics"),
        json!([sa_subject("default", "local")]),
    )
    .await;
    // Allowed (then not served).
    assert_eq!(status_of(&emulator, &bound, "GET", "/metrics").await, 404);
    assert_eq!(
        status_of(&emulator, &bound, "GET", "/logs/kubelet.log").await,
        404
    );
    assert_eq!(
        status_of(&emulator, &bound, "GET", "/metrics/extra").await,
        403
    );
    assert_eq!(status_of(&emulator, &bound, "POST", "/metrics").await, 403);
    assert_eq!(status_of(&emulator, &local, "GET", "/metrics").await, 403);
}

#[tokio::test]
async fn users_and_groups_are_subjects() {
    let emulator = emulator().await;
    admin_create(
        &emulator,
        "/api/v1/namespaces",
        json!({"metadata": {"name": "other"}}),
    )
    .await;
    let op = service_account(&emulator, "default", "op").await;
    let stranger = service_account(&emulator, "other", "op").await;
    cluster_role(
        &emulator,
        "cm-reader",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]),
    )
    .await;
    cluster_role(
        &emulator,
        "lease-reader",
        json!([{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list"]}]),
    )
    .await;
    cluster_role_binding(
        &emulator,
        "default-sas",
        role_ref("ClusterRole", "cm-reader"),
        json!([{"kind": "Group", "name": "system:serviceaccounts:default"}]),
    )
    .await;
    cluster_role_binding(
        &emulator,
        "op-user",
        role_ref("ClusterRole", "lease-reader"),
        json!([{"kind": "User", "name": OP}]),
    )
    .await;
    assert_eq!(
        status_of(&emulator, &op, "GET", "/api/v1/configmaps").await,
        200
    );
    assert_eq!(
        status_of(&emulator, &stranger, "GET", "/api/v1/configmaps").await,
        403
    );
    assert_eq!(
        status_of(&emulator, &op, "GET", "/apis/coordination.k8s.io/v1/leases").await,
        200
    );
    assert_eq!(
        status_of(
            &emulator,
            &stranger,
            "GET",
            "/apis/coordination.k8s.io/v1/leases"
        )
        .await,
        403
    );
}

fn ssar(attributes: Value) -> Value {
    json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": attributes})
}

#[tokio::test]
async fn self_subject_access_reviews_answer_for_the_caller() {
    let emulator = emulator().await;
    let token = service_account(&emulator, "default", "op").await;
    let path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let list_secrets = ssar(
        json!({"resourceAttributes": {"verb": "list", "resource": "secrets", "namespace": "default"}}),
    );
    let resp = request(&emulator, &token, "POST", path, Some(list_secrets.clone())).await;
    assert_eq!(resp.status, 201, "{}", String::from_utf8_lossy(&resp.body));
    assert_eq!(resp.json()["status"], json!({"allowed": false}));
    assert_eq!(
        resp.json()["spec"],
        list_secrets["spec"],
        "the spec is echoed"
    );
    role(
        &emulator,
        "default",
        "secrets",
        json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]),
    )
    .await;
    role_binding(
        &emulator,
        "default",
        "op",
        role_ref("Role", "secrets"),
        json!([sa_subject("default", "op")]),
    )
    .await;
    let resp = request(&emulator, &token, "POST", path, Some(list_secrets)).await;
    assert_eq!(
        resp.json()["status"],
        json!({"allowed": true, "reason": "RBAC: allowed by RoleBinding \"op/default\" of Role \"secrets\" to ServiceAccount \"op/default\""})
    );
    let discovery = ssar(json!({"nonResourceAttributes": {"verb": "get", "path": "/apis/apps"}}));
    let resp = request(&emulator, &token, "POST", path, Some(discovery)).await;
    assert_eq!(
        resp.json()["status"],
        json!({"allowed": true, "reason": "RBAC: allowed by ClusterRoleBinding \"system:discovery\" of ClusterRole \"system:discovery\" to Group \"system:authenticated\""})
    );
    let resp = request(&emulator, &token, "POST", path, Some(ssar(json!({})))).await;
    resp.assert_status_object(422);
    // The administrator is allowed everything, by no rule.
    let resp = send_json(
        emulator.addr(),
        "POST",
        path,
        "application/json",
        &ssar(json!({"resourceAttributes": {"verb": "delete", "resource": "nodes"}})),
    )
    .await;
    assert_eq!(resp.json()["status"], json!({"allowed": true}));
}

#[tokio::test]
async fn subject_access_reviews_need_their_own_permission() {
    let emulator = emulator().await;
    let token = service_account(&emulator, "default", "op").await;
    let path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let sar = |spec: Value| json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec});
    let about_op = sar(
        json!({"user": OP, "resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "default"}}),
    );
    let resp = request(&emulator, &token, "POST", path, Some(about_op.clone())).await;
    assert_eq!(
        resp.json()["message"],
        format!(
            "subjectaccessreviews.authorization.k8s.io is forbidden: User \"{OP}\" cannot create resource \"subjectaccessreviews\" in API group \"authorization.k8s.io\" at the cluster scope"
        )
    );
    let resp = send_json(emulator.addr(), "POST", path, "application/json", &about_op).await;
    assert_eq!(resp.status, 201);
    assert_eq!(resp.json()["status"], json!({"allowed": false}));
    let masters = sar(
        json!({"groups": ["system:masters"], "resourceAttributes": {"verb": "get", "resource": "pods"}}),
    );
    let resp = send_json(emulator.addr(), "POST", path, "application/json", &masters).await;
    assert_eq!(resp.json()["status"], json!({"allowed": true}));
    let nobody = sar(json!({"resourceAttributes": {"verb": "get", "resource": "pods"}}));
    let resp = send_json(emulator.addr(), "POST", path, "application/json", &nobody).await;
    resp.assert_status_object(422);
    // Allowed to whom RBAC allows creating them.
    cluster_role(&emulator, "reviewer", json!([{"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}])).await;
    cluster_role_binding(
        &emulator,
        "op-reviews",
        role_ref("ClusterRole", "reviewer"),
        json!([sa_subject("default", "op")]),
    )
    .await;
    let resp = request(&emulator, &token, "POST", path, Some(about_op)).await;
    assert_eq!(resp.status, 201);
}

#[tokio::test]
async fn token_requests_mint_tokens_bound_to_their_service_account() {
    let emulator = emulator().await;
    admin_create(
        &emulator,
        "/api/v1/namespaces/default/serviceaccounts",
        json!({"metadata": {"name": "op"}}),
    )
    .await;
    let path = "/api/v1/namespaces/default/serviceaccounts/op/token";
    let resp = send_json(emulator.addr(), "POST", path, "application/json", &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}})).await;
    assert_eq!(resp.status, 201, "{}", String::from_utf8_lossy(&resp.body));
    let answer = resp.json();
    assert_eq!(answer["kind"], "TokenRequest");
    assert_eq!(answer["spec"]["expirationSeconds"], 600);
    assert!(
        answer["status"]["expirationTimestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{answer}"
    );
    let token = answer["status"]["token"]
        .as_str()
        .expect("a token")
        .to_string();
    assert_eq!(status_of(&emulator, &token, "GET", "/api").await, 200);
    let too_short = send_json(
        emulator.addr(),
        "POST",
        path,
        "application/json",
        &json!({"spec": {"expirationSeconds": 60}}),
    )
    .await;
    too_short.assert_status_object(422);
    let missing = send_json(
        emulator.addr(),
        "POST",
        "/api/v1/namespaces/default/serviceaccounts/nope/token",
        "application/json",
        &json!({}),
    )
    .await;
    missing.assert_status_object(404);
    // Deleted, then recreated under the same name: the token is refused.
    let deleted = raw_request(
        emulator.addr(),
        "DELETE",
        "/api/v1/namespaces/default/serviceaccounts/op",
        &[],
        b"",
    )
    .await;
    assert_eq!(deleted.status, 200);
    request(&emulator, &token, "GET", "/api", None)
        .await
        .assert_status_object(401);
    admin_create(
        &emulator,
        "/api/v1/namespaces/default/serviceaccounts",
        json!({"metadata": {"name": "op"}}),
    )
    .await;
    assert_eq!(status_of(&emulator, &token, "GET", "/api").await, 401);
    assert_eq!(
        status_of(&emulator, "not-a-token", "GET", "/api").await,
        401
    );
}

#[tokio::test]
async fn the_usage_record_names_the_rules_used_and_the_denials() {
    let emulator = emulator().await;
    service_account(&emulator, "default", "op").await;
    let client = emulator
        .client_as_service_account("default", "op")
        .expect("a client");
    cluster_role(
        &emulator,
        "secret-reader",
        json!([
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]},
        ]),
    )
    .await;
    role_binding(
        &emulator,
        "default",
        "op-reads",
        role_ref("ClusterRole", "secret-reader"),
        json!([sa_subject("default", "op")]),
    )
    .await;
    // A kubeconfig for another process authenticates the same way.
    let kubeconfig = emulator
        .kubeconfig_as_service_account("default", "op")
        .expect("a kubeconfig");
    let options = kube::config::KubeConfigOptions::default();
    let config = within(
        "a config",
        kube::Config::from_custom_kubeconfig(kubeconfig, &options),
    )
    .await
    .expect("a config");
    let from_file = kube::Client::try_from(config).expect("a client");
    let who = within("a review", from_file.request::<Value>(
        http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
            .body(serde_json::to_vec(&json!({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1"})).expect("JSON"))
            .expect("a request"),
    ))
    .await
    .expect("answered");
    assert_eq!(who["status"]["userInfo"]["username"], OP);
    emulator.clear_rbac_usage();
    let secrets: Api<Secret> = Api::default_namespaced(client.clone());
    for _ in 0..2 {
        within("a list", secrets.list(&ListParams::default()))
            .await
            .expect("allowed");
    }
    let all: Api<Secret> = Api::all(client);
    within("a list", all.list(&ListParams::default()))
        .await
        .expect_err("denied");
    let usage = emulator.rbac_usage();
    let grant = usage
        .grants
        .iter()
        .find(|g| g.grant.role.name == "secret-reader")
        .expect("the rule was used");
    assert_eq!(grant.user, OP);
    assert_eq!(
        grant.grant,
        Grant {
            binding: ObjectRef {
                kind: "RoleBinding".into(),
                namespace: "default".into(),
                name: "op-reads".into()
            },
            role: ObjectRef {
                kind: "ClusterRole".into(),
                namespace: String::new(),
                name: "secret-reader".into()
            },
            rule: 1,
        }
    );
    assert_eq!(grant.count, 2);
    assert_eq!(usage.denials.len(), 1, "{usage:?}");
    let denial = &usage.denials[0];
    assert_eq!(
        (
            denial.user.as_str(),
            denial.verb.as_str(),
            denial.resource.as_str(),
            denial.namespace.as_str()
        ),
        (OP, "list", "secrets", "")
    );
    // The same over the admin endpoint, for another process.
    let resp = raw_request(emulator.addr(), "GET", "/_emulator/rbac/usage", &[], b"").await;
    assert_eq!(resp.status, 200);
    let body = resp.json();
    let grants = body["grants"].as_array().expect("grants");
    assert!(
        grants.contains(&json!({
            "user": OP,
            "binding": {"kind": "RoleBinding", "namespace": "default", "name": "op-reads"},
            "role": {"kind": "ClusterRole", "namespace": "", "name": "secret-reader"},
            "rule": 1, "count": 2,
        })),
        "{body}"
    );
    assert_eq!(body["denials"][0]["resource"], "secrets");
    assert_eq!(body["denials"][0]["count"], 1);
    let cleared = raw_request(emulator.addr(), "DELETE", "/_emulator/rbac/usage", &[], b"").await;
    assert_eq!(cleared.status, 200);
    assert_eq!(emulator.rbac_usage(), Default::default());
}

#[tokio::test]
async fn anonymous_requests_get_the_public_information_only() {
    let emulator = within(
        "the emulator to start",
        Emulator::builder().rbac().require_token("adm1n").start(),
    )
    .await
    .expect("the emulator starts");
    let get = |path: &'static str| raw_request(emulator.addr(), "GET", path, &[], b"");
    assert_eq!(get("/version").await.status, 200);
    assert_eq!(get("/healthz").await.status, 200);
    let resp = get("/api").await;
    assert_eq!(
        resp.json()["message"],
        "forbidden: User \"system:anonymous\" cannot get path \"/api\""
    );
    assert_eq!(
        status_of(&emulator, "adm1n", "GET", "/api/v1/secrets").await,
        200
    );
    assert_eq!(status_of(&emulator, "wrong", "GET", "/version").await, 401);
    // The administrator's client and the bootstrap roles.
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(emulator.client());
    let names: Vec<String> = within("a list", roles.list(&ListParams::default()))
        .await
        .expect("listed")
        .items
        .into_iter()
        .filter_map(|r| r.metadata.name)
        .collect();
    assert_eq!(
        names,
        [
            "system:basic-user",
            "system:discovery",
            "system:public-info-viewer"
        ]
    );
}

#[tokio::test]
async fn without_rbac_everything_is_allowed() {
    let emulator = within("the emulator to start", Emulator::start())
        .await
        .expect("the emulator starts");
    assert_eq!(
        raw_request(emulator.addr(), "GET", "/api/v1/secrets", &[], b"")
            .await
            .status,
        200
    );
    let review = ssar(json!({"resourceAttributes": {"verb": "list", "resource": "secrets"}}));
    let resp = send_json(
        emulator.addr(),
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        "application/json",
        &review,
    )
    .await;
    assert_eq!(resp.status, 201);
    assert_eq!(resp.json()["status"], json!({"allowed": true}));
    // Tokens can be minted, and are not needed.
    admin_create(
        &emulator,
        "/api/v1/namespaces/default/serviceaccounts",
        json!({"metadata": {"name": "op"}}),
    )
    .await;
    let token = emulator
        .service_account_token("default", "op")
        .expect("minted");
    assert_eq!(
        status_of(&emulator, &token, "GET", "/api/v1/secrets").await,
        200
    );
    assert_eq!(emulator.rbac_usage(), Default::default());
}

#[tokio::test]
async fn self_subject_reviews_say_who_one_is() {
    let emulator = emulator().await;
    let token = service_account(&emulator, "default", "op").await;
    let path = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let resp = request(&emulator, &token, "POST", path, Some(body.clone())).await;
    assert_eq!(resp.status, 201, "{}", String::from_utf8_lossy(&resp.body));
    let user = &resp.json()["status"]["userInfo"];
    assert_eq!(user["username"], OP);
    assert_eq!(
        user["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ])
    );
    assert!(
        user["uid"].as_str().is_some_and(|u| !u.is_empty()),
        "{user}"
    );
    let resp = send_json(emulator.addr(), "POST", path, "application/json", &body).await;
    assert_eq!(
        resp.json()["status"]["userInfo"],
        json!({"username": "system:admin", "groups": ["system:masters", "system:authenticated"]})
    );
}

#[tokio::test]
async fn rbac_objects_are_validated_and_defaulted_as_the_api_server_does() {
    let emulator = emulator().await;
    let roles = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles";
    let bad =
        json!({"metadata": {"name": "bad"}, "rules": [{"apiGroups": [""], "resources": ["pods"]}]});
    let resp = send_json(emulator.addr(), "POST", roles, "application/json", &bad).await;
    resp.assert_status_object(422);
    assert_eq!(
        resp.json()["message"],
        "Role.rbac.authorization.k8s.io \"bad\" is invalid: rules[0].verbs: Required value: verbs must contain at least one value"
    );
    assert_eq!(
        resp.causes(),
        ["rules[0].verbs: Required value: verbs must contain at least one value"]
    );

    let bindings = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings";
    let binding = json!({
        "metadata": {"name": "b"},
        "roleRef": role_ref("Role", "r"),
        "subjects": [{"kind": "Group", "name": "devs"}],
    });
    let resp = send_json(
        emulator.addr(),
        "POST",
        bindings,
        "application/json",
        &binding,
    )
    .await;
    assert_eq!(resp.status, 201, "{}", String::from_utf8_lossy(&resp.body));
    assert_eq!(
        resp.json()["subjects"][0]["apiGroup"],
        "rbac.authorization.k8s.io",
        "defaulted"
    );
    let mut changed = binding.clone();
    changed["roleRef"]["name"] = json!("other");
    let resp = send_json(
        emulator.addr(),
        "PUT",
        &format!("{bindings}/b"),
        "application/json",
        &changed,
    )
    .await;
    resp.assert_status_object(422);
    assert_eq!(
        resp.json()["message"],
        "RoleBinding.rbac.authorization.k8s.io \"b\" is invalid: roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"Role\", Name:\"other\"}: cannot change roleRef"
    );
}

#[tokio::test]
async fn admission_webhooks_are_told_who_sends_the_request() {
    use crate::common::webhooks::{Hook, Pki, allow, configuration, webhook};

    let emulator = emulator().await;
    let token = service_account(&emulator, "default", "op").await;
    cluster_role(
        &emulator,
        "cm-writer",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]),
    )
    .await;
    cluster_role_binding(
        &emulator,
        "op-cms",
        role_ref("ClusterRole", "cm-writer"),
        json!([sa_subject("default", "op")]),
    )
    .await;
    let pki = Pki::new(&["127.0.0.1"]);
    let hook = Hook::start(&pki, allow).await;
    let config = configuration(
        "ValidatingWebhookConfiguration",
        "check",
        vec![webhook("check.example.com", &hook.url("/v"), &pki)],
    );
    admin_create(
        &emulator,
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        config,
    )
    .await;
    let path = "/api/v1/namespaces/default/configmaps";
    let created = request(
        &emulator,
        &token,
        "POST",
        path,
        Some(json!({"metadata": {"name": "by-op"}})),
    )
    .await;
    assert_eq!(
        created.status,
        201,
        "{}",
        String::from_utf8_lossy(&created.body)
    );
    admin_create(&emulator, path, json!({"metadata": {"name": "by-admin"}})).await;
    let users: Vec<Value> = hook
        .requests("/v")
        .iter()
        .map(|r| r["userInfo"].clone())
        .collect();
    assert_eq!(users.len(), 2);
    assert_eq!(users[0]["username"], OP);
    assert_eq!(
        users[0]["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ])
    );
    assert_eq!(
        users[1],
        json!({"username": "system:admin", "groups": ["system:masters", "system:authenticated"]})
    );
}

#[tokio::test]
async fn impersonation_is_granted_by_the_impersonate_verb() {
    let emulator = emulator().await;
    let token = service_account(&emulator, "default", "op").await;
    cluster_role(
        &emulator,
        "cm-reader",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]),
    )
    .await;
    cluster_role_binding(
        &emulator,
        "devs-read",
        role_ref("ClusterRole", "cm-reader"),
        json!([{"kind": "Group", "name": "devs"}]),
    )
    .await;
    // The administrator may act as anyone.
    let alice: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::all(emulator.client_as("alice", &["devs"]));
    within("a list", alice.list(&ListParams::default()))
        .await
        .expect("allowed to devs");
    let bob: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::all(emulator.client_as("bob", &[]));
    let err = within("a list", bob.list(&ListParams::default()))
        .await
        .expect_err("bob is no dev");
    assert!(
        err.to_string()
            .contains("User \"bob\" cannot list resource \"configmaps\""),
        "{err}"
    );
    // Others need the `impersonate` verb.
    let auth = format!("Bearer {token}");
    let as_alice = [
        ("Authorization", auth.as_str()),
        ("Impersonate-User", "alice"),
    ];
    let resp = raw_request(emulator.addr(), "GET", "/api/v1/configmaps", &as_alice, b"").await;
    resp.assert_status_object(403);
    assert_eq!(
        resp.json()["message"],
        format!(
            "users \"alice\" is forbidden: User \"{OP}\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        )
    );
    cluster_role(&emulator, "impersonator", json!([{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": ["alice"]}])).await;
    cluster_role_binding(
        &emulator,
        "op-impersonates",
        role_ref("ClusterRole", "impersonator"),
        json!([sa_subject("default", "op")]),
    )
    .await;
    let resp = raw_request(emulator.addr(), "GET", "/api/v1/configmaps", &as_alice, b"").await;
    assert_eq!(resp.status, 403, "alice is in no group");
    assert!(
        resp.json()["message"]
            .as_str()
            .is_some_and(|m| m.contains("User \"alice\" cannot list")),
        "{}",
        resp.json()
    );
    let with_group = [
        ("Authorization", auth.as_str()),
        ("Impersonate-User", "alice"),
        ("Impersonate-Group", "devs"),
    ];
    let resp = raw_request(
        emulator.addr(),
        "GET",
        "/api/v1/configmaps",
        &with_group,
        b"",
    )
    .await;
    assert_eq!(
        resp.json()["message"],
        format!(
            "groups \"devs\" is forbidden: User \"{OP}\" cannot impersonate resource \"groups\" in API group \"\" at the cluster scope"
        )
    );
}

#[tokio::test]
async fn writing_rbac_objects_grants_no_more_than_the_writer_holds() {
    let emulator = emulator().await;
    let token = service_account(&emulator, "default", "op").await;
    role(&emulator, "default", "rbac-writer", json!([
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
    ])).await;
    role_binding(
        &emulator,
        "default",
        "op-writes",
        role_ref("Role", "rbac-writer"),
        json!([sa_subject("default", "op")]),
    )
    .await;
    let roles = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles";
    let more = json!({"metadata": {"name": "more"}, "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}]});
    let resp = request(&emulator, &token, "POST", roles, Some(more)).await;
    resp.assert_status_object(403);
    assert_eq!(
        resp.json()["message"],
        format!(
            "roles.rbac.authorization.k8s.io \"more\" is forbidden: user \"{OP}\" (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:default\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"list\" \"watch\"]}}"
        )
    );
    assert_eq!(
        resp.json()["details"],
        json!({"name": "more", "group": "rbac.authorization.k8s.io", "kind": "roles"})
    );
    let held = json!({"metadata": {"name": "held"}, "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]});
    assert_eq!(
        request(&emulator, &token, "POST", roles, Some(held))
            .await
            .status,
        201
    );

    // Binding a role needs its rules, or `bind` on it.
    cluster_role(
        &emulator,
        "powerful",
        json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
    )
    .await;
    let bindings = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings";
    let binding = |name: &str, role: Value| json!({"metadata": {"name": name}, "roleRef": role, "subjects": [sa_subject("default", "op")]});
    let resp = request(
        &emulator,
        &token,
        "POST",
        bindings,
        Some(binding("held", role_ref("Role", "held"))),
    )
    .await;
    assert_eq!(resp.status, 201, "{}", resp.json());
    let resp = request(
        &emulator,
        &token,
        "POST",
        bindings,
        Some(binding("power", role_ref("ClusterRole", "powerful"))),
    )
    .await;
    resp.assert_status_object(403);
    assert!(
        resp.json()["message"].as_str().is_some_and(|m| m
            .starts_with("rolebindings.rbac.authorization.k8s.io \"power\" is forbidden: user")),
        "{}",
        resp.json()
    );
    role(&emulator, "default", "binder", json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["powerful"]}])).await;
    role_binding(
        &emulator,
        "default",
        "op-binds",
        role_ref("Role", "binder"),
        json!([sa_subject("default", "op")]),
    )
    .await;
    let resp = request(
        &emulator,
        &token,
        "POST",
        bindings,
        Some(binding("power", role_ref("ClusterRole", "powerful"))),
    )
    .await;
    assert_eq!(resp.status, 201, "{}", resp.json());
}
