//! The admission chain over real HTTP: webhook configurations stored in the
//! emulator, a small HTTPS webhook server in the test, and kube clients
//! seeing denials, mutations, warnings, dry runs, failure policies,
//! timeouts, subresources, selectors and TLS failures as from an API server.

use std::time::{Duration, Instant};

use crate::common::webhooks::{Hook, Pki, Reply, allow, configuration, deny, review, webhook};
use crate::common::{api_error, raw_request, within};
use base64::Engine;
use k8s_openapi::api::{
    admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration},
    core::v1::{ConfigMap, Namespace, Pod},
};
use kopf_testing::Emulator;
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

pub(crate) fn cm(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).expect("a ConfigMap")
}

pub(crate) async fn validating(client: &Client, name: &str, webhooks: Vec<Value>) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let config = configuration("ValidatingWebhookConfiguration", name, webhooks);
    let config = serde_json::from_value(config).expect("a configuration");
    api.create(&PostParams::default(), &config)
        .await
        .expect("create the validating configuration");
}

pub(crate) async fn mutating(client: &Client, name: &str, webhooks: Vec<Value>) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let config = configuration("MutatingWebhookConfiguration", name, webhooks);
    let config = serde_json::from_value(config).expect("a configuration");
    api.create(&PostParams::default(), &config)
        .await
        .expect("create the mutating configuration");
}

/// Denies configmaps whose `data.valid` is not "yes".
fn validity(request: &Value) -> Reply {
    if request["object"]["data"]["valid"] == "yes" || request["operation"] == "DELETE" {
        allow(request)
    } else {
        deny(request, 403, "data.valid must be yes")
    }
}

