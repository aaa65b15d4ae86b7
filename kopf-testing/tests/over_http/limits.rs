//! The emulator survives hostile clients: patches that blow up, bodies nested
//! too deeply, YAML alias bombs, CRDs claiming built-in groups, namespace
//! deletecollection, and connections that never send a request.

use std::time::Duration;

use crate::common::{RawResponse, WAIT, raw_request, within};
use kopf_testing::Emulator;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";
const JSON: (&str, &str) = ("Content-Type", "application/json");
const JSON_PATCH: (&str, &str) = ("Content-Type", "application/json-patch+json");

async fn emulator() -> Emulator {
    Emulator::builder()
        .crd("example.com", "v1", "widgets", "Widget", true)
        .start()
        .await
        .expect("the emulator starts")
}

async fn post(em: &Emulator, path: &str, body: &Value) -> RawResponse {
    let bytes = serde_json::to_vec(body).expect("a JSON value serializes");
    raw_request(em.addr(), "POST", path, &[JSON], &bytes).await
}

/// Sends `body` as a JSON patch of the ConfigMap `name`.
async fn json_patch(em: &Emulator, name: &str, body: &[u8]) -> RawResponse {
    raw_request(
        em.addr(),
        "PATCH",
        &format!("{CMS}/{name}"),
        &[JSON_PATCH],
        body,
    )
    .await
}

/// The emulator still answers, and the object is as it was.
async fn assert_alive(em: &Emulator, path: &str) {
    let resp = raw_request(em.addr(), "GET", path, &[], b"").await;
    assert_eq!(
        resp.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&resp.body)
    );
}

#[tokio::test]
async fn json_patch_copies_that_double_the_nesting_are_refused() {
    let em = emulator().await;
    post(&em, CMS, &json!({"metadata": {"name": "a"}}))
        .await
        .assert_ok();
    // Each copy puts the whole of /s at its own deepest point, doubling the depth.
    let mut ops = vec![json!({"op": "add", "path": "/s", "value": {"s": {}}})];
    let mut depth = 1;
    while ops.len() < 20 {
        let path = format!("/s{}", "/s".repeat(depth));
        ops.push(json!({"op": "copy", "from": "/s", "path": path}));
        depth *= 2;
    }
    let body = serde_json::to_vec(&ops).unwrap();
    assert!(body.len() > 30_000, "a patch of {} bytes", body.len());
    let resp = json_patch(&em, "a", &body).await;
    resp.assert_status_object(422);
    assert!(
        resp.json()["message"].as_str().unwrap().contains("deeper"),
        "{}",
        resp.json()
    );
    assert_alive(&em, &format!("{CMS}/a")).await;
}

#[tokio::test]
async fn json_patch_copies_that_double_the_size_are_refused() {
    let em = emulator().await;
    let value = "x".repeat(1024);
    post(
        &em,
        CMS,
        &json!({"metadata": {"name": "a"}, "data": {"v": value}}),
    )
    .await
    .assert_ok();
    // Forty copies of the whole object into itself: 2^40 KiB unless refused.
    let ops: Vec<Value> = (0..40)
        .map(|i| json!({"op": "copy", "from": "", "path": format!("/c{i}")}))
        .collect();
    let body = serde_json::to_vec(&ops).unwrap();
    let resp = json_patch(&em, "a", &body).await;
    resp.assert_status_object(422);
    assert!(
        resp.json()["message"].as_str().unwrap().contains("bytes"),
        "{}",
        resp.json()
    );
    let got = raw_request(em.addr(), "GET", &format!("{CMS}/a"), &[], b"").await;
    assert!(
        got.json().get("c0").is_none(),
        "nothing of the patch was kept"
    );
}

fn nested(levels: usize) -> Value {
    let mut v = json!(1);
    for _ in 0..levels {
        v = json!({ "a": v });
    }
    v
}

fn nested_text(levels: usize) -> String {
    format!("{}1{}", "{\"a\":".repeat(levels), "}".repeat(levels))
}

