//! The admission webhook server over real HTTPS: reviews answered by the
//! handlers (denials with their code, warnings, JSON patches, dry runs,
//! panics), TLS verified with the dumped CA, certificate files reloaded
//! for new connections, the requests counted in the metrics, and the
//! managed configurations written to the emulator and cleaned up on exit.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime::{
    Endpoints, Error, Kwargs, Operation, Operator, OperatorError, Registry, ResourceRef,
    WebhookArgs, WebhookServer,
};
use kopf_testing::Emulator;
use kopf_tests::{
    Calls, HttpsAnswer, Running, Urls, admission_review, eventually, https_post, scrape,
    test_settings,
};
use kube::Api;
use kube::api::{ApiResource, DynamicObject};
use serde_json::{Value, json};

fn cms() -> ResourceRef {
    ResourceRef::of::<ConfigMap>()
}

fn configmap(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default", "labels": {"app": "demo"}},
           "data": {"k": value}})
}

/// A fresh directory for one test's files, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(test: &str) -> Scratch {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "kopf-webhooks-{}-{test}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    Scratch(dir)
}

/// `strict` denies `k: bad` with 422 and warns on every review, recording
/// whether it was a dry run; `defaults` labels the object; `explodes`
/// panics on `k: boom`.
fn registry(calls: &Calls) -> Registry {
    let calls = calls.clone();
    Registry::builder()
        .on_validate(cms(), "strict", move |kw: Kwargs| {
            let calls = calls.clone();
            async move {
                let admission = kw.admission.clone().expect("admission kwargs");
                calls.push(
                    "strict",
                    json!({"dryrun": admission.dryrun, "user": admission.userinfo["username"]}),
                );
                admission.warnings.push("strict looked at it");
                if kw.body["data"]["k"] == "bad" {
                    return Err(Error::admission("k must not be bad", 422));
                }
                Ok(())
            }
        })
        .on_mutate(cms(), "defaults", |kw: Kwargs| async move {
            kw.patch.set("metadata.labels.mutated", json!("yes"));
            Ok::<_, Error>(())
        })
        .on_validate(cms(), "explodes", |kw: Kwargs| async move {
            if kw.body["data"]["k"] == "boom" {
                panic!("the handler exploded");
            }
            Ok::<_, Error>(())
        })
        .build()
        .expect("a valid registry")
}

async fn started(emulator: &Emulator, registry: Registry, args: WebhookArgs) -> (Running, String) {
    let server = WebhookServer::bind(&args)
        .await
        .expect("the webhook server binds");
    let url = server.url().to_owned();
    let operator = Operator::new(registry)
        .client(emulator.client())
        .settings(test_settings())
        .webhooks(server);
    (Running::operator(operator, Urls::default()), url)
}

/// Posts a review to the webhook `id` until the server answers.
async fn review(url: &str, id: &str, ca: &str, body: &[u8]) -> HttpsAnswer {
    let target = format!("{url}/{id}");
    eventually("the webhook server answers", || async {
        https_post(&target, ca, body).await.ok()
    })
    .await
}

fn self_signed(dir: &Scratch) -> WebhookArgs {
    WebhookArgs {
        server: Some("https://127.0.0.1:0/hooks".into()),
        ca_dump: Some(dir.join("ca.pem")),
        ..WebhookArgs::default()
    }
}

