//! One Tokio sleep for all the timers of a spawner: [`Alarms`], and the
//! [`Alarm`] each waiting timer holds.
//!
//! Tokio keeps every sleep in a hierarchical wheel. A sleep whose deadline
//! lies past the end of the current 4.096-s block of the wheel goes into a
//! coarse level, and when that block ends, every such sleep is moved down
//! at once: with 300,000 one-second timers, every sleep made in the last
//! second of a block, all at the 4.096-s mark, a stall of about 50 ms that
//! every tick due meanwhile waits out.
//!
//! Here, the alarms are filed by the eighth of a millisecond they are due
//! in ([`SLOT`]), each a waker in that slot's vector, and one task (the
//! ringer) sleeps until the first slot is due, wakes its timers in order
//! and goes on to the next. The vectors are reused from slot to slot:
//! nothing moves until it rings, and an alarm that is dropped or reset
//! leaves its slot at once.
//!
//! # Guarantees
//! - An alarm rings at its deadline or later, never earlier: a slot rings
//!   once Tokio's clock has passed the latest deadline filed in it (in
//!   paused time, at exactly that deadline).
//! - Slots ring in order, each once; an alarm filed after its slot rang
//!   goes into the next one.

use std::collections::BTreeMap;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How long a slot lasts. Tokio's sleeps have a resolution of a
/// millisecond, and the ringer waits with one: an alarm rings up to a slot
/// later than a sleep of its own would. Slots of a millisecond made the
/// jitter p99 of 1,000 one-second timers 1.35× Tokio's; an eighth of one
/// costs little more.
const SLOT: Duration = Duration::from_micros(125);

/// How many emptied slots' vectors are kept for new slots.
const SPARE: usize = 64;

/// The alarms of one spawner's timers: a handle, cloned into every task.
#[derive(Clone)]
pub(crate) struct Alarms {
    shared: Arc<Shared>,
}

struct Shared {
    /// Where the slots are counted from.
    base: Instant,
    /// The last slot that rang: every slot up to it is gone.
    rung: AtomicU64,
    state: Mutex<State>,
    /// Wakes the ringer when a slot is filed before its first one, and
    /// when the alarms are dropped.
    rearm: Arc<Notify>,
    /// Where the ringer is spawned, on the first alarm filed.
    runtime: Handle,
}

#[derive(Default)]
struct State {
    slots: BTreeMap<u64, Slot>,
    /// Emptied slots' vectors, kept for new slots, so that slots come and
    /// go without allocating.
    spare: Vec<Vec<Option<Waker>>>,
    ringing: bool,
}

/// The alarms due in one [`SLOT`].
struct Slot {
    /// The latest deadline filed in the slot: it rings once that is past.
    latest: Instant,
    /// Its alarms by their keys, `None` for one taken out.
    wakers: Vec<Option<Waker>>,
    /// How many of them are still filed.
    filed: usize,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The ringer holds no reference while it waits: this ends it.
        self.rearm.notify_one();
    }
}

impl Alarms {
    /// Alarms whose ringer runs on `runtime` once the first is filed.
    pub(crate) fn new(runtime: Handle) -> Self {
        Self {
            shared: Arc::new(Shared {
                base: Instant::now(),
                rung: AtomicU64::new(0),
                state: Mutex::default(),
                rearm: Arc::new(Notify::new()),
                runtime,
            }),
        }
    }

