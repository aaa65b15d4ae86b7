//! The admission chain under hostile webhooks: patches built to exhaust
//! the stack or memory, webhooks slow enough to hold a request forever,
//! floods of warnings, and patches touching what a webhook may not change;
//! and what webhooks see of a write, as the API server shows it to them.
//! Each is answered as the API server answers it, and the emulator lives.

use std::time::{Duration, Instant};

use crate::admission::{cm, mutating, validating};
use crate::common::webhooks::{Hook, Pki, Reply, allow, review, webhook};
use crate::common::{api_error, raw_request, within};
use base64::Engine;
use k8s_openapi::api::core::v1::ConfigMap;
use kopf_testing::Emulator;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// A mutating webhook answering every review with the JSON Patch `ops`.
async fn patching(ops: Value) -> (Pki, Hook) {
    let pki = Pki::new(&["127.0.0.1"]);
    let patch = base64::engine::general_purpose::STANDARD.encode(ops.to_string());
    let hook = Hook::start(&pki, move |r: &Value| {
        Reply::Json(review(
            r,
            json!({"allowed": true, "patchType": "JSONPatch", "patch": patch}),
        ))
    })
    .await;
    (pki, hook)
}

#[tokio::test]
async fn a_patch_doubling_the_depth_is_an_internal_error_and_the_emulator_lives() {
    let emulator = Emulator::start().await.unwrap();
    let client = emulator.client();
    // Each copy puts `/x` into its own innermost object: 15 copies would
    // nest the object 65,536 levels deep.
    let mut ops = vec![json!({"op": "add", "path": "/x", "value": {"b": {}}})];
    ops.extend((1..=15).map(
        |i| json!({"op": "copy", "from": "/x", "path": format!("/x{}", "/b".repeat(1 << i))}),
    ));
    let (pki, hook) = patching(Value::Array(ops)).await;
    let mut deepen = webhook("deepen.example.com", &hook.url("/m"), &pki);
    // A failed patch is an error whatever the failure policy.
    deepen["failurePolicy"] = json!("Ignore");
    mutating(&client, "deepen", vec![deepen]).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    let status = api_error(
        cms.create(&PostParams::default(), &cm("deep", json!({})))
            .await,
    );
    assert_eq!(
        (status.code, status.reason.as_str()),
        (500, "InternalError")
    );
    assert!(
        status.message.starts_with("Internal error occurred: ")
            && status.message.contains("deeper than"),
        "{}",
        status.message
    );
    assert!(cms.get_opt("deep").await.unwrap().is_none());
    let resp = raw_request(emulator.addr(), "GET", "/version", &[], b"").await;
    assert_eq!(resp.status, 200, "the emulator still answers");
}

#[tokio::test]
async fn slow_webhooks_share_one_deadline_for_the_request() {
    let emulator = Emulator::builder()
        .request_timeout(Duration::from_secs(3))
        .start()
        .await
        .unwrap();
    let client = emulator.client();
    let pki = Pki::new(&["127.0.0.1"]);
    let slow = Hook::start(&pki, |r: &Value| {
        Reply::After(
            Duration::from_secs(60),
            review(r, json!({"allowed": true, "warnings": ["slow"]})),
        )
    })
    .await;
    // Three webhooks of 2 s each, failing open: 6 s one after the other,
    // over the request's 3 s.
    let hooks = (0..3)
        .map(|i| {
            let mut hook = webhook(&format!("slow{i}.example.com"), &slow.url("/m"), &pki);
            hook["timeoutSeconds"] = json!(2);
            hook["failurePolicy"] = json!("Ignore");
            hook
        })
        .collect();
    mutating(&client, "slow", hooks).await;

    let started = Instant::now();
    let body = br#"{"metadata":{"name":"s"}}"#;
    let resp = within(
        "a request to slow webhooks",
        raw_request(
            emulator.addr(),
            "POST",
            "/api/v1/namespaces/default/configmaps",
            &[("Content-Type", "application/json")],
            body,
        ),
    )
    .await;
    let took = started.elapsed();
    assert_eq!(resp.status, 504, "{}", String::from_utf8_lossy(&resp.body));
    let status = resp.json();
    assert_eq!(status["reason"], "Timeout");
    assert_eq!(
        status["message"],
        "Timeout: request did not complete within the allotted timeout"
    );
    assert!(resp.header("warning").is_none(), "{:?}", resp.headers);
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(5),
        "took {took:?}"
    );
    // The second call was told what was left; the third never made.
    let calls: Vec<String> = emulator
        .requests()
        .into_iter()
        .filter(|r| r.verb == "admission")
        .map(|r| r.path)
        .collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls[0].ends_with("?timeout=2s"), "{calls:?}");
    assert!(calls[1].ends_with("?timeout=1s"), "{calls:?}");
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    assert!(cms.get_opt("s").await.unwrap().is_none());
}

