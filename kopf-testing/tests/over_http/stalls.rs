//! No client stalls the emulator: what one client sends or asks for is
//! worked through in time linear in its size, and without holding the
//! store for long, so that other clients are answered meanwhile.

use std::time::{Duration, Instant};

use crate::common::{raw_request, within};
use kopf_testing::{Emulator, FailRule, MAX_FRAGMENT_BYTES};
use tokio::io::{AsyncBufReadExt, BufReader};

const CMS: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test]
async fn a_body_rule_searches_bodies_in_linear_time() {
    let emulator = Emulator::start().await.expect("emulator starts");
    // The longest fragment, almost matching everywhere in a body of the
    // same byte: a search comparing it at every offset takes seconds.
    let mut fragment = "a".repeat(MAX_FRAGMENT_BYTES - 1);
    fragment.push('b');
    let rule = FailRule::status(500)
        .verb("create")
        .body_contains(&fragment);
    emulator.faults().fail_next(1, rule);
    let body = vec![b'a'; 3 * 1024 * 1024 - 1024];
    let started = Instant::now();
    for _ in 0..3 {
        let json = [("Content-Type", "application/json")];
        let resp = raw_request(emulator.addr(), "POST", CMS, &json, &body).await;
        assert_eq!(resp.status, 400, "not the rule's 500: the body is no JSON");
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "three 3 MiB bodies took {took:?} to check against one rule"
    );
}

