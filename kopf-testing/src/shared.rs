//! State shared by the server tasks, the request handlers and the handles.

use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::faults::FaultState;
use crate::recording::Recorder;
use crate::server::ConnectionLimits;
use crate::store::Store;

/// Everything the handlers need.
#[derive(Debug)]
pub(crate) struct Shared {
    store: Mutex<Store>,
    /// Fault rules and latency.
    pub(crate) faults: FaultState,
    /// Recorded requests.
    pub(crate) recorder: Recorder,
    /// Bumped to end every open watch stream.
    watch_epoch: tokio::sync::watch::Sender<u64>,
    /// The listening port (for discovery's serverAddressByClientCIDRs).
    pub(crate) port: u16,
    /// Timeouts and the cap on connections.
    pub(crate) connection_limits: ConnectionLimits,
}

impl Shared {
    /// Shared state around a store.
    pub(crate) fn new(store: Store, port: u16) -> Self {
        Self {
            store: Mutex::new(store),
            faults: FaultState::default(),
            recorder: Recorder::default(),
            watch_epoch: tokio::sync::watch::channel(0).0,
            port,
            connection_limits: ConnectionLimits::default(),
        }
    }

    /// Locks the store (a panic in another request does not poison it for good).
    pub(crate) fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Ends every open watch stream.
    pub(crate) fn drop_watches(&self) {
        self.watch_epoch.send_modify(|e| *e += 1);
    }

    /// A receiver that changes when watches must end.
    pub(crate) fn watch_epoch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.watch_epoch.subscribe()
    }
}
