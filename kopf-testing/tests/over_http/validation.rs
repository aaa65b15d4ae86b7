//! What the API server refuses, refused over real HTTP with its codes and
//! `Status` bodies: malformed metadata and data, bodies that contradict the
//! URL, oversized or malformed patches, preconditions, crafted continue
//! tokens and resource versions, and bad query parameters.

use crate::common::{RawResponse, api_error, raw_request, send_json, within};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kopf_testing::Emulator;
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams},
};
use serde_json::{Value, json};

const CMS: &str = "/api/v1/namespaces/default/configmaps";

async fn emulator() -> Emulator {
    within("the emulator to start", Emulator::start())
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

async fn post(emulator: &Emulator, path: &str, body: Value) -> RawResponse {
    send(emulator, "POST", path, "application/json", &body).await
}

async fn create_cm(emulator: &Emulator, name: &str) -> Value {
    let created = post(
        emulator,
        CMS,
        json!({"metadata": {"name": name}, "data": {"k": "v"}}),
    )
    .await;
    assert_eq!(created.status, 201, "{:?}", created.json());
    created.json()
}

/// The causes' `field: message` lines of a 422 answer.
fn message(resp: &RawResponse) -> String {
    resp.json()["message"].as_str().unwrap_or("").to_string()
}

#[tokio::test]
async fn metadata_of_the_wrong_type_is_a_bad_request() {
    let emulator = emulator().await;
    for metadata in [
        json!({"name": "a", "labels": {"app": 1}}),
        json!({"name": "a", "labels": ["app"]}),
        json!({"name": "a", "annotations": {"note": {"x": 1}}}),
        json!({"name": "a", "finalizers": "example.com/f"}),
        json!({"name": "a", "finalizers": [7]}),
        json!({"name": "a", "ownerReferences": {"name": "o"}}),
        json!({"name": "a", "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "o", "uid": 5}]}),
    ] {
        let resp = post(&emulator, CMS, json!({"metadata": metadata})).await;
        resp.assert_status_object(400);
        assert_eq!(resp.json()["reason"], "BadRequest");
        assert!(
            message(&resp)
                .starts_with("ConfigMap in version \"v1\" cannot be handled as a ConfigMap"),
            "{metadata}: {}",
            message(&resp)
        );
    }
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    let list = api.list(&ListParams::default()).await.expect("list");
    assert!(list.items.is_empty(), "nothing was created");
}

#[tokio::test]
async fn labels_annotations_finalizers_and_owner_references_follow_the_api_syntax() {
    let emulator = emulator().await;
    let resp = post(
        &emulator,
        CMS,
        json!({"metadata": {
            "name": "a",
            "labels": {"bad key": "ok", "long": "v".repeat(64), "-x.example.com/y": "z"},
            "annotations": {"a/b/c": "x"},
            "finalizers": ["not a qualified name"],
            "ownerReferences": [{"kind": "Pod", "name": "o"}],
        }}),
    )
    .await;
    resp.assert_status_object(422);
    assert_eq!(resp.json()["reason"], "Invalid");
    let causes = resp.causes();
    let expect = [
        "metadata.labels: Invalid value: \"-x.example.com/y\": prefix part a lowercase RFC 1123 subdomain",
        "metadata.labels: Invalid value: \"bad key\": name part must consist of alphanumeric characters",
        &format!(
            "metadata.labels: Invalid value: \"{}\": must be no more than 63 characters",
            "v".repeat(64)
        ),
        "metadata.annotations: Invalid value: \"a/b/c\": a qualified name must consist",
        "metadata.finalizers[0]: Invalid value: \"not a qualified name\": name part must consist",
        "metadata.ownerReferences.apiVersion: Invalid value: \"\": version must not be empty",
        "metadata.ownerReferences.uid: Invalid value: \"\": uid must not be empty",
    ];
    for e in expect {
        assert!(
            causes.iter().any(|c| c.starts_with(e)),
            "no cause {e:?} in {causes:#?}"
        );
    }
    assert!(
        message(&resp).starts_with("ConfigMap \"a\" is invalid: ["),
        "{}",
        message(&resp)
    );
    // What operators write passes: prefixed keys with dots and slashes.
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    let ok: ConfigMap = serde_json::from_value(json!({"metadata": {
        "name": "b",
        "labels": {"app.kubernetes.io/name": "demo", "empty": ""},
        "annotations": {"kopf.zalando.org/last-handled-configuration": "{\"spec\": {}}", "Note": "any text at all"},
        "finalizers": ["kopf.zalando.org/KopfFinalizerMarker", "kubernetes"],
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "1234", "controller": true}],
    }}))
    .expect("configmap");
    within("create", api.create(&PostParams::default(), &ok))
        .await
        .expect("a valid object is created");
    // A patch may not make an object invalid either.
    let bad = json!({"metadata": {"labels": {"bad key": "x"}}});
    let status = api_error(
        api.patch("b", &PatchParams::default(), &Patch::Merge(&bad))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
}

#[tokio::test]
async fn annotations_over_256_kib_in_total_are_too_long() {
    let emulator = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    let half = "x".repeat(128 * 1024);
    let big: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "big", "annotations": {"a": half, "b": half}}}),
    )
    .expect("configmap");
    let status = api_error(api.create(&PostParams::default(), &big).await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        "ConfigMap \"big\" is invalid: metadata.annotations: Too long: must have at most 262144 bytes"
    );
    create_cm(&emulator, "small").await;
    let grow = json!({"metadata": {"annotations": {"a": half, "b": half}}});
    let status = api_error(
        api.patch("small", &PatchParams::default(), &Patch::Merge(&grow))
            .await,
    );
    assert_eq!(status.code, 422);
}