    /// An alarm for `deadline`, filed on its first poll.
    pub(crate) fn at(&self, deadline: Instant) -> Alarm<'_> {
        Alarm {
            alarms: self,
            deadline,
            filed: Filed::NOT,
        }
    }

    #[cfg(test)]
    /// How many alarms are filed.
    fn filed(&self) -> usize {
        self.shared
            .lock()
            .slots
            .values()
            .map(|slot| slot.filed)
            .sum()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a waker panicked mid-push: the slots
        // are still whole.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The slot of `deadline`: the [`SLOT`]s from the base, rounded up.
    fn slot_of(&self, deadline: Instant) -> u64 {
        let nanos = deadline.saturating_duration_since(self.base).as_nanos();
        u64::try_from(nanos.div_ceil(SLOT.as_nanos())).unwrap_or(u64::MAX)
    }

    /// File `waker` for `deadline`; returns its place.
    fn file(self: &Arc<Self>, deadline: Instant, waker: &Waker) -> Filed {
        let mut state = self.lock();
        let at = self
            .slot_of(deadline)
            .max(self.rung.load(Ordering::Relaxed) + 1);
        let first = state.slots.first_key_value().map(|(first, _)| *first);
        let State {
            slots,
            spare,
            ringing,
        } = &mut *state;
        let slot = slots.entry(at).or_insert_with(|| Slot {
            latest: deadline,
            // One alarm alone in its slot (timers far apart) costs one.
            wakers: spare.pop().unwrap_or_else(|| Vec::with_capacity(1)),
            filed: 0,
        });
        slot.latest = slot.latest.max(deadline);
        let key = slot.wakers.len();
        slot.wakers.push(Some(waker.clone()));
        slot.filed += 1;
        let spawn = !std::mem::replace(ringing, true);
        drop(state);
        if spawn {
            self.runtime
                .spawn(ring(Arc::downgrade(self), Arc::clone(&self.rearm)));
        } else if first.is_none_or(|first| at < first) {
            self.rearm.notify_one();
        }
        Filed { at, key }
    }

    /// Whether the alarm filed at `filed` has rung; if not, its waker is
    /// `waker` from now on.
    fn poll_filed(&self, filed: Filed, waker: &Waker) -> Poll<()> {
        if filed.at <= self.rung.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        let mut state = self.lock();
        let Some(Some(kept)) = state
            .slots
            .get_mut(&filed.at)
            .and_then(|slot| slot.wakers.get_mut(filed.key))
        else {
            // Rung between the two looks.
            return Poll::Ready(());
        };
        if kept.will_wake(waker) {
            return Poll::Pending;
        }
        let old = std::mem::replace(kept, waker.clone());
        // Dropped with no lock held: it may be the last reference to
        // another task, whose alarm would take the lock.
        drop(state);
        drop(old);
        Poll::Pending
    }

    /// Take the alarm at `filed` out of its slot, unless it rang.
    fn unfile(&self, filed: Filed) {
        if filed.at <= self.rung.load(Ordering::Acquire) {
            return;
        }
        let mut state = self.lock();
        let State { slots, spare, .. } = &mut *state;
        let Some(slot) = slots.get_mut(&filed.at) else {
            return;
        };
        let waker = slot.wakers.get_mut(filed.key).and_then(Option::take);
        if waker.is_some() {
            slot.filed -= 1;
        }
        if slot.filed == 0
            && let Some(slot) = slots.remove(&filed.at)
        {
            recycle(spare, slot.wakers);
        }
        drop(state);
        // Dropped with no lock held (see `poll_filed`).
        drop(waker);
    }
}

/// Keep an emptied slot's vector for a new slot, unless enough are kept.
fn recycle(spare: &mut Vec<Vec<Option<Waker>>>, mut wakers: Vec<Option<Waker>>) {
    if spare.len() < SPARE {
        wakers.clear();
        spare.push(wakers);
    }
}

/// The ringer: rings every slot that is due, then sleeps until the next
/// one (or until an earlier slot is filed); ends once the alarms are gone.
async fn ring(shared: Weak<Shared>, rearm: Arc<Notify>) {
    let mut due = Vec::new();
    let mut sleep = pin!(tokio::time::sleep(Duration::ZERO));
    loop {
        let next = {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let now = Instant::now();
            let mut state = shared.lock();
            let State { slots, spare, .. } = &mut *state;
            while let Some(first) = slots.first_entry()
                && first.get().latest <= now
            {
                let (at, mut slot) = first.remove_entry();
                shared.rung.store(at, Ordering::Release);
                due.extend(slot.wakers.drain(..).flatten());
                recycle(spare, slot.wakers);
            }
            slots.first_key_value().map(|(_, slot)| slot.latest)
        };
        // Woken with no lock held: a woken timer may file its next alarm
        // right away (on another thread).
        for waker in due.drain(..) {
            waker.wake();
        }
        match next {
            Some(latest) => {
                sleep.as_mut().reset(latest);
                tokio::select! {
                    biased;
                    () = rearm.notified() => {}
                    () = sleep.as_mut() => {}
                }
            }
            None => rearm.notified().await,
        }
    }
}

