//! The manifests of representative operators, compared with the YAML
//! files in `snapshots/` (`KOPF_UPDATE_SNAPSHOTS=1` rewrites them), and
//! the decisions of the command line one by one.

use std::ffi::OsString;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use super::layout::{self, Invocation, Layout};
use super::rbac::rules;
use super::{ManifestError, Owned, Rendered, parse, render};
use crate::deploying::Permission;
use crate::model::kwargs::Kwargs;
use crate::model::registry::{Registry, RegistryBuilder};
use crate::model::resources::ResourceRef;

fn examples() -> ResourceRef {
    ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples")
}

/// Handlers that change objects, a timer, and one on a cluster-scoped kind.
fn handling() -> RegistryBuilder {
    Registry::builder()
        .on_create(examples(), "create", |_: Kwargs| async {})
        .timer(examples(), "tick", |_: Kwargs| async {})
        .on_event(
            ResourceRef::of::<Namespace>(),
            "namespaces",
            |_: Kwargs| async {},
        )
}

/// Handlers that admit objects, and one that creates them.
#[cfg(feature = "webhooks")]
fn admitting() -> RegistryBuilder {
    Registry::builder()
        .on_validate(examples(), "check", |_: Kwargs| async {})
        .on_mutate(examples(), "default", |_: Kwargs| async {})
        .on_create(examples(), "create", |_: Kwargs| async {})
}

fn crd() -> CustomResourceDefinition {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "kopfexamples.kopf.dev"},
        "spec": {
            "group": "kopf.dev",
            "scope": "Namespaced",
            "names": {"plural": "kopfexamples", "singular": "kopfexample", "kind": "KopfExample"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object", "x-kubernetes-preserve-unknown-fields": true,
                }},
            }],
        },
    }))
    .expect("a valid CRD")
}

fn invocation(argv: &[&str]) -> Invocation {
    let argv = argv.iter().map(OsString::from).collect();
    parse("/usr/local/bin/shop_operator", argv).expect("a valid command line")
}

fn rendered(registry: RegistryBuilder, argv: &[&str], rbac: &[Permission]) -> Rendered {
    let registry = registry.build().expect("valid handlers");
    let owned = Owned {
        registry: &registry,
        crds: &[crd()],
        rbac,
        events: true,
    };
    render(&invocation(argv), owned).expect("manifests")
}

fn refusal(registry: RegistryBuilder, argv: &[&str]) -> String {
    let registry = registry.build().expect("valid handlers");
    let owned = Owned {
        registry: &registry,
        crds: &[],
        rbac: &[],
        events: true,
    };
    match render(&invocation(argv), owned) {
        Err(error @ ManifestError::Usage(_)) => {
            assert_eq!(error.exit_code(), 2);
            error.to_string()
        }
        other => panic!("{argv:?} was not refused: {other:?}"),
    }
}

/// Compares `yaml` with `snapshots/NAME.yaml`, or writes it there with
/// `KOPF_UPDATE_SNAPSHOTS=1`.
fn snapshot(name: &str, yaml: &str) {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "src/deploying/manifests/snapshots",
        &format!("{name}.yaml"),
    ]
    .iter()
    .collect();
    if std::env::var_os("KOPF_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, yaml).expect("the snapshot is written");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|error| {
        panic!(
            "{}: {error}; run with KOPF_UPDATE_SNAPSHOTS=1 to write it",
            path.display()
        )
    });
    assert!(
        yaml == expected,
        "the manifests differ from {} (KOPF_UPDATE_SNAPSHOTS=1 rewrites it):\n{yaml}",
        path.display()
    );
}

#[test]
fn a_cluster_wide_operator_gets_a_cluster_role_its_crds_and_metrics() {
    let argv = [
        "-A",
        "--metrics",
        "http://0.0.0.0:9090/metrics",
        "--image",
        "shop:1.0",
        "--crds",
        "-v",
    ];
    let out = rendered(handling(), &argv, &[]);
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
    snapshot("cluster_wide", &out.yaml);
}