#[tokio::test]
async fn a_denial_carries_its_message_and_code_and_the_warnings_reach_the_client() {
    let emulator = Emulator::start().await.expect("the emulator starts");
    let calls = Calls::default();
    let dir = scratch("deny");
    let (operator, url) = started(&emulator, registry(&calls), self_signed(&dir)).await;
    // The chain verifies with the dumped CA, and with it only.
    let ca = std::fs::read_to_string(dir.join("ca.pem")).expect("the CA is dumped at start");

    let answer = review(
        &url,
        "strict",
        &ca,
        &admission_review("CREATE", configmap("a", "bad"), false),
    )
    .await;
    assert_eq!(answer.status, 200);
    let review = answer.json();
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["kind"], "AdmissionReview");
    assert_eq!(review["response"]["uid"], "review-1");
    assert_eq!(review["response"]["allowed"], false);
    assert_eq!(
        review["response"]["status"],
        json!({"message": "k must not be bad", "code": 422})
    );
    assert_eq!(
        review["response"]["warnings"],
        json!(["strict looked at it"])
    );
    // Only the handler of the path's id ran.
    assert_eq!(calls.named("strict").len(), 1);

    let answer = review_once(
        &url,
        "strict",
        &ca,
        &admission_review("UPDATE", configmap("a", "good"), true),
    )
    .await;
    assert_eq!(answer.json()["response"]["allowed"], true);
    assert_eq!(
        calls.named("strict").last(),
        Some(&json!({"dryrun": true, "user": "tester"}))
    );

    let other = kopf_runtime::WebhookServer::bind(&WebhookArgs {
        server: Some("https://127.0.0.1:0".into()),
        ..WebhookArgs::default()
    })
    .await
    .expect("another server");
    let refused = https_post(&format!("{url}/strict"), &other.ca_pem(), b"{}").await;
    assert!(refused.is_err(), "another CA must not verify the server");
    operator.stop().await;
}

async fn review_once(url: &str, id: &str, ca: &str, body: &[u8]) -> HttpsAnswer {
    https_post(&format!("{url}/{id}"), ca, body)
        .await
        .expect("the webhook server answers")
}

#[tokio::test]
async fn a_mutation_answers_with_a_json_patch_of_the_handlers_merge_patch() {
    let emulator = Emulator::start().await.expect("the emulator starts");
    let dir = scratch("mutate");
    let (operator, url) = started(&emulator, registry(&Calls::default()), self_signed(&dir)).await;
    let ca = std::fs::read_to_string(dir.join("ca.pem")).expect("dumped");
    let answer = review(
        &url,
        "defaults",
        &ca,
        &admission_review("CREATE", configmap("m", "x"), false),
    )
    .await;
    let response = &answer.json()["response"];
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().expect("a patch"))
        .expect("base64");
    let patch: Value = serde_json::from_slice(&patch).expect("a JSON patch");
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}])
    );
    // Mutations skip deletions, as in Kopf: nothing to patch.
    let answer = review_once(
        &url,
        "defaults",
        &ca,
        &admission_review("DELETE", configmap("m", "x"), false),
    )
    .await;
    assert!(answer.json()["response"].get("patch").is_none());
    operator.stop().await;
}

#[tokio::test]
async fn a_panicking_handler_denies_with_500_and_the_server_keeps_serving() {
    let emulator = Emulator::start().await.expect("the emulator starts");
    let dir = scratch("panic");
    let (operator, url) = started(&emulator, registry(&Calls::default()), self_signed(&dir)).await;
    let ca = std::fs::read_to_string(dir.join("ca.pem")).expect("dumped");
    let answer = review(
        &url,
        "explodes",
        &ca,
        &admission_review("CREATE", configmap("p", "boom"), false),
    )
    .await;
    let response = &answer.json()["response"];
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 500);
    let message = response["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("the handler exploded"), "{message}");
    for _ in 0..3 {
        let answer = review_once(
            &url,
            "explodes",
            &ca,
            &admission_review("CREATE", configmap("p", "fine"), false),
        )
        .await;
        assert_eq!(answer.json()["response"]["allowed"], true);
    }
    // No review for what is no review, nor for an unknown resource.
    assert_eq!(review_once(&url, "explodes", &ca, b"{").await.status, 400);
    let mut pods: Value =
        serde_json::from_slice(&admission_review("CREATE", configmap("p", "x"), false))
            .expect("JSON");
    pods["request"]["resource"]["resource"] = json!("pods");
    let body = serde_json::to_vec(&pods).expect("JSON");
    assert_eq!(review_once(&url, "explodes", &ca, &body).await.status, 404);
    assert!(operator.is_running());
    operator.stop().await;
}

/// A self-signed certificate and key for 127.0.0.1, in PEM.
fn certificate(common_name: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("a key");
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    let cert = params.self_signed(&key).expect("a certificate");
    (cert.pem(), key.serialize_pem())
}

fn der_of(pem: &str) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject as _;
    rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("a PEM certificate")
        .to_vec()
}

