//! [`LiveBody`]: the object of a daemon or timer as it is now.

use std::sync::{Arc, Mutex, PoisonError};

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{Notify, watch};

use super::body::EncodedBody;
use crate::model::errors::KwargError;

/// The body of a daemon's or timer's object as it is now (Kopf's live
/// `body`), the `live` parameter.
///
/// `body`, `spec`, `status` and the other object parameters are the body
/// as it was when the call began: a daemon that runs for days would see
/// its object as it was at its start. `live` follows the object: the
/// runtime updates it whenever it processes an event of the object (before
/// the object's change handlers run).
///
/// Cloning is cheap; each clone keeps its own track of what it has seen.
///
/// ```
/// use kopf_runtime as kopf;
/// use k8s_openapi::api::core::v1::Pod;
///
/// #[kopf::daemon(Pod)]
/// async fn follow(mut live: kopf::LiveBody, stopped: kopf::Stopped, logger: &kopf::Logger) {
///     while !stopped.is_set() {
///         let phase = live.get()["status"]["phase"].as_str().map(str::to_owned);
///         logger.info(format!("the pod is {phase:?}"));
///         tokio::select! {
///             () = live.changed() => {}
///             () = stopped.cancelled() => {}
///         }
///     }
/// }
/// # fn main() {}
/// ```
#[derive(Debug, Clone)]
pub struct LiveBody(Source);

/// Where the bodies come from: a channel of values (for tests and
/// embedding), or the runtime's channel of the object's body as text.
#[derive(Debug, Clone)]
enum Source {
    Values(watch::Receiver<Arc<Value>>),
    Encoded(BodyReader),
}

/// An object's latest body, kept as text, for its tasks: written by the
/// spawner as the object's events arrive, read by each call. One per
/// object with tasks: about 80 bytes, where a `watch` channel takes 350.
#[derive(Debug)]
pub(crate) struct BodyCell {
    /// The body and how many bodies came before it.
    current: Mutex<(u64, EncodedBody)>,
    changed: Notify,
}

