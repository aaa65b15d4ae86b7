//! Per-object serial processing: one worker per key (an object's UID), many
//! keys at once.
//!
//! Events for a key that arrive while its worker is busy are coalesced: the
//! worker only ever sees the newest one. Once a worker has patched its object
//! it names the `resourceVersion` its patch produced, and it does not act on
//! any older body of that object (Kopf's "consistency wait"), so no handler
//! runs twice because a stale event was still in flight.
//!
//! # Guarantees
//! - At most one processing call runs for a key at any time.
//! - The newest event pushed for a key is processed eventually (unless the
//!   queue is shut down first); intermediate ones may be skipped.
//! - After a call that reported an expected version, the next call for that
//!   key gets a body at least that new, or the newest one available once
//!   [`QueueSettings::consistency_timeout`] has passed.
//! - A call that asks for a retry gets the key's newest event again once the
//!   delay has passed, without any request to the API server.
//! - Workers with nothing to do go away after [`QueueSettings::idle_timeout`]
//!   (at once by default), so idle objects cost only their slot in the
//!   watcher. A worker waiting for its own patch to come back stays until it
//!   does, or until the consistency timeout.
//! - At most [`QueueSettings::max_backlog`] keys are admitted and not yet
//!   through their first call; [`Queue::push`] of another new key waits. So
//!   a burst (the initial listing of 100,000 objects) flows through in
//!   bounded memory instead of piling up as 100,000 pending workers. A key
//!   whose first call takes longer than [`ADMISSION_HOLD`] stops counting
//!   then, so slow handlers do not hold up the others.
//! - Of them, at most [`QueueSettings::max_listing_backlog`] are keys of an
//!   initial listing ([`Queue::push_listed`]): every listed object is new at
//!   once, and what their first calls hold (a body each, and a patch and
//!   its connection each with finalizers) stays with the allocator after a
//!   burst of them.
//! - After [`Queue::shutdown`] returns, no call runs any more: calls still in
//!   flight when its timeout passes are cancelled (their futures dropped), so
//!   a stopped operator never acts on an object afterwards.

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use hashbrown::HashMap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Something with a Kubernetes `resourceVersion`, to wait for consistency.
pub(crate) trait Versioned {
    /// The `resourceVersion` of the body this event carries, if it has one
    /// that can be compared. Synthetic events (an object found missing after a
    /// re-list) return `None`: they are always current.
    fn version(&self) -> Option<&str>;
}

/// What a processing call tells the queue when it is done.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Processed {
    /// The `resourceVersion` the call's own patch produced: the key's next
    /// call will not see an older body.
    pub expect_version: Option<String>,
    /// Process the key's newest event again after this delay, even if no new
    /// event arrives (a handler is due for a retry). A newer event comes first.
    pub retry_after: Option<Duration>,
}

/// Limits and timeouts of the worker queue.
#[derive(Debug, Clone)]
pub(crate) struct QueueSettings {
    /// How many keys are processed at the same time, at most.
    pub max_workers: usize,
    /// How many new keys may wait for (or be in) their first call before
    /// [`Queue::push`] of another new key waits.
    pub max_backlog: usize,
    /// Of them, how many keys of an initial listing, at most
    /// ([`Queue::push_listed`]).
    pub max_listing_backlog: usize,
    /// How long an idle worker waits for another event before it exits
    /// (a worker waiting for its own patch to come back waits at least the
    /// consistency timeout).
    pub idle_timeout: Duration,
    /// How long a worker waits for the body its own patch produced before it
    /// goes on with the newest body it has.
    pub consistency_timeout: Duration,
}

impl Default for QueueSettings {
    fn default() -> Self {
        Self {
            max_workers: 1_000,
            max_backlog: 1_024,
            max_listing_backlog: 64,
            idle_timeout: Duration::ZERO,
            consistency_timeout: Duration::from_secs(5),
        }
    }
}

/// The processing call: invoked with a key and the newest event for it.
pub(crate) type ProcessFn<K, E> =
    Arc<dyn Fn(K, Arc<E>) -> BoxFuture<'static, Processed> + Send + Sync>;