#[test]
fn a_namespaced_operator_gets_a_role_per_namespace_with_the_declared_rules() {
    let declared = [
        Permission::new("", "configmaps")
            .verbs(["get", "create", "patch"])
            .why("the create handler keeps a ConfigMap per object"),
        Permission::new("", "secrets")
            .verbs(["get"])
            .names(["shop-credentials"])
            .namespace("a")
            .why("the handlers log in with it"),
    ];
    let argv = ["-n", "a", "--namespace", "b", "--image", "shop:1.0"];
    snapshot("namespaced", &rendered(handling(), &argv, &declared).yaml);
}

#[test]
fn a_peering_operator_with_shards_gets_replicas_leases_and_a_budget() {
    let argv = [
        "-n",
        "shop",
        "--peering",
        "shop",
        "--shards",
        "4",
        "--replicas",
        "3",
        "--image",
        "shop:1.0",
        "--name",
        "shop",
    ];
    snapshot("peering_shards", &rendered(handling(), &argv, &[]).yaml);
}

#[test]
#[cfg(feature = "webhooks")]
fn an_admission_operator_gets_a_service_its_configurations_point_at() {
    let argv = [
        "-n",
        "shop",
        "--webhook-managed",
        "shop.kopf.dev",
        "--image",
        "shop:1.0",
        "--deploy-namespace",
        "operators",
    ];
    snapshot("webhooks_managed", &rendered(admitting(), &argv, &[]).yaml);
}

#[test]
fn the_output_does_not_change_between_runs() {
    let argv = [
        "-n", "b", "-n", "a", "--image", "x", "-P", "p", "--shards", "2",
    ];
    let first = rendered(handling(), &argv, &[]).yaml;
    for _ in 0..3 {
        assert_eq!(rendered(handling(), &argv, &[]).yaml, first);
    }
}

#[test]
fn the_verbs_of_one_resource_and_the_resources_of_one_verb_set_merge() {
    let permissions = [
        Permission::new("", "secrets").verbs(["list", "watch"]),
        Permission::new("", "secrets").verbs(["patch"]),
        Permission::new("", "configmaps").verbs(["list", "patch", "watch"]),
        Permission::new("", "pods/status").verbs(["patch"]),
        Permission::new("", "configmaps")
            .verbs(["get"])
            .names(["one"]),
        Permission::new("", "secrets").verbs(["get"]).names(["one"]),
        Permission::new("apps", "deployments").verbs(["get"]),
    ];
    let rules = rules(&permissions);
    let shown: Vec<_> = rules
        .iter()
        .map(|r| {
            (
                r.api_groups.clone().unwrap_or_default().join(","),
                r.resources.clone().unwrap_or_default().join(","),
                r.resource_names.clone().unwrap_or_default().join(","),
                r.verbs.join(","),
            )
        })
        .collect();
    let expected = [
        ("", "configmaps", "one", "get"),
        ("", "configmaps,secrets", "", "list,patch,watch"),
        ("", "pods/status", "", "patch"),
        ("", "secrets", "one", "get"),
        ("apps", "deployments", "", "get"),
    ];
    let expected: Vec<_> = expected
        .iter()
        .map(|(g, r, n, v)| (g.to_string(), r.to_string(), n.to_string(), v.to_string()))
        .collect();
    assert_eq!(shown, expected);
}

fn decided(argv: &[&str]) -> Layout {
    let registry = handling().build().expect("valid handlers");
    Layout::decide(&invocation(argv), &registry, Vec::new()).expect("a layout")
}

#[test]
fn the_deploy_namespace_is_the_one_served_else_default_unless_given() {
    let namespace = |argv: &[&str]| {
        let mut all = argv.to_vec();
        all.extend(["--image", "x"]);
        decided(&all).namespace
    };
    assert_eq!(namespace(&["-n", "shop"]), "shop");
    assert_eq!(namespace(&["-n", "shop", "-n", "shop"]), "shop");
    assert_eq!(namespace(&["-n", "a", "-n", "b"]), "default");
    assert_eq!(namespace(&["-n", "a,b"]), "default");
    assert_eq!(namespace(&["-n", "shop-*"]), "default");
    assert_eq!(namespace(&["-A"]), "default");
    assert_eq!(namespace(&["-A", "-n", "!kube-system"]), "default");
    assert_eq!(namespace(&[]), "default");
    assert_eq!(
        namespace(&["-n", "shop", "--deploy-namespace", "ops"]),
        "ops"
    );
}

