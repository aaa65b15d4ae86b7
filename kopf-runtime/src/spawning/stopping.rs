//! The stop signal a daemon or timer sees: [`StopFlag`] and its [`StopReason`].
//!
//! A [`StopFlag`] wraps a [`CancellationToken`] plus the reason it was set
//! for. Flags form a tree (operator → object → task): setting a parent flag
//! sets every descendant, and a descendant reports the reason of the nearest
//! flag that was set. Cloning a flag is one reference-count increment.
//!
//! The DSL's user-facing `Stopped` type wraps (or is) this flag.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Why a daemon or timer is asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StopReason {
    /// A `DELETED` watch event arrived for the object.
    ObjectDeleted,
    /// The object was known but is missing from a fresh listing (after a
    /// watch gap, `410 Gone`, or an operator re-list).
    ObjectVanished,
    /// The object got a `deletionTimestamp` (someone else's finalizer holds it).
    DeletionRequested,
    /// The object stopped matching the handler's filters.
    FilterMismatch,
    /// The handler was removed from the registry.
    #[cfg(test)]
    HandlerRemoved,
    /// Serving paused: the resource is gone from the cluster for now; tasks
    /// are spawned again once it is back.
    OperatorPausing,
    /// This replica stopped leading on its Lease (it could not renew it,
    /// or handed it over to a replica of a higher priority), or the shard
    /// slots it holds changed: another replica may serve the object now.
    /// Tasks are spawned again if this replica serves it again.
    LeadershipLost,
    /// The operator is exiting.
    OperatorExiting,
}

impl StopReason {
    /// Whether the object itself is gone (or the whole operator is), so that
    /// nothing about it needs to be remembered once its tasks have stopped.
    #[must_use]
    pub fn object_is_gone(self) -> bool {
        matches!(
            self,
            Self::ObjectDeleted | Self::ObjectVanished | Self::OperatorExiting
        )
    }

    /// Whether no task may be spawned for the object any more: it is gone,
    /// being deleted, or the operator is exiting.
    #[must_use]
    pub fn ends_spawning(self) -> bool {
        self.object_is_gone() || matches!(self, Self::DeletionRequested)
    }

    /// A short, stable, lowercase name for logs, Events and metric labels.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ObjectDeleted => "object-deleted",
            Self::ObjectVanished => "object-vanished",
            Self::DeletionRequested => "deletion-requested",
            Self::FilterMismatch => "filter-mismatch",
            #[cfg(test)]
            Self::HandlerRemoved => "handler-removed",
            Self::OperatorPausing => "operator-pausing",
            Self::LeadershipLost => "leadership-lost",
            Self::OperatorExiting => "operator-exiting",
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

struct FlagInner {
    token: CancellationToken,
    reason: OnceLock<StopReason>,
    parent: Option<StopFlag>,
}

/// The stop signal of a daemon or timer: a cancellation token plus a reason.
///
/// # Guarantees
/// - Once set, a flag stays set; the first reason given wins.
/// - Setting a flag sets all flags created from it with [`StopFlag::child`].
/// - [`StopFlag::wait`] and [`StopFlag::cancelled`] return as soon as the
///   flag is set, however it was set.
///
/// # Caveats
/// - The flag is only a request. A task that never looks at it is cancelled
///   by the runtime later (see the `spawning` module), but a blocking
///   function on a thread cannot be cancelled and must check the flag itself.
#[derive(Clone)]
pub(crate) struct StopFlag {
    inner: Arc<FlagInner>,
}

impl Default for StopFlag {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for StopFlag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StopFlag")
            .field("is_set", &self.is_set())
            .field("reason", &self.reason())
            .finish()
    }
}

impl StopFlag {
    /// A new root flag, not set.
    #[must_use]
    pub(crate) fn new() -> Self {
        Self {
            inner: Arc::new(FlagInner {
                token: CancellationToken::new(),
                reason: OnceLock::new(),
                parent: None,
            }),
        }
    }

    /// A new flag that is set whenever this one is (but not the other way).
    #[must_use]
    pub(crate) fn child(&self) -> Self {
        Self {
            inner: Arc::new(FlagInner {
                token: self.inner.token.child_token(),
                reason: OnceLock::new(),
                parent: Some(self.clone()),
            }),
        }
    }

    /// Set the flag for `reason`. Returns `false` if it was already set (the
    /// earlier reason is kept).
    pub(crate) fn set(&self, reason: StopReason) -> bool {
        if self.is_set() {
            return false;
        }
        let fresh = self.inner.reason.set(reason).is_ok();
        // The reason is stored before the token is cancelled, so that whoever
        // wakes up on the token always sees a reason.
        self.inner.token.cancel();
        fresh
    }

    /// Whether the flag (or one of its ancestors) is set.
    #[must_use]
    pub(crate) fn is_set(&self) -> bool {
        self.inner.token.is_cancelled()
    }