#[tokio::test]
async fn a_denial_reaches_the_client_with_the_webhooks_code_and_message() {
    let emulator = Emulator::start().await.unwrap();
    let client = emulator.client();
    let pki = Pki::new(&["127.0.0.1"]);
    let hook = Hook::start(&pki, validity).await;
    validating(
        &client,
        "check",
        vec![webhook("valid.example.com", &hook.url("/v"), &pki)],
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    let status = api_error(
        cms.create(&PostParams::default(), &cm("bad", json!({})))
            .await,
    );
    assert_eq!(status.code, 403);
    assert_eq!(
        status.message,
        "admission webhook \"valid.example.com\" denied the request: data.valid must be yes"
    );
    assert!(
        cms.get_opt("bad").await.unwrap().is_none(),
        "a denied create stores nothing"
    );
    cms.create(&PostParams::default(), &cm("good", json!({"valid": "yes"})))
        .await
        .expect("an allowed create");

    let reviews = hook.requests("/v");
    assert_eq!(reviews.len(), 2);
    let r = &reviews[1];
    assert_eq!(r["operation"], "CREATE");
    assert_eq!(
        r["kind"],
        json!({"group": "", "version": "v1", "kind": "ConfigMap"})
    );
    assert_eq!(
        r["resource"],
        json!({"group": "", "version": "v1", "resource": "configmaps"})
    );
    assert_eq!(r["requestKind"], r["kind"]);
    assert_eq!(
        (r["name"].as_str(), r["namespace"].as_str()),
        (Some("good"), Some("default"))
    );
    assert_eq!(r["object"]["metadata"]["namespace"], "default");
    assert_eq!(r["oldObject"], Value::Null);
    assert_eq!(r["dryRun"], false);
    assert_eq!(r["options"]["kind"], "CreateOptions");
    assert!(r["userInfo"]["username"].is_string());
    assert!(r["uid"].as_str().is_some_and(|u| !u.is_empty()));

    // The call is in the request log, before the request it served.
    let log = emulator.requests();
    let calls: Vec<_> = log.iter().filter(|r| r.verb == "admission").collect();
    assert_eq!(calls.len(), 2);
    assert!(calls[0].path.starts_with(&hook.url("/v")), "{:?}", calls[0]);
    assert!(
        calls[0].query.contains("webhook=valid.example.com"),
        "{:?}",
        calls[0]
    );
    assert_eq!(calls[0].status, 200);
}

#[tokio::test]
async fn updates_patches_and_deletes_are_reviewed_with_the_old_object() {
    let emulator = Emulator::start().await.unwrap();
    let client = emulator.client();
    let pki = Pki::new(&["127.0.0.1"]);
    let hook = Hook::start(&pki, |r: &Value| {
        if r["operation"] == "DELETE" && r["oldObject"]["metadata"]["name"] == "keep" {
            deny(r, 409, "keep is kept")
        } else {
            validity(r)
        }
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for name in ["a", "keep", "b"] {
        cms.create(&PostParams::default(), &cm(name, json!({"valid": "yes"})))
            .await
            .unwrap();
    }
    validating(
        &client,
        "check",
        vec![webhook("valid.example.com", &hook.url("/v"), &pki)],
    )
    .await;

    for patch in [
        Patch::Merge(json!({"data": {"valid": "no"}})),
        Patch::Json(
            serde_json::from_value(
                json!([{"op": "replace", "path": "/data/valid", "value": "no"}]),
            )
            .unwrap(),
        ),
        Patch::Strategic(json!({"data": {"valid": "no"}})),
    ] {
        let status = api_error(cms.patch("a", &PatchParams::default(), &patch).await);
        assert_eq!(status.code, 403, "{patch:?}");
    }
    let apply = PatchParams::apply("test").force();
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"valid": "no"}});
    assert_eq!(
        api_error(cms.patch("a", &apply, &Patch::Apply(&applied)).await).code,
        403
    );
    let mut a = cms.get("a").await.unwrap();
    a.data = Some([("valid".to_string(), "no".to_string())].into());
    assert_eq!(
        api_error(cms.replace("a", &PostParams::default(), &a).await).code,
        403
    );
    assert_eq!(cms.get("a").await.unwrap().data.unwrap()["valid"], "yes");

    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"more": "1"}})),
    )
    .await
    .expect("an allowed patch");
    let update = hook.requests("/v").pop().unwrap();
    assert_eq!(update["operation"], "UPDATE");
    assert_eq!(update["options"]["kind"], "UpdateOptions");
    assert_eq!(update["oldObject"]["data"], json!({"valid": "yes"}));
    assert_eq!(
        update["object"]["data"],
        json!({"valid": "yes", "more": "1"})
    );

    // Deletes: one refused, the collection stops at it.
    let status = api_error(cms.delete("keep", &DeleteParams::default()).await);
    assert_eq!(
        (status.code, status.message.as_str()),
        (
            409,
            "admission webhook \"valid.example.com\" denied the request: keep is kept"
        )
    );
    cms.delete("a", &DeleteParams::default())
        .await
        .expect("an allowed delete");
    let delete = hook.requests("/v").pop().unwrap();
    assert_eq!(delete["operation"], "DELETE");
    assert_eq!(delete["object"], Value::Null);
    assert_eq!(delete["oldObject"]["metadata"]["name"], "a");
    assert_eq!(delete["options"]["kind"], "DeleteOptions");
    let result = cms
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    assert_eq!(api_error(result).code, 409);
    let left: Vec<String> = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert!(left.contains(&"keep".to_string()), "{left:?}");
}