#[test]
fn the_name_is_the_binarys_as_a_dns_label_unless_given() {
    assert_eq!(
        layout::name_of_binary("/usr/bin/ttl_secrets"),
        "ttl-secrets"
    );
    assert_eq!(layout::name_of_binary("Op.exe"), "op");
    assert_eq!(decided(&["--image", "x"]).name, "shop-operator");
    assert_eq!(decided(&["--image", "x", "--name", "shop"]).name, "shop");
}

#[test]
fn the_container_gets_the_run_flags_as_written_and_what_it_needs() {
    let layout = decided(&[
        "-n",
        "shop",
        "--image=x",
        "--deploy-namespace",
        "ops",
        "--name=op",
        "--replicas",
        "1",
        "--crds",
        "-v",
        "--log-format",
        "json",
    ]);
    assert_eq!(
        layout.args,
        [
            "-n",
            "shop",
            "-v",
            "--log-format",
            "json",
            "--liveness=http://0.0.0.0:8080/healthz"
        ]
    );
    let given = decided(&["--image", "x", "-L", "http://0.0.0.0:8081/alive"]);
    assert_eq!(given.args, ["-L", "http://0.0.0.0:8081/alive"]);
    assert_eq!(
        (given.liveness.port, given.liveness.path.as_str()),
        (8081, "/alive")
    );
}

#[test]
fn a_lease_from_the_environment_is_passed_as_a_flag() {
    let mut invocation = invocation(&["--image", "x", "-P", "ops"]);
    invocation.tokens.retain(|t| t != "-P" && t != "ops");
    invocation.peering_from_env = true;
    let registry = handling().build().expect("valid handlers");
    let layout = Layout::decide(&invocation, &registry, Vec::new()).expect("a layout");
    assert!(
        layout.args.contains(&"--peering=ops".to_owned()),
        "{:?}",
        layout.args
    );
}

#[test]
fn flags_for_a_developers_machine_are_refused_naming_them() {
    for (flag, argv) in [
        ("--emulator", &["--emulator"][..]),
        ("--kubeconfig", &["--kubeconfig", "/tmp/kc"]),
        ("--context", &["--context", "kind"]),
        ("--identity", &["-P", "p", "--identity", "me"]),
        ("--dev", &["-P", "p", "--dev"]),
        (
            "--webhook-ca-dump",
            &[
                "--webhook-server",
                "https://0.0.0.0:9443",
                "--webhook-ca-dump",
                "/tmp/ca.pem",
            ],
        ),
    ] {
        let mut all = argv.to_vec();
        all.extend(["--image", "x"]);
        let message = refusal(handling(), &all);
        assert!(
            message.starts_with(&format!("{flag} makes no sense in a deployment")),
            "{message}"
        );
    }
}

#[test]
#[cfg(feature = "webhooks")]
fn replicas_without_a_lease_are_refused_unless_only_admitting() {
    let message = refusal(handling(), &["--replicas", "2", "--image", "x"]);
    assert!(message.contains("add --peering NAME"), "{message}");
    let admitting_only = Registry::builder()
        .on_validate(examples(), "check", |_: Kwargs| async {})
        .on_startup("boot", |_: Kwargs| async {});
    let out = rendered(admitting_only, &["--replicas", "2", "--image", "x"], &[]);
    assert!(out.yaml.contains("kind: PodDisruptionBudget"));
    assert!(
        out.warnings.iter().any(|w| w.contains("--webhook-cert")),
        "{:?}",
        out.warnings
    );
    let standalone = ["--replicas", "2", "--image", "x", "-P", "p", "--standalone"];
    assert!(refusal(handling(), &standalone).contains("--peering"));
}

