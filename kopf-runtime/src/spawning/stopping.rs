//! The stop signal a daemon or timer sees: [`StopFlag`] and its [`StopReason`].
//!
//! A flag ([`FlagState`]) is an atomic reason plus a [`Notify`] that wakes
//! its waiters once it is set, and one waker slot for the loop of the task
//! it belongs to ([`FlagState::poll_set`]). Each task has its own, inline in
//! its shared state; the spawner sets them one by one (on the operator's
//! exit too). A [`StopFlag`] is a handle on one, given to the task's calls.
//! Reading a flag takes no lock, waiting on one registers one waiter, and
//! cloning a handle is one reference-count increment.
//!
//! The DSL's user-facing `Stopped` type wraps this flag; a
//! [`CancellationToken`] is made only for code that asks for one.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering, fence};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::AtomicWaker;
use tokio::sync::Notify;
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

impl StopReason {
    /// Every reason, in the order of their codes.
    const ALL: &[StopReason] = &[
        Self::ObjectDeleted,
        Self::ObjectVanished,
        Self::DeletionRequested,
        Self::FilterMismatch,
        #[cfg(test)]
        Self::HandlerRemoved,
        Self::OperatorPausing,
        Self::LeadershipLost,
        Self::OperatorExiting,
    ];

    /// Its code in a flag: its place in [`Self::ALL`] plus one (0 is "not set").
    fn code(self) -> u8 {
        let place = Self::ALL.iter().position(|r| *r == self).unwrap_or(0);
        u8::try_from(place + 1).unwrap_or(u8::MAX)
    }

    /// The reason of a flag's code, `None` for "not set".
    fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code).checked_sub(1)?).copied()
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stop flag itself: what a [`StopFlag`] points to, and what a task's
/// shared state holds inline. Every method of a flag is here.
pub(crate) struct FlagState {
    /// Its reason's code once set ([`StopReason::code`]); 0 until then.
    reason: AtomicU8,
    /// Wakes the flag's waiters when it is set.
    set: Notify,
    /// Wakes the loop of the flag's task when it is set: a slot here
    /// rather than a waiter in every waiting task's future.
    runner: AtomicWaker,
    /// A token cancelled with the flag, made for whoever asks for one.
    token: OnceLock<CancellationToken>,
}

/// The stop signal of a daemon or timer: a reason, set once, and a way to
/// wait for it.
///
/// # Guarantees
/// - Once set, a flag stays set; the first reason given wins.
/// - [`FlagState::wait`], [`FlagState::cancelled`] and
///   [`FlagState::poll_set`] return as soon as the flag is set.
///
/// # Caveats
/// - The flag is only a request. A task that never looks at it is cancelled
///   by the runtime later (see the `spawning` module), but a blocking
///   function on a thread cannot be cancelled and must check the flag itself.
#[derive(Clone)]
pub(crate) struct StopFlag {
    holder: Arc<dyn HoldsFlag>,
}

/// What a [`StopFlag`] points into: a flag's state of its own, or a task's
/// shared state (`TaskShared`), which holds its flag inline so that a tick
/// finds both in one allocation.
pub(crate) trait HoldsFlag: Send + Sync + 'static {
    /// The flag held.
    fn flag(&self) -> &FlagState;
}

impl HoldsFlag for FlagState {
    fn flag(&self) -> &FlagState {
        self
    }
}

impl std::ops::Deref for StopFlag {
    type Target = FlagState;

    fn deref(&self) -> &FlagState {
        self.holder.flag()
    }
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
    /// A new flag, not set, of its own.
    #[must_use]
    pub(crate) fn new() -> Self {
        Self {
            holder: Arc::new(FlagState::new()),
        }
    }

    /// A handle on the flag that `holder` holds.
    pub(crate) fn of(holder: Arc<dyn HoldsFlag>) -> Self {
        Self { holder }
    }
}

impl FlagState {
    /// A flag, not set.
    #[must_use]
    pub(crate) fn new() -> Self {
        Self {
            reason: AtomicU8::new(0),
            set: Notify::new(),
            runner: AtomicWaker::new(),
            token: OnceLock::new(),
        }
    }

    fn reason_code(&self) -> u8 {
        self.reason.load(Ordering::SeqCst)
    }