#[tokio::test]
async fn mutations_are_applied_before_validation_and_stored() {
    let emulator = Emulator::start().await.unwrap();
    let client = emulator.client();
    let pki = Pki::new(&["127.0.0.1"]);
    let hook = Hook::start(&pki, |r: &Value| {
        if r["operation"] == "DELETE" && r["oldObject"]["metadata"]["name"] == "m" {
            return allow(r);
        }
        let patch = json!([
            {"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}},
            {"op": "add", "path": "/data/valid", "value": "yes"},
        ]);
        let patch = base64::engine::general_purpose::STANDARD.encode(patch.to_string());
        Reply::Json(review(
            r,
            json!({"allowed": true, "patchType": "JSONPatch", "patch": patch}),
        ))
    })
    .await;
    let validator = Hook::start(&pki, validity).await;
    mutating(
        &client,
        "defaults",
        vec![webhook("mutate.example.com", &hook.url("/m"), &pki)],
    )
    .await;
    validating(
        &client,
        "check",
        vec![webhook("valid.example.com", &validator.url("/v"), &pki)],
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    let created = cms
        .create(&PostParams::default(), &cm("m", json!({"x": "1"})))
        .await
        .expect("the mutated object passes validation");
    assert_eq!(created.metadata.labels.unwrap()["mutated"], "yes");
    let stored = cms.get("m").await.unwrap();
    assert_eq!(stored.data.unwrap()["valid"], "yes");
    assert_eq!(
        validator.requests("/v")[0]["object"]["data"]["valid"],
        "yes"
    );
    cms.delete("m", &DeleteParams::default())
        .await
        .expect("an unpatched delete");
    // A mutating webhook that patches a delete is an internal error.
    cms.create(&PostParams::default(), &cm("m2", json!({})))
        .await
        .unwrap();
    let status = api_error(cms.delete("m2", &DeleteParams::default()).await);
    assert_eq!(status.code, 500);
    assert_eq!(
        status.message,
        "Internal error occurred: admission webhook \"mutate.example.com\" attempted to modify the object, which is not supported for this operation"
    );
}

#[tokio::test]
async fn warnings_reach_the_client_on_admission_and_on_denial() {
    let emulator = Emulator::start().await.unwrap();
    let client = emulator.client();
    let pki = Pki::new(&["127.0.0.1"]);
    let hook = Hook::start(&pki, |r: &Value| {
        let allowed = r["object"]["data"]["valid"] == "yes";
        let mut response = json!({"allowed": allowed, "warnings": ["mind the \"gap\"", "second"]});
        if !allowed {
            response["status"] = json!({"message": "no"});
        }
        Reply::Json(review(r, response))
    })
    .await;
    validating(
        &client,
        "check",
        vec![webhook("warn.example.com", &hook.url("/w"), &pki)],
    )
    .await;
    let path = "/api/v1/namespaces/default/configmaps";
    let headers = [("Content-Type", "application/json")];
    for (body, code) in [
        (r#"{"metadata":{"name":"ok"},"data":{"valid":"yes"}}"#, 201),
        (r#"{"metadata":{"name":"no"},"data":{}}"#, 400),
    ] {
        let resp = raw_request(emulator.addr(), "POST", path, &headers, body.as_bytes()).await;
        assert_eq!(resp.status, code);
        let warnings: Vec<&str> = resp
            .headers
            .iter()
            .filter(|(k, _)| k == "warning")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(
            warnings,
            [r#"299 - "mind the \"gap\"""#, r#"299 - "second""#]
        );
    }
}

#[tokio::test]
async fn dry_runs_reach_webhooks_and_side_effects_refuse_them() {
    let emulator = Emulator::start().await.unwrap();
    let client = emulator.client();
    let pki = Pki::new(&["127.0.0.1"]);
    let hook = Hook::start(&pki, validity).await;
    validating(
        &client,
        "check",
        vec![webhook("valid.example.com", &hook.url("/v"), &pki)],
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };

    cms.create(&dry, &cm("d", json!({"valid": "yes"})))
        .await
        .expect("a dry run");
    assert!(
        cms.get_opt("d").await.unwrap().is_none(),
        "a dry run stores nothing"
    );
    let r = hook.requests("/v").pop().unwrap();
    assert_eq!(r["dryRun"], true);
    assert_eq!(r["options"]["dryRun"], json!(["All"]));
    assert_eq!(
        api_error(cms.create(&dry, &cm("d", json!({}))).await).code,
        403
    );

    let mut side = webhook("side.example.com", &hook.url("/side"), &pki);
    side["sideEffects"] = json!("Some");
    validating(&client, "side", vec![side]).await;
    let status = api_error(cms.create(&dry, &cm("d", json!({"valid": "yes"}))).await);
    assert_eq!(
        (status.code, status.message.as_str()),
        (
            400,
            "admission webhook \"side.example.com\" does not support dry run"
        )
    );
    assert!(
        hook.requests("/side").is_empty(),
        "a side-effecting webhook is not called for dry runs"
    );
    cms.create(&PostParams::default(), &cm("real", json!({"valid": "yes"})))
        .await
        .expect("it is called for real requests");
    assert_eq!(hook.requests("/side").len(), 1);
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
    listener.local_addr().expect("local addr").port()
}

#[tokio::test]
async fn failure_policy_decides_about_failing_webhooks() {
    let emulator = Emulator::start().await.unwrap();
    let client = emulator.client();
    let pki = Pki::new(&["127.0.0.1"]);
    let crashing = Hook::start(&pki, |_: &Value| Reply::Raw(500, "boom")).await;
    let garbage = Hook::start(&pki, |_: &Value| {
        Reply::Raw(200, "<html>not a review</html>")
    })
    .await;
    let wrong_uid = Hook::start(&pki, |_: &Value| {
        Reply::Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "other", "allowed": true}}))
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let unreachable = format!("https://127.0.0.1:{}/v", closed_port());
    let cases = [
        (
            "unreachable.example.com",
            unreachable,
            "failed to call webhook",
        ),
        ("crashing.example.com", crashing.url("/v"), "500"),
        (
            "garbage.example.com",
            garbage.url("/v"),
            "not an AdmissionReview",
        ),
        (
            "uid.example.com",
            wrong_uid.url("/v"),
            "expected response.uid",
        ),
    ];
    for (i, (name, url, why)) in cases.iter().enumerate() {
        let mut ignored = webhook(name, url, &pki);
        ignored["failurePolicy"] = json!("Ignore");
        validating(&client, &format!("ignore-{i}"), vec![ignored]).await;
        cms.create(
            &PostParams::default(),
            &cm(&format!("ignored-{i}"), json!({})),
        )
        .await
        .unwrap_or_else(|e| panic!("{name} under Ignore admits: {e}"));
        let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        api.delete(&format!("ignore-{i}"), &DeleteParams::default())
            .await
            .unwrap();

        validating(
            &client,
            &format!("fail-{i}"),
            vec![webhook(name, url, &pki)],
        )
        .await;
        let status = api_error(
            cms.create(
                &PostParams::default(),
                &cm(&format!("failed-{i}"), json!({})),
            )
            .await,
        );
        assert_eq!(
            (status.code, status.reason.as_str()),
            (500, "InternalError"),
            "{name}"
        );
        let prefix = format!("Internal error occurred: failed calling webhook \"{name}\": ");
        assert!(
            status.message.starts_with(&prefix),
            "{name}: {}",
            status.message
        );
        assert!(status.message.contains(why), "{name}: {}", status.message);
        api.delete(&format!("fail-{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn timeout_seconds_bounds_a_slow_webhook() {
    let emulator = Emulator::start().await.unwrap();
    let client = emulator.client();
    let pki = Pki::new(&["127.0.0.1"]);
    let slow = Hook::start(&pki, |r: &Value| {
        Reply::After(Duration::from_secs(60), review(r, json!({"allowed": true})))
    })
    .await;
    let mut hook = webhook("slow.example.com", &slow.url("/v"), &pki);
    hook["timeoutSeconds"] = json!(1);
    validating(&client, "slow", vec![hook]).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let started = Instant::now();
    let status = within(
        "a request to a slow webhook",
        cms.create(&PostParams::default(), &cm("s", json!({}))),
    )
    .await;
    let took = started.elapsed();
    let status = api_error(status);
    assert_eq!(status.code, 500);
    assert!(
        status.message.contains("deadline exceeded"),
        "{}",
        status.message
    );
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(5),
        "took {took:?}"
    );
    let call = emulator
        .requests()
        .into_iter()
        .find(|r| r.verb == "admission")
        .unwrap();
    assert!(call.path.ends_with("?timeout=1s"), "{call:?}");
}

#[tokio::test]
async fn subresource_rules_fire_only_for_their_subresource() {
    let emulator = Emulator::start().await.unwrap();
    let client = emulator.client();
    let pki = Pki::new(&["127.0.0.1"]);
    let hook = Hook::start(&pki, allow).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = serde_json::from_value(
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
    )
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let rule = |resources: Value| {
        let mut h = webhook("x", "", &pki);
        h["rules"] = json!([{"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": resources}]);
        h
    };
    let mut main = rule(json!(["pods"]));
    main["name"] = json!("main.example.com");
    main["clientConfig"]["url"] = json!(hook.url("/main"));
    let mut status = rule(json!(["pods/status"]));
    status["name"] = json!("status.example.com");
    status["clientConfig"]["url"] = json!(hook.url("/status"));
    validating(&client, "pods", vec![main, status]).await;

    pods.patch_status(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .unwrap();
    assert_eq!(hook.requests("/main").len(), 0);
    let reviews = hook.requests("/status");
    assert_eq!(reviews.len(), 1);
    assert_eq!(reviews[0]["subResource"], "status");
    assert_eq!(reviews[0]["object"]["status"]["phase"], "Running");
    pods.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
    )
    .await
    .unwrap();
    assert_eq!(hook.requests("/main").len(), 1);
    assert_eq!(hook.requests("/status").len(), 1);
}

#[tokio::test]
async fn object_and_namespace_selectors_pick_what_is_reviewed() {
    let emulator = Emulator::start().await.unwrap();
    let client = emulator.client();
    let pki = Pki::new(&["127.0.0.1"]);
    let hook = Hook::start(&pki, |r: &Value| deny(r, 403, "selected")).await;
    let mut by_object = webhook("object.example.com", &hook.url("/o"), &pki);
    by_object["objectSelector"] = json!({"matchLabels": {"checked": "yes"}});
    let mut by_namespace = webhook("namespace.example.com", &hook.url("/n"), &pki);
    by_namespace["namespaceSelector"] =
        json!({"matchExpressions": [{"key": "guarded", "operator": "Exists"}]});
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let guarded = serde_json::from_value(
        json!({"metadata": {"name": "guarded", "labels": {"guarded": "1"}}}),
    )
    .unwrap();
    namespaces
        .create(&PostParams::default(), &guarded)
        .await
        .unwrap();
    validating(&client, "selectors", vec![by_object, by_namespace]).await;

    let default: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    default
        .create(&PostParams::default(), &cm("plain", json!({})))
        .await
        .expect("neither selector picks it");
    assert!(hook.seen().is_empty());
    let mut labelled = cm("labelled", json!({}));
    labelled.metadata.labels = Some([("checked".to_string(), "yes".to_string())].into());
    let status = api_error(default.create(&PostParams::default(), &labelled).await);
    assert!(
        status.message.contains("object.example.com"),
        "{}",
        status.message
    );
    // An object leaving the selector is still reviewed: its old labels match.
    default
        .create(&PostParams::default(), &cm("later", json!({})))
        .await
        .unwrap();
    let relabel = Patch::Merge(json!({"metadata": {"labels": {"checked": "yes"}}}));
    assert_eq!(
        api_error(
            default
                .patch("later", &PatchParams::default(), &relabel)
                .await
        )
        .code,
        403
    );

    let guarded: Api<ConfigMap> = Api::namespaced(client.clone(), "guarded");
    let status = api_error(
        guarded
            .create(&PostParams::default(), &cm("inside", json!({})))
            .await,
    );
    assert!(
        status.message.contains("namespace.example.com"),
        "{}",
        status.message
    );
    assert_eq!(hook.requests("/n").len(), 1);
    // A namespace that does not exist is NotFound before any webhook.
    let missing: Api<ConfigMap> = Api::namespaced(client.clone(), "missing");
    assert_eq!(
        api_error(
            missing
                .create(&PostParams::default(), &cm("x", json!({})))
                .await
        )
        .code,
        404
    );
}

#[tokio::test]
async fn a_wrong_ca_bundle_is_a_tls_failure() {
    let emulator = Emulator::start().await.unwrap();
    let client = emulator.client();
    let pki = Pki::new(&["127.0.0.1"]);
    let other = Pki::new(&["127.0.0.1"]);
    let hook = Hook::start(&pki, allow).await;
    validating(
        &client,
        "check",
        vec![webhook("tls.example.com", &hook.url("/v"), &other)],
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let status = api_error(
        cms.create(&PostParams::default(), &cm("t", json!({})))
            .await,
    );
    assert_eq!(status.code, 500);
    assert!(status.message.contains("tls"), "{}", status.message);
    assert!(hook.seen().is_empty());
}

#[tokio::test]
async fn services_are_reached_at_their_mapped_address_and_verified_by_name() {
    let pki = Pki::new(&["hook.webhooks.svc"]);
    let hook = Hook::start(&pki, |r: &Value| deny(r, 422, "via the service")).await;
    let emulator = Emulator::builder()
        .webhook_service("webhooks", "hook", 8443, hook.addr)
        .start()
        .await
        .unwrap();
    let client = emulator.client();
    let mut by_service = webhook("svc.example.com", "", &pki);
    by_service["clientConfig"] = json!({
        "service": {"namespace": "webhooks", "name": "hook", "port": 8443, "path": "/validate"},
        "caBundle": pki.ca_bundle(),
    });
    let mut unmapped = by_service.clone();
    unmapped["name"] = json!("unmapped.example.com");
    unmapped["clientConfig"]["service"]["name"] = json!("elsewhere");
    unmapped["failurePolicy"] = json!("Ignore");
    validating(&client, "services", vec![unmapped, by_service]).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let status = api_error(
        cms.create(&PostParams::default(), &cm("s", json!({})))
            .await,
    );
    assert_eq!(
        (status.code, status.message.as_str()),
        (
            422,
            "admission webhook \"svc.example.com\" denied the request: via the service"
        )
    );
    assert_eq!(hook.requests("/validate").len(), 1);
}

#[tokio::test]
async fn webhook_configurations_are_never_reviewed() {
    let emulator = Emulator::start().await.unwrap();
    let client = emulator.client();
    let pki = Pki::new(&["127.0.0.1"]);
    let hook = Hook::start(&pki, |r: &Value| deny(r, 403, "nothing passes")).await;
    let mut everything = webhook("all.example.com", &hook.url("/v"), &pki);
    everything["rules"] = json!([{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]}]);
    validating(&client, "all", vec![everything.clone()]).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    assert_eq!(
        api_error(
            cms.create(&PostParams::default(), &cm("x", json!({})))
                .await
        )
        .code,
        403
    );
    validating(&client, "another", vec![everything]).await;
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    api.delete("all", &DeleteParams::default())
        .await
        .expect("configurations pass");
    api.delete("another", &DeleteParams::default())
        .await
        .expect("configurations pass");
    cms.create(&PostParams::default(), &cm("x", json!({})))
        .await
        .expect("no webhook left");
    assert_eq!(hook.seen().len(), 1);
}

#[tokio::test]
async fn call_webhook_sends_one_review_and_returns_the_answer() {
    let pki = Pki::new(&["127.0.0.1"]);
    let hook = Hook::start(&pki, allow).await;
    let request =
        json!({"uid": "u-1", "operation": "CREATE", "object": {"metadata": {"name": "n"}}});
    let sent =
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
    let answer = kopf_testing::call_webhook(
        &hook.url("/v"),
        pki.ca_pem.as_bytes(),
        &sent,
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(answer["response"], json!({"uid": "u-1", "allowed": true}));
    assert_eq!(hook.requests("/v"), [request]);
    let other = Pki::new(&["127.0.0.1"]);
    let err = kopf_testing::call_webhook(
        &hook.url("/v"),
        other.ca_pem.as_bytes(),
        &sent,
        Duration::from_secs(10),
    )
    .await;
    assert!(
        matches!(err, Err(kopf_testing::WebhookCallError::Transport { .. })),
        "{err:?}"
    );
}