#[test]
#[cfg(feature = "webhooks")]
fn listeners_the_cluster_cannot_reach_are_refused() {
    for (argv, said) in [
        (&["-L", "http://127.0.0.1:8080/healthz"][..], "loopback"),
        (&["--metrics", "http://localhost:9090/metrics"], "loopback"),
        (&["--webhook-server", "https://[::1]:9443"], "loopback"),
        (&["-L", "http://0.0.0.0:0/healthz"], "port 0"),
        (
            &[
                "--metrics",
                "http://0.0.0.0:8080/metrics",
                "--webhook-server",
                "https://0.0.0.0:8080",
            ],
            "both listen on port 8080",
        ),
        (&["-L", "https://0.0.0.0:8080/healthz"], "only http://"),
    ] {
        let mut all = argv.to_vec();
        all.extend(["--image", "x"]);
        let message = refusal(handling(), &all);
        assert!(message.contains(said), "{argv:?}: {message}");
    }
    // Metrics beside the liveness endpoint share its listener.
    let shared = decided(&["--image", "x", "--metrics", "http://0.0.0.0:8080/metrics"]);
    assert_eq!(shared.metrics.map(|m| m.port), Some(8080));
}

#[test]
#[cfg(feature = "webhooks")]
fn names_and_services_that_cannot_be_deployed_are_refused() {
    let message = refusal(handling(), &["--image", "x", "--name", "Shop_Op"]);
    assert!(
        message.contains("--name \"Shop_Op\" is not a DNS label"),
        "{message}"
    );
    let message = refusal(handling(), &["--image", "x", "--deploy-namespace", "Ops"]);
    assert!(message.contains("--deploy-namespace"), "{message}");
    let elsewhere = [
        "--image",
        "x",
        "--webhook-server",
        "https://0.0.0.0:9443",
        "--webhook-managed",
        "m",
        "--webhook-service",
        "other/hooks",
    ];
    let message = refusal(admitting(), &elsewhere);
    assert!(
        message.contains("not in the deploy namespace default"),
        "{message}"
    );
    let message = refusal(handling(), &["--image", "x", "--webhook-managed", "m"]);
    assert!(message.contains("add --webhook-server"), "{message}");
}

#[test]
#[cfg(feature = "webhooks")]
fn a_given_webhook_service_is_the_one_made() {
    let argv = [
        "--image",
        "x",
        "--webhook-managed",
        "m",
        "--webhook-service",
        "default/hooks:8443",
    ];
    let out = rendered(admitting(), &argv, &[]);
    assert!(out.yaml.contains("  name: hooks\n"), "{}", out.yaml);
    assert!(out.yaml.contains("- port: 8443\n") || out.yaml.contains("port: 8443"));
    assert!(out.yaml.contains("--webhook-extra-san=hooks.default.svc"));
    assert!(!out.yaml.contains("--webhook-service=default/"));
}

#[test]
fn webhook_flags_are_refused_by_a_build_without_webhooks() {
    let argv = ["--image", "x", "--webhook-server", "https://0.0.0.0:9443"];
    if cfg!(feature = "webhooks") {
        let out = rendered(handling(), &argv, &[]);
        // Passed on as given: the flag, then its value.
        let passed = "- --webhook-server\n        - https://0.0.0.0:9443\n";
        assert!(out.yaml.contains(passed), "{}", out.yaml);
    } else {
        let message = refusal(handling(), &argv);
        assert!(message.contains(r#"features = ["webhooks"]"#), "{message}");
    }
}

#[test]
fn the_help_says_where_the_operator_goes_and_what_is_added() {
    use clap::CommandFactory as _;
    let help = super::ManifestsArgs::command()
        .render_long_help()
        .to_string();
    for said in [
        "--deploy-namespace",
        "exactly one plain `-n",
        "--image",
        "--liveness=http://0.0.0.0:8080/healthz",
        "--replicas",
        "--crds",
        "are refused",
    ] {
        assert!(help.contains(said), "{said} not in:\n{help}");
    }
}
