//! The HTTP server: accepting connections and serving them until told to stop.
//!
//! Each generation of the server (between restarts) owns a cancellation token
//! and a task tracker; stopping cancels the token, which drops the listener and
//! every connection (keep-alive and watches included), then waits for the tasks.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::EmulatorError;
use crate::handlers;
use crate::refusals::StatusOnRefusal;
use crate::shared::Shared;

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
    tracker.spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = accept_cancel.cancelled() => break,
                accepted = listener.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::debug!(error = %e, "emulator: accept failed");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let shared = shared.clone();
            let conn_cancel = accept_cancel.clone();
            accept_tracker.spawn(async move {
                let service = service_fn(move |req| {
                    let shared = shared.clone();
                    async move { Ok::<_, Infallible>(handlers::handle(shared, req).await) }
                });
                let conn = http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(StatusOnRefusal::new(stream)), service);
                tokio::select! {
                    result = conn => {
                        if let Err(e) = result {
                            tracing::trace!(error = %e, "emulator: connection ended");
                        }
                    }
                    _ = conn_cancel.cancelled() => {}
                }
            });
        }
    });
    Running { cancel, tracker }
}
