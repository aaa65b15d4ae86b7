//! The bodies the API answers with: `Status` failures, objects, and lists.
//!
//! A list is serialized as its client reads it: the `…List` head and the
//! first items at once, the rest item by item, a chunk at a time, so that a
//! list held by a client that does not read keeps only its snapshot of
//! (shared) objects, not a serialized copy of the collection.

use std::sync::Arc;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Value, json};

use crate::failures::ApiError;
use crate::resources::ResourceDef;

/// A list's items are serialized this many bytes at a time (or one item, if
/// larger).
const CHUNK: usize = 64 * 1024;

/// A JSON response.
pub(crate) fn json_response(code: u16, body: &Value) -> Response<Body> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    bytes_response(code, Bytes::from(bytes))
}

/// A JSON response of bytes already serialized.
pub(crate) fn bytes_response(code: u16, bytes: Bytes) -> Response<Body> {
    json_body_response(code, Body::from(bytes))
}

fn json_body_response(code: u16, body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// A `Status` response for a failure (with `Retry-After` when set).
pub(crate) fn error_response(err: &ApiError) -> Response<Body> {
    let mut resp = json_response(err.code, &err.to_status());
    if let Some(secs) = err.retry_after
        && let Ok(v) = HeaderValue::from_str(&secs.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

/// An object as seen through `def`'s version.
pub(crate) fn object_response(code: u16, def: &ResourceDef, obj: &Value) -> Response<Body> {
    let mut buf = Vec::with_capacity(512);
    write_object(&mut buf, &def.api_version(), obj);
    bytes_response(code, Bytes::from(buf))
}

/// Serializes an object as seen through `api_version`.
fn write_object(buf: &mut Vec<u8>, api_version: &str, obj: &Value) {
    let view = crate::conversion::present(obj, api_version);
    if serde_json::to_writer(&mut *buf, &*view).is_err() {
        buf.extend_from_slice(b"null");
    }
}

/// A list's items not yet serialized.
struct Items {
    api_version: String,
    rest: std::vec::IntoIter<Arc<Value>>,
    started: bool,
    ended: bool,
}

impl Items {
    /// Serializes items into `buf` until it holds [`CHUNK`] bytes, and the
    /// list's end after the last; `false` once everything was written.
    fn fill(&mut self, buf: &mut Vec<u8>) -> bool {
        if self.ended {
            return false;
        }
        while buf.len() < CHUNK {
            let Some(item) = self.rest.next() else {
                buf.extend_from_slice(b"]}");
                self.ended = true;
                break;
            };
            if std::mem::replace(&mut self.started, true) {
                buf.push(b',');
            }
            write_object(buf, &self.api_version, &item);
        }
        true
    }
}

/// A `…List` of `items` at `rv`, serialized as the client reads it.
pub(crate) fn list_response(
    def: &ResourceDef,
    items: Vec<Arc<Value>>,
    rv: u64,
    continue_token: Option<String>,
    remaining: Option<usize>,
) -> Response<Body> {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(token) = continue_token {
        metadata["continue"] = token.into();
    }
    if let Some(n) = remaining {
        metadata["remainingItemCount"] = n.into();
    }
    let head = json!({"kind": format!("{}List", def.kind), "apiVersion": def.api_version(), "metadata": metadata});
    let mut first = serde_json::to_vec(&head).unwrap_or_default();
    first.pop(); // the closing brace
    first.extend_from_slice(b",\"items\":[");
    let mut items = Items {
        api_version: def.api_version(),
        rest: items.into_iter(),
        started: false,
        ended: false,
    };
    items.fill(&mut first);
    if items.ended {
        return bytes_response(200, Bytes::from(first));
    }
    let rest = futures::stream::unfold(items, |mut items| async move {
        let mut buf = Vec::with_capacity(CHUNK);
        items
            .fill(&mut buf)
            .then(|| (Ok::<_, std::convert::Infallible>(Bytes::from(buf)), items))
    });
    let first = futures::stream::once(async move { Ok(Bytes::from(first)) });
    json_body_response(
        200,
        Body::from_stream(futures::StreamExt::chain(first, rest)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn list_of(n: usize, size: usize) -> (Option<u64>, Value) {
        let def = crate::resources::builtins()
            .into_iter()
            .find(|d| d.group.is_empty() && d.plural == "configmaps")
            .unwrap();
        let items = (0..n)
            .map(|i| {
                Arc::new(
                    json!({"metadata": {"name": i.to_string()}, "data": {"k": "x".repeat(size)}}),
                )
            })
            .collect();
        let resp = list_response(&def, items, 7, Some("c".into()), Some(3));
        let length = http_body::Body::size_hint(resp.body()).exact();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (length, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn small_lists_are_sent_whole_and_large_ones_in_chunks() {
        let (length, small) = list_of(3, 10).await;
        assert!(length.is_some(), "a small list has a length");
        assert_eq!(small["kind"], "ConfigMapList");
        assert_eq!(small["metadata"]["continue"], "c");
        assert_eq!(small["metadata"]["remainingItemCount"], 3);
        assert_eq!(small["items"].as_array().unwrap().len(), 3);
        let (length, large) = list_of(100, 10_000).await;
        assert!(length.is_none(), "a large list is streamed");
        let names: Vec<&str> = large["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.len(), 100);
        assert_eq!(names[99], "99");
        let (_, empty) = list_of(0, 0).await;
        assert_eq!(empty["items"], json!([]));
    }
}