#[tokio::test]
async fn sigterm_stops_the_binary_during_a_restart_from_another_process() {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-emulator"))
        .args(["--port", "0"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kube-emulator starts");
    let stdout = child.stdout.take().expect("its stdout");
    let line = within("the listening line", async {
        BufReader::new(stdout).lines().next_line().await
    })
    .await
    .expect("stdout is readable")
    .expect("a listening line");
    let addr: std::net::SocketAddr = line
        .strip_prefix("listening on http://")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
    // Down for ten minutes: the restart is under way when the signal comes.
    let restart = raw_request(
        addr,
        "POST",
        "/_emulator/restart",
        &[],
        b"{\"down_ms\": 600000}",
    )
    .await;
    assert_eq!(restart.status, 200);
    within("the port closed by the restart", async {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let pid = child.id().expect("a running child").to_string();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    let status = within("the emulator to exit on SIGTERM", child.wait())
        .await
        .expect("the exit status");
    assert!(status.success(), "{status:?}");
}

/// The slowest answer to `probe` while `work` runs (at least one probe),
/// and what `work` returned.
async fn slowest_answer_during<W>(
    emulator: &Emulator,
    probe: &str,
    work: W,
) -> (Duration, W::Output)
where
    W: std::future::Future + Send + 'static,
    W::Output: Send,
{
    let work = tokio::spawn(work);
    let mut slowest = Duration::ZERO;
    loop {
        let started = Instant::now();
        let resp = raw_request(emulator.addr(), "GET", probe, &[], b"").await;
        assert_eq!(resp.status, 200);
        slowest = slowest.max(started.elapsed());
        if work.is_finished() {
            break;
        }
    }
    (slowest, work.await.expect("the work ends"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_namespace_of_large_objects_stalls_no_other_client() {
    let emulator = Emulator::start().await.expect("emulator starts");
    let addr = emulator.addr();
    let json = [("Content-Type", "application/json")];
    let ns = br#"{"metadata":{"name":"bulky"}}"#;
    let created = raw_request(addr, "POST", "/api/v1/namespaces", &json, ns).await;
    assert_eq!(created.status, 201);
    let value = "x".repeat(900 * 1024);
    for i in 0..40 {
        let body = format!(r#"{{"metadata":{{"name":"big{i}"}},"data":{{"v":"{value}"}}}}"#);
        let path = "/api/v1/namespaces/bulky/configmaps";
        let created = raw_request(addr, "POST", path, &json, body.as_bytes()).await;
        assert_eq!(created.status, 201);
    }
    let probe = br#"{"metadata":{"name":"probe"}}"#;
    let created = raw_request(addr, "POST", CMS, &json, probe).await;
    assert_eq!(created.status, 201);
    let delete = async move {
        let resp = raw_request(addr, "DELETE", "/api/v1/namespaces/bulky", &[], b"").await;
        assert_eq!(resp.status, 200);
    };
    let (slowest, ()) = slowest_answer_during(&emulator, &format!("{CMS}/probe"), delete).await;
    assert!(
        slowest < Duration::from_millis(250),
        "another client waited {slowest:?} while a namespace of 36 MiB was deleted"
    );
}

// One thread serves the emulator and both clients: a list matched on it
// would hold up the probe for the whole list.
#[tokio::test(flavor = "current_thread")]
async fn lists_with_huge_selectors_stall_no_other_client() {
    let mut yaml = String::new();
    for i in 0..2000 {
        yaml.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c{i}\n  namespace: default\n  labels:\n    app: v{i}\n"
        ));
    }
    yaml.push_str(
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe\n  namespace: default\n",
    );
    let emulator = Emulator::builder()
        .preload_yaml(&yaml)
        .start()
        .await
        .expect("emulator starts");
    let addr = emulator.addr();
    // 7,000 values, none of them any object's: each object is compared
    // with every one. The last requirement matches no object, so that
    // the lists take their matching's time, not their answer's.
    let values: Vec<String> = (0..7000).map(|i| format!("w{i}")).collect();
    let labels = format!(
        "{CMS}?labelSelector=app%20notin%20({}),app=none",
        values.join(",")
    );
    let names: Vec<String> = (0..2500).map(|i| format!("metadata.name!=n{i}")).collect();
    let fields = format!("{CMS}?fieldSelector={},metadata.name=none", names.join(","));
    let lists = async move {
        let mut longest = Duration::ZERO;
        for path in [&labels, &fields, &labels, &fields] {
            let started = Instant::now();
            let resp = raw_request(addr, "GET", path, &[], b"").await;
            assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
            longest = longest.max(started.elapsed());
        }
        longest
    };
    let (slowest, longest) = slowest_answer_during(&emulator, &format!("{CMS}/probe"), lists).await;
    // Measured against the lists themselves, so that a loaded machine,
    // which slows both, does not fail it.
    assert!(
        slowest < longest / 4,
        "another client waited {slowest:?} while 2,000 objects were matched against huge \
         selectors, in lists of up to {longest:?}"
    );
}

#[tokio::test]
async fn a_watch_that_falls_behind_while_its_client_reads_ends_cleanly() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    // A watcher may fall behind by the history's bytes: 4 MiB here.
    let emulator = Emulator::builder()
        .history_bytes(4 * 1024 * 1024)
        .start()
        .await
        .expect("emulator starts");
    let mut watch = tokio::net::TcpStream::connect(emulator.addr())
        .await
        .expect("connects");
    let head = format!(
        "GET {CMS}?watch=true HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        emulator.addr()
    );
    watch.write_all(head.as_bytes()).await.expect("sent");
    within("the watch to be served", async {
        while emulator.requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // Silenced, the stream takes nothing: five events of 500 KiB objects
    // (about 1 MiB each, with their lines) put it too far behind.
    emulator.faults().silence_watches();
    let json = [("Content-Type", "application/json")];
    let value = "x".repeat(500 * 1024);
    for i in 0..5 {
        let body = format!(r#"{{"metadata":{{"name":"big{i}"}},"data":{{"v":"{value}"}}}}"#);
        let created = raw_request(emulator.addr(), "POST", CMS, &json, body.as_bytes()).await;
        assert_eq!(created.status, 201);
    }
    emulator.faults().resume_watches();
    // The client reads on: it gets the end of the stream (the last chunk),
    // not a connection cut off, and resumes as after a watch timeout.
    let mut answer = Vec::new();
    within("the end of the watch", watch.read_to_end(&mut answer))
        .await
        .expect("read to the end");
    assert!(
        answer.ends_with(b"\r\n0\r\n\r\n"),
        "the watch was cut off: {:?}",
        String::from_utf8_lossy(&answer[answer.len().saturating_sub(64)..])
    );
}