/// Dispatches events to one serial worker per key.
pub(crate) struct Queue<K, E> {
    inner: Arc<Inner<K, E>>,
}

struct Inner<K, E> {
    slots: Mutex<HashMap<K, watch::Sender<Option<Arc<E>>>>>,
    permits: Arc<Semaphore>,
    /// Places of new keys in the backlog (see [`QueueSettings::max_backlog`]).
    backlog: Arc<Semaphore>,
    /// Places of listed keys in it (see [`QueueSettings::max_listing_backlog`]).
    listing: Arc<Semaphore>,
    tracker: TaskTracker,
    stop: CancellationToken,
    /// Cancels the calls in flight (at the end of a shutdown).
    abort: CancellationToken,
    settings: QueueSettings,
    process: ProcessFn<K, E>,
}

impl<K, E> fmt::Debug for Queue<K, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue")
            .field("workers", &self.inner.tracker.len())
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl<K, E> Queue<K, E>
where
    K: Clone + Eq + Hash + Send + Sync + fmt::Debug + 'static,
    E: Versioned + Send + Sync + 'static,
{
    /// A queue calling `process` for each key's events. Its workers stop when
    /// `stop` is cancelled (after the call in flight) or on [`Queue::shutdown`].
    pub(crate) fn new(
        settings: QueueSettings,
        stop: CancellationToken,
        process: ProcessFn<K, E>,
    ) -> Self {
        let permits = Arc::new(Semaphore::new(settings.max_workers.max(1)));
        let backlog = Arc::new(Semaphore::new(settings.max_backlog.max(1)));
        let listing = Arc::new(Semaphore::new(settings.max_listing_backlog.max(1)));
        Self {
            inner: Arc::new(Inner {
                slots: Mutex::new(HashMap::new()),
                permits,
                backlog,
                listing,
                tracker: TaskTracker::new(),
                stop,
                abort: CancellationToken::new(),
                settings,
                process,
            }),
        }
    }

    /// Hands an event to the key's worker, starting one if there is none.
    /// A key with a worker never waits: a busy worker sees only the newest
    /// event when it is free. A new key waits while the backlog is full
    /// (see [`QueueSettings::max_backlog`]).
    pub(crate) async fn push(&self, key: K, event: E) {
        self.admit(key, event, Admission::Watched).await;
    }

    /// [`Queue::push`] for a key of an initial listing: a new one also
    /// waits while the listing's share of the backlog is full (see
    /// [`QueueSettings::max_listing_backlog`]).
    pub(crate) async fn push_listed(&self, key: K, event: E) {
        self.admit(key, event, Admission::Listed).await;
    }

    async fn admit(&self, key: K, event: E, admission: Admission) {
        if self.inner.stop.is_cancelled() {
            return;
        }
        let event = Some(Arc::new(event));
        if let Some(slot) = self.inner.lock_slots().get(&key) {
            slot.send_replace(event);
            return;
        }
        let place = tokio::select! {
            place = self.inner.place(admission) => match place {
                Some(place) => place,
                None => return,
            },
            () = self.inner.stop.cancelled() => return,
        };
        let mut slots = self.inner.lock_slots();
        if let Some(slot) = slots.get(&key) {
            slot.send_replace(event);
            return;
        }
        let (slot, mut receiver) = watch::channel(event);
        receiver.mark_changed();
        slots.insert(key.clone(), slot);
        drop(slots);
        let inner = Arc::clone(&self.inner);
        self.inner
            .tracker
            .spawn(async move { inner.work(key, receiver, place).await });
    }

    #[cfg(test)]
    /// How many keys have a worker now (busy or waiting for more events).
    pub(crate) fn workers(&self) -> usize {
        self.inner.lock_slots().len()
    }

    /// Reads `workers` for as long as the queue lives
    /// (0 after), without keeping it alive: for metrics.
    pub(crate) fn workers_reader(&self) -> impl Fn() -> usize + Send + Sync + 'static {
        let inner = Arc::downgrade(&self.inner);
        move || inner.upgrade().map_or(0, |inner| inner.lock_slots().len())
    }

    /// Stops taking events and waits up to `timeout` for the calls in flight,
    /// then cancels those still running. Returns how many were cancelled.
    pub(crate) async fn shutdown(&self, timeout: Duration) -> usize {
        self.inner.stop.cancel();
        self.inner.tracker.close();
        if tokio::time::timeout(timeout, self.inner.tracker.wait())
            .await
            .is_err()
        {
            let left = self.inner.tracker.len();
            tracing::warn!(
                workers = left,
                ?timeout,
                "object workers did not finish in time; cancelling them"
            );
            self.inner.abort.cancel();
            if tokio::time::timeout(ABORT_GRACE, self.inner.tracker.wait())
                .await
                .is_err()
            {
                tracing::warn!(
                    workers = self.inner.tracker.len(),
                    "object workers did not stop when cancelled; abandoning them"
                );
            }
            return left;
        }
        0
    }
}