#[tokio::test]
async fn deep_objects_are_served_up_to_the_depth_limit() {
    let em = emulator().await;
    // 512 levels in all: the widget and 511 below it.
    let deep = nested(511);
    let widget = json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "deep", "labels": {"x": "1"}}, "spec": deep,
    });
    let listed = raw_request(em.addr(), "GET", WIDGETS, &[], b"")
        .await
        .json();
    let rv = listed["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let created = post(&em, WIDGETS, &widget).await;
    assert_eq!(
        created.status,
        201,
        "{:?}",
        String::from_utf8_lossy(&created.body)
    );
    let got = raw_request(em.addr(), "GET", &format!("{WIDGETS}/deep"), &[], b"").await;
    assert_eq!(got.status, 200);
    let list = raw_request(
        em.addr(),
        "GET",
        &format!("{WIDGETS}?labelSelector=x%3D1"),
        &[],
        b"",
    )
    .await;
    assert_eq!(list.status, 200);
    let watch = raw_request(
        em.addr(),
        "GET",
        &format!("{WIDGETS}?watch=1&resourceVersion={rv}&timeoutSeconds=1"),
        &[],
        b"",
    )
    .await;
    assert!(String::from_utf8_lossy(&watch.body).contains("\"ADDED\""));
    let patch = serde_json::to_vec(&json!({"metadata": {"labels": {"y": "2"}}})).unwrap();
    let patched = raw_request(
        em.addr(),
        "PATCH",
        &format!("{WIDGETS}/deep"),
        &[("Content-Type", "application/merge-patch+json")],
        &patch,
    )
    .await;
    assert_eq!(patched.status, 200);
    let deleted = raw_request(em.addr(), "DELETE", &format!("{WIDGETS}/deep"), &[], b"").await;
    assert_eq!(deleted.status, 200);
}

#[tokio::test]
async fn bodies_nested_deeper_than_the_limit_are_400() {
    let em = emulator().await;
    for levels in [600, 100_000] {
        let body = format!(
            r#"{{"apiVersion":"example.com/v1","kind":"Widget","metadata":{{"name":"w"}},"spec":{}}}"#,
            nested_text(levels)
        );
        let resp = raw_request(em.addr(), "POST", WIDGETS, &[JSON], body.as_bytes()).await;
        resp.assert_status_object(400);
        assert!(
            resp.json()["message"]
                .as_str()
                .unwrap()
                .contains("nested too deeply")
        );
        let patch = raw_request(
            em.addr(),
            "PATCH",
            &format!("{WIDGETS}/w"),
            &[("Content-Type", "application/merge-patch+json")],
            body.as_bytes(),
        )
        .await;
        patch.assert_status_object(400);
    }
    assert_alive(&em, WIDGETS).await;
}

fn alias_bomb() -> String {
    let mut yaml = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\nx0: &x0 \"{}\"\n",
        "x".repeat(100_000)
    );
    for i in 1..4 {
        let refs = vec![format!("*x{}", i - 1); 100].join(",");
        yaml.push_str(&format!("x{i}: &x{i} [{refs}]\n"));
    }
    yaml
}

#[tokio::test]
async fn yaml_alias_bombs_are_refused_in_bodies_and_preloads() {
    let em = emulator().await;
    let yaml = alias_bomb();
    for content_type in ["application/yaml", "application/apply-patch+yaml"] {
        let (method, path) = if content_type == "application/yaml" {
            ("POST", CMS.to_string())
        } else {
            ("PATCH", format!("{CMS}/bomb?fieldManager=t"))
        };
        let resp = raw_request(
            em.addr(),
            method,
            &path,
            &[("Content-Type", content_type)],
            yaml.as_bytes(),
        )
        .await;
        assert!(
            matches!(resp.status, 400 | 413),
            "{content_type}: {}",
            resp.status
        );
        resp.assert_status_object(resp.status);
    }
    assert_alive(&em, CMS).await;
    let err = within(
        "a preload alias bomb to be refused",
        Emulator::builder().preload_yaml(&yaml).start(),
    )
    .await
    .expect_err("the preload is refused");
    assert!(err.to_string().contains("budget"), "{err}");
}

fn crd(group: &str, plural: &str, kind: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    })
}