    /// Why the flag is set: its own reason, else the nearest set ancestor's.
    /// `None` while not set.
    #[must_use]
    pub(crate) fn reason(&self) -> Option<StopReason> {
        if !self.is_set() {
            return None;
        }
        let mut flag = Some(self);
        while let Some(current) = flag {
            if let Some(reason) = current.inner.reason.get() {
                return Some(*reason);
            }
            flag = current.inner.parent.as_ref();
        }
        None
    }

    /// Resolves once the flag is set.
    pub(crate) async fn cancelled(&self) {
        self.inner.token.cancelled().await;
    }

    /// Sleep for `timeout` or until the flag is set, whichever is first.
    /// Returns whether the flag is set (i.e. `true` means "stop now").
    pub(crate) async fn wait(&self, timeout: Duration) -> bool {
        self.sleep_until(deadline_after(Instant::now(), timeout))
            .await
    }

    /// Sleep until `deadline` or until the flag is set, whichever is first.
    /// Returns whether the flag is set.
    pub(crate) async fn sleep_until(&self, deadline: Instant) -> bool {
        tokio::select! {
            biased;
            () = self.inner.token.cancelled() => true,
            () = tokio::time::sleep_until(deadline) => self.is_set(),
        }
    }

    #[cfg(test)]
    /// For blocking code on a blocking thread (sync daemons): like
    /// [`StopFlag::wait`], but blocks the current thread. Returns whether the
    /// flag is set.
    ///
    /// Outside a Tokio runtime context it cannot wait and just returns
    /// [`StopFlag::is_set`].
    ///
    /// # Panics
    /// When called from an async task (it would block a runtime worker);
    /// call it on a blocking thread, e.g. inside
    /// [`TaskContext::run_blocking`](super::TaskContext::run_blocking).
    #[must_use]
    pub(crate) fn wait_blocking(&self, timeout: Duration) -> bool {
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => handle.block_on(self.wait(timeout)),
            Err(_) => self.is_set(),
        }
    }

    /// The underlying cancellation token (e.g. for `tokio::select!` or to
    /// derive further child tokens).
    #[must_use]
    pub(crate) fn token(&self) -> &CancellationToken {
        &self.inner.token
    }
}

/// `from + delay`, saturating at a far future (about 30 years) instead of
/// panicking on overflow (e.g. for `Duration::MAX`).
pub(crate) fn deadline_after(from: Instant, delay: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);
    from.checked_add(delay.min(FAR)).unwrap_or(from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn wait_times_out_when_not_set() {
        let flag = StopFlag::new();
        let start = Instant::now();
        assert!(!flag.wait(Duration::from_secs(5)).await);
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        assert_eq!(flag.reason(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn wait_returns_early_when_set() {
        let flag = StopFlag::new();
        let setter = flag.clone();
        let start = Instant::now();
        let waiter = tokio::spawn(async move { flag.wait(Duration::from_secs(60)).await });
        tokio::time::sleep(Duration::from_secs(2)).await;
        setter.set(StopReason::ObjectDeleted);
        assert!(waiter.await.expect("waiter"));
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test]
    async fn child_inherits_parent_reason_but_own_reason_wins() {
        let root = StopFlag::new();
        let a = root.child();
        let b = root.child();
        assert!(a.set(StopReason::FilterMismatch));
        assert!(!b.is_set());
        assert!(root.set(StopReason::OperatorExiting));
        assert!(b.is_set());
        assert_eq!(a.reason(), Some(StopReason::FilterMismatch));
        assert_eq!(b.reason(), Some(StopReason::OperatorExiting));
        b.cancelled().await;
    }

    #[tokio::test(start_paused = true)]
    async fn wait_for_ever_does_not_overflow() {
        let flag = StopFlag::new();
        let setter = flag.clone();
        let waiter = tokio::spawn(async move { flag.wait(Duration::MAX).await });
        tokio::time::sleep(Duration::from_secs(1)).await;
        setter.set(StopReason::OperatorExiting);
        assert!(waiter.await.expect("waiter"));
    }

    #[test]
    fn first_reason_wins() {
        let flag = StopFlag::new();
        assert!(flag.set(StopReason::DeletionRequested));
        assert!(!flag.set(StopReason::ObjectDeleted));
        assert_eq!(flag.reason(), Some(StopReason::DeletionRequested));
    }

    #[test]
    fn wait_blocking_outside_runtime_reports_state() {
        let flag = StopFlag::new();
        assert!(!flag.wait_blocking(Duration::from_secs(1)));
        flag.set(StopReason::OperatorExiting);
        assert!(flag.wait_blocking(Duration::from_secs(1)));
    }

    #[test]
    fn gone_reasons() {
        assert!(StopReason::ObjectDeleted.object_is_gone());
        assert!(StopReason::ObjectVanished.object_is_gone());
        assert!(!StopReason::FilterMismatch.object_is_gone());
        assert!(!StopReason::DeletionRequested.object_is_gone());
        assert!(StopReason::DeletionRequested.ends_spawning());
        assert!(!StopReason::FilterMismatch.ends_spawning());
        assert!(!StopReason::OperatorPausing.ends_spawning());
        assert!(!StopReason::LeadershipLost.ends_spawning());
        assert_eq!(StopReason::ObjectVanished.to_string(), "object-vanished");
    }
}