impl<K, E> Inner<K, E>
where
    K: Clone + Eq + Hash + Send + Sync + fmt::Debug + 'static,
    E: Versioned + Send + Sync + 'static,
{
    fn lock_slots(&self) -> std::sync::MutexGuard<'_, HashMap<K, watch::Sender<Option<Arc<E>>>>> {
        // The map holds no invariant a panicking holder could break halfway.
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new key's place in the backlog, once there is room; `None` once
    /// the queue is closed. A listed key takes its place in the listing's
    /// share first, so that it holds no place of the backlog meanwhile.
    async fn place(&self, admission: Admission) -> Option<BacklogPlace> {
        let listed = match admission {
            Admission::Watched => None,
            Admission::Listed => Some(Arc::clone(&self.listing).acquire_owned().await.ok()?),
        };
        let permit = Arc::clone(&self.backlog).acquire_owned().await.ok()?;
        Some(BacklogPlace {
            _permit: permit,
            _listed: listed,
            until: Instant::now() + ADMISSION_HOLD,
        })
    }

    async fn work(&self, key: K, mut events: watch::Receiver<Option<Arc<E>>>, place: BacklogPlace) {
        let mut place = Some(place);
        let mut expected: Option<String> = None;
        let mut retry_at: Option<Instant> = None;
        loop {
            // Wake up for a new event, for a due retry, or to retire when idle
            // (not before the own patch's version came back, if one is due).
            let linger = match expected {
                Some(_) => self
                    .settings
                    .idle_timeout
                    .max(self.settings.consistency_timeout),
                None => self.settings.idle_timeout,
            };
            let woken = if retry_at.is_none() && linger.is_zero() {
                // Nothing to wait for: take what is there or retire, with no
                // timer to arm (and no wake-up of the runtime's driver).
                if self.stop.is_cancelled() {
                    Woken::Stopped
                } else {
                    match events.has_changed() {
                        Ok(true) => Woken::Changed,
                        Ok(false) => Woken::Idle,
                        Err(_closed) => Woken::Stopped,
                    }
                }
            } else {
                let wake_at = retry_at.unwrap_or_else(|| Instant::now() + linger);
                tokio::select! {
                    biased;
                    () = self.stop.cancelled() => Woken::Stopped,
                    next = tokio::time::timeout_at(wake_at, events.changed()) => match next {
                        Ok(Ok(())) => Woken::Changed,
                        Ok(Err(_closed)) => Woken::Stopped,
                        Err(_elapsed) if retry_at.is_some() => Woken::Due,
                        Err(_idle) => Woken::Idle,
                    },
                }
            };
            match woken {
                Woken::Stopped => break,
                Woken::Changed | Woken::Due => {}
                Woken::Idle => {
                    if self.retire(&key, &events) {
                        return;
                    }
                    continue;
                }
            }
            retry_at = None;
            let Some(mut event) = events.borrow_and_update().clone() else {
                continue;
            };
            if let Some(version) = expected.take() {
                match self.wait_for_version(&mut events, event, &version).await {
                    Some(newer) => event = newer,
                    None => break,
                }
            }
            let Ok(_permit) = in_backlog(self.permits.acquire(), &mut place).await else {
                break;
            };
            let call = (self.process)(key.clone(), Arc::clone(&event));
            let processed = tokio::select! {
                processed = in_backlog(call, &mut place) => processed,
                () = self.abort.cancelled() => break,
            };
            place = None;
            drop(event);
            expected = processed.expect_version;
            retry_at = processed.retry_after.map(|delay| Instant::now() + delay);
        }
        self.lock_slots().remove(&key);
    }

    /// Waits until the key's newest event is at least `version`, or the
    /// consistency timeout passes; returns the event to process then.
    /// `None` means the queue is stopping.
    async fn wait_for_version(
        &self,
        events: &mut watch::Receiver<Option<Arc<E>>>,
        mut event: Arc<E>,
        version: &str,
    ) -> Option<Arc<E>> {
        let deadline = Instant::now() + self.settings.consistency_timeout;
        while !is_at_least(event.version(), version) {
            tokio::select! {
                biased;
                () = self.stop.cancelled() => return None,
                changed = tokio::time::timeout_at(deadline, events.changed()) => match changed {
                    Ok(Ok(())) => {
                        if let Some(newer) = events.borrow_and_update().clone() {
                            event = newer;
                        }
                    }
                    Ok(Err(_closed)) => return None,
                    Err(_timeout) => {
                        tracing::warn!(
                            expected = version,
                            got = event.version().unwrap_or("?"),
                            "the object's own patch was not seen in time; processing the newest body"
                        );
                        break;
                    }
                },
            }
        }
        Some(event)
    }

    /// Removes the key's slot unless an event arrived meanwhile.
    fn retire(&self, key: &K, events: &watch::Receiver<Option<Arc<E>>>) -> bool {
        let mut slots = self.lock_slots();
        if events.has_changed().unwrap_or(false) {
            return false;
        }
        slots.remove(key);
        true
    }
}

