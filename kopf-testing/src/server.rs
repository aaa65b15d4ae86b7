//! The HTTP server: accepting connections and serving them until told to stop.
//!
//! Each generation of the server (between restarts) owns a cancellation token
//! and a task tracker; stopping cancels the token, which drops the listener and
//! every connection (keep-alive and watches included), then waits for the tasks.
//!
//! No client can hold the server: once the first byte of a request arrives,
//! its headers must follow within the header-read timeout; a connection with
//! no request in flight (and none begun) is closed after the idle timeout (a
//! watch streaming its response is a request in flight), as Go's
//! `ReadHeaderTimeout` and `IdleTimeout` do for the API server;
//! and at most [`ConnectionLimits::max_connections`] connections are served at
//! once: at the cap (or when the process runs out of file descriptors) the
//! connection idle the longest is closed to make room, and when every
//! connection is busy the newcomer is answered `503` and closed.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::EmulatorError;
use crate::failures::ApiError;
use crate::handlers;
use crate::refusals::StatusOnRefusal;
use crate::shared::Shared;

/// Default for [`ConnectionLimits::header_read_timeout`].
pub(crate) const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Default for [`ConnectionLimits::idle_timeout`] (longer than the 90 s kube
/// clients keep idle connections, so that clients close them first).
pub(crate) const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Default for [`ConnectionLimits::max_connections`].
pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// How the server bounds connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnectionLimits {
    /// How long a client may take to send a request's headers, from their
    /// first byte.
    pub header_read_timeout: Duration,
    /// How long a connection may stay open with no request in flight.
    pub idle_timeout: Duration,
    /// How many connections are served at once.
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// What the server knows of one open connection.
#[derive(Debug)]
struct Connection {
    /// Requests whose response has not been sent in full.
    in_flight: AtomicUsize,
    /// When the last request ended (or the connection opened).
    last_active: Mutex<Instant>,
    /// When the first byte of a request not yet in flight arrived.
    head_since: Mutex<Option<Instant>>,
    /// When to close the connection unless its requests in flight end
    /// first (a watch that fell too far behind).
    stalled_until: Mutex<Option<Instant>>,
    /// Wakes the connection's task when `stalled_until` is set.
    stall: tokio::sync::Notify,
    /// Whether the last write to the socket could not go on (the client
    /// does not read).
    write_blocked: AtomicBool,
    /// Closes the connection.
    close: CancellationToken,
}

impl Connection {
    fn new(close: CancellationToken) -> Self {
        Self {
            in_flight: AtomicUsize::new(0),
            last_active: Mutex::new(Instant::now()),
            head_since: Mutex::new(None),
            stalled_until: Mutex::new(None),
            stall: tokio::sync::Notify::new(),
            write_blocked: AtomicBool::new(false),
            close,
        }
    }

    /// Whether a response stalled past its grace: one is still in flight,
    /// or its end still waits for the client to read. Forgets a stall the
    /// client read past.
    fn stalled(&self, now: Instant) -> bool {
        let mut until = self
            .stalled_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if until.is_none_or(|d| d > now) {
            return false;
        }
        let stalled = self.in_flight.load(Ordering::Acquire) > 0
            || self.write_blocked.load(Ordering::Acquire);
        if !stalled {
            *until = None;
        }
        stalled
    }

    /// Notes whether a write to the socket went on.
    fn note_write<T>(&self, polled: &Poll<std::io::Result<T>>) {
        self.write_blocked
            .store(polled.is_pending(), Ordering::Release);
    }

    /// When the connection is to be closed for a stalled response, if it is.
    fn stalled_until(&self) -> Option<Instant> {
        *self
            .stalled_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes arrived: with no request in flight they begin one.
    fn note_read(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0 {
            self.head_since
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert_with(Instant::now);
        }
    }

    /// When the connection is to be closed unless a request gets in flight:
    /// headers begun must end within the header-read timeout, and a
    /// connection with nothing begun is idle. None while a request is in flight.
    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        let idle_since = self.idle_since()?;
        let head_since = *self
            .head_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Some(match head_since {
            Some(at) => at + limits.header_read_timeout,
            None => idle_since + limits.idle_timeout,
        })
    }

    fn idle_since(&self) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(
            *self
                .last_active
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }
}

/// Counts a request in flight until its response body is sent or dropped.
#[derive(Debug)]
struct InFlight(Arc<Connection>);

impl InFlight {
    fn new(conn: Arc<Connection>) -> Self {
        conn.in_flight.fetch_add(1, Ordering::AcqRel);
        // The headers are in: the request is no longer being read.
        *conn
            .head_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        Self(conn)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        *self
            .0
            .last_active
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How long a watch that fell too far behind has to take the end of its
/// stream before its connection is closed.
const STALL_GRACE: Duration = Duration::from_secs(1);

/// Closes the connection a request came over (in the request's
/// extensions) when its client stopped reading.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionCloser(Arc<Connection>);

impl ConnectionCloser {
    /// Closes the connection unless, within a grace period, the response
    /// in flight ends and its client reads on: a watch that fell too far
    /// behind ends cleanly for a client still reading, and a client that
    /// stopped reading is cut off.
    pub(crate) fn close_if_stalled(&self) {
        *self
            .0
            .stalled_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now() + STALL_GRACE);
        self.0.stall.notify_one();
    }
}

/// A response body that keeps its request counted as in flight.
struct TrackedBody {
    inner: Body,
    _in_flight: InFlight,
}

impl http_body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A socket that tells its connection when bytes arrive (the answers
/// hyper writes by itself get their `Status` bodies from
/// [`StatusOnRefusal`] around it).
struct WatchedStream {
    inner: tokio::net::TcpStream,
    conn: Arc<Connection>,
}

impl WatchedStream {
    fn new(inner: tokio::net::TcpStream, conn: Arc<Connection>) -> Self {
        Self { inner, conn }
    }
}

impl AsyncRead for WatchedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.conn.note_read();
        }
        polled
    }
}

