//! What the operator's own HTTP/1.1 servers share: the liveness and
//! metrics endpoints (`endpoints`) and the admission webhook server
//! (`webhooks`). A URL to listen at ([`ListenUrl`]), the loop that accepts
//! connections until the operator exits ([`accept`]), and one connection
//! served until it ends or the operator exits ([`serve_connection`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::service::HttpService;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How many connections one listener serves at once; more wait.
const MAX_CONNECTIONS: usize = 64;

/// How long a client may take to send a request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long open connections get to finish when the operator exits.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// A URL to listen at, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListenUrl {
    /// Lowercase, IPv6 without brackets.
    pub(crate) host: String,
    pub(crate) port: u16,
    /// As written (empty for none).
    pub(crate) path: String,
}

/// How a server's URLs are written.
pub(crate) struct Scheme {
    /// `http` or `https`.
    pub(crate) name: &'static str,
    pub(crate) default_port: u16,
    /// A URL as it should be written, for messages.
    pub(crate) example: &'static str,
    /// Why another scheme is not served.
    pub(crate) only: &'static str,
}

impl ListenUrl {
    /// Parses `url` of `scheme`; the error says what is wrong and how to
    /// write it.
    pub(crate) fn parse(url: &str, scheme: &Scheme) -> Result<Self, String> {
        let uri: http::Uri = url
            .parse()
            .map_err(|_| format!("not a URL; write it as {}", scheme.example))?;
        match uri.scheme_str() {
            Some(name) if name == scheme.name => {}
            Some(_) => return Err(scheme.only.to_owned()),
            None => return Err(format!("no scheme; write it as {}", scheme.example)),
        }
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or("no host; write 0.0.0.0 for every interface")?;
        if uri.query().is_some() {
            return Err("a query is not served; drop it".to_owned());
        }
        Ok(Self {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_lowercase(),
            port: uri.port_u16().unwrap_or(scheme.default_port),
            path: uri.path().to_owned(),
        })
    }

    /// The host as written in a URL (IPv6 in brackets).
    pub(crate) fn url_host(&self) -> String {
        url_host(&self.host)
    }
}

/// `host` as written in a URL (IPv6 in brackets).
pub(crate) fn url_host(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

/// Serves one connection with `service` until it ends; once `stop` is
/// cancelled, the connection gets [`CLOSE_GRACE`] to finish what it is
/// answering.
pub(crate) async fn serve_connection<T, S>(io: T, service: S, stop: &CancellationToken)
where
    T: AsyncRead + AsyncWrite + Unpin,
    S: HttpService<Incoming>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::ResBody: 'static,
    <S::ResBody as Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(io), service);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        () = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(CLOSE_GRACE, connection).await;
        }
    }
}

/// Accepts connections on `listener` until `stop`, serving each with
/// `serve`, at most [`MAX_CONNECTIONS`] at once (more wait); then waits, a
/// little longer than the grace of each, until they have closed. `what`
/// names the server in logs.
pub(crate) async fn accept<F, Fut>(
    listener: TcpListener,
    stop: CancellationToken,
    what: &'static str,
    serve: F,
) where
    F: Fn(TcpStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let connections = TaskTracker::new();
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let slot = tokio::select! {
            () = stop.cancelled() => break,
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_closed) => break,
            },
        };
        let stream = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::debug!(%error, "a {what} connection failed");
                    continue;
                }
            },
        };
        let served = serve(stream);
        connections.spawn(async move {
            let _slot = slot;
            served.await;
        });
    }
    drop(listener);
    connections.close();
    if tokio::time::timeout(CLOSE_GRACE * 2, connections.wait())
        .await
        .is_err()
    {
        tracing::debug!("{what} connections did not close in time");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HTTP: Scheme = Scheme {
        name: "http",
        default_port: 80,
        example: "http://0.0.0.0:8080/healthz",
        only: "only http:// is served",
    };

    #[test]
    fn urls_are_taken_apart_with_the_schemes_default_port() {
        let url = ListenUrl::parse("http://0.0.0.0:8080/healthz", &HTTP).expect("valid");
        assert_eq!(
            (url.host.as_str(), url.port, url.path.as_str()),
            ("0.0.0.0", 8080, "/healthz")
        );
        let v6 = ListenUrl::parse("http://[::1]", &HTTP).expect("valid");
        assert_eq!(
            (v6.host.as_str(), v6.url_host(), v6.port),
            ("::1", "[::1]".to_owned(), 80)
        );
        for (bad, why) in [
            ("https://h", "only http://"),
            ("h:80", "no scheme"),
            ("http://h/?a=1", "a query"),
            ("::", "not a URL"),
        ] {
            let error = ListenUrl::parse(bad, &HTTP).expect_err(bad);
            assert!(error.starts_with(why), "{bad}: {error}");
        }
    }
}