#[tokio::test]
async fn changed_certificate_files_are_served_to_new_connections_without_a_restart() {
    let emulator = Emulator::start().await.expect("the emulator starts");
    let dir = scratch("reload");
    let (cert_path, key_path) = (dir.join("tls.crt"), dir.join("tls.key"));
    let (first, first_key) = certificate("first");
    std::fs::write(&cert_path, &first).expect("written");
    std::fs::write(&key_path, &first_key).expect("written");
    let args = WebhookArgs {
        server: Some("https://127.0.0.1:0".into()),
        cert: Some(cert_path.clone()),
        key: Some(key_path.clone()),
        ca_dump: Some(dir.join("ca.pem")),
        managed: Some("reload.kopf.dev".into()),
        ..WebhookArgs::default()
    };
    let (operator, url) = started(&emulator, registry(&Calls::default()), args).await;
    let validating: Api<DynamicObject> = Api::all_with(
        emulator.client(),
        &configuration(
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
        ),
    );
    let configured_ca = || async {
        let found = validating.get_opt("reload.kopf.dev").await.ok()??;
        let bundle = found.data["webhooks"][0]["clientConfig"]["caBundle"].as_str()?;
        let bundle = base64::engine::general_purpose::STANDARD
            .decode(bundle)
            .ok()?;
        String::from_utf8(bundle).ok()
    };
    let body = admission_review("CREATE", configmap("r", "x"), false);
    let answer = review(&url, "strict", &first, &body).await;
    assert_eq!(answer.peer.first(), Some(&der_of(&first)));

    eventually("the configurations carry the first CA bundle", || async {
        (configured_ca().await? == first).then_some(())
    })
    .await;
    let (second, second_key) = certificate("second");
    // The key first: a pair that does not match is not served meanwhile.
    std::fs::write(&key_path, &second_key).expect("written");
    std::fs::write(&cert_path, &second).expect("written");
    let answer = review(&url, "strict", &second, &body).await;
    assert_eq!(answer.peer.first(), Some(&der_of(&second)));
    assert_eq!(answer.json()["response"]["allowed"], true);
    // The CA bundle written out follows the files (without a caBundle
    // file, the certificate is the bundle, as in Kopf).
    eventually("the new CA bundle is dumped", || async {
        (std::fs::read_to_string(dir.join("ca.pem")).ok()? == second).then_some(())
    })
    .await;
    // So do the managed configurations.
    eventually("the configurations carry the new CA bundle", || async {
        (configured_ca().await? == second).then_some(())
    })
    .await;
    assert!(
        https_post(&format!("{url}/strict"), &first, &body)
            .await
            .is_err()
    );
    operator.stop().await;
}

#[tokio::test]
async fn admission_requests_count_by_webhook_and_result() {
    let emulator = Emulator::start().await.expect("the emulator starts");
    let dir = scratch("metrics");
    let server = WebhookServer::bind(&self_signed(&dir))
        .await
        .expect("binds");
    let url = server.url().to_owned();
    let endpoints = Endpoints::bind(None, Some("http://127.0.0.1:0/metrics"))
        .await
        .expect("binds");
    let urls = Urls {
        metrics: endpoints.metrics_url().expect("metrics").to_owned(),
        ..Urls::default()
    };
    let operator = Operator::new(registry(&Calls::default()))
        .client(emulator.client())
        .settings(test_settings())
        .endpoints(endpoints)
        .webhooks(server);
    let operator = Running::operator(operator, urls);
    let ca = std::fs::read_to_string(dir.join("ca.pem")).expect("dumped");
    // The handlers' series are there from the start, at zero.
    let before = eventually("the webhook series are resolved", || async {
        let metrics = scrape(&operator.urls().metrics).await;
        metrics
            .get(
                "kopf_admission_requests_total",
                &[("webhook", "defaults"), ("result", "allowed")],
            )
            .map(|_| metrics)
    })
    .await;
    assert_eq!(
        before.value(
            "kopf_admission_requests_total",
            &[("webhook", "strict"), ("result", "denied")]
        ),
        0.0
    );
    review(
        &url,
        "strict",
        &ca,
        &admission_review("CREATE", configmap("c", "bad"), false),
    )
    .await;
    review_once(
        &url,
        "strict",
        &ca,
        &admission_review("CREATE", configmap("c", "ok"), false),
    )
    .await;
    review_once(&url, "strict", &ca, b"not json").await;
    review_once(&url, "no-such-id", &ca, b"not json").await;
    let metrics = scrape(&operator.urls().metrics).await;
    let count = |webhook: &str, result: &str| {
        metrics.value(
            "kopf_admission_requests_total",
            &[("webhook", webhook), ("result", result)],
        )
    };
    assert_eq!(count("strict", "denied"), 1.0);
    assert_eq!(count("strict", "allowed"), 1.0);
    assert_eq!(count("strict", "error"), 1.0);
    assert_eq!(count("unknown", "error"), 1.0);
    operator.stop().await;
}