#[tokio::test]
async fn crds_cannot_replace_built_in_apis() {
    let em = emulator().await;
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    for (group, plural, kind) in [
        (
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
        ),
        ("events.k8s.io", "events", "Event"),
        ("coordination.k8s.io", "leases", "Lease"),
        ("", "pods", "Pod"),
        ("example.k8s.io", "gadgets", "Gadget"),
    ] {
        let resp = post(&em, crds, &crd(group, plural, kind)).await;
        resp.assert_status_object(422);
        assert_eq!(resp.json()["reason"], "Invalid");
    }
    // CRDs still work, and so do the built-in APIs.
    let resp = post(&em, crds, &crd("example.org", "gizmos", "Gizmo")).await;
    assert_eq!(
        resp.status,
        201,
        "{:?}",
        String::from_utf8_lossy(&resp.body)
    );
    let mut approved = crd("example.k8s.io", "gadgets", "Gadget");
    approved["metadata"]["annotations"] = json!({"api-approved.kubernetes.io": "https://github.com/kubernetes/enhancements/pull/1111"});
    assert_eq!(post(&em, crds, &approved).await.status, 201);
    assert_alive(&em, "/apis/events.k8s.io/v1/namespaces/default/events").await;
}

#[tokio::test]
async fn namespaces_have_no_deletecollection() {
    let em = emulator().await;
    let resp = raw_request(em.addr(), "DELETE", "/api/v1/namespaces", &[], b"").await;
    resp.assert_status_object(405);
    for ns in ["default", "kube-system", "kube-public"] {
        assert_alive(&em, &format!("/api/v1/namespaces/{ns}")).await;
    }
}

#[tokio::test]
async fn watch_history_is_bounded_by_bytes_and_older_resumes_are_gone() {
    let em = Emulator::builder()
        .history_bytes(1024 * 1024)
        .start()
        .await
        .unwrap();
    let first = post(&em, CMS, &json!({"metadata": {"name": "first"}})).await;
    let rv = first.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let value = "x".repeat(256 * 1024);
    for i in 0..8 {
        let name = format!("big{i}");
        post(
            &em,
            CMS,
            &json!({"metadata": {"name": name}, "data": {"v": value}}),
        )
        .await
        .assert_ok();
        let gone = raw_request(em.addr(), "DELETE", &format!("{CMS}/{name}"), &[], b"").await;
        assert_eq!(gone.status, 200);
    }
    let watch = raw_request(
        em.addr(),
        "GET",
        &format!("{CMS}?watch=1&resourceVersion={rv}&timeoutSeconds=1"),
        &[],
        b"",
    )
    .await;
    let text = String::from_utf8_lossy(&watch.body);
    assert!(text.contains("\"ERROR\"") && text.contains("410"), "{text}");
}

/// Reads until the server closes the connection; `true` if it did within `WAIT`.
async fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(WAIT, read).await.is_ok()
}

#[tokio::test]
async fn idle_and_half_open_connections_are_closed() {
    // Headers begun must end within the header-read timeout...
    let em = Emulator::builder()
        .header_read_timeout(Duration::from_millis(300))
        .idle_timeout(Duration::from_secs(600))
        .start()
        .await
        .unwrap();
    let mut partial = TcpStream::connect(em.addr()).await.unwrap();
    partial
        .write_all(b"GET /version HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    assert!(
        closed_by_server(&mut partial).await,
        "a connection never ending its headers is closed"
    );
    // ...and a connection that sends nothing is idle.
    let em = Emulator::builder()
        .header_read_timeout(Duration::from_secs(600))
        .idle_timeout(Duration::from_millis(300))
        .start()
        .await
        .unwrap();
    let mut silent = TcpStream::connect(em.addr()).await.unwrap();
    assert!(
        closed_by_server(&mut silent).await,
        "a connection sending nothing is closed"
    );
}

#[tokio::test]
async fn half_open_connections_do_not_lock_out_new_clients() {
    let em = Emulator::builder()
        .max_connections(16)
        .start()
        .await
        .unwrap();
    let mut held = Vec::new();
    for i in 0..300 {
        let mut s = TcpStream::connect(em.addr()).await.unwrap();
        if i % 2 == 0 {
            s.write_all(b"GET /version HTTP/1.1\r\n").await.unwrap();
        }
        held.push(s);
    }
    // A new client is served at once (the idlest connections make room)...
    assert_alive(&em, "/version").await;
    let client = em.client();
    within("a kube client request", client.apiserver_version())
        .await
        .unwrap();
    // ...and the server holds no more than its cap of the half-open ones.
    let mut closed = 0;
    for s in &mut held {
        let mut buf = [0u8; 16];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await
        {
            closed += 1;
        }
    }
    assert!(
        closed >= 300 - 16,
        "only {closed} of 300 half-open connections were closed"
    );
}