/// Where an alarm is filed: its slot and its key in that slot.
#[derive(Clone, Copy)]
struct Filed {
    /// Its slot; 0 (a slot that never exists, as slots are filed after
    /// the one that rang) while not filed.
    at: u64,
    key: usize,
}

impl Filed {
    const NOT: Self = Self { at: 0, key: 0 };

    fn is_filed(self) -> bool {
        self.at != 0
    }
}

/// One timer's alarm: like Tokio's `Sleep`, a future that resolves at its
/// deadline, filed with its [`Alarms`] on its first poll and taken out when
/// dropped or reset.
pub(crate) struct Alarm<'a> {
    alarms: &'a Alarms,
    deadline: Instant,
    filed: Filed,
}

impl Alarm<'_> {
    /// Its deadline.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The alarm for `deadline` instead, not filed until polled again.
    pub(crate) fn reset(&mut self, deadline: Instant) {
        let filed = std::mem::replace(&mut self.filed, Filed::NOT);
        if filed.is_filed() {
            self.alarms.shared.unfile(filed);
        }
        self.deadline = deadline;
    }

    /// Resolves once the deadline is past.
    pub(crate) fn poll_rung(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let shared = &self.alarms.shared;
        if self.filed.is_filed() {
            let rung = shared.poll_filed(self.filed, cx.waker());
            if rung.is_ready() {
                self.filed = Filed::NOT;
            }
            return rung;
        }
        if self.deadline <= Instant::now() {
            return Poll::Ready(());
        }
        self.filed = shared.file(self.deadline, cx.waker());
        Poll::Pending
    }
}

impl Drop for Alarm<'_> {
    fn drop(&mut self) {
        if self.filed.is_filed() {
            self.alarms.shared.unfile(self.filed);
        }
    }
}

