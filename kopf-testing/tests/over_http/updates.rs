//! What an update may change, refused over real HTTP as the API server
//! refuses it: the data of immutable ConfigMaps and Secrets, a Secret's
//! type, deletion metadata, a custom resource without a resourceVersion, a
//! CRD's scope; and what a custom resource's status write keeps.

use crate::common::{RawResponse, raw_request, send_json, within};
use kopf_testing::Emulator;
use serde_json::{Value, json};

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const SECRETS: &str = "/api/v1/namespaces/default/secrets";
const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

async fn emulator() -> Emulator {
    within(
        "the emulator to start",
        Emulator::builder()
            .crd("example.com", "v1", "widgets", "Widget", true)
            .start(),
    )
    .await
    .expect("the emulator starts")
}

async fn send(
    emulator: &Emulator,
    method: &str,
    path: &str,
    ct: &str,
    body: &Value,
) -> RawResponse {
    send_json(emulator.addr(), method, path, ct, body).await
}

async fn created(emulator: &Emulator, path: &str, body: Value) -> Value {
    let resp = send(emulator, "POST", path, "application/json", &body).await;
    assert_eq!(resp.status, 201, "{:?}", resp.json());
    resp.json()
}

async fn get(emulator: &Emulator, path: &str) -> Value {
    let resp = raw_request(emulator.addr(), "GET", path, &[], b"").await;
    assert_eq!(resp.status, 200, "{:?}", resp.json());
    resp.json()
}

#[tokio::test]
async fn immutable_config_maps_keep_their_data() {
    let emulator = emulator().await;
    let cm = created(
        &emulator,
        CMS,
        json!({"metadata": {"name": "frozen"}, "immutable": true, "data": {"k": "v"}}),
    )
    .await;
    let path = format!("{CMS}/frozen");
    let mut changed = cm.clone();
    changed["data"]["k"] = "w".into();
    let resp = send(&emulator, "PUT", &path, "application/json", &changed).await;
    resp.assert_status_object(422);
    assert_eq!(
        resp.causes(),
        ["data: Forbidden: field is immutable when `immutable` is set"]
    );
    let thaw = json!({"immutable": false});
    let resp = send(
        &emulator,
        "PATCH",
        &path,
        "application/merge-patch+json",
        &thaw,
    )
    .await;
    resp.assert_status_object(422);
    assert_eq!(
        resp.causes(),
        ["immutable: Forbidden: field is immutable when `immutable` is set"]
    );
    assert_eq!(get(&emulator, &path).await["data"]["k"], "v");
    let labelled = json!({"metadata": {"labels": {"still": "fine"}}});
    let resp = send(
        &emulator,
        "PATCH",
        &path,
        "application/merge-patch+json",
        &labelled,
    )
    .await;
    assert_eq!(resp.status, 200, "{:?}", resp.json());
}

#[tokio::test]
async fn secrets_keep_their_type_and_immutable_data() {
    let emulator = emulator().await;
    created(
        &emulator,
        SECRETS,
        json!({"metadata": {"name": "tls"}, "type": "kubernetes.io/tls", "data": {"a": "aGk="}}),
    )
    .await;
    let path = format!("{SECRETS}/tls");
    let retype = json!({"type": "Opaque"});
    let resp = send(
        &emulator,
        "PATCH",
        &path,
        "application/merge-patch+json",
        &retype,
    )
    .await;
    resp.assert_status_object(422);
    assert_eq!(
        resp.json()["message"],
        "Secret \"tls\" is invalid: type: Invalid value: \"Opaque\": field is immutable"
    );
    created(
        &emulator,
        SECRETS,
        json!({"metadata": {"name": "frozen"}, "immutable": true, "data": {"a": "aGk="}}),
    )
    .await;
    let path = format!("{SECRETS}/frozen");
    let more = json!({"stringData": {"b": "x"}});
    let resp = send(
        &emulator,
        "PATCH",
        &path,
        "application/merge-patch+json",
        &more,
    )
    .await;
    resp.assert_status_object(422);
    assert_eq!(
        resp.causes(),
        ["data: Forbidden: field is immutable when `immutable` is set"]
    );
}