/// How long cancelled workers get to unwind (drop their futures) at shutdown.
const ABORT_GRACE: Duration = Duration::from_secs(1);

/// How long a new key counts against [`QueueSettings::max_backlog`] at most,
/// however long its first call takes.
pub(crate) const ADMISSION_HOLD: Duration = Duration::from_secs(1);

/// Why a waiting worker woke up.
enum Woken {
    /// A new event for its key.
    Changed,
    /// A retry is due.
    Due,
    /// Nothing came for the idle timeout.
    Idle,
    /// The queue is stopping, or the key's events are gone.
    Stopped,
}

/// Where a new key comes from, which decides the backlog places it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    /// A watch event: a place in the backlog.
    Watched,
    /// An initial listing: a place in the listing's share of it first.
    Listed,
}

/// A new key's place in the backlog, given up after its first call or at
/// `until`, whichever comes first.
struct BacklogPlace {
    _permit: OwnedSemaphorePermit,
    _listed: Option<OwnedSemaphorePermit>,
    until: Instant,
}

/// Runs `fut`, giving up its backlog `place` once its time is over.
async fn in_backlog<F: Future>(fut: F, place: &mut Option<BacklogPlace>) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    loop {
        let Some(until) = place.as_ref().map(|a| a.until) else {
            return fut.await;
        };
        tokio::select! {
            out = &mut fut => return out,
            () = tokio::time::sleep_until(until) => *place = None,
        }
    }
}