impl Future for Alarm<'_> {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.poll_rung(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    fn alarms() -> Alarms {
        Alarms::new(Handle::current())
    }

    #[tokio::test(start_paused = true)]
    async fn an_alarm_rings_when_tokio_would_ring_its_deadline() {
        let alarms = alarms();
        let deadline = Instant::now() + Duration::from_millis(1500);
        alarms.at(deadline).await;
        assert_eq!(Instant::now(), deadline, "on the millisecond: exactly");
        // Between milliseconds, as late as Tokio's own sleep: at the next.
        let between = Duration::from_nanos(2_000_000_001);
        let deadline = Instant::now() + between;
        alarms.at(deadline).await;
        let ours = Instant::now() - deadline;
        let deadline = Instant::now() + between;
        tokio::time::sleep_until(deadline).await;
        assert_eq!(ours, Instant::now() - deadline);
        assert!(ours < Duration::from_millis(1));
        assert_eq!(alarms.filed(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn alarms_ring_in_the_order_of_their_deadlines() {
        let alarms = alarms();
        let start = Instant::now();
        let order = Arc::new(Mutex::new(Vec::new()));
        let tasks: Vec<_> = [700_u64, 100, 400, 100, 999]
            .into_iter()
            .map(|ms| {
                let (alarms, order) = (alarms.clone(), Arc::clone(&order));
                tokio::spawn(async move {
                    alarms.at(start + Duration::from_millis(ms)).await;
                    order.lock().expect("order").push((ms, start.elapsed()));
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("rings");
        }
        let order = order.lock().expect("order").clone();
        let rung: Vec<_> = order.iter().map(|(ms, _)| *ms).collect();
        assert_eq!(rung, [100, 100, 400, 700, 999]);
        for (ms, elapsed) in order {
            assert_eq!(elapsed, Duration::from_millis(ms));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_alarm_filed_later_rings_first() {
        let alarms = alarms();
        let start = Instant::now();
        let late = tokio::spawn({
            let alarms = alarms.clone();
            async move { alarms.at(start + Duration::from_secs(60)).await }
        });
        tokio::task::yield_now().await;
        assert_eq!(alarms.filed(), 1);
        alarms.at(start + Duration::from_secs(1)).await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        assert!(!late.is_finished());
        late.await.expect("rings");
        assert_eq!(start.elapsed(), Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_or_reset_alarm_leaves_its_slot() {
        let alarms = alarms();
        let start = Instant::now();
        let mut alarm = alarms.at(start + Duration::from_secs(10));
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(alarm.poll_rung(&mut cx).is_pending());
        assert_eq!(alarms.filed(), 1);
        alarm.reset(start + Duration::from_secs(20));
        assert_eq!(alarms.filed(), 0, "reset takes it out");
        assert!(alarm.poll_rung(&mut cx).is_pending());
        assert_eq!(alarms.filed(), 1);
        drop(alarm);
        assert_eq!(alarms.filed(), 0, "dropping takes it out");
        // The ringer, woken for nothing, goes back to sleep.
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(alarms.filed(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_alarms_left_in_a_slot_ring_when_others_leave_it() {
        let alarms = alarms();
        let deadline = Instant::now() + Duration::from_secs(1);
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut filed: Vec<_> = (0..4).map(|_| alarms.at(deadline)).collect();
        for alarm in &mut filed {
            assert!(alarm.poll_rung(&mut cx).is_pending());
        }
        // The last filed is first in its slot's list, the first filed last.
        drop(filed.remove(3));
        drop(filed.remove(1));
        drop(filed.remove(0));
        assert_eq!(alarms.filed(), 1);
        filed.push(alarms.at(deadline));
        filed.push(alarms.at(deadline));
        for alarm in &mut filed {
            assert!(alarm.poll_rung(&mut cx).is_pending());
        }
        assert_eq!(alarms.filed(), 3);
        tokio::time::sleep_until(deadline + Duration::from_millis(1)).await;
        for alarm in &mut filed {
            assert!(alarm.poll_rung(&mut cx).is_ready(), "rung");
        }
        assert_eq!(alarms.filed(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_due_alarm_is_ready_without_being_filed() {
        let alarms = alarms();
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut alarm = alarms.at(Instant::now());
        assert!(alarm.poll_rung(&mut cx).is_ready());
        assert_eq!(alarms.filed(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_timers_each_ring_every_time_on_two_threads() {
        let alarms = alarms();
        let rings = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..200_u64)
            .map(|n| {
                let (alarms, rings) = (alarms.clone(), Arc::clone(&rings));
                tokio::spawn(async move {
                    let mut alarm = alarms.at(Instant::now());
                    for _ in 0..5 {
                        let deadline = Instant::now() + Duration::from_millis(1 + n % 7);
                        alarm.reset(deadline);
                        (&mut alarm).await;
                        assert!(Instant::now() >= deadline, "never early");
                        rings.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for task in tasks {
            tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("every alarm rings")
                .expect("no panic");
        }
        assert_eq!(rings.load(Ordering::Relaxed), 1000);
        assert_eq!(alarms.filed(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_ringer_ends_once_the_alarms_are_gone() {
        let alarms = alarms();
        let weak = Arc::downgrade(&alarms.shared);
        alarms.at(Instant::now() + Duration::from_secs(1)).await;
        let ringers = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        assert_eq!(ringers, 1);
        drop(alarms);
        assert!(weak.upgrade().is_none());
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let left = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        assert_eq!(left, 0, "the ringer ended");
    }
}