#[tokio::test]
async fn config_map_data_must_be_strings_and_secret_data_base64() {
    let emulator = emulator().await;
    for body in [
        json!({"metadata": {"name": "a"}, "data": {"n": 1}}),
        json!({"metadata": {"name": "a"}, "data": {"n": {"nested": "x"}}}),
        json!({"metadata": {"name": "a"}, "data": "text"}),
        json!({"metadata": {"name": "a"}, "binaryData": {"b": "not base64!"}}),
    ] {
        let resp = post(&emulator, CMS, body.clone()).await;
        resp.assert_status_object(400);
        assert!(
            message(&resp).contains("cannot be handled as a ConfigMap"),
            "{body}: {}",
            message(&resp)
        );
    }
    let secrets = "/api/v1/namespaces/default/secrets";
    for body in [
        json!({"metadata": {"name": "s"}, "data": {"k": "plain text"}}),
        json!({"metadata": {"name": "s"}, "data": {"k": 12}}),
        json!({"metadata": {"name": "s"}, "stringData": {"k": false}}),
    ] {
        let resp = post(&emulator, secrets, body.clone()).await;
        resp.assert_status_object(400);
        assert!(
            message(&resp).contains("cannot be handled as a Secret"),
            "{body}: {}",
            message(&resp)
        );
    }
    let ok = post(
        &emulator,
        secrets,
        json!({"metadata": {"name": "s"}, "data": {"k": "aGk="}, "stringData": {"t": "hi"}}),
    )
    .await;
    assert_eq!(ok.status, 201, "{:?}", ok.json());
    let api: Api<Secret> = Api::default_namespaced(emulator.client());
    let status = api_error(
        api.patch(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "%%%"}})),
        )
        .await,
    );
    assert_eq!(status.code, 400);
}