#[tokio::test]
async fn admission_handlers_without_a_webhook_server_refuse_to_start() {
    let emulator = Emulator::start().await.expect("the emulator starts");
    let operator = Operator::new(registry(&Calls::default()))
        .client(emulator.client())
        .settings(test_settings());
    let outcome = Running::operator(operator, Urls::default()).outcome().await;
    let error = outcome.expect_err("no webhook server");
    assert!(
        matches!(error, OperatorError::NoWebhookServer { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("--webhook-server"), "{error}");
}

fn configuration(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

#[tokio::test]
async fn managed_configurations_follow_the_handlers_and_keep_only_persistent_ones_on_exit() {
    let emulator = Emulator::start().await.expect("the emulator starts");
    let registry = Registry::builder()
        .on_validate(cms(), "guard", |_: Kwargs| async { Ok::<_, Error>(()) })
        .label("app", "demo")
        .label("tier", kopf_runtime::PRESENT)
        .operations(vec![Operation::Create, Operation::Update])
        .ignore_failures(true)
        .persistent(true)
        .on_mutate(cms(), "stamp", |_: Kwargs| async { Ok::<_, Error>(()) })
        .side_effects(true)
        .build()
        .expect("a valid registry");
    let dir = scratch("managed");
    let args = WebhookArgs {
        managed: Some("managed.kopf.dev".into()),
        ..self_signed(&dir)
    };
    let (operator, url) = started(&emulator, registry, args).await;
    let ca = std::fs::read_to_string(dir.join("ca.pem")).expect("dumped");
    let validating: Api<DynamicObject> = Api::all_with(
        emulator.client(),
        &configuration(
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
        ),
    );
    let mutating: Api<DynamicObject> = Api::all_with(
        emulator.client(),
        &configuration(
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
        ),
    );
    let webhooks = |object: DynamicObject| object.data["webhooks"].clone();
    let guard = eventually("the validating configuration is written", || async {
        let found = validating.get_opt("managed.kopf.dev").await.ok()??;
        let hooks = webhooks(found);
        (hooks.as_array()?.len() == 1 && !hooks[0]["rules"].as_array()?.is_empty())
            .then(|| hooks[0].clone())
    })
    .await;
    assert_eq!(guard["name"], "guard.managed.kopf.dev");
    assert_eq!(
        guard["rules"],
        json!([{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
                "operations": ["CREATE", "UPDATE"], "scope": "*"}])
    );
    assert_eq!(
        guard["objectSelector"],
        json!({"matchExpressions": [
            {"key": "app", "operator": "In", "values": ["demo"]},
            {"key": "tier", "operator": "Exists"},
        ]})
    );
    assert_eq!(guard["failurePolicy"], "Ignore");
    assert_eq!(guard["sideEffects"], "None");
    assert_eq!(guard["admissionReviewVersions"], json!(["v1"]));
    assert_eq!(guard["clientConfig"]["url"], format!("{url}/guard"));
    let bundle = base64::engine::general_purpose::STANDARD
        .decode(
            guard["clientConfig"]["caBundle"]
                .as_str()
                .expect("a caBundle"),
        )
        .expect("base64");
    assert_eq!(String::from_utf8(bundle).expect("PEM"), ca);
    let stamp = eventually("the mutating configuration is written", || async {
        let hooks = webhooks(mutating.get_opt("managed.kopf.dev").await.ok()??);
        (hooks.as_array()?.len() == 1).then(|| hooks[0].clone())
    })
    .await;
    assert_eq!(stamp["sideEffects"], "NoneOnDryRun");
    assert_eq!(stamp["failurePolicy"], "Fail");

    operator.stop().await;
    let left = |api: Api<DynamicObject>| async move {
        webhooks(
            api.get("managed.kopf.dev")
                .await
                .expect("the configuration stays"),
        )
    };
    let kept = left(validating).await;
    assert_eq!(kept.as_array().map(Vec::len), Some(1), "{kept}");
    assert_eq!(left(mutating).await, json!([]));
}

/// The emulator calls the operator's webhooks from the configurations the
/// operator manages, as an API server would: a create the validating
/// handler denies is refused with its code and message, a dry run reaches
/// the handler as one, and a create it allows is stored as the mutating
/// handler patched it.
#[tokio::test]
async fn a_create_through_the_emulator_is_refused_or_mutated_by_the_operators_webhooks() {
    let emulator = Emulator::start().await.expect("the emulator starts");
    let calls = Calls::default();
    let dir = scratch("chain");
    let args = WebhookArgs {
        managed: Some("chain.kopf.dev".into()),
        ..self_signed(&dir)
    };
    let (operator, _) = started(&emulator, registry(&calls), args).await;
    let validating: Api<DynamicObject> = Api::all_with(
        emulator.client(),
        &configuration(
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
        ),
    );
    let mutating: Api<DynamicObject> = Api::all_with(
        emulator.client(),
        &configuration(
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
        ),
    );
    for api in [&validating, &mutating] {
        eventually("the configuration names configmaps", || async {
            let found = api.get_opt("chain.kopf.dev").await.ok()??;
            let hooks = found.data["webhooks"].as_array()?.clone();
            (!hooks.is_empty()
                && hooks
                    .iter()
                    .all(|h| h["rules"][0]["resources"] == json!(["configmaps"])))
            .then_some(())
        })
        .await;
    }
    let configmaps: Api<ConfigMap> = Api::namespaced(emulator.client(), "default");
    let object = |name: &str, value: &str| -> ConfigMap {
        serde_json::from_value(configmap(name, value)).expect("a ConfigMap")
    };
    let refused = configmaps
        .create(&kube::api::PostParams::default(), &object("refused", "bad"))
        .await
        .expect_err("the webhook denies it");
    let kube::Error::Api(status) = refused else {
        panic!("not an API refusal: {refused}");
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.contains("k must not be bad"),
        "{}",
        status.message
    );
    assert!(
        configmaps
            .get_opt("refused")
            .await
            .expect("a GET")
            .is_none()
    );
    // kubectl is refused alike, with the handler's message.
    let kubeconfig = dir.join("kubeconfig");
    let manifest = dir.join("refused.json");
    std::fs::write(
        &kubeconfig,
        serde_json::to_vec(&emulator.kubeconfig()).expect("a kubeconfig"),
    )
    .expect("written");
    std::fs::write(&manifest, configmap("refused", "bad").to_string()).expect("written");
    let mut apply = std::process::Command::new(kopf_testing::kubectl());
    apply
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["apply", "-f"])
        .arg(&manifest);
    let applied = tokio::task::spawn_blocking(move || apply.output())
        .await
        .expect("kubectl is waited for")
        .expect("kubectl runs");
    let stderr = String::from_utf8_lossy(&applied.stderr);
    assert!(!applied.status.success(), "kubectl apply was accepted");
    assert!(
        stderr.contains("denied the request") && stderr.contains("k must not be bad"),
        "{stderr}"
    );

    let dry = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    configmaps
        .create(&dry, &object("dry", "good"))
        .await
        .expect("a dry run passes");
    assert!(
        calls
            .named("strict")
            .iter()
            .any(|call| call["dryrun"] == json!(true)),
        "{:?}",
        calls.named("strict")
    );

    let created = configmaps
        .create(
            &kube::api::PostParams::default(),
            &object("accepted", "good"),
        )
        .await
        .expect("the webhooks allow it");
    let labels = created.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("mutated").map(String::as_str), Some("yes"));
    operator.stop().await;
}