#[tokio::test]
async fn a_client_over_the_cap_of_busy_connections_gets_a_503_status() {
    let em = Emulator::builder()
        .max_connections(2)
        .start()
        .await
        .unwrap();
    let mut watches = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(em.addr()).await.unwrap();
        s.write_all(format!("GET {CMS}?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        // The response head shows the watch is being served.
        let mut buf = [0u8; 1024];
        let n = within("a watch's response head", s.read(&mut buf))
            .await
            .unwrap();
        assert!(n > 0);
        watches.push(s);
    }
    let resp = raw_request(em.addr(), "GET", "/version", &[], b"").await;
    resp.assert_status_object(503);
    assert_eq!(resp.json()["reason"], "ServiceUnavailable");
    // Once a watch ends, there is room again.
    drop(watches.pop());
    within("room for a new client", async {
        loop {
            let resp = raw_request(em.addr(), "GET", "/version", &[], b"").await;
            if resp.status == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn requests_hyper_cannot_parse_get_status_answers() {
    let em = emulator().await;
    let huge_header = "h".repeat(512 * 1024);
    let resp = raw_request(
        em.addr(),
        "GET",
        "/version",
        &[("X-Big", &huge_header)],
        b"",
    )
    .await;
    resp.assert_status_object(431);
    let long_path = format!(
        "/api/v1/namespaces/default/configmaps?x={}",
        "q".repeat(70_000)
    );
    let resp = raw_request(em.addr(), "GET", &long_path, &[], b"").await;
    resp.assert_status_object(414);
    let resp = raw_request(em.addr(), "G E T", "/version", &[], b"").await;
    resp.assert_status_object(400);
    assert_alive(&em, "/version").await;
}

#[tokio::test]
async fn watches_outlive_the_idle_timeout() {
    let em = Emulator::builder()
        .header_read_timeout(Duration::from_millis(200))
        .idle_timeout(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let mut stream = TcpStream::connect(em.addr()).await.unwrap();
    stream
        .write_all(format!("GET {CMS}?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    within("the watch's response head", async {
        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "the watch ended early");
            seen.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    // Silent for several idle timeouts (no events, no bookmarks)...
    tokio::time::sleep(Duration::from_secs(1)).await;
    post(&em, CMS, &json!({"metadata": {"name": "late"}}))
        .await
        .assert_ok();
    // ...and the event still arrives on the same connection.
    within("the event on the watch", async {
        while !String::from_utf8_lossy(&seen).contains("\"late\"") {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "the watch was closed while streaming");
            seen.extend_from_slice(&buf[..n]);
        }
    })
    .await;
}

trait AssertOk {
    fn assert_ok(&self);
}

impl AssertOk for RawResponse {
    fn assert_ok(&self) {
        assert!(
            (200..300).contains(&self.status),
            "status {}: {:?}",
            self.status,
            String::from_utf8_lossy(&self.body)
        );
    }
}

#[tokio::test]
async fn kept_alive_connections_wait_for_the_idle_timeout_not_the_header_timeout() {
    let em = Emulator::builder()
        .header_read_timeout(Duration::from_millis(200))
        .idle_timeout(Duration::from_secs(60))
        .start()
        .await
        .unwrap();
    let mut s = TcpStream::connect(em.addr()).await.unwrap();
    let request = b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut buf = [0u8; 4096];
    s.write_all(request).await.unwrap();
    assert!(within("the first answer", s.read(&mut buf)).await.unwrap() > 0);
    // Waiting for the next request is idling, not reading headers.
    tokio::time::sleep(Duration::from_secs(1)).await;
    s.write_all(request).await.unwrap();
    let n = within("the second answer", s.read(&mut buf)).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
}