#[tokio::test]
async fn bodies_that_contradict_the_url_are_bad_requests() {
    let emulator = emulator().await;
    let resp = post(
        &emulator,
        CMS,
        json!({"metadata": {"name": "a", "namespace": "kube-system"}}),
    )
    .await;
    resp.assert_status_object(400);
    assert_eq!(
        message(&resp),
        "the namespace of the provided object does not match the namespace sent on the request"
    );
    let resp = post(
        &emulator,
        CMS,
        json!({"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
    )
    .await;
    resp.assert_status_object(400);
    assert_eq!(
        message(&resp),
        "the API version in the data (apps/v1) does not match the expected API version (v1)"
    );
    let resp = post(
        &emulator,
        CMS,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}}),
    )
    .await;
    resp.assert_status_object(400);
    let created = create_cm(&emulator, "a").await;
    let mut moved = created.clone();
    moved["metadata"]["namespace"] = "kube-system".into();
    let resp = send(
        &emulator,
        "PUT",
        &format!("{CMS}/a"),
        "application/json",
        &moved,
    )
    .await;
    resp.assert_status_object(400);
    let mut retyped = created.clone();
    retyped["apiVersion"] = "v2".into();
    let resp = send(
        &emulator,
        "PUT",
        &format!("{CMS}/a"),
        "application/json",
        &retyped,
    )
    .await;
    resp.assert_status_object(400);
}

#[tokio::test]
async fn patches_may_not_change_kind_or_namespace() {
    let emulator = emulator().await;
    let created = create_cm(&emulator, "a").await;
    let path = format!("{CMS}/a");
    for (ct, patch) in [
        ("application/merge-patch+json", json!({"kind": "Secret"})),
        (
            "application/merge-patch+json",
            json!({"metadata": {"namespace": "kube-system"}}),
        ),
        (
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/metadata/namespace", "value": "kube-system"}]),
        ),
        (
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/kind", "value": "Secret"}]),
        ),
        (
            "application/strategic-merge-patch+json",
            json!({"apiVersion": "v2"}),
        ),
    ] {
        let resp = send(&emulator, "PATCH", &path, ct, &patch).await;
        resp.assert_status_object(400);
        assert!(
            message(&resp).contains("does not match"),
            "{patch}: {}",
            message(&resp)
        );
    }
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    let now = api.get("a").await.expect("still there");
    assert_eq!(
        now.metadata.resource_version.as_deref(),
        created["metadata"]["resourceVersion"].as_str(),
        "nothing was written"
    );
}

#[tokio::test]
async fn patches_may_not_rename_objects() {
    let emulator = emulator().await;
    create_cm(&emulator, "a").await;
    let path = format!("{CMS}/a");
    let rename = json!([{"op": "replace", "path": "/metadata/name", "value": "b"}]);
    let resp = send(
        &emulator,
        "PATCH",
        &path,
        "application/json-patch+json",
        &rename,
    )
    .await;
    resp.assert_status_object(400);
    assert_eq!(resp.json()["reason"], "BadRequest");
    assert_eq!(
        message(&resp),
        "the name of the object (b) does not match the name on the URL (a)"
    );
    let unname = json!([{"op": "remove", "path": "/metadata/name"}]);
    let resp = send(
        &emulator,
        "PATCH",
        &path,
        "application/json-patch+json",
        &unname,
    )
    .await;
    resp.assert_status_object(400);
    assert_eq!(
        message(&resp),
        "the name of the object (a based on URL) was undeterminable: name must be provided"
    );
    let moved = json!({"metadata": {"namespace": "kube-system"}});
    let resp = send(
        &emulator,
        "PATCH",
        &path,
        "application/merge-patch+json",
        &moved,
    )
    .await;
    assert_eq!(
        message(&resp),
        "the namespace of the object (kube-system) does not match the namespace on the URL (default)"
    );
}

#[tokio::test]
async fn json_patches_of_more_than_10000_operations_are_too_large() {
    let emulator = emulator().await;
    create_cm(&emulator, "a").await;
    let op = json!({"op": "test", "path": "/data/k", "value": "v"});
    let patch = Value::Array(vec![op.clone(); 10_001]);
    let resp = send(
        &emulator,
        "PATCH",
        &format!("{CMS}/a"),
        "application/json-patch+json",
        &patch,
    )
    .await;
    resp.assert_status_object(413);
    assert_eq!(resp.json()["reason"], "RequestEntityTooLarge");
    assert!(
        message(&resp)
            .contains("The allowed maximum operations in a JSON patch is 10000, got 10001")
    );
    let patch = Value::Array(vec![op; 10_000]);
    let resp = send(
        &emulator,
        "PATCH",
        &format!("{CMS}/a"),
        "application/json-patch+json",
        &patch,
    )
    .await;
    assert_eq!(resp.status, 200, "{:?}", resp.json());
}

