//! Helpers shared by the emulator's integration tests: bounded waits, API
//! error extraction and a raw HTTP/1.1 client for requests `kube` would refuse
//! to send.
#![allow(dead_code)]

pub(crate) mod webhooks;

use std::{future::Future, net::SocketAddr, time::Duration};

use kube::core::Status;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The longest any single wait in these tests may take.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// Awaits `fut`, failing the test with `what` if it takes longer than [`WAIT`].
pub(crate) async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(WAIT, fut).await {
        Ok(out) => out,
        Err(_) => panic!("timed out after {WAIT:?} waiting for {what}"),
    }
}

/// The `Status` an API call failed with; fails the test if it did not fail that way.
pub(crate) fn api_error<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> Box<Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected the API server to answer with a Status error, got {other:?}"),
    }
}

/// Parses a `resourceVersion` the emulator hands out as a number.
pub(crate) fn rv_num(rv: Option<&String>) -> u64 {
    let rv = rv.expect("object carries a resourceVersion");
    rv.parse()
        .unwrap_or_else(|e| panic!("resourceVersion {rv:?} is not numeric: {e}"))
}

/// A response read off a raw socket.
#[derive(Debug)]
pub(crate) struct RawResponse {
    /// HTTP status code.
    pub status: u16,
    /// Header names (lowercased) and values.
    pub headers: Vec<(String, String)>,
    /// Decoded body (chunked encoding removed).
    pub body: Vec<u8>,
}

impl RawResponse {
    /// The first header called `name` (case-insensitive).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The causes of a `422` `Status` body, each as `field: message`.
    pub(crate) fn causes(&self) -> Vec<String> {
        self.json()["details"]["causes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                format!(
                    "{}: {}",
                    c["field"].as_str().unwrap_or(""),
                    c["message"].as_str().unwrap_or("")
                )
            })
            .collect()
    }

    /// The body as JSON; fails the test if it is not JSON.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "response body is not JSON ({e}): status {} body {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// Asserts the body is a `Status` object carrying `code`.
    pub(crate) fn assert_status_object(&self, code: u16) {
        assert_eq!(
            self.status,
            code,
            "HTTP status; body {:?}",
            String::from_utf8_lossy(&self.body)
        );
        let body = self.json();
        assert_eq!(body["kind"], "Status", "body is a Status object: {body}");
        assert_eq!(body["apiVersion"], "v1", "Status apiVersion: {body}");
        assert_eq!(body["status"], "Failure", "Status.status: {body}");
        assert_eq!(body["code"], code, "Status.code: {body}");
    }
}

/// Sends one HTTP/1.1 request over a fresh connection (`Connection: close`) and
/// reads the whole answer. The body is written while the answer is read, so a
/// server that answers early (413) is seen rather than a broken pipe.
pub(crate) async fn raw_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> RawResponse {
    within(&format!("raw {method} {path}"), async {
        let stream = tokio::net::TcpStream::connect(addr).await.expect("connect to the emulator");
        let (mut rd, mut wr) = stream.into_split();
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let mut payload = head.into_bytes();
        payload.extend_from_slice(body);
        let writer = async move {
            // The server may answer and close before reading everything; that is fine.
            let _ = wr.write_all(&payload).await;
            let _ = wr.flush().await;
            wr
        };
        let reader = async move {
            let mut buf = Vec::new();
            let res = rd.read_to_end(&mut buf).await;
            (buf, res)
        };
        let (_wr, (buf, res)) = tokio::join!(writer, reader);
        if buf.is_empty() {
            panic!("the emulator closed the connection without answering {method} {path}: {res:?}");
        }
        parse_response(&buf)
    })
    .await
}

/// Sends `body` as JSON with the content type `content_type` (a JSON, merge
/// or JSON patch type), over [`raw_request`].
pub(crate) async fn send_json(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: &str,
    body: &serde_json::Value,
) -> RawResponse {
    let body = serde_json::to_vec(body).expect("JSON");
    raw_request(addr, method, path, &[("Content-Type", content_type)], &body).await
}

/// Sends raw bytes and returns whatever comes back before the server closes.
pub(crate) async fn raw_bytes(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    within("a raw exchange", async {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connect to the emulator");
        let _ = stream.write_all(bytes).await;
        let _ = stream.shutdown().await;
        let mut buf = Vec::new();
        let _ = stream.read_to_end(&mut buf).await;
        buf
    })
    .await
}

fn parse_response(buf: &[u8]) -> RawResponse {
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header terminator in {:?}", String::from_utf8_lossy(buf)));
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = &buf[split + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_vec()
    };
    RawResponse {
        status,
        headers,
        body,
    }
}

fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size_str = String::from_utf8_lossy(&rest[..eol]);
        let size = usize::from_str_radix(size_str.split(';').next().unwrap_or("0").trim(), 16)
            .unwrap_or(0);
        rest = &rest[eol + 2..];
        if size == 0 || rest.len() < size {
            break;
        }
        out.extend_from_slice(&rest[..size]);
        rest = rest.get(size + 2..).unwrap_or_default();
    }
    out
}