/// Whether `version` is at least `expected`. Kubernetes versions are opaque,
/// but every server in use issues integers: compare them as such, and fall
/// back to equality otherwise. A body without a version is always current.
fn is_at_least(version: Option<&str>, expected: &str) -> bool {
    let Some(version) = version else { return true };
    match (version.parse::<u64>(), expected.parse::<u64>()) {
        (Ok(version), Ok(expected)) => version >= expected,
        _ => version == expected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::mpsc;

    #[derive(Debug)]
    struct Ev {
        n: u32,
        rv: Option<String>,
    }
    impl Versioned for Ev {
        fn version(&self) -> Option<&str> {
            self.rv.as_deref()
        }
    }
    fn ev(n: u32, rv: u64) -> Ev {
        Ev {
            n,
            rv: Some(rv.to_string()),
        }
    }

    type Log = mpsc::UnboundedReceiver<(u32, u32)>;

    /// A queue whose calls record (key, event number), hold for `hold`, and
    /// report `expect(n)` as the version they produced.
    fn queue(
        settings: QueueSettings,
        hold: Duration,
        expect: fn(u32) -> Option<String>,
    ) -> (Queue<u32, Ev>, Log, Arc<AtomicUsize>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let peak_out = Arc::clone(&peak);
        let process: ProcessFn<u32, Ev> = Arc::new(move |key, event: Arc<Ev>| {
            let tx = tx.clone();
            let running = Arc::clone(&running);
            let peak = Arc::clone(&peak);
            Box::pin(async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                let _ = tx.send((key, event.n));
                tokio::time::sleep(hold).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Processed {
                    expect_version: expect(event.n),
                    retry_after: None,
                }
            })
        });
        (
            Queue::new(settings, CancellationToken::new(), process),
            rx,
            peak_out,
        )
    }

    async fn next(log: &mut Log) -> (u32, u32) {
        tokio::time::timeout(Duration::from_secs(60), log.recv())
            .await
            .expect("a call within the timeout")
            .expect("the log stays open")
    }

    #[tokio::test(start_paused = true)]
    async fn events_for_a_busy_key_coalesce_to_the_newest() {
        let (q, mut log, peak) = queue(QueueSettings::default(), Duration::from_secs(1), |_| None);
        q.push(1, ev(1, 1)).await;
        assert_eq!(next(&mut log).await, (1, 1));
        q.push(1, ev(2, 2)).await;
        q.push(1, ev(3, 3)).await;
        assert_eq!(next(&mut log).await, (1, 3));
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(log.try_recv().is_err(), "event 2 must have been skipped");
        assert_eq!(
            peak.load(Ordering::SeqCst),
            1,
            "one key is never processed twice at once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn keys_run_concurrently_up_to_the_worker_limit() {
        let settings = QueueSettings {
            max_workers: 2,
            ..QueueSettings::default()
        };
        let (q, mut log, peak) = queue(settings, Duration::from_secs(1), |_| None);
        for key in 0..5 {
            q.push(key, ev(key, 1)).await;
        }
        let mut seen = Vec::new();
        for _ in 0..5 {
            seen.push(next(&mut log).await.0);
        }
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1, 2, 3, 4]);
        assert_eq!(peak.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_worker_never_acts_on_a_body_older_than_its_own_patch() {
        // The first call "patches" the object to version 10.
        let (q, mut log, _) = queue(QueueSettings::default(), Duration::from_millis(10), |n| {
            (n == 1).then(|| "10".to_owned())
        });
        q.push(7, ev(1, 5)).await;
        assert_eq!(next(&mut log).await, (7, 1));
        // A stale event from before the patch arrives: it must be held back.
        q.push(7, ev(2, 9)).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            log.try_recv().is_err(),
            "version 9 is older than the patch's 10"
        );
        q.push(7, ev(3, 10)).await;
        assert_eq!(next(&mut log).await, (7, 3));
    }

    #[tokio::test(start_paused = true)]
    async fn the_consistency_wait_gives_up_after_its_timeout() {
        let settings = QueueSettings {
            consistency_timeout: Duration::from_secs(3),
            ..QueueSettings::default()
        };
        let (q, mut log, _) = queue(settings, Duration::from_millis(10), |n| {
            (n == 1).then(|| "10".to_owned())
        });
        q.push(7, ev(1, 5)).await;
        assert_eq!(next(&mut log).await, (7, 1));
        let pushed = Instant::now();
        q.push(7, ev(2, 9)).await;
        assert_eq!(next(&mut log).await, (7, 2));
        assert!(pushed.elapsed() >= Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn synthetic_events_without_a_version_pass_the_consistency_wait() {
        let (q, mut log, _) = queue(QueueSettings::default(), Duration::from_millis(10), |n| {
            (n == 1).then(|| "10".to_owned())
        });
        q.push(7, ev(1, 5)).await;
        assert_eq!(next(&mut log).await, (7, 1));
        let pushed = Instant::now();
        q.push(7, Ev { n: 2, rv: None }).await;
        assert_eq!(next(&mut log).await, (7, 2));
        assert!(pushed.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_workers_exit_and_come_back_on_the_next_event() {
        let settings = QueueSettings {
            idle_timeout: Duration::from_secs(5),
            ..QueueSettings::default()
        };
        let (q, mut log, _) = queue(settings, Duration::from_millis(10), |_| None);
        q.push(1, ev(1, 1)).await;
        assert_eq!(next(&mut log).await, (1, 1));
        assert_eq!(q.workers(), 1);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(q.workers(), 0);
        q.push(1, ev(2, 2)).await;
        assert_eq!(next(&mut log).await, (1, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn by_default_a_worker_exits_as_soon_as_it_has_nothing_to_do() {
        let (q, mut log, _) = queue(QueueSettings::default(), Duration::from_millis(10), |_| {
            None
        });
        q.push(1, ev(1, 1)).await;
        assert_eq!(next(&mut log).await, (1, 1));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(q.workers(), 0, "no idle worker is kept");
        q.push(1, ev(2, 2)).await;
        assert_eq!(next(&mut log).await, (1, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_worker_waiting_for_its_own_patch_stays_until_it_comes_back() {
        let (q, mut log, _) = queue(QueueSettings::default(), Duration::from_millis(10), |n| {
            (n == 1).then(|| "10".to_owned())
        });
        q.push(7, ev(1, 5)).await;
        assert_eq!(next(&mut log).await, (7, 1));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(q.workers(), 1, "still waiting for version 10");
        q.push(7, ev(2, 9)).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(log.try_recv().is_err(), "version 9 is held back");
        q.push(7, ev(3, 10)).await;
        assert_eq!(next(&mut log).await, (7, 3));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(q.workers(), 0, "gone once its patch came back");
    }

    #[tokio::test(start_paused = true)]
    async fn new_keys_wait_while_the_backlog_is_full_and_known_keys_never_do() {
        let settings = QueueSettings {
            max_workers: 1,
            max_backlog: 2,
            ..QueueSettings::default()
        };
        let (q, mut log, _) = queue(settings, Duration::from_millis(300), |_| None);
        q.push(1, ev(1, 1)).await;
        q.push(2, ev(1, 1)).await;
        // Keys 1 and 2 fill the backlog: a third new key waits...
        let third = q.push(3, ev(1, 1));
        let mut third = std::pin::pin!(third);
        assert!(
            futures::poll!(third.as_mut()).is_pending(),
            "a third new key waits for room"
        );
        // ...but a key already admitted never waits.
        q.push(2, ev(2, 2)).await;
        assert_eq!(next(&mut log).await, (1, 1));
        third.await;
        let mut rest = vec![next(&mut log).await, next(&mut log).await];
        rest.sort_unstable();
        assert_eq!(
            rest,
            vec![(2, 2), (3, 1)],
            "key 2 coalesced to its newest event"
        );
        assert!(q.workers() <= 1);
    }

    #[tokio::test(start_paused = true)]
    async fn listed_keys_wait_for_the_listings_share_and_watched_ones_do_not() {
        let settings = QueueSettings {
            max_workers: 1,
            max_backlog: 4,
            max_listing_backlog: 2,
            ..QueueSettings::default()
        };
        let (q, mut log, _) = queue(settings, Duration::from_millis(300), |_| None);
        let start = Instant::now();
        q.push_listed(1, ev(1, 1)).await;
        q.push_listed(2, ev(1, 1)).await;
        // Keys 1 and 2 fill the listing's share: a third listed key waits...
        let third = q.push_listed(3, ev(1, 1));
        let mut third = std::pin::pin!(third);
        assert!(
            futures::poll!(third.as_mut()).is_pending(),
            "a third listed key waits for room"
        );
        // ...holding no place of the backlog: two watched keys fill it, at
        // once (the clock is paused: waiting would move it).
        q.push(4, ev(1, 1)).await;
        q.push(5, ev(1, 1)).await;
        assert_eq!(start.elapsed(), Duration::ZERO, "watched keys never waited");
        assert!(futures::poll!(third.as_mut()).is_pending(), "still waiting");
        // A listed key already admitted never waits.
        q.push_listed(2, ev(2, 2)).await;
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(next(&mut log).await);
        }
        third.await;
        seen.push(next(&mut log).await);
        seen.sort_unstable();
        assert_eq!(seen, vec![(1, 1), (2, 2), (3, 1), (4, 1), (5, 1)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_first_call_gives_up_its_backlog_place_after_a_while() {
        let settings = QueueSettings {
            max_backlog: 1,
            ..QueueSettings::default()
        };
        let (q, mut log, _) = queue(settings, Duration::from_secs(100), |_| None);
        let started = Instant::now();
        q.push(1, ev(1, 1)).await;
        assert_eq!(next(&mut log).await, (1, 1));
        q.push(2, ev(1, 1)).await;
        assert_eq!(next(&mut log).await, (2, 1));
        let waited = started.elapsed();
        assert!(
            waited >= ADMISSION_HOLD && waited < ADMISSION_HOLD * 2,
            "key 2 got in once key 1's hold was over, not after its call: {waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_waits_for_calls_in_flight_and_reports_the_stuck() {
        let (q, mut log, _) = queue(QueueSettings::default(), Duration::from_secs(100), |_| None);
        q.push(1, ev(1, 1)).await;
        assert_eq!(next(&mut log).await, (1, 1));
        assert_eq!(q.shutdown(Duration::from_secs(5)).await, 1);
        q.push(2, ev(1, 1)).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(log.try_recv().is_err(), "a stopped queue takes no events");
    }

    #[tokio::test(start_paused = true)]
    async fn calls_still_running_after_the_shutdown_timeout_are_cancelled() {
        let (finished_tx, mut finished) = mpsc::unbounded_channel();
        let (started_tx, mut started) = mpsc::unbounded_channel();
        let process: ProcessFn<u32, Ev> = Arc::new(move |_key, _event: Arc<Ev>| {
            let (started, finished) = (started_tx.clone(), finished_tx.clone());
            Box::pin(async move {
                let _ = started.send(());
                tokio::time::sleep(Duration::from_secs(100)).await;
                let _ = finished.send(());
                Processed::default()
            })
        });
        let q = Queue::new(QueueSettings::default(), CancellationToken::new(), process);
        q.push(1, ev(1, 1)).await;
        tokio::time::timeout(Duration::from_secs(60), started.recv())
            .await
            .expect("started within the timeout");
        assert_eq!(q.shutdown(Duration::from_secs(5)).await, 1);
        assert_eq!(q.inner.tracker.len(), 0, "no worker is left running");
        drop(q);
        tokio::time::sleep(Duration::from_secs(200)).await;
        assert!(
            matches!(
                finished.try_recv(),
                Err(mpsc::error::TryRecvError::Disconnected)
            ),
            "the call was dropped, not finished"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_reprocesses_the_newest_event_after_its_delay() {
        let (tx, mut log) = mpsc::unbounded_channel();
        let process: ProcessFn<u32, Ev> = Arc::new(move |key, event: Arc<Ev>| {
            let tx = tx.clone();
            Box::pin(async move {
                let _ = tx.send((key, event.n));
                let retry_after = (event.n < 3).then(|| Duration::from_secs(30));
                Processed {
                    expect_version: None,
                    retry_after,
                }
            })
        });
        let q = Queue::new(QueueSettings::default(), CancellationToken::new(), process);
        let started = Instant::now();
        q.push(1, ev(1, 1)).await;
        assert_eq!(next(&mut log).await, (1, 1));
        assert_eq!(next(&mut log).await, (1, 1), "retried without a new event");
        assert!(started.elapsed() >= Duration::from_secs(30));
        q.push(1, ev(3, 3)).await;
        assert_eq!(
            next(&mut log).await,
            (1, 3),
            "a new event comes before the retry"
        );
        assert!(started.elapsed() < Duration::from_secs(60));
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert!(log.try_recv().is_err(), "no retry was asked for event 3");
        assert_eq!(q.workers(), 0);
    }

    #[test]
    fn versions_compare_as_integers_when_they_are() {
        assert!(is_at_least(Some("10"), "9"));
        assert!(!is_at_least(Some("9"), "10"));
        assert!(is_at_least(Some("abc"), "abc"));
        assert!(!is_at_least(Some("abc"), "abd"));
        assert!(is_at_least(None, "10"));
    }
}
