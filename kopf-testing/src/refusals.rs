//! `Status` bodies for requests refused before they reach the handlers.
//!
//! The HTTP layer answers a request line it cannot parse (400), a URI longer
//! than it accepts (414) or headers larger than it buffers (431) by itself,
//! with an empty body. [`StatusOnRefusal`] wraps each connection's socket and
//! replaces such an answer, as it is written, by the same code with a
//! Kubernetes `Status` body, so clients see the failure as they see every
//! other. The connection closes after it, as it did before.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::failures::ApiError;

/// The longest request URI the HTTP layer accepts.
pub(crate) const MAX_URI_LEN: usize = 65_534;

/// The longest automatic answer (a status line and a few headers).
const MAX_AUTOMATIC_ANSWER: usize = 512;

/// A socket whose empty automatic error answers get a `Status` body.
#[derive(Debug)]
pub(crate) struct StatusOnRefusal<S> {
    inner: S,
    /// A replacement answer still to be written, and how much of it was.
    pending: Option<(Bytes, usize)>,
}

impl<S> StatusOnRefusal<S> {
    /// Wraps a connection's socket.
    pub(crate) fn new(inner: S) -> Self {
        Self {
            inner,
            pending: None,
        }
    }
}

/// The failure an automatic answer stands for, if `head` is one: a status
/// line for 400, 414 or 431 and headers without a content type (every answer
/// of the handlers has one), and nothing after them.
fn refusal(head: &[u8]) -> Option<ApiError> {
    // Every write passes here: refuse anything else after a prefix check.
    if head.len() > MAX_AUTOMATIC_ANSWER {
        return None;
    }
    let code = head
        .strip_prefix(b"HTTP/1.1 ")
        .or_else(|| head.strip_prefix(b"HTTP/1.0 "))?
        .get(..3)?;
    if !matches!(code, b"400" | b"414" | b"431") {
        return None;
    }
    let text = std::str::from_utf8(head).ok()?;
    let (_, rest) = text.split_once("\r\n")?;
    if !rest.ends_with("\r\n\r\n") || rest.matches("\r\n\r\n").count() != 1 {
        return None;
    }
    if rest.to_ascii_lowercase().contains("content-type:") {
        return None;
    }
    Some(match code {
        b"400" => ApiError::bad_request(
            "the request could not be parsed as HTTP/1.1; check the request line and headers",
        ),
        b"414" => ApiError::new(
            414,
            "RequestURITooLong",
            format!(
                "the request URI is longer than the server accepts ({MAX_URI_LEN} bytes); \
                 send shorter selectors or split the request"
            ),
        ),
        b"431" => ApiError::new(
            431,
            "RequestHeaderFieldsTooLarge",
            "the request headers are larger than the server accepts; send fewer or shorter headers",
        ),
        _ => return None,
    })
}

/// The whole answer (head and `Status` body) for a refusal.
fn answer(err: &ApiError) -> Bytes {
    let body = serde_json::to_vec(&err.to_status()).unwrap_or_default();
    let reason = http::StatusCode::from_u16(err.code)
        .ok()
        .and_then(|c| c.canonical_reason())
        .unwrap_or("");
    let mut out = format!(
        "HTTP/1.1 {} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        err.code,
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    Bytes::from(out)
}

impl<S: AsyncWrite + Unpin> StatusOnRefusal<S> {
    /// Writes what is left of a replacement answer.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.pending {
            if *written >= bytes.len() {
                self.pending = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for StatusOnRefusal<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for StatusOnRefusal<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.drain(cx))?;
        if let Some(err) = refusal(buf) {
            self.pending = Some((answer(&err), 0));
            // The replacement stands for all of `buf`; what is not written
            // now is written by the next write, flush or shutdown.
            let _ = self.drain(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn only_automatic_refusals_are_recognised() {
        let auto = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        assert_eq!(refusal(auto).map(|e| e.code), Some(414));
        let auto = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(refusal(auto).map(|e| e.code), Some(431));
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n";
        assert_eq!(refusal(ours), None);
        let with_body = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(refusal(with_body), None);
        assert_eq!(refusal(b"HTTP/1.1 200 OK\r\n\r\n"), None);
        assert_eq!(refusal(b"{\"kind\":\"Status\"}"), None);
        let long = [
            b"HTTP/1.1 414 URI Too Long\r\nx: ".as_slice(),
            &[b'y'; 600],
            b"\r\n\r\n",
        ]
        .concat();
        assert_eq!(refusal(&long), None);
    }

    #[tokio::test]
    async fn a_refusal_is_rewritten_with_a_status_body() {
        let (client, server) = tokio::io::duplex(64);
        let mut wrapped = StatusOnRefusal::new(server);
        let writer = tokio::spawn(async move {
            wrapped
                .write_all(b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            wrapped.shutdown().await.unwrap();
        });
        let mut client = client;
        let mut out = Vec::new();
        client.read_to_end(&mut out).await.unwrap();
        writer.await.unwrap();
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{head}");
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let status: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["code"], 414);
    }
}