#[tokio::test]
async fn a_numeric_resource_version_is_a_precondition() {
    let emulator = emulator().await;
    let created = create_cm(&emulator, "a").await;
    let rv: u64 = created["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("numeric rv");
    let path = format!("{CMS}/a");
    let stale = json!({"metadata": {"resourceVersion": rv - 1}, "data": {"k": "stale"}});
    let resp = send(
        &emulator,
        "PATCH",
        &path,
        "application/merge-patch+json",
        &stale,
    )
    .await;
    resp.assert_status_object(409);
    assert_eq!(resp.json()["reason"], "Conflict");
    let mut replaced = created.clone();
    replaced["metadata"]["resourceVersion"] = json!(rv - 1);
    let resp = send(&emulator, "PUT", &path, "application/json", &replaced).await;
    resp.assert_status_object(409);
    let current = json!({"metadata": {"resourceVersion": rv}, "data": {"k": "fresh"}});
    let resp = send(
        &emulator,
        "PATCH",
        &path,
        "application/merge-patch+json",
        &current,
    )
    .await;
    assert_eq!(resp.status, 200, "{:?}", resp.json());
    assert_eq!(resp.json()["data"]["k"], "fresh");
}

#[tokio::test]
async fn unknown_patch_directives_are_bad_requests() {
    let emulator = emulator().await;
    create_cm(&emulator, "a").await;
    let patch = json!({"data": {"$patch": "bogus", "k": "w"}});
    let resp = send(
        &emulator,
        "PATCH",
        &format!("{CMS}/a"),
        "application/strategic-merge-patch+json",
        &patch,
    )
    .await;
    resp.assert_status_object(400);
    assert!(message(&resp).contains("\"bogus\""), "{}", message(&resp));
    let known = json!({"data": {"$patch": "replace", "k": "w"}});
    let resp = send(
        &emulator,
        "PATCH",
        &format!("{CMS}/a"),
        "application/strategic-merge-patch+json",
        &known,
    )
    .await;
    assert_eq!(resp.status, 200, "{:?}", resp.json());
}

#[tokio::test]
async fn server_side_apply_needs_a_field_manager_and_the_right_name() {
    let emulator = emulator().await;
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}});
    let resp = send(
        &emulator,
        "PATCH",
        &format!("{CMS}/a"),
        "application/apply-patch+yaml",
        &body,
    )
    .await;
    resp.assert_status_object(422);
    assert_eq!(
        resp.causes(),
        ["fieldManager: Required value: is required for apply patch; pass ?fieldManager=NAME"]
    );
    let resp = send(
        &emulator,
        "PATCH",
        &format!("{CMS}/b?fieldManager=me"),
        "application/apply-patch+yaml",
        &body,
    )
    .await;
    resp.assert_status_object(400);
    assert_eq!(
        message(&resp),
        "the name of the object (a) does not match the name on the URL (b)"
    );
    let resp = send(
        &emulator,
        "PATCH",
        &format!("{CMS}/a?fieldManager=me"),
        "application/apply-patch+yaml",
        &body,
    )
    .await;
    assert_eq!(resp.status, 201, "{:?}", resp.json());
}

#[tokio::test]
async fn crafted_continue_tokens_are_bad_requests() {
    let emulator = emulator().await;
    for name in ["a", "b", "c"] {
        create_cm(&emulator, name).await;
    }
    let hex = |s: &str| s.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    for token in [
        "zz-not-a-token".to_string(),
        hex("99999999|default|a"),
        hex("0|default|a"),
        hex("5|kube-system|a"),
    ] {
        let resp = raw_request(
            emulator.addr(),
            "GET",
            &format!("{CMS}?limit=1&continue={token}"),
            &[],
            b"",
        )
        .await;
        resp.assert_status_object(400);
        assert!(
            message(&resp).starts_with("continue key is not valid"),
            "{token}: {}",
            message(&resp)
        );
    }
}