#[tokio::test]
async fn an_update_cannot_set_a_deletion_timestamp() {
    let emulator = emulator().await;
    let mut cm = created(&emulator, CMS, json!({"metadata": {"name": "a"}})).await;
    cm["metadata"]["deletionTimestamp"] = "2024-05-01T10:00:00Z".into();
    let resp = send(
        &emulator,
        "PUT",
        &format!("{CMS}/a"),
        "application/json",
        &cm,
    )
    .await;
    resp.assert_status_object(422);
    assert_eq!(
        resp.causes(),
        [
            "metadata.deletionTimestamp: Invalid value: 2024-05-01 10:00:00 +0000 UTC: field is immutable"
        ]
    );
    let stored = get(&emulator, &format!("{CMS}/a")).await;
    assert!(
        stored["metadata"].get("deletionTimestamp").is_none(),
        "{stored}"
    );
}

#[tokio::test]
async fn a_custom_resource_update_needs_a_resource_version() {
    let emulator = emulator().await;
    created(
        &emulator,
        WIDGETS,
        json!({"metadata": {"name": "w"}, "spec": {"size": 1}}),
    )
    .await;
    let path = format!("{WIDGETS}/w");
    let blind = json!({"metadata": {"name": "w"}, "spec": {"size": 2}});
    let resp = send(&emulator, "PUT", &path, "application/json", &blind).await;
    resp.assert_status_object(422);
    let status = resp.json();
    assert_eq!(
        status["message"],
        "widgets.example.com \"w\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
    );
    assert_eq!(status["details"]["kind"], "widgets");
    assert_eq!(get(&emulator, &path).await["spec"]["size"], 1);
    // A ConfigMap may be replaced unconditionally.
    created(&emulator, CMS, json!({"metadata": {"name": "c"}})).await;
    let blind = json!({"metadata": {"name": "c"}, "data": {"k": "v"}});
    let resp = send(
        &emulator,
        "PUT",
        &format!("{CMS}/c"),
        "application/json",
        &blind,
    )
    .await;
    assert_eq!(resp.status, 200, "{:?}", resp.json());
}

#[tokio::test]
async fn a_custom_resource_status_write_keeps_its_metadata() {
    let emulator = emulator().await;
    let mut widget = created(
        &emulator,
        WIDGETS,
        json!({"metadata": {"name": "w", "labels": {"a": "1"}}, "spec": {"size": 1}}),
    )
    .await;
    widget["metadata"]["labels"] = json!({"a": "2", "b": "3"});
    widget["metadata"]["annotations"] = json!({"x": "y"});
    widget["status"] = json!({"phase": "Ready"});
    let resp = send(
        &emulator,
        "PUT",
        &format!("{WIDGETS}/w/status"),
        "application/json",
        &widget,
    )
    .await;
    assert_eq!(resp.status, 200, "{:?}", resp.json());
    let stored = get(&emulator, &format!("{WIDGETS}/w")).await;
    assert_eq!(stored["status"]["phase"], "Ready");
    assert_eq!(stored["metadata"]["labels"], json!({"a": "1"}));
    assert!(stored["metadata"].get("annotations").is_none(), "{stored}");
}

#[tokio::test]
async fn a_crd_keeps_its_scope() {
    let emulator = emulator().await;
    let path = format!("{CRDS}/widgets.example.com");
    let mut crd = get(&emulator, &path).await;
    crd["spec"]["scope"] = "Cluster".into();
    let resp = send(&emulator, "PUT", &path, "application/json", &crd).await;
    resp.assert_status_object(422);
    assert_eq!(
        resp.causes(),
        ["spec.scope: Invalid value: \"Cluster\": field is immutable"]
    );
    assert_eq!(get(&emulator, &path).await["spec"]["scope"], "Namespaced");
}