    /// Set the flag for `reason`. Returns `false` if it was already set (the
    /// earlier reason is kept).
    pub(crate) fn set(&self, reason: StopReason) -> bool {
        if self.is_set() {
            return false;
        }
        let fresh = self
            .reason
            .compare_exchange(0, reason.code(), Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if fresh {
            // The reason is stored before anyone is woken, so that whoever
            // wakes up always sees a reason; a waiter that checked before
            // the store was registered before it, and is woken here.
            self.set.notify_waiters();
            self.runner.wake();
            // Pairs with the fence in `token`: a token made meanwhile is
            // either seen here or sees the reason there.
            fence(Ordering::SeqCst);
            if let Some(token) = self.token.get() {
                token.cancel();
            }
        }
        fresh
    }

    /// Whether the flag is set.
    #[must_use]
    pub(crate) fn is_set(&self) -> bool {
        self.reason_code() != 0
    }

    /// Why the flag is set; `None` while not set.
    #[must_use]
    pub(crate) fn reason(&self) -> Option<StopReason> {
        StopReason::from_code(self.reason_code())
    }

    /// Resolves once the flag is set. The future may be kept and polled
    /// again and again: it stays registered, with no allocation.
    pub(crate) async fn cancelled(&self) {
        // A Notified future sees every `notify_waiters` from its creation
        // on, so a flag set between these lines still wakes it.
        let set = self.set.notified();
        if !self.is_set() {
            set.await;
        }
    }

    /// Polls whether the flag is set, for the loop of the task the flag
    /// belongs to: its waker goes to the flag's one slot, so that the
    /// waiting task holds no waiter of its own. Only that one task may
    /// poll a flag so (another's waker would replace its own); everyone
    /// else waits with [`cancelled`](Self::cancelled).
    pub(crate) fn poll_set(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_set() {
            return Poll::Ready(());
        }
        self.runner.register(cx.waker());
        // Registered before this second look: a flag set in between has
        // either been seen here or wakes the waker just registered.
        if self.is_set() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
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
            () = self.cancelled() => true,
            () = tokio::time::sleep_until(deadline) => self.is_set(),
        }
    }

    #[cfg(test)]
    /// For blocking code on a blocking thread (sync daemons): like
    /// [`FlagState::wait`], but blocks the current thread. Returns whether the
    /// flag is set.
    ///
    /// Outside a Tokio runtime context it cannot wait and just returns
    /// [`FlagState::is_set`].
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

    /// A cancellation token cancelled with the flag (e.g. for
    /// `tokio::select!` or to derive further child tokens), made on the
    /// first call.
    #[must_use]
    pub(crate) fn token(&self) -> &CancellationToken {
        let token = self.token.get_or_init(CancellationToken::new);
        // Pairs with the fence in `set`.
        fence(Ordering::SeqCst);
        if self.is_set() {
            token.cancel();
        }
        token
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
    fn every_reason_has_a_code_of_its_own() {
        for reason in StopReason::ALL {
            assert_eq!(StopReason::from_code(reason.code()), Some(*reason));
        }
        assert_eq!(StopReason::from_code(0), None);
    }

    #[tokio::test]
    async fn tokens_are_cancelled_with_their_flags_made_before_or_after() {
        let early = StopFlag::new();
        let early_token = early.token().clone();
        assert!(!early_token.is_cancelled());
        early.set(StopReason::LeadershipLost);
        assert!(early_token.is_cancelled());
        let late = StopFlag::new();
        late.set(StopReason::FilterMismatch);
        assert!(late.token().is_cancelled());
        late.token().cancelled().await;
    }

    #[tokio::test]
    async fn a_kept_waiter_and_the_task_polling_its_flag_wake_once_it_is_set() {
        let flag = StopFlag::new();
        let (kept, polled) = (flag.clone(), flag.clone());
        let waiter = tokio::spawn(async move { kept.cancelled().await });
        let runner =
            tokio::spawn(async move { std::future::poll_fn(|cx| polled.poll_set(cx)).await });
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        assert!(
            !waiter.is_finished() && !runner.is_finished(),
            "pending while not set"
        );
        flag.set(StopReason::ObjectDeleted);
        for task in [waiter, runner] {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("woken")
                .expect("ends");
        }
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
