//! [`Stopped`]: the stop flag of daemons and timers.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// The stop flag of a daemon or timer (Kopf's `stopped`).
///
/// The engine owns the [`CancellationToken`] behind it and cancels it when the
/// object is deleted, the handler's filters stop matching, or the operator exits.
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
    token: CancellationToken,
}

impl Stopped {
    /// A flag bound to the engine's token.
    pub fn new(token: CancellationToken) -> Self {
        Stopped { token }
    }

    /// Whether the daemon or timer should stop now.
    pub fn is_set(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Sleeps for `duration` or until stopped; returns whether the flag is set.
    pub async fn wait(&self, duration: Duration) -> bool {
        tokio::select! {
            _ = self.token.cancelled() => true,
            _ = tokio::time::sleep(duration) => self.is_set(),
        }
    }

    /// Completes when the flag is set.
    pub async fn cancelled(&self) {
        self.token.cancelled().await
    }

    /// The underlying token (e.g. to make child tokens for sub-tasks).
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
