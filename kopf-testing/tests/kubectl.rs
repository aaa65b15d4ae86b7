//! `kubectl` against the standalone `kube-emulator` binary: each test spawns
//! the binary with a temporary kubeconfig and drives it with the real kubectl
//! (get, get -w, apply, patch, label, delete, wait). Every kubectl call runs
//! under a timeout. Without kubectl on PATH these tests fail loudly.

mod common;

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::atomic::{AtomicUsize, Ordering},
};

use common::webhooks::{Pki, TlsProxy};
use common::within;
use serde_json::json;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
    task::JoinHandle,
};

const EMULATOR: &str = env!("CARGO_BIN_EXE_kube-emulator");

fn unique_dir() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "kopf-kubectl-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).expect("create a temp dir");
    dir
}

/// A running `kube-emulator` process, killed on drop.
struct Server {
    child: Child,
    dir: PathBuf,
    kubeconfig: PathBuf,
    port: u16,
    drain: JoinHandle<()>,
    /// Whether the kubeconfig existed when the listening line was printed.
    written_when_announced: bool,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.drain.abort();
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

async fn start_server(extra: &[String]) -> Server {
    let kubectl = kopf_testing::kubectl();
    assert!(kubectl.is_file());
    let dir = unique_dir();
    let kubeconfig = dir.join("kubeconfig");
    let port = free_port();
    let mut child = Command::new(EMULATOR)
        .arg("--port")
        .arg(port.to_string())
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn kube-emulator");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let expected = format!("listening on http://127.0.0.1:{port}");
    within("kube-emulator to print its listening line", async {
        loop {
            match lines.next_line().await.expect("read emulator stdout") {
                Some(line) if line.contains(&expected) => break,
                Some(_) => continue,
                None => panic!("kube-emulator exited before printing {expected:?}"),
            }
        }
    })
    .await;
    let written_when_announced = kubeconfig.is_file();
    within("the kubeconfig to be written", async {
        while !kubeconfig.is_file() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    // Keep reading stdout so the emulator never blocks on a full pipe.
    let drain = tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Server {
        child,
        dir,
        kubeconfig,
        port,
        drain,
        written_when_announced,
    }
}

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn kubectl_cmd(server: &Server, args: &[&str]) -> Command {
    let mut cmd = Command::new(kopf_testing::kubectl());
    cmd.args(args)
        .env("KUBECONFIG", &server.kubeconfig)
        .env("HOME", &server.dir)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

async fn kubectl(server: &Server, args: &[&str]) -> Out {
    let out = within(
        &format!("kubectl {}", args.join(" ")),
        kubectl_cmd(server, args).output(),
    )
    .await
    .expect("run kubectl");
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs kubectl and fails the test if it does not succeed; returns stdout.
async fn ok(server: &Server, args: &[&str]) -> String {
    let out = kubectl(server, args).await;
    assert!(
        out.ok,
        "kubectl {} failed:\nstdout: {}\nstderr: {}",
        args.join(" "),
        out.stdout,
        out.stderr
    );
    out.stdout
}

/// Creates a ConfigMap through `kubectl apply` (a JSON body).
async fn apply_cm(server: &Server, name: &str) {
    let file = write(
        &server.dir,
        &format!("{name}.yaml"),
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  a: b\n"),
    );
    ok(server, &["apply", "-f", &file]).await;
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write manifest");
    path.to_string_lossy().into_owned()
}

#[tokio::test]
async fn binary_writes_the_kubeconfig_before_announcing_that_it_listens() {
    // A script that waits for the listening line and then runs kubectl must not race the file.
    for _ in 0..3 {
        let server = start_server(&[]).await;
        assert!(
            server.written_when_announced,
            "the kubeconfig exists when `listening on` is printed"
        );
    }
}

#[tokio::test]
async fn binary_serves_kubectl_and_exits_zero_on_sigterm() {
    let mut server = start_server(&[]).await;
    let kc = std::fs::read_to_string(&server.kubeconfig).expect("read kubeconfig");
    assert!(
        kc.contains(&format!("127.0.0.1:{}", server.port)),
        "kubeconfig points at the emulator:\n{kc}"
    );
    let version = ok(&server, &["version", "-o", "json"]).await;
    assert!(
        version.contains("serverVersion"),
        "kubectl sees a server version: {version}"
    );
    let nss = ok(&server, &["get", "namespaces", "-o", "name"]).await;
    for ns in [
        "namespace/default",
        "namespace/kube-system",
        "namespace/kube-public",
    ] {
        assert!(nss.lines().any(|l| l == ns), "{ns} in {nss:?}");
    }

    let pid = server.child.id().expect("the emulator is running");
    let kill = within(
        "kill -TERM",
        Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status(),
    )
    .await
    .expect("run kill");
    assert!(kill.success());
    let status = within("kube-emulator to exit after SIGTERM", server.child.wait())
        .await
        .expect("wait");
    assert_eq!(status.code(), Some(0), "SIGTERM exits 0: {status:?}");
}

#[tokio::test]
async fn binary_registers_crd_flags_and_preloads_manifests() {
    let dir = unique_dir();
    let preload = write(
        &dir,
        "preload.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pre\n  namespace: default\ndata:\n  a: b\n\
         ---\napiVersion: example.com/v1\nkind: Thing\nmetadata:\n  name: t1\nspec:\n  x: 1\n",
    );
    let server = start_server(&[
        "--crd".into(),
        "example.com/v1/things:Thing:Cluster".into(),
        "--crd".into(),
        "kopf.dev/v1/gizmos:Gizmo".into(),
        "--preload".into(),
        preload,
    ])
    .await;
    let cms = ok(&server, &["get", "configmaps", "-o", "name"]).await;
    assert!(cms.lines().any(|l| l == "configmap/pre"), "{cms:?}");
    let a = ok(
        &server,
        &["get", "configmap", "pre", "-o", "jsonpath={.data.a}"],
    )
    .await;
    assert_eq!(a, "b");
    let things = ok(&server, &["get", "things", "-o", "name"]).await;
    assert_eq!(things.trim(), "thing.example.com/t1");
    let gizmos = kubectl(&server, &["get", "gizmos", "-n", "default", "-o", "name"]).await;
    assert!(
        gizmos.ok && gizmos.stdout.trim().is_empty(),
        "gizmos are served and empty: {}",
        gizmos.stderr
    );
    let _ = std::fs::remove_dir_all(dir);
}

const APP_V1: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  greeting: hello\n";
const APP_V2: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  greeting: bonjour\n";

#[tokio::test]
async fn kubectl_apply_patch_and_label_change_objects() {
    let server = start_server(&[]).await;
    let v1 = write(&server.dir, "v1.yaml", APP_V1);
    let v2 = write(&server.dir, "v2.yaml", APP_V2);
    let out = ok(&server, &["apply", "-f", &v1]).await;
    assert!(out.contains("configmap/app created"), "{out}");
    let out = ok(&server, &["apply", "-f", &v2]).await;
    assert!(out.contains("configmap/app configured"), "{out}");
    let greeting = ok(
        &server,
        &["get", "configmap", "app", "-o", "jsonpath={.data.greeting}"],
    )
    .await;
    assert_eq!(greeting, "bonjour");

    ok(&server, &["label", "configmap", "app", "tier=web"]).await;
    ok(
        &server,
        &[
            "patch",
            "configmap",
            "app",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"m":"1"}}"#,
        ],
    )
    .await;
    ok(
        &server,
        &[
            "patch",
            "configmap",
            "app",
            "--type",
            "json",
            "-p",
            r#"[{"op":"add","path":"/data/j","value":"2"}]"#,
        ],
    )
    .await;
    ok(
        &server,
        &["patch", "configmap", "app", "-p", r#"{"data":{"s":"3"}}"#],
    )
    .await;
    let got = ok(
        &server,
        &[
            "get",
            "configmap",
            "app",
            "-o",
            "jsonpath={.metadata.labels.tier} {.data.m}{.data.j}{.data.s}",
        ],
    )
    .await;
    assert_eq!(got, "web 123");
    let selected = ok(
        &server,
        &["get", "configmaps", "-l", "tier=web", "-o", "name"],
    )
    .await;
    assert_eq!(selected.trim(), "configmap/app");

    let table = ok(&server, &["get", "configmaps"]).await;
    let header = table.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("NAME"),
        "kubectl get prints a table: {table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().next() == Some("app")),
        "{table}"
    );

    let failed = kubectl(
        &server,
        &[
            "patch",
            "configmap",
            "app",
            "--type",
            "json",
            "-p",
            r#"[{"op":"test","path":"/data/m","value":"nope"}]"#,
        ],
    )
    .await;
    assert!(
        !failed.ok,
        "a failing json-patch test op fails kubectl: {}",
        failed.stdout
    );
    let missing = kubectl(&server, &["get", "configmap", "nope"]).await;
    assert!(
        !missing.ok && missing.stderr.contains("NotFound"),
        "kubectl reports NotFound: {}",
        missing.stderr
    );
    ok(
        &server,
        &["annotate", "configmap", "app", "kopf.dev/note=hi"],
    )
    .await;
    let v3 = write(
        &server.dir,
        "v3.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  greeting: hallo\n",
    );
    let out = ok(&server, &["replace", "-f", &v3]).await;
    assert!(out.contains("configmap/app replaced"), "{out}");
    let got = ok(
        &server,
        &[
            "get",
            "configmap",
            "app",
            "-o",
            "jsonpath={.data.greeting} {.data.m}",
        ],
    )
    .await;
    assert_eq!(got.trim_end(), "hallo", "replace swaps the whole object");
    let out = ok(&server, &["delete", "-f", &v2]).await;
    assert!(out.contains("configmap \"app\" deleted"), "{out}");
}

const WIDGET_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.kopf.dev
spec:
  group: kopf.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

#[tokio::test]
async fn kubectl_applies_a_crd_and_patches_the_status_subresource() {
    let server = start_server(&[]).await;
    let crd = write(&server.dir, "crd.yaml", WIDGET_CRD);
    ok(&server, &["apply", "-f", &crd]).await;
    ok(
        &server,
        &[
            "wait",
            "--for=condition=Established",
            "crd/widgets.kopf.dev",
            "--timeout=20s",
        ],
    )
    .await;
    let w = write(
        &server.dir,
        "w.yaml",
        "apiVersion: kopf.dev/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 1\n",
    );
    ok(&server, &["apply", "-f", &w]).await;

    ok(
        &server,
        &[
            "patch",
            "widget",
            "w1",
            "--subresource",
            "status",
            "--type",
            "merge",
            "-p",
            r#"{"status":{"phase":"Ready"}}"#,
        ],
    )
    .await;
    ok(
        &server,
        &[
            "patch",
            "widget",
            "w1",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"size":2},"status":{"phase":"Ignored"}}"#,
        ],
    )
    .await;
    let got = ok(
        &server,
        &[
            "get",
            "widget",
            "w1",
            "-o",
            "jsonpath={.spec.size} {.status.phase}",
        ],
    )
    .await;
    assert_eq!(
        got, "2 Ready",
        "status only changes through the subresource"
    );
    ok(
        &server,
        &[
            "wait",
            "--for=jsonpath={.status.phase}=Ready",
            "widget/w1",
            "--timeout=20s",
        ],
    )
    .await;
}

#[tokio::test]
async fn kubectl_get_watch_prints_changes_as_they_happen() {
    let server = start_server(&[]).await;
    apply_cm(&server, "w1").await;
    let mut watch = kubectl_cmd(&server, &["get", "configmaps", "--watch", "-o", "name"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn kubectl get -w");
    let mut lines = BufReader::new(watch.stdout.take().expect("stdout")).lines();
    let mut seen = Vec::new();
    let mut read_until = async |needle: &str, seen: &mut Vec<String>| {
        within(&format!("kubectl get -w to print {needle}"), async {
            loop {
                match lines.next_line().await.expect("read kubectl output") {
                    Some(line) => {
                        let hit = line.contains(needle);
                        seen.push(line);
                        if hit {
                            return;
                        }
                    }
                    None => panic!("kubectl get -w exited; printed {seen:?}"),
                }
            }
        })
        .await
    };
    read_until("configmap/w1", &mut seen).await;
    apply_cm(&server, "w2").await;
    read_until("configmap/w2", &mut seen).await;
    ok(&server, &["label", "configmap", "w1", "x=y"]).await;
    read_until("configmap/w1", &mut seen).await;
    watch.start_kill().expect("kill kubectl get -w");
    within("kubectl get -w to exit", watch.wait())
        .await
        .expect("wait");
}

#[tokio::test]
async fn kubectl_delete_removes_objects_and_waits_for_finalizers_to_be_released() {
    let server = start_server(&[]).await;
    apply_cm(&server, "plain").await;
    let out = ok(&server, &["delete", "configmap", "plain"]).await;
    assert!(out.contains("deleted"), "{out}");
    let gone = kubectl(&server, &["get", "configmap", "plain"]).await;
    assert!(
        !gone.ok && gone.stderr.contains("NotFound"),
        "{}",
        gone.stderr
    );

    let held = write(
        &server.dir,
        "held.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  finalizers: [kopf.dev/hold]\n",
    );
    ok(&server, &["apply", "-f", &held]).await;
    ok(&server, &["delete", "configmap", "held", "--wait=false"]).await;
    let ts = ok(
        &server,
        &[
            "get",
            "configmap",
            "held",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ],
    )
    .await;
    assert!(
        !ts.trim().is_empty(),
        "the finalizer keeps the object, marked for deletion"
    );

    let waiting = kubectl_cmd(
        &server,
        &["wait", "--for=delete", "configmap/held", "--timeout=30s"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn kubectl wait");
    ok(
        &server,
        &[
            "patch",
            "configmap",
            "held",
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
    )
    .await;
    let out = within("kubectl wait --for=delete", waiting.wait_with_output())
        .await
        .expect("kubectl wait");
    assert!(
        out.status.success(),
        "kubectl wait --for=delete succeeds once the finalizer is gone: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gone = kubectl(&server, &["get", "configmap", "held"]).await;
    assert!(
        !gone.ok && gone.stderr.contains("NotFound"),
        "{}",
        gone.stderr
    );
}

#[tokio::test]
async fn kubectl_create_configmap_sends_protobuf_and_is_accepted() {
    // `kubectl create configmap|secret` use client-go's typed clients, which send
    // `Content-Type: application/vnd.kubernetes.protobuf` for built-in kinds.
    let server = start_server(&[]).await;
    ok(
        &server,
        &["create", "configmap", "made", "--from-literal=a=b"],
    )
    .await;
    let a = ok(
        &server,
        &["get", "configmap", "made", "-o", "jsonpath={.data.a}"],
    )
    .await;
    assert_eq!(a, "b");
}

#[tokio::test]
async fn kubectl_server_side_apply_creates_and_updates() {
    let server = start_server(&[]).await;
    let v1 = write(&server.dir, "v1.yaml", APP_V1);
    let v2 = write(&server.dir, "v2.yaml", APP_V2);
    let out = ok(&server, &["apply", "--server-side", "-f", &v1]).await;
    assert!(out.contains("serverside-applied"), "{out}");
    ok(&server, &["apply", "--server-side", "-f", &v2]).await;
    let greeting = ok(
        &server,
        &["get", "configmap", "app", "-o", "jsonpath={.data.greeting}"],
    )
    .await;
    assert_eq!(greeting, "bonjour");
}

#[tokio::test]
async fn kubectl_apply_of_an_invalid_object_is_refused_by_a_webhook() {
    use common::webhooks::{Hook, Reply, allow, configuration, review, webhook};
    use serde_json::Value;

    let pki = Pki::new(&["hook.webhooks.svc"]);
    let hook = Hook::start(&pki, |r: &Value| {
        if r["object"]["data"]["valid"] == "yes" {
            return allow(r);
        }
        Reply::Json(review(
            r,
            json!({"allowed": false, "status": {"code": 422, "message": "data.valid must be yes"}, "warnings": ["checked by the test webhook"]}),
        ))
    })
    .await;
    let mapping = format!("webhooks/hook:443=127.0.0.1:{}", hook.addr.port());
    let server = start_server(&["--webhook-service".into(), mapping]).await;
    let mut by_service = webhook("valid.example.com", "", &pki);
    by_service["clientConfig"] = json!({
        "service": {"namespace": "webhooks", "name": "hook", "path": "/validate"},
        "caBundle": pki.ca_bundle(),
    });
    let config = configuration("ValidatingWebhookConfiguration", "check", vec![by_service]);
    let config = write(&server.dir, "config.json", &config.to_string());
    ok(&server, &["apply", "-f", &config]).await;

    let invalid =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  valid: \"no\"\n";
    let invalid = write(&server.dir, "invalid.yaml", invalid);
    let out = kubectl(&server, &["apply", "-f", &invalid]).await;
    assert!(!out.ok, "an invalid object is refused: {}", out.stdout);
    assert!(
        out.stderr.contains(
            "admission webhook \"valid.example.com\" denied the request: data.valid must be yes"
        ),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("Warning: checked by the test webhook"),
        "{}",
        out.stderr
    );
    let out = kubectl(&server, &["get", "configmap", "app"]).await;
    assert!(!out.ok, "nothing was stored: {}", out.stdout);

    let valid = write(
        &server.dir,
        "valid.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  valid: \"yes\"\n",
    );
    let out = ok(&server, &["apply", "-f", &valid]).await;
    assert!(out.contains("configmap/app created"), "{out}");
    assert!(hook.requests("/validate").len() >= 2);
}

/// Runs kubectl with another kubeconfig.
async fn kubectl_as(server: &Server, kubeconfig: &Path, args: &[&str]) -> Out {
    let mut cmd = kubectl_cmd(server, args);
    cmd.env("KUBECONFIG", kubeconfig);
    let out = within(&format!("kubectl {}", args.join(" ")), cmd.output())
        .await
        .expect("run kubectl");
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A kubeconfig reaching `server` through a TLS proxy with `token`, as
/// kubectl sends credentials over TLS only.
fn kubeconfig_with_token(server: &Server, proxy: &TlsProxy, pki: &Pki, token: &str) -> PathBuf {
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "tls", "cluster": {
            "server": format!("https://127.0.0.1:{}", proxy.addr.port()),
            "certificate-authority-data": pki.ca_bundle(),
        }}],
        "users": [{"name": "op", "user": {"token": token}}],
        "contexts": [{"name": "op", "context": {"cluster": "tls", "user": "op", "namespace": "default"}}],
        "current-context": "op",
    });
    PathBuf::from(write(&server.dir, "op-kubeconfig", &doc.to_string()))
}

#[tokio::test]
async fn kubectl_create_token_then_auth_can_i_answers_for_the_service_account() {
    let server = start_server(&["--rbac".into()]).await;
    let pki = Pki::new(&["127.0.0.1"]);
    let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], server.port));
    let proxy = TlsProxy::start(&pki, upstream).await;
    ok(&server, &["create", "serviceaccount", "op"]).await;
    let token = ok(&server, &["create", "token", "op"]).await;
    let as_op = kubeconfig_with_token(&server, &proxy, &pki, token.trim());
    let can_i = &["auth", "can-i", "list", "secrets", "-n", "default"];
    let out = kubectl_as(&server, &as_op, can_i).await;
    assert_eq!(out.stdout.trim(), "no");
    assert!(!out.ok, "`no` exits non-zero");
    let out = kubectl_as(&server, &as_op, &["get", "secrets", "-n", "kube-system"]).await;
    assert!(
        out.stderr.contains(
            "Error from server (Forbidden): secrets is forbidden: User \"system:serviceaccount:default:op\" cannot list resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
        ),
        "{}",
        out.stderr
    );

    ok(
        &server,
        &[
            "create",
            "role",
            "secrets",
            "--verb=list",
            "--resource=secrets",
        ],
    )
    .await;
    ok(
        &server,
        &[
            "create",
            "rolebinding",
            "op-secrets",
            "--role=secrets",
            "--serviceaccount=default:op",
        ],
    )
    .await;
    let out = kubectl_as(&server, &as_op, can_i).await;
    assert_eq!(out.stdout.trim(), "yes");
    assert!(out.ok);
    let out = kubectl_as(
        &server,
        &as_op,
        &["auth", "can-i", "--list", "-n", "default"],
    )
    .await;
    let listed = out.stdout;
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("secrets ") && l.ends_with("[list]")),
        "{listed}"
    );
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("selfsubjectaccessreviews.authorization.k8s.io ")),
        "{listed}"
    );
    let out = kubectl_as(&server, &as_op, &["auth", "whoami"]).await;
    assert!(
        out.stdout.contains("system:serviceaccount:default:op"),
        "{}{}",
        out.stdout,
        out.stderr
    );
    // The administrator (no token) may do anything.
    assert_eq!(
        ok(&server, &["auth", "can-i", "delete", "nodes"])
            .await
            .trim(),
        "yes"
    );
}
