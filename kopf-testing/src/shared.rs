//! State shared by the server tasks, the request handlers and the handles.

use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock};

use crate::admission::Admission;
use crate::faults::FaultState;
use crate::rbac::Rbac;
use crate::recording::Recorder;
use crate::server::ConnectionLimits;
use crate::store::Store;

/// The paths anyone may read, authenticated or not (the API server's
/// `system:public-info-viewer` role).
const PUBLIC_INFO_PATHS: [&str; 5] = ["/healthz", "/livez", "/readyz", "/version", "/version/"];

/// The token of an `Authorization` header, as the API server's bearer
/// authenticator reads it: the scheme `Bearer` in any case, the token up to
/// the next space; `None` when there is no bearer token (anonymous).
pub(crate) fn bearer_token(header: &[u8]) -> Option<&[u8]> {
    let mut parts = header.trim_ascii().splitn(3, |b| *b == b' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case(b"bearer") && !token.is_empty()).then_some(token)
}

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
    /// Whether watch streams send nothing (kept open, silent).
    watch_silence: tokio::sync::watch::Sender<bool>,
    /// The listening port (for discovery's serverAddressByClientCIDRs).
    pub(crate) port: u16,
    /// Timeouts and the cap on connections.
    pub(crate) connection_limits: ConnectionLimits,
    /// The bearer token every API request must carry, if one is required.
    token: RwLock<Option<String>>,
    /// The admission chain's state.
    pub(crate) admission: Admission,
    /// Authentication and RBAC, when enforced; minted tokens and the
    /// record of decisions.
    pub(crate) rbac: Rbac,
    /// Asks the running emulator to restart, keeping its state, with the
    /// port closed for the given time (`POST /_emulator/restart`).
    pub(crate) restarts: Option<tokio::sync::mpsc::UnboundedSender<std::time::Duration>>,
}

impl Shared {
    /// Shared state around a store.
    pub(crate) fn new(store: Store, port: u16) -> Self {
        let admission = Admission::new(store.admission_tracker());
        Self {
            admission,
            store: Mutex::new(store),
            faults: FaultState::default(),
            recorder: Recorder::default(),
            watch_epoch: tokio::sync::watch::channel(0).0,
            watch_silence: tokio::sync::watch::channel(false).0,
            port,
            connection_limits: ConnectionLimits::default(),
            token: RwLock::new(None),
            rbac: Rbac::default(),
            restarts: None,
        }
    }

    /// The bearer token API requests must carry, if one is required.
    pub(crate) fn token(&self) -> Option<String> {
        self.token
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Requires `token` from now on (`None`: no token needed).
    pub(crate) fn set_token(&self, token: Option<String>) {
        *self.token.write().unwrap_or_else(PoisonError::into_inner) = token;
    }

    /// Whether a request for `path` with this `Authorization` header may be
    /// served: with the required bearer token, or anonymously (no bearer
    /// token at all) for what a cluster lets anyone read
    /// (`system:public-info-viewer`). A wrong token is refused everywhere,
    /// as the API server does not fall back to anonymous for it.
    pub(crate) fn authorized(&self, authorization: Option<&[u8]>, path: &str) -> bool {
        let token = self.token.read().unwrap_or_else(PoisonError::into_inner);
        let Some(token) = token.as_deref() else {
            return true;
        };
        match authorization.and_then(bearer_token) {
            Some(given) => given == token.as_bytes(),
            None => PUBLIC_INFO_PATHS.contains(&path),
        }
    }

    /// Locks the store (a panic in another request does not poison it for
    /// good); what the store let go of meanwhile is freed once unlocked.
    pub(crate) fn store(&self) -> StoreGuard<'_> {
        StoreGuard(Some(
            self.store.lock().unwrap_or_else(PoisonError::into_inner),
        ))
    }

    /// Ends every open watch stream.
    pub(crate) fn drop_watches(&self) {
        self.watch_epoch.send_modify(|e| *e += 1);
    }

    /// A receiver that changes when watches must end.
    pub(crate) fn watch_epoch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.watch_epoch.subscribe()
    }

    /// Makes every watch stream, open or new, send nothing (`true`) or
    /// carry on (`false`).
    pub(crate) fn silence_watches(&self, silent: bool) {
        self.watch_silence
            .send_if_modified(|s| std::mem::replace(s, silent) != silent);
    }

    /// A receiver of whether watch streams are silenced.
    pub(crate) fn watch_silence(&self) -> tokio::sync::watch::Receiver<bool> {
        self.watch_silence.subscribe()
    }
}

/// The locked store; unlocking frees what the store let go of meanwhile
/// (objects, events, whole resources), after the lock is released.
#[derive(Debug)]
pub(crate) struct StoreGuard<'a>(Option<MutexGuard<'a, Store>>);

impl Deref for StoreGuard<'_> {
    type Target = Store;

    fn deref(&self) -> &Store {
        self.0.as_ref().expect("invariant: held until dropped")
    }
}

impl DerefMut for StoreGuard<'_> {
    fn deref_mut(&mut self) -> &mut Store {
        self.0.as_mut().expect("invariant: held until dropped")
    }
}

impl Drop for StoreGuard<'_> {
    fn drop(&mut self) {
        if let Some(mut store) = self.0.take() {
            let released = store.take_released();
            drop(store);
            drop(released);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_as_the_api_server_reads_them() {
        assert_eq!(bearer_token(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"  BEARER abc extra "), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"Bearer "), None);
        assert_eq!(bearer_token(b"Bearer  abc"), None);
        assert_eq!(bearer_token(b"Basic abc"), None);
    }

    #[test]
    fn public_information_needs_no_token() {
        let shared = Shared::new(Store::new(10), 0);
        shared.set_token(Some("t".into()));
        assert!(shared.authorized(None, "/version"));
        assert!(shared.authorized(Some(b"Basic x"), "/healthz"));
        assert!(!shared.authorized(Some(b"Bearer wrong"), "/healthz"));
        assert!(!shared.authorized(None, "/api"));
        assert!(!shared.authorized(None, "/healthz/ping"));
        assert!(shared.authorized(Some(b"bearer t"), "/api"));
    }
}
