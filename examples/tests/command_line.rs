//! The command line of an operator binary promises only what runs: every
//! flag it lists works, options that need another flag are refused naming
//! it, and an endpoint that cannot be served stops it, before the operator
//! connects anywhere.

use std::process::Command;

/// Runs the example operator with `args`; its exit status and stderr.
fn run(args: &[&str]) -> (std::process::ExitStatus, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_ttl_secrets"))
        .args(args)
        // No cluster anywhere: a flag that were accepted would fail later,
        // on the cluster configuration, with another message.
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KOPF_RUN_PEERING")
        .output()
        .expect("the example runs");
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn peering_options_without_a_lease_are_refused_naming_the_flag() {
    for args in [&["-p", "10"][..], &["--dev"], &["--identity", "me"]] {
        let (status, stderr) = run(args);
        assert!(!status.success(), "{args:?} was accepted");
        assert!(stderr.contains("--peering <NAME>"), "{args:?}: {stderr}");
    }
}

#[test]
fn the_help_lists_the_flags() {
    let output = Command::new(env!("CARGO_BIN_EXE_ttl_secrets"))
        .arg("--help")
        .output()
        .expect("the example runs");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--emulator",
        "--liveness",
        "--metrics",
        "--peering",
        "--priority",
        "--dev",
        "--standalone",
        "manifests --image",
    ] {
        assert!(help.contains(flag), "{flag} not in:\n{help}");
    }
}

#[test]
fn an_endpoint_address_taken_stops_the_operator_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = taken.local_addr().expect("bound").port();
    let url = format!("http://127.0.0.1:{port}/healthz");
    let (status, stderr) = run(&["--liveness", &url]);
    assert!(!status.success(), "a taken port was accepted");
    assert!(
        stderr.contains(&format!(
            "cannot listen on 127.0.0.1:{port} for the liveness endpoint"
        )),
        "{stderr}"
    );
}

/// Runs `ttl_secrets manifests` with `args`: its exit status, stdout and stderr.
fn manifests(args: &[&str]) -> (std::process::ExitStatus, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_ttl_secrets"))
        .arg("manifests")
        .args(args)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KOPF_RUN_PEERING")
        .output()
        .expect("the example runs");
    (
        output.status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Reads `document` as the API type `K`, and checks that it says nothing
/// the type does not hold (a misspelled or unknown field).
fn typed<K>(document: &serde_json::Value) -> K
where
    K: serde::de::DeserializeOwned + serde::Serialize,
{
    let object: K = serde_json::from_value(document.clone()).expect("fits the API type");
    let again = serde_json::to_value(&object).expect("serializes");
    assert_eq!(&again, document, "fields the API type does not hold");
    object
}

#[test]
fn manifests_are_printed_as_api_objects_without_a_cluster() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};

    let (status, stdout, stderr) = manifests(&["--image", "x", "-A", "-v"]);
    assert!(status.success(), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&stdout).expect("multi-document YAML");
    let mut kinds = Vec::new();
    for document in &documents {
        let kind = document["kind"].as_str().expect("a kind").to_owned();
        match kind.as_str() {
            "ServiceAccount" => drop(typed::<ServiceAccount>(document)),
            "ClusterRole" => {
                let role = typed::<ClusterRole>(document);
                let deletes_secrets = role.rules.unwrap_or_default().iter().any(|rule| {
                    rule.resources.as_deref() == Some(&["secrets".to_owned()][..])
                        && rule.verbs.contains(&"delete".to_owned())
                });
                assert!(deletes_secrets, "Runner::rbac's rule is missing:\n{stdout}");
            }
            "ClusterRoleBinding" => drop(typed::<ClusterRoleBinding>(document)),
            "Role" => drop(typed::<Role>(document)),
            "RoleBinding" => drop(typed::<RoleBinding>(document)),
            "Deployment" => {
                let deployment = typed::<Deployment>(document);
                let pod = deployment.spec.template.spec.expect("a pod spec");
                let args = pod.containers[0].args.clone().unwrap_or_default();
                assert_eq!(args, ["-A", "-v", "--liveness=http://0.0.0.0:8080/healthz"]);
            }
            other => panic!("an unexpected {other}:\n{stdout}"),
        }
        kinds.push(kind);
    }
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment"
        ]
    );
}

#[test]
fn manifests_refuse_what_cannot_be_deployed_with_the_usage_code() {
    for (args, said) in [
        (
            &["--image", "x", "--emulator"][..],
            "--emulator makes no sense",
        ),
        (&["--image", "x", "--replicas", "2"], "add --peering NAME"),
        (&["-A"], "--image <IMAGE>"),
    ] {
        let (status, stdout, stderr) = manifests(args);
        assert_eq!(status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
}

/// What `manifests` prints is accepted by the API server as it is:
/// `kubectl apply --dry-run=server`, then for real, against an emulator
/// enforcing RBAC, as its administrator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifests_apply_with_kubectl_as_they_are() {
    let output = Command::new(env!("CARGO_BIN_EXE_ttl_secrets"))
        .args(["manifests", "--image", "example.com/ttl-secrets:1", "-A"])
        .args(["--peering", "ttl", "--shards", "2", "--replicas", "2"])
        .args(["--metrics", "http://0.0.0.0:9090/metrics"])
        .env_remove("KOPF_RUN_PEERING")
        .output()
        .expect("the example runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let manifests =
        std::env::temp_dir().join(format!("kopf-manifests-{}.yaml", std::process::id()));
    std::fs::write(&manifests, &output.stdout).expect("the manifests are written");
    let emulator = kopf_testing::Emulator::builder()
        .rbac()
        .start()
        .await
        .expect("the emulator starts");
    let kubectl = |args: &[&str]| {
        let output = Command::new(kopf_testing::kubectl())
            .arg(format!("--server={}", emulator.url()))
            .arg("--request-timeout=30s")
            .args(args)
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .expect("kubectl runs");
        (
            output.status,
            format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        )
    };
    let file = manifests.to_string_lossy().into_owned();
    for dry_run in [true, false] {
        let mut args = vec!["apply", "-f", file.as_str()];
        if dry_run {
            args.push("--dry-run=server");
        }
        let (status, text) = tokio::task::block_in_place(|| kubectl(&args));
        assert!(status.success(), "kubectl {args:?}: {text}");
        for object in [
            "serviceaccount/ttl-secrets",
            "clusterrole.rbac.authorization.k8s.io/ttl-secrets",
            "clusterrolebinding.rbac.authorization.k8s.io/ttl-secrets",
            "role.rbac.authorization.k8s.io/ttl-secrets",
            "rolebinding.rbac.authorization.k8s.io/ttl-secrets",
            "deployment.apps/ttl-secrets",
            "poddisruptionbudget.policy/ttl-secrets",
        ] {
            assert!(text.contains(object), "{object} not in {text}");
        }
    }
    let (status, text) = tokio::task::block_in_place(|| {
        kubectl(&[
            "auth",
            "can-i",
            "delete",
            "secrets",
            "-n",
            "default",
            "--as=system:serviceaccount:default:ttl-secrets",
        ])
    });
    assert!(status.success() && text.trim() == "yes", "{text}");
    let _ = std::fs::remove_file(&manifests);
    emulator.shutdown().await;
}
