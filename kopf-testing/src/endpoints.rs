//! Reading an operator's HTTP endpoints (liveness, readiness, metrics)
//! from tests, without an HTTP client crate.

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// A `GET` of a plain-HTTP `url` (`http://127.0.0.1:PORT/path`) over a new
/// connection: the status code and the body. HTTP/1.0, so that the answer
/// is never chunked.
///
/// # Errors
/// The connection's error; [`std::io::ErrorKind::InvalidData`] for a URL
/// that is not `http://` or an answer without a status line.
pub async fn http_get(url: &str) -> std::io::Result<(u16, String)> {
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| invalid(format!("not an http:// URL: {url}")))?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let mut stream = tokio::net::TcpStream::connect(authority).await?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {authority}\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| invalid(format!("no status line in {head:?}")))?;
    Ok((status, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_the_status_and_body_of_an_answer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds");
        let url = format!(
            "http://{}/healthz",
            listener.local_addr().expect("an address")
        );
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("a connection");
            let mut request = [0; 256];
            let n = stream.read(&mut request).await.expect("a request");
            let line = String::from_utf8_lossy(&request[..n])
                .lines()
                .next()
                .map(str::to_owned);
            stream
                .write_all(b"HTTP/1.0 503 Service Unavailable\r\n\r\n{\"ready\":false}")
                .await
                .expect("answered");
            line
        });
        let answer = http_get(&url).await.expect("an answer");
        assert_eq!(answer, (503, "{\"ready\":false}".to_owned()));
        assert_eq!(
            server.await.expect("served").as_deref(),
            Some("GET /healthz HTTP/1.0")
        );
        assert!(http_get("https://127.0.0.1:1/").await.is_err());
    }
}