impl AsyncWrite for WatchedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.conn.note_write(&polled);
        polled
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.conn.note_write(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The open connections of one server generation.
#[derive(Debug, Default)]
struct Registry {
    next_id: u64,
    open: HashMap<u64, Arc<Connection>>,
}

impl Registry {
    /// Closes the connection idle the longest; false if every one is busy.
    fn evict_idlest(&mut self) -> bool {
        let idlest = self
            .open
            .iter()
            .filter_map(|(id, c)| c.idle_since().map(|at| (at, *id)))
            .min();
        match idlest.and_then(|(_, id)| self.open.remove(&id)) {
            Some(conn) => {
                conn.close.cancel();
                true
            }
            None => false,
        }
    }
}

/// How long a refused connection is given to take its `503`.
const REFUSE_TIMEOUT: Duration = Duration::from_secs(1);

/// The raw answer to a connection over the cap when none can be closed.
fn busy_response() -> Vec<u8> {
    let err = ApiError::new(
        503,
        "ServiceUnavailable",
        "the emulator serves too many connections, all of them busy; close some or raise the connection limit",
    );
    raw_status_response(&err, "retry-after: 1\r\n")
}

/// A whole HTTP/1.1 answer carrying a `Status`, closing the connection.
fn raw_status_response(err: &ApiError, extra_headers: &str) -> Vec<u8> {
    let body = serde_json::to_vec(&err.to_status()).unwrap_or_default();
    let reason = http::StatusCode::from_u16(err.code)
        .ok()
        .and_then(|c| c.canonical_reason())
        .unwrap_or("Error");
    let mut out = format!(
        "HTTP/1.1 {} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra_headers}connection: close\r\n\r\n",
        err.code,
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// One running generation of the server.
#[derive(Debug)]
pub(crate) struct Running {
    cancel: CancellationToken,
    tracker: TaskTracker,
}

impl Running {
    /// Stops accepting, closes every connection and waits for the tasks to end.
    pub(crate) async fn stop(self) {
        self.cancel.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }

    /// Signals the tasks to stop without waiting (for `Drop`).
    pub(crate) fn signal_stop(&self) {
        self.cancel.cancel();
        self.tracker.close();
    }
}

/// Binds `addr`, retrying briefly if the port is still held (after a restart).
pub(crate) async fn bind(addr: SocketAddr, retries: u32) -> Result<TcpListener, EmulatorError> {
    let mut attempt = 0;
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(source) if attempt >= retries || source.kind() != std::io::ErrorKind::AddrInUse => {
                return Err(EmulatorError::Bind { addr, source });
            }
            Err(_) => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Serves connections from `listener` until stopped.
pub(crate) fn spawn(listener: TcpListener, shared: Arc<Shared>) -> Running {
    let cancel = CancellationToken::new();
    let tracker = TaskTracker::new();
    let accept_cancel = cancel.clone();
    let accept_tracker = tracker.clone();
    let limits = shared.connection_limits;
    let registry = Arc::new(Mutex::new(Registry::default()));
    tracker.spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = accept_cancel.cancelled() => break,
                accepted = listener.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors (or similar): make room.
                    tracing::debug!(error = %e, "emulator: accept failed");
                    registry
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .evict_idlest();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let conn = Arc::new(Connection::new(accept_cancel.child_token()));
            let id = {
                let mut reg = registry.lock().unwrap_or_else(PoisonError::into_inner);
                if reg.open.len() >= limits.max_connections.max(1) && !reg.evict_idlest() {
                    drop(reg);
                    tracing::debug!("emulator: every connection busy, refusing one");
                    accept_tracker.spawn(refuse(stream));
                    continue;
                }
                reg.next_id += 1;
                let id = reg.next_id;
                reg.open.insert(id, conn.clone());
                id
            };
            let shared = shared.clone();
            let registry = registry.clone();
            accept_tracker.spawn(async move {
                serve_connection(stream, shared, conn.clone(), limits).await;
                registry
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .open
                    .remove(&id);
            });
        }
    });
    Running { cancel, tracker }
}

/// Answers `503` to a connection over the cap, and reads what the client
/// sent (for a second at most) so that closing does not reset the answer.
async fn refuse(mut stream: tokio::net::TcpStream) {
    let answer = async {
        stream.write_all(&busy_response()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    };
    let _ = tokio::time::timeout(REFUSE_TIMEOUT, answer).await;
}

/// Serves one connection until it ends, is closed, or stays idle too long.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    shared: Arc<Shared>,
    conn: Arc<Connection>,
    limits: ConnectionLimits,
) {
    let service_conn = conn.clone();
    let service = service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
        let shared = shared.clone();
        let in_flight = InFlight::new(service_conn.clone());
        req.extensions_mut()
            .insert(ConnectionCloser(service_conn.clone()));
        async move {
            let resp = handlers::handle(shared, req).await;
            Ok::<_, Infallible>(resp.map(|inner| TrackedBody {
                inner,
                _in_flight: in_flight,
            }))
        }
    });
    // Hyper's own header timeout would also run while a kept-alive
    // connection waits for its next request: the deadlines below replace it.
    let stream = WatchedStream::new(stream, conn.clone());
    let http = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .keep_alive(true)
        .serve_connection(TokioIo::new(StatusOnRefusal::new(stream)), service);
    tokio::pin!(http);
    loop {
        // Look again at least every header-read timeout: a request may begin
        // (and must then end its headers in time) or get in flight meanwhile.
        let next_look = Instant::now() + limits.header_read_timeout;
        let deadline = conn
            .deadline(&limits)
            .into_iter()
            .chain(conn.stalled_until())
            .fold(next_look, Instant::min);
        tokio::select! {
            result = &mut http => {
                if let Err(e) = result {
                    tracing::trace!(error = %e, "emulator: connection ended");
                }
                return;
            }
            _ = conn.close.cancelled() => return,
            _ = conn.stall.notified() => {}
            _ = tokio::time::sleep_until(deadline) => {
                let now = Instant::now();
                if conn.deadline(&limits).is_some_and(|d| d <= now) {
                    tracing::trace!("emulator: closing an idle or stalled connection");
                    return;
                }
                if conn.stalled(now) {
                    tracing::debug!("emulator: closing a watch that stopped reading");
                    return;
                }
            }
        }
    }
}
