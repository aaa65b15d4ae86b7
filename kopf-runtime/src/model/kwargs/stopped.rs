//! [`Stopped`]: the stop flag of daemons and timers.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::spawning::stopping::{StopFlag, StopReason};

/// The stop flag of a daemon or timer (Kopf's `stopped`).
///
/// The engine sets it when the object is deleted, the handler's filters
/// stop matching, the replica stops leading on its Lease, or the operator
/// exits; [`Stopped::reason`] says which. [`Stopped::token`] gives a
/// [`CancellationToken`] cancelled with it.
///
/// # Guarantees
/// Once set, the flag stays set; [`wait`](Stopped::wait) and
/// [`cancelled`](Stopped::cancelled) return immediately from then on.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// let token = tokio_util::sync::CancellationToken::new();
/// let stopped = kopf_runtime::Stopped::new(token.clone());
/// assert!(!stopped.wait(Duration::from_millis(1)).await);
/// token.cancel();
/// assert!(stopped.is_set());
/// assert!(stopped.wait(Duration::from_secs(3600)).await);
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Stopped {
    by: StoppedBy,
}

/// What a [`Stopped`] reads.
#[derive(Debug, Clone)]
enum StoppedBy {
    /// A token of the caller's ([`Stopped::new`]).
    Token(CancellationToken),
    /// The engine's flag, which knows why it is set.
    Flag(StopFlag),
}

impl Default for StoppedBy {
    fn default() -> Self {
        Self::Token(CancellationToken::new())
    }
}

impl Stopped {
    /// A flag bound to the engine's token.
    pub fn new(token: CancellationToken) -> Self {
        Stopped {
            by: StoppedBy::Token(token),
        }
    }

    /// The flag of a daemon or timer, as the engine sets it.
    pub(crate) fn of(flag: &StopFlag) -> Self {
        Stopped {
            by: StoppedBy::Flag(flag.clone()),
        }
    }

    /// Why the daemon or timer is asked to stop (Kopf's `stopped.reason`):
    /// e.g. [`StopReason::ObjectDeleted`], or
    /// [`StopReason::LeadershipLost`] when the replica stopped leading on
    /// its Lease; `None` while it is not, or for a flag made with
    /// [`Stopped::new`].
    pub fn reason(&self) -> Option<StopReason> {
        match &self.by {
            StoppedBy::Token(_) => None,
            StoppedBy::Flag(flag) => flag.reason(),
        }
    }

    /// Whether the daemon or timer should stop now.
    pub fn is_set(&self) -> bool {
        match &self.by {
            StoppedBy::Token(token) => token.is_cancelled(),
            StoppedBy::Flag(flag) => flag.is_set(),
        }
    }

    /// Sleeps for `duration` or until stopped; returns whether the flag is set.
    pub async fn wait(&self, duration: Duration) -> bool {
        tokio::select! {
            () = self.cancelled() => true,
            () = tokio::time::sleep(duration) => self.is_set(),
        }
    }

    /// For plain-`fn` daemons and timers, which run on a blocking thread:
    /// sleeps for `duration` or until stopped, blocking the thread; returns
    /// whether the flag is set.
    ///
    /// ```
    /// use std::time::Duration;
    /// use kopf_runtime as kopf;
    ///
    /// #[kopf::daemon(k8s_openapi::api::core::v1::Pod)]
    /// fn poll(name: &str, stopped: &kopf::Stopped) {
    ///     while !stopped.wait_blocking(Duration::from_secs(10)) {
    ///         let _ = name; // blocking work
    ///     }
    /// }
    /// # fn main() {}
    /// ```
    ///
    /// # Panics
    /// When called from async code on a runtime's worker (whose thread it
    /// would block): use [`wait`](Self::wait) there.
    pub fn wait_blocking(&self, duration: Duration) -> bool {
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => handle.block_on(self.wait(duration)),
            // No runtime to time the wait: poll the flag.
            Err(_) => {
                let deadline = std::time::Instant::now() + duration;
                while !self.is_set() {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    std::thread::sleep(left.min(Duration::from_millis(10)));
                }
                self.is_set()
            }
        }
    }

    /// Completes when the flag is set.
    pub async fn cancelled(&self) {
        match &self.by {
            StoppedBy::Token(token) => token.cancelled().await,
            StoppedBy::Flag(flag) => flag.cancelled().await,
        }
    }

    /// A token cancelled with the flag (e.g. to make child tokens for
    /// sub-tasks).
    pub fn token(&self) -> &CancellationToken {
        match &self.by {
            StoppedBy::Token(token) => token,
            StoppedBy::Flag(flag) => flag.token(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn wait_blocking_returns_early_when_stopped_on_a_blocking_thread() {
        let token = CancellationToken::new();
        let stopped = Stopped::new(token.clone());
        let waiter = tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            let set = stopped.wait_blocking(Duration::from_secs(60));
            (set, started.elapsed())
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        token.cancel();
        let (set, waited) = waiter.await.expect("the waiter does not panic");
        assert!(set);
        assert!(waited < Duration::from_secs(10), "{waited:?}");
        let outside =
            std::thread::spawn(|| Stopped::default().wait_blocking(Duration::from_millis(20)));
        assert_eq!(outside.join().ok(), Some(false), "outside a runtime");
    }

    #[tokio::test(start_paused = true)]
    async fn wait_returns_early_when_stopped_while_sleeping() {
        let token = CancellationToken::new();
        let stopped = Stopped::new(token.clone());
        let waiter = tokio::spawn(async move { stopped.wait(Duration::from_secs(60)).await });
        tokio::time::sleep(Duration::from_secs(1)).await;
        token.cancel();
        assert!(waiter.await.expect("the waiter does not panic"));
    }
}
