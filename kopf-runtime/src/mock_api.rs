//! A scripted in-process Kubernetes API for unit tests of the async modules:
//! a `tower` service behind a real `kube::Client`, so requests and answers
//! go through kube's own URL building, JSON and watch-line parsing. Unlike
//! the emulator of kopf-testing, it involves no network and no server
//! tasks, so these tests run with tokio's paused clock and script exact
//! answers (a hanging watch, a failure at the third request).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// One recorded request.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub(crate) method: String,
    /// Path and query, e.g. `/api/v1/pods?watch=true&resourceVersion=5`.
    pub(crate) uri: String,
    pub(crate) body: Value,
}

/// How the mock answers one request.
pub(crate) enum Reply {
    /// A JSON answer with this HTTP status code.
    Json(u16, Value),
    /// A watch stream of these events; then it ends.
    Events(Vec<Value>),
    /// A watch stream of these events; then it stays open and silent.
    EventsThenHang(Vec<Value>),
    /// A watch stream fed by the test; it ends when the sender is dropped.
    Channel(mpsc::UnboundedReceiver<Value>),
    /// The reply, once this long has passed (on tokio's clock).
    After(std::time::Duration, Box<Reply>),
}

pub(crate) type Handler = dyn Fn(&Recorded) -> Reply + Send + Sync;

/// A kube client answered by `handler`, and the log of requests it got.
pub(crate) fn client(
    handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
) -> (kube::Client, Arc<Mutex<Vec<Recorded>>>) {
    let log: Arc<Mutex<Vec<Recorded>>> = Arc::default();
    let handler: Arc<Handler> = Arc::new(handler);
    let service_log = log.clone();
    let service = tower::service_fn(move |req: Request<kube::client::Body>| {
        let handler = handler.clone();
        let log = service_log.clone();
        async move {
            let (parts, body) = req.into_parts();
            let bytes = body
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let recorded = Recorded {
                method: parts.method.to_string(),
                uri: parts
                    .uri
                    .path_and_query()
                    .map(|pq| pq.to_string())
                    .unwrap_or_default(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            log.lock().expect("not poisoned").push(recorded.clone());
            let mut reply = handler(&recorded);
            while let Reply::After(delay, later) = reply {
                tokio::time::sleep(delay).await;
                reply = *later;
            }
            Ok::<_, Infallible>(respond(reply))
        }
    });
    (kube::Client::new(service, "default"), log)
}

fn line(value: Value) -> Result<Frame<Bytes>, Infallible> {
    let mut bytes = serde_json::to_vec(&value).expect("serializable");
    bytes.push(b'\n');
    Ok(Frame::data(Bytes::from(bytes)))
}

fn respond(reply: Reply) -> Response<BoxBody<Bytes, Infallible>> {
    let (code, body) =
        match reply {
            Reply::Json(code, value) => (
                code,
                BodyExt::boxed(Full::new(Bytes::from(
                    serde_json::to_vec(&value).expect("serializable"),
                ))),
            ),
            Reply::Events(events) => (
                200,
                BodyExt::boxed(StreamBody::new(futures::stream::iter(events).map(line))),
            ),
            Reply::EventsThenHang(events) => {
                let stream = futures::stream::iter(events)
                    .map(line)
                    .chain(futures::stream::pending());
                (200, BodyExt::boxed(StreamBody::new(stream)))
            }
            Reply::Channel(rx) => {
                let stream = futures::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|v| (v, rx))
                });
                (200, BodyExt::boxed(StreamBody::new(stream.map(line))))
            }
            Reply::After(_, reply) => return respond(*reply),
        };
    Response::builder()
        .status(code)
        .body(body)
        .expect("valid response")
}

/// A Kubernetes `Status` answer with `code` and `retryAfterSeconds`.
pub(crate) fn status(code: u16, reason: &str, retry_after: u32) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("mock {code}"), "reason": reason, "code": code,
        "details": {"retryAfterSeconds": retry_after},
    })
}

/// A list answer.
pub(crate) fn list(items: Vec<Value>, resource_version: &str) -> Reply {
    Reply::Json(
        200,
        json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": resource_version}, "items": items}),
    )
}

/// A KopfExample object.
pub(crate) fn example(ns: &str, name: &str, uid: &str, rv: &str) -> Value {
    json!({
        "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": rv},
        "spec": {},
    })
}

/// A watch event line.
pub(crate) fn event(kind: &str, object: Value) -> Value {
    json!({"type": kind, "object": object})
}

/// The resource of [`example`] objects.
pub(crate) fn example_resource() -> kube::core::ApiResource {
    let gvk = kube::core::GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample");
    kube::core::ApiResource::from_gvk_with_plural(&gvk, "kopfexamples")
}