#[tokio::test]
async fn a_flood_of_warnings_is_cut_as_the_api_server_cuts_it() {
    let emulator = Emulator::start().await.unwrap();
    let client = emulator.client();
    let pki = Pki::new(&["127.0.0.1"]);
    // 40 warnings of 300 characters, twice over, and one with a newline.
    let mut warnings: Vec<String> = (0..40)
        .map(|i| format!("{i:03}{}", "w".repeat(297)))
        .collect();
    warnings.extend(warnings.clone());
    warnings.insert(0, "two\nlines".into());
    let hook = Hook::start(&pki, move |r: &Value| {
        Reply::Json(review(r, json!({"allowed": true, "warnings": warnings})))
    })
    .await;
    validating(
        &client,
        "warn",
        vec![webhook("warn.example.com", &hook.url("/w"), &pki)],
    )
    .await;
    let resp = raw_request(
        emulator.addr(),
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("Content-Type", "application/json")],
        br#"{"metadata":{"name":"w"}}"#,
    )
    .await;
    assert_eq!(resp.status, 201);
    let headers: Vec<&str> = resp
        .headers
        .iter()
        .filter(|(k, _)| k == "warning")
        .map(|(_, v)| v.as_str())
        .collect();
    // 13 warnings fit in 4,096 characters; the 14th cuts them all to 256,
    // and two more of 256 reach 4,096: the rest are dropped.
    assert_eq!(headers.len(), 16, "{headers:?}");
    for (i, header) in headers.iter().enumerate() {
        assert_eq!(*header, format!("299 - \"{i:03}{}\"", "w".repeat(253)));
    }
}

#[tokio::test]
async fn a_dry_run_create_is_given_a_name_uid_and_time_that_webhooks_see() {
    let emulator = Emulator::start().await.unwrap();
    let client = emulator.client();
    let pki = Pki::new(&["127.0.0.1"]);
    let hook = Hook::start(&pki, allow).await;
    validating(
        &client,
        "see",
        vec![webhook("see.example.com", &hook.url("/v"), &pki)],
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let generated: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "gen-"}})).unwrap();
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };

    let created = cms.create(&dry, &generated).await.expect("a dry run");
    let meta = &created.metadata;
    let name = meta.name.clone().expect("a generated name");
    assert!(name.starts_with("gen-") && name.len() > 4, "{name}");
    assert!(meta.uid.as_ref().is_some_and(|u| !u.is_empty()), "{meta:?}");
    assert!(meta.creation_timestamp.is_some(), "{meta:?}");
    assert!(meta.resource_version.is_none(), "{meta:?}");
    assert!(cms.get_opt(&name).await.unwrap().is_none());
    let seen = hook.requests("/v").pop().unwrap();
    assert_eq!(seen["name"], name.as_str());
    assert_eq!(seen["object"]["metadata"]["name"], name.as_str());
    assert_eq!(
        seen["object"]["metadata"]["uid"],
        meta.uid.as_deref().unwrap()
    );
    assert!(seen["object"]["metadata"]["creationTimestamp"].is_string());

    // For real, the object stored is the one webhooks saw.
    let created = cms
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    let seen = hook.requests("/v").pop().unwrap();
    assert_eq!(
        seen["object"]["metadata"]["uid"],
        created.metadata.uid.as_deref().unwrap()
    );
    assert_eq!(
        seen["object"]["metadata"]["name"],
        created.metadata.name.as_deref().unwrap()
    );
}