#[tokio::test]
async fn far_future_resource_versions_time_out_with_504() {
    let emulator = emulator().await;
    create_cm(&emulator, "a").await;
    let future = 10_000_000;
    for path in [
        format!("{CMS}/a?resourceVersion={future}"),
        format!("{CMS}?resourceVersion={future}"),
        format!("{CMS}?resourceVersion={future}&resourceVersionMatch=Exact"),
        format!("{CMS}?watch=1&resourceVersion={future}"),
    ] {
        let resp = raw_request(emulator.addr(), "GET", &path, &[], b"").await;
        resp.assert_status_object(504);
        let status = resp.json();
        assert_eq!(status["reason"], "Timeout", "{path}");
        assert_eq!(status["details"]["retryAfterSeconds"], 1, "{path}");
        assert_eq!(
            status["details"]["causes"][0]["reason"],
            "ResourceVersionTooLarge"
        );
        assert!(
            status["message"]
                .as_str()
                .unwrap_or("")
                .starts_with(&format!(
                    "Timeout: Too large resource version: {future}, current: "
                ))
        );
        assert_eq!(resp.header("retry-after"), Some("1"));
    }
}

#[tokio::test]
async fn a_watch_with_timeout_zero_uses_the_default_timeout() {
    let emulator = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    let mut events = within("watch", api.watch(&WatchParams::default().timeout(0), "0"))
        .await
        .expect("watch starts")
        .boxed();
    create_cm(&emulator, "later").await;
    let name = within("the ADDED event on a still open watch", async {
        loop {
            match events.try_next().await {
                Ok(Some(WatchEvent::Added(cm))) => break cm.metadata.name,
                Ok(Some(_)) => continue,
                other => panic!("the watch ended early: {other:?}"),
            }
        }
    })
    .await;
    assert_eq!(name.as_deref(), Some("later"));
}

#[tokio::test]
async fn malformed_limits_and_dry_runs_are_refused() {
    let emulator = emulator().await;
    for path in [
        format!("{CMS}?limit=abc"),
        format!("{CMS}?watch=1&timeoutSeconds=soon"),
    ] {
        let resp = raw_request(emulator.addr(), "GET", &path, &[], b"").await;
        resp.assert_status_object(400);
        assert_eq!(resp.json()["reason"], "BadRequest");
    }
    let resp = send(
        &emulator,
        "POST",
        &format!("{CMS}?dryRun=Bogus"),
        "application/json",
        &json!({"metadata": {"name": "a"}}),
    )
    .await;
    resp.assert_status_object(422);
    assert_eq!(
        resp.causes(),
        ["dryRun: Unsupported value: []string{\"Bogus\"}: supported values: \"All\""]
    );
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    assert!(
        api.get_opt("a").await.expect("get").is_none(),
        "nothing was created"
    );
}

#[tokio::test]
async fn a_resource_version_on_create_is_refused_by_the_storage() {
    let emulator = emulator().await;
    let body = json!({"metadata": {"name": "a", "resourceVersion": "12"}});
    let resp = post(&emulator, CMS, body.clone()).await;
    // As the API server: its storage's error, with no reason of its own.
    assert_eq!(resp.status, 500, "{:?}", resp.json());
    let status = resp.json();
    assert_eq!(
        (&status["kind"], &status["code"]),
        (&json!("Status"), &json!(500))
    );
    assert!(status.get("reason").is_none(), "{status}");
    assert_eq!(
        message(&resp),
        "resourceVersion should not be set on objects to be created"
    );
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    assert!(
        api.get_opt("a").await.expect("get").is_none(),
        "nothing was created"
    );
    // A dry run does not reach the storage.
    let resp = post(&emulator, &format!("{CMS}?dryRun=All"), body).await;
    assert_eq!(resp.status, 201, "{:?}", resp.json());
}
