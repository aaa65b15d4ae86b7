//! `#[on_login]` handlers against an emulator that requires a bearer token:
//! their credentials serve every request, and a rotation of the token
//! (a `401`) makes them run again while the operator carries on.

use std::sync::{Arc, Mutex};

use kopf_runtime::{ConnectionInfo, Error, Kwargs, Operator, OperatorError, Registry, ResourceRef};
use kopf_testing::Emulator;
use kopf_tests::{
    Calls, DIFFBASE, Running, annotation, configmaps, eventually, get, get_json, logs,
    new_configmap, scrape, test_settings,
};
use serde_json::json;

/// A login handler returning the token in `token` (as read from a file or
/// a secret store) for the emulator, and a creation handler.
fn registry(emulator: &Emulator, token: &Arc<Mutex<String>>, calls: &Calls) -> Registry {
    let server = emulator.url();
    let (token, logins, creations) = (Arc::clone(token), calls.clone(), calls.clone());
    Registry::builder()
        .on_login("login", move |_kw: Kwargs| {
            let token = token.lock().expect("token").clone();
            logins.push("login", json!(token));
            let info = ConnectionInfo {
                token: Some(token),
                ..ConnectionInfo::new(server.clone())
            };
            async move { Ok::<_, Error>(info) }
        })
        .on_create(
            ResourceRef::dynamic("", "v1", "configmaps"),
            "created",
            move |kw: Kwargs| {
                let calls = creations.clone();
                async move {
                    calls.push("created", json!(kw.name()));
                    Ok::<_, Error>(json!("done"))
                }
            },
        )
        .build()
        .expect("a valid registry")
}

/// Waits until the operator has stored its handling of `name` on it.
async fn handled(emulator: &Emulator, name: &str) {
    eventually(&format!("{name} to be handled"), || async {
        let body = get(emulator, &configmaps(), "default", name).await?;
        annotation(&body, DIFFBASE)?;
        (body["status"]["created"] == "done").then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_login_handler_supplies_the_token_and_logs_in_again_after_a_rotation() {
    logs();
    let emulator = Emulator::builder()
        .require_token("first")
        .start()
        .await
        .expect("emulator");
    let token = Arc::new(Mutex::new("first".to_owned()));
    let calls = Calls::default();
    let operator = Running::start(&emulator, registry(&emulator, &token, &calls));
    new_configmap(&emulator, "before").await;
    handled(&emulator, "before").await;
    assert_eq!(calls.named("login"), [json!("first")]);

    // The token is rotated: the old one is refused from now on, while the
    // watch already streaming goes on.
    *token.lock().expect("token") = "second".to_owned();
    emulator.set_token(Some("second"));
    new_configmap(&emulator, "after").await;
    handled(&emulator, "after").await;
    assert_eq!(calls.named("login"), [json!("first"), json!("second")]);
    assert!(
        emulator.requests().iter().any(|r| r.status == 401),
        "the old token was refused"
    );
    assert_eq!(calls.named("created"), [json!("before"), json!("after")]);
    assert!(operator.is_running());
    operator.stop().await;
}

#[tokio::test]
async fn the_probes_answer_during_the_login_and_requests_are_counted_after_a_rotation() {
    logs();
    let emulator = Emulator::builder()
        .require_token("first")
        .start()
        .await
        .expect("emulator");
    let token = Arc::new(Mutex::new("first".to_owned()));
    let calls = Calls::default();
    // The first login waits until the test lets it finish.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let login = registry(&emulator, &token, &calls);
    let gated = Arc::clone(&gate);
    let registry = Registry::builder()
        .on_login("wait", move |_kw: Kwargs| {
            let gate = Arc::clone(&gated);
            async move {
                let _permit = gate.acquire().await;
                Ok::<_, Error>(())
            }
        })
        .on_probe("alive", |_kw: Kwargs| async { Ok::<_, Error>("yes") });
    let registry = login
        .handlers()
        .iter()
        .cloned()
        .fold(registry, kopf_runtime::RegistryBuilder::handler)
        .build()
        .expect("a valid registry");
    let operator = Running::serving(&emulator, registry, test_settings()).await;
    let urls = operator.urls().clone();
    let (status, body) = get_json(&urls.readiness).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        body["waiting"],
        json!({"operator": "running the login handlers"})
    );
    assert_eq!(
        get_json(&urls.liveness).await,
        (200, json!({})),
        "alive, the probe handlers waiting for a client"
    );
    gate.add_permits(1);
    new_configmap(&emulator, "before").await;
    handled(&emulator, "before").await;
    assert_eq!(
        get_json(&urls.liveness).await,
        (200, json!({"alive": "yes"}))
    );

    *token.lock().expect("token") = "second".to_owned();
    emulator.set_token(Some("second"));
    new_configmap(&emulator, "after").await;
    handled(&emulator, "after").await;
    assert_eq!(calls.named("login"), [json!("first"), json!("second")]);

    // Each patch the emulator accepted, before the rotation and after it,
    // is counted; a request refused with the old token and sent again with
    // the new one counts once, with its last answer.
    let patched = || {
        emulator
            .requests()
            .iter()
            .filter(|r| r.verb == "patch" && r.status == 200)
            .count() as f64
    };
    assert!(patched() >= 2.0);
    eventually("the patches to be counted", || async {
        let metrics = scrape(&urls.metrics).await;
        let counted = metrics.value(
            "kopf_api_requests_total",
            &[("verb", "patch"), ("code", "200")],
        );
        (counted == patched()).then_some(())
    })
    .await;
    let metrics = scrape(&urls.metrics).await;
    let logins = |handler| {
        metrics.value(
            "kopf_handler_invocations_total",
            &[
                ("resource", ""),
                ("handler", handler),
                ("outcome", "success"),
            ],
        )
    };
    assert_eq!((logins("login"), logins("wait")), (2.0, 2.0));
    operator.stop().await;
}

#[tokio::test]
async fn without_credentials_from_the_login_handlers_the_operator_does_not_start() {
    logs();
    let emulator = Emulator::builder()
        .require_token("secret")
        .start()
        .await
        .expect("emulator");
    let registry = Registry::builder()
        .on_login("login", |_kw: Kwargs| async { Ok::<_, Error>(()) })
        .build()
        .expect("a valid registry");
    let outcome = Operator::new(registry)
        .client(emulator.client())
        .settings(test_settings())
        .run_until(std::future::pending())
        .await;
    match outcome {
        Err(OperatorError::Login(error)) => {
            assert!(
                error.to_string().contains("no usable credentials"),
                "{error}"
            );
        }
        other => panic!("expected a login error, got {other:?}"),
    }
    assert!(emulator.requests().is_empty(), "nothing was sent");
}