#[tokio::test]
async fn webhooks_see_the_kind_and_api_version_a_client_left_out() {
    let emulator = Emulator::start().await.unwrap();
    let client = emulator.client();
    let pki = Pki::new(&["127.0.0.1"]);
    let hook = Hook::start(&pki, allow).await;
    mutating(
        &client,
        "see",
        vec![webhook("see.example.com", &hook.url("/m"), &pki)],
    )
    .await;
    let path = "/api/v1/namespaces/default/configmaps";
    let json = [("Content-Type", "application/json")];
    let created = raw_request(
        emulator.addr(),
        "POST",
        path,
        &json,
        br#"{"metadata":{"name":"t"}}"#,
    )
    .await;
    assert_eq!(created.status, 201);
    let put = raw_request(
        emulator.addr(),
        "PUT",
        &format!("{path}/t"),
        &json,
        br#"{"metadata":{"name":"t"},"data":{"a":"b"}}"#,
    )
    .await;
    assert_eq!(put.status, 200, "{}", String::from_utf8_lossy(&put.body));
    let seen = hook.requests("/m");
    assert_eq!(seen.len(), 2);
    for review in seen {
        assert_eq!(review["object"]["kind"], "ConfigMap", "{review}");
        assert_eq!(review["object"]["apiVersion"], "v1", "{review}");
    }
}

#[tokio::test]
async fn an_update_a_webhook_moves_renames_deletes_or_retypes_is_refused() {
    let emulator = Emulator::start().await.unwrap();
    let client = emulator.client();
    let pki = Pki::new(&["127.0.0.1"]);
    // Patches what `data.try` names.
    let hook = Hook::start(&pki, |r: &Value| {
        let op = match r["object"]["data"]["try"].as_str() {
            Some("namespace") => json!({"op": "replace", "path": "/metadata/namespace", "value": "kube-system"}),
            Some("name") => json!({"op": "replace", "path": "/metadata/name", "value": "renamed"}),
            Some("deletion") => json!({"op": "add", "path": "/metadata/deletionTimestamp", "value": "2026-01-02T03:04:05Z"}),
            Some("kind") => json!({"op": "replace", "path": "/kind", "value": "Secret"}),
            _ => return allow(r),
        };
        let patch = base64::engine::general_purpose::STANDARD.encode(json!([op]).to_string());
        Reply::Json(review(
            r,
            json!({"allowed": true, "patchType": "JSONPatch", "patch": patch}),
        ))
    })
    .await;
    mutating(
        &client,
        "meddle",
        vec![webhook("meddle.example.com", &hook.url("/m"), &pki)],
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &cm("t", json!({})))
        .await
        .unwrap();

    for (attempt, code, message) in [
        (
            "namespace",
            400,
            "the namespace of the provided object does not match the namespace sent on the request",
        ),
        (
            "name",
            422,
            "ConfigMap \"renamed\" is invalid: metadata.name: Invalid value: \"renamed\": field is immutable",
        ),
        (
            "deletion",
            422,
            "ConfigMap \"t\" is invalid: metadata.deletionTimestamp: Invalid value: 2026-01-02 03:04:05 +0000 UTC: field is immutable",
        ),
        ("kind", 500, ""),
    ] {
        let patch = Patch::Merge(json!({"data": {"try": attempt}}));
        let status = api_error(cms.patch("t", &PatchParams::default(), &patch).await);
        assert_eq!(status.code, code, "{attempt}: {status:?}");
        if !message.is_empty() {
            assert_eq!(status.message, message, "{attempt}");
        } else {
            assert_eq!(status.reason, "InternalError", "{attempt}");
        }
    }
    let stored = cms.get("t").await.unwrap();
    assert!(
        stored.data.is_none_or(|d| d.is_empty()),
        "nothing was stored"
    );
    assert!(stored.metadata.deletion_timestamp.is_none());
}