impl BodyCell {
    pub(crate) fn new(body: EncodedBody) -> Arc<Self> {
        Arc::new(Self {
            current: Mutex::new((0, body)),
            changed: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, EncodedBody)> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The latest body.
    pub(crate) fn get(&self) -> EncodedBody {
        self.lock().1.clone()
    }

    /// Replaces the body with `body` unless it is the same; returns whether
    /// it did. Readers waiting in [`BodyReader::changed`] wake up.
    pub(crate) fn replace(&self, body: EncodedBody) -> bool {
        {
            let mut current = self.lock();
            if current.1 == body {
                return false;
            }
            *current = (current.0 + 1, body);
        }
        self.changed.notify_waiters();
        true
    }

    /// A reader that has seen the latest body.
    pub(crate) fn reader(self: &Arc<Self>) -> BodyReader {
        BodyReader {
            seen: self.lock().0,
            cell: Arc::clone(self),
        }
    }
}

/// A task's view of its object's [`BodyCell`]: the latest body, and a wait
/// for a newer one than it has seen.
#[derive(Debug, Clone)]
pub(crate) struct BodyReader {
    cell: Arc<BodyCell>,
    seen: u64,
}

impl BodyReader {
    /// Reads the reference count of its object's body cell with a plain load, for
    /// `Run::warm` (in `spawning/runner.rs`): the value means nothing.
    pub(crate) fn warm(&self) -> usize {
        Arc::strong_count(&self.cell)
    }

    /// The latest body, now seen.
    pub(crate) fn read(&mut self) -> EncodedBody {
        let current = self.cell.lock();
        self.seen = current.0;
        current.1.clone()
    }

    /// The latest body, without marking it seen.
    pub(crate) fn peek(&self) -> EncodedBody {
        self.cell.get()
    }

    /// Completes once a body newer than the last one read (or seen at
    /// the reader's making) has arrived; marks it seen. Never completes
    /// once nothing writes any more.
    pub(crate) async fn changed(&mut self) {
        loop {
            let notified = self.cell.changed.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the check, so that a body written between
            // the check and the wait is not missed.
            notified.as_mut().enable();
            let version = self.cell.lock().0;
            if version != self.seen {
                self.seen = version;
                return;
            }
            notified.await;
        }
    }
}

impl LiveBody {
    /// A live body fed by `receiver`; [`changed`](Self::changed) waits for
    /// a value newer than the one the receiver last saw. The runtime makes
    /// one for each call of a daemon or timer; this is for tests of
    /// handlers and for embedding.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::sync::{Arc, Mutex, PoisonError};
    /// use serde_json::json;
    /// let (sender, receiver) = tokio::sync::watch::channel(Arc::new(json!({"spec": {"size": 1}})));
    /// let mut live = kopf_runtime::LiveBody::new(receiver);
    /// sender.send_replace(Arc::new(json!({"spec": {"size": 2}})));
    /// live.changed().await;
    /// assert_eq!(live.get()["spec"]["size"], 2);
    /// # }
    /// ```
    #[must_use]
    pub fn new(receiver: watch::Receiver<Arc<Value>>) -> Self {
        Self(Source::Values(receiver))
    }

    /// The runtime's: follows the body an object's tasks keep as text.
    pub(crate) fn encoded(reader: BodyReader) -> Self {
        Self(Source::Encoded(reader))
    }

    /// The freshest body: one reference count with [`new`](Self::new);
    /// decoded from the object's text in a daemon or timer.
    #[must_use]
    pub fn get(&self) -> Arc<Value> {
        match &self.0 {
            Source::Values(receiver) => Arc::clone(&receiver.borrow()),
            Source::Encoded(reader) => Arc::new(reader.peek().decode()),
        }
    }

    /// The freshest body, deserialized into `T` (e.g. the resource type).
    ///
    /// # Errors
    /// [`KwargError::Deserialize`] if the body does not fit `T`.
    pub fn get_as<T: DeserializeOwned>(&self) -> Result<T, KwargError> {
        T::deserialize(&*self.get()).map_err(|error| KwargError::Deserialize {
            kwarg: "live",
            type_name: std::any::type_name::<T>(),
            message: error.to_string(),
        })
    }

    /// Completes once a body newer than the last one this handle has waited
    /// for (at first: the one the call began with) has arrived; read it with
    /// [`get`](Self::get). Never completes once no change can come any more
    /// (the object is gone and its task is being stopped): wait for it
    /// together with the stop flag.
    pub async fn changed(&mut self) {
        match &mut self.0 {
            Source::Values(receiver) => {
                if receiver.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            Source::Encoded(reader) => reader.changed().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn changed_waits_for_a_newer_body_and_never_completes_once_none_can_come() {
        let (sender, receiver) = watch::channel(Arc::new(json!({"n": 1})));
        let mut live = LiveBody::new(receiver);
        let waited = tokio::time::timeout(Duration::from_secs(1), live.changed()).await;
        assert!(waited.is_err(), "nothing newer yet");
        sender.send_replace(Arc::new(json!({"n": 2})));
        live.changed().await;
        assert_eq!(live.get(), Arc::new(json!({"n": 2})));
        assert_eq!(live.get_as::<Value>().ok(), Some(json!({"n": 2})));
        assert!(live.get_as::<u32>().is_err());
        drop(sender);
        let waited = tokio::time::timeout(Duration::from_secs(1), live.changed()).await;
        assert!(waited.is_err(), "gone: pending, not a busy loop");
        assert_eq!(live.get(), Arc::new(json!({"n": 2})), "the last body stays");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_cell_wakes_its_readers_for_a_different_body_only() {
        let encoded = |n: u32| EncodedBody::new(&json!({"n": n}));
        let cell = BodyCell::new(encoded(1));
        let mut live = LiveBody::encoded(cell.reader());
        let mut waiting = tokio::spawn({
            let mut reader = cell.reader();
            async move { reader.changed().await }
        });
        tokio::task::yield_now().await;
        assert!(!cell.replace(encoded(1)), "the same body is no change");
        let early = tokio::time::timeout(Duration::from_secs(1), &mut waiting).await;
        assert!(early.is_err(), "not woken by the same body");
        assert!(cell.replace(encoded(2)));
        waiting.await.expect("woken");
        live.changed().await;
        assert_eq!(live.get(), Arc::new(json!({"n": 2})));
        let waited = tokio::time::timeout(Duration::from_secs(1), live.changed()).await;
        assert!(waited.is_err(), "seen: nothing newer");
        drop(cell);
        let waited = tokio::time::timeout(Duration::from_secs(1), live.changed()).await;
        assert!(waited.is_err(), "no writer: pending, not a busy loop");
    }
}
