//! Names as the API server makes and checks them, over real HTTP: services
//! named as DNS-1035 labels, long `generateName` prefixes cut rather than
//! refused, and CRD groups that are domains.

use crate::common::{RawResponse, raw_request, within};
use kopf_testing::Emulator;
use serde_json::{Value, json};

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const SERVICES: &str = "/api/v1/namespaces/default/services";
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

async fn emulator() -> Emulator {
    within("the emulator to start", Emulator::start())
        .await
        .expect("the emulator starts")
}

async fn post(emulator: &Emulator, path: &str, body: &Value) -> RawResponse {
    let body = serde_json::to_vec(body).expect("JSON");
    raw_request(
        emulator.addr(),
        "POST",
        path,
        &[("Content-Type", "application/json")],
        &body,
    )
    .await
}

#[tokio::test]
async fn service_names_are_dns_1035_labels() {
    let emulator = emulator().await;
    let resp = post(
        &emulator,
        SERVICES,
        &json!({"metadata": {"name": "1st-web"}}),
    )
    .await;
    resp.assert_status_object(422);
    assert_eq!(
        resp.causes(),
        [
            "metadata.name: Invalid value: \"1st-web\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        ]
    );
    let resp = post(
        &emulator,
        SERVICES,
        &json!({"metadata": {"name": "web.example"}}),
    )
    .await;
    resp.assert_status_object(422);
    let resp = post(&emulator, SERVICES, &json!({"metadata": {"name": "web-1"}})).await;
    assert_eq!(resp.status, 201, "{:?}", resp.json());
    // Other resources keep their subdomain names.
    let resp = post(&emulator, CMS, &json!({"metadata": {"name": "1st.web"}})).await;
    assert_eq!(resp.status, 201, "{:?}", resp.json());
}

/// The name generated from `prefix` on `path`.
async fn generated(emulator: &Emulator, path: &str, prefix: &str) -> String {
    let resp = post(
        emulator,
        path,
        &json!({"metadata": {"generateName": prefix}}),
    )
    .await;
    assert_eq!(resp.status, 201, "{:?}", resp.json());
    assert_eq!(resp.json()["metadata"]["generateName"], prefix);
    resp.json()["metadata"]["name"]
        .as_str()
        .expect("a generated name")
        .to_string()
}

#[tokio::test]
async fn long_generate_names_are_cut() {
    let emulator = emulator().await;
    // A valid label prefix of 60 characters: cut to 58, plus 5 random ones.
    let name = generated(&emulator, SERVICES, &"p".repeat(60)).await;
    assert_eq!(name.len(), 63, "{name}");
    assert!(name.starts_with(&"p".repeat(58)), "{name}");
    // A subdomain prefix may be as long as a subdomain, and is cut as well.
    let name = generated(&emulator, CMS, &"c".repeat(250)).await;
    assert_eq!(name.len(), 63, "{name}");
    // A prefix is still checked as a name of its resource.
    let resp = post(
        &emulator,
        CMS,
        &json!({"metadata": {"generateName": "c".repeat(254)}}),
    )
    .await;
    resp.assert_status_object(422);
    assert_eq!(
        resp.causes(),
        [format!(
            "metadata.generateName: Invalid value: \"{}\": must be no more than 253 characters",
            "c".repeat(254)
        )]
    );
}

fn crd(group: &str) -> Value {
    json!({
        "metadata": {"name": format!("things.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    })
}

#[tokio::test]
async fn crd_groups_are_domains_with_a_dot() {
    let emulator = emulator().await;
    let resp = post(&emulator, CRDS, &crd("things")).await;
    resp.assert_status_object(422);
    assert_eq!(
        resp.causes(),
        ["spec.group: Invalid value: \"things\": should be a domain with at least one dot"]
    );
    let resp = post(&emulator, CRDS, &crd("example.com")).await;
    assert_eq!(resp.status, 201, "{:?}", resp.json());
}
