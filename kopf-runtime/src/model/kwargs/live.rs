//! [`LiveBody`]: the object of a daemon or timer as it is now.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::watch;

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
    Encoded(watch::Receiver<Arc<EncodedBody>>),
}

impl LiveBody {
    /// A live body fed by `receiver`; [`changed`](Self::changed) waits for
    /// a value newer than the one the receiver last saw. The runtime makes
    /// one for each call of a daemon or timer; this is for tests of
    /// handlers and for embedding.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::sync::Arc;
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
    pub(crate) fn encoded(receiver: watch::Receiver<Arc<EncodedBody>>) -> Self {
        Self(Source::Encoded(receiver))
    }

    /// The freshest body: one reference count with [`new`](Self::new);
    /// decoded from the object's text in a daemon or timer.
    #[must_use]
    pub fn get(&self) -> Arc<Value> {
        match &self.0 {
            Source::Values(receiver) => Arc::clone(&receiver.borrow()),
            Source::Encoded(receiver) => {
                let encoded = Arc::clone(&receiver.borrow());
                Arc::new(encoded.decode())
            }
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
        let changed = match &mut self.0 {
            Source::Values(receiver) => receiver.changed().await,
            Source::Encoded(receiver) => receiver.changed().await,
        };
        if changed.is_err() {
            std::future::pending::<()>().await;
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
}
