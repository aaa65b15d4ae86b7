//! The options a request carries besides its object, refused over real HTTP
//! as the API server refuses them: `DeleteOptions` bodies that do not decode
//! or do not validate, `resourceVersionMatch` values, and field managers.

use crate::common::{RawResponse, raw_request, send_json, within};
use kopf_testing::Emulator;
use serde_json::{Value, json};

const CMS: &str = "/api/v1/namespaces/default/configmaps";

async fn emulator() -> Emulator {
    within("the emulator to start", Emulator::start())
        .await
        .expect("the emulator starts")
}

async fn send(emulator: &Emulator, method: &str, path: &str, body: &Value) -> RawResponse {
    send_json(emulator.addr(), method, path, "application/json", body).await
}

async fn create_cm(emulator: &Emulator, name: &str) {
    let created = send(emulator, "POST", CMS, &json!({"metadata": {"name": name}})).await;
    assert_eq!(created.status, 201, "{:?}", created.json());
}

async fn exists(emulator: &Emulator, name: &str) -> bool {
    let path = format!("{CMS}/{name}");
    raw_request(emulator.addr(), "GET", &path, &[], b"")
        .await
        .status
        == 200
}

fn message(resp: &RawResponse) -> String {
    resp.json()["message"].as_str().unwrap_or("").to_string()
}

#[tokio::test]
async fn a_delete_options_body_that_does_not_decode_deletes_nothing() {
    let emulator = emulator().await;
    create_cm(&emulator, "a").await;
    let path = format!("{CMS}/a");
    let body = json!({"preconditions": {"resourceVersion": 1}});
    let resp = send(&emulator, "DELETE", &path, &body).await;
    // As the API server: its decoder's error, not turned into a Status reason.
    assert_eq!(resp.status, 500, "{:?}", resp.json());
    let status = resp.json();
    assert_eq!(status["kind"], "Status");
    assert!(status.get("reason").is_none(), "{status}");
    assert_eq!(
        message(&resp),
        "json: cannot unmarshal number into Go struct field Preconditions.preconditions.resourceVersion of type string"
    );
    assert!(exists(&emulator, "a").await, "the object is still there");
}

#[tokio::test]
async fn bad_propagation_policies_are_invalid() {
    let emulator = emulator().await;
    create_cm(&emulator, "a").await;
    let path = format!("{CMS}/a");
    let resp = send(
        &emulator,
        "DELETE",
        &path,
        &json!({"propagationPolicy": "Sideways"}),
    )
    .await;
    resp.assert_status_object(422);
    let status = resp.json();
    assert_eq!(
        (&status["details"]["group"], &status["details"]["kind"]),
        (&json!("meta.k8s.io"), &json!("DeleteOptions"))
    );
    assert_eq!(
        message(&resp),
        "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Sideways\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
    );
    let both = json!({"propagationPolicy": "Foreground", "orphanDependents": false});
    let resp = send(&emulator, "DELETE", &path, &both).await;
    resp.assert_status_object(422);
    assert_eq!(
        message(&resp),
        "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Invalid value: \"Foreground\": orphanDependents and deletionPropagation cannot be both set"
    );
    let resp = send(
        &emulator,
        "DELETE",
        CMS,
        &json!({"propagationPolicy": "Sideways"}),
    )
    .await;
    resp.assert_status_object(422);
    assert!(exists(&emulator, "a").await, "the object is still there");
    let resp = send(
        &emulator,
        "DELETE",
        &path,
        &json!({"propagationPolicy": "Background"}),
    )
    .await;
    assert_eq!(resp.status, 200, "{:?}", resp.json());
}

#[tokio::test]
async fn bad_resource_version_matches_are_invalid() {
    let emulator = emulator().await;
    let path = format!("{CMS}?resourceVersion=1&resourceVersionMatch=Newest");
    let resp = raw_request(emulator.addr(), "GET", &path, &[], b"").await;
    resp.assert_status_object(422);
    assert_eq!(
        message(&resp),
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Unsupported value: \"Newest\": supported values: \"Exact\", \"NotOlderThan\", \"\""
    );
    let path = format!("{CMS}?resourceVersionMatch=NotOlderThan");
    let resp = raw_request(emulator.addr(), "GET", &path, &[], b"").await;
    resp.assert_status_object(422);
    assert_eq!(
        message(&resp),
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
    );
    let path = format!("{CMS}?watch=1&resourceVersion=1&resourceVersionMatch=Exact");
    let resp = raw_request(emulator.addr(), "GET", &path, &[], b"").await;
    resp.assert_status_object(422);
}

#[tokio::test]
async fn field_managers_longer_than_128_bytes_are_invalid() {
    let emulator = emulator().await;
    let long = "m".repeat(129);
    let path = format!("{CMS}?fieldManager={long}");
    let resp = send(
        &emulator,
        "POST",
        &path,
        &json!({"metadata": {"name": "a"}}),
    )
    .await;
    resp.assert_status_object(422);
    assert_eq!(
        message(&resp),
        "CreateOptions.meta.k8s.io \"\" is invalid: fieldManager: Too long: may not be more than 128 bytes"
    );
    assert!(!exists(&emulator, "a").await, "nothing was created");
    create_cm(&emulator, "a").await;
    let path = format!("{CMS}/a?fieldManager={long}");
    let patch = serde_json::to_vec(&json!({"data": {"k": "v"}})).expect("JSON");
    let resp = raw_request(
        emulator.addr(),
        "PATCH",
        &path,
        &[("Content-Type", "application/merge-patch+json")],
        &patch,
    )
    .await;
    resp.assert_status_object(422);
    assert!(message(&resp).starts_with("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager"));
    let fine = format!("{CMS}?fieldManager={}", "m".repeat(128));
    let resp = send(
        &emulator,
        "POST",
        &fine,
        &json!({"metadata": {"name": "b"}}),
    )
    .await;
    assert_eq!(resp.status, 201, "{:?}", resp.json());
}
