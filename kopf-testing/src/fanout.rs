//! The live events of one resource, fanned out to its watchers: each
//! watcher has a queue of its own, bounded in events and in bytes.
//!
//! A watcher whose client does not read falls behind; once its queue is
//! over either bound, the queue is emptied at once (so that no slow reader
//! keeps events alive past the history's bounds) and the watcher is ended,
//! as the API server's cacher closes the watchers that cannot keep up
//! ("Forcing ... watcher close due to unresponsiveness"): its stream ends
//! cleanly if its client reads on, else its connection is closed. Its
//! client resumes from its last resourceVersion.
//! A resource with no watcher holds nothing.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use crate::events::WatchEvent;
use crate::server::ConnectionCloser;

/// The most events a watcher may fall behind by.
pub(crate) const WATCH_QUEUE_EVENTS: usize = 16_384;

/// The most bytes of events (by [`crate::history::weight`]) a watcher may
/// fall behind by, unless the history's byte bound is smaller.
pub(crate) const WATCH_QUEUE_BYTES: usize = 64 * 1024 * 1024;

/// Why a watcher gets no more events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// It fell behind by more than its queue holds.
    Lagged,
    /// Its resource went away (or stopped serving a version).
    Closed,
}

#[derive(Debug, Default)]
struct Queue {
    events: VecDeque<(Arc<WatchEvent>, usize)>,
    bytes: usize,
    ended: Option<Ended>,
}

/// The side of a watcher the sender and its receiver share.
#[derive(Debug)]
struct Slot {
    queue: Mutex<Queue>,
    ready: Notify,
    /// Closes the watcher's connection, if it came over one.
    connection: Option<ConnectionCloser>,
}

impl Slot {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn end(&self, why: Ended) {
        let mut queue = self.queue();
        if queue.ended.is_none() {
            queue.ended = Some(why);
        }
        queue.events = VecDeque::new();
        queue.bytes = 0;
        drop(queue);
        self.ready.notify_one();
    }
}

/// The watchers of one resource.
#[derive(Debug, Default)]
pub(crate) struct Fanout {
    slots: Vec<Arc<Slot>>,
}

impl Fanout {
    /// A new watcher of the events sent from now on; `connection` closes
    /// its connection should it fall behind too far.
    pub(crate) fn subscribe(&mut self, connection: Option<ConnectionCloser>) -> Receiver {
        self.slots.retain(|slot| Arc::strong_count(slot) > 1);
        let slot = Arc::new(Slot {
            queue: Mutex::default(),
            ready: Notify::new(),
            connection,
        });
        self.slots.push(slot.clone());
        Receiver { slot }
    }

    /// Queues an event of `weight` bytes for every watcher; ends those
    /// that would fall behind by more than [`WATCH_QUEUE_EVENTS`] or `bytes`.
    pub(crate) fn send(&mut self, event: &Arc<WatchEvent>, weight: usize, bytes: usize) {
        self.slots.retain(|slot| {
            // Only this fan-out holds it: its receiver is gone.
            if Arc::strong_count(slot) == 1 {
                return false;
            }
            let mut queue = slot.queue();
            if queue.ended.is_some() {
                return false;
            }
            if queue.events.len() >= WATCH_QUEUE_EVENTS || queue.bytes + weight > bytes {
                drop(queue);
                slot.end(Ended::Lagged);
                if let Some(connection) = &slot.connection {
                    connection.close_if_stalled();
                }
                return false;
            }
            queue.events.push_back((event.clone(), weight));
            queue.bytes += weight;
            drop(queue);
            slot.ready.notify_one();
            true
        });
    }

    /// Ends every watcher (their streams end cleanly, and clients resume).
    pub(crate) fn close(&mut self) {
        for slot in self.slots.drain(..) {
            slot.end(Ended::Closed);
        }
    }
}

impl Drop for Fanout {
    fn drop(&mut self) {
        self.close();
    }
}

/// One watcher's end of its queue.
#[derive(Debug)]
pub(crate) struct Receiver {
    slot: Arc<Slot>,
}

impl Receiver {
    /// The next queued event, `Ok(None)` if none is queued now.
    pub(crate) fn try_recv(&mut self) -> Result<Option<Arc<WatchEvent>>, Ended> {
        let mut queue = self.slot.queue();
        if let Some(why) = queue.ended {
            return Err(why);
        }
        Ok(queue.events.pop_front().map(|(event, weight)| {
            queue.bytes -= weight;
            event
        }))
    }

    /// The next event, once one is queued. Cancel-safe: an event is taken
    /// off the queue only when it is returned.
    pub(crate) async fn recv(&mut self) -> Result<Arc<WatchEvent>, Ended> {
        loop {
            if let Some(event) = self.try_recv()? {
                return Ok(event);
            }
            // A notification sent since the look above is kept for this wait.
            self.slot.ready.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventType;
    use serde_json::json;

    fn event(rv: u64) -> Arc<WatchEvent> {
        Arc::new(WatchEvent::new(
            rv,
            EventType::Added,
            Arc::new(json!({"metadata": {"name": rv.to_string()}})),
            None,
        ))
    }

    #[test]
    fn every_watcher_gets_every_event_in_order() {
        let mut fanout = Fanout::default();
        let mut a = fanout.subscribe(None);
        let mut b = fanout.subscribe(None);
        for rv in 1..=3 {
            fanout.send(&event(rv), 10, 1000);
        }
        for rx in [&mut a, &mut b] {
            let rvs: Vec<u64> = std::iter::from_fn(|| rx.try_recv().ok().flatten())
                .map(|e| e.rv)
                .collect();
            assert_eq!(rvs, [1, 2, 3]);
        }
    }

    #[test]
    fn a_watcher_behind_by_more_than_its_bytes_is_emptied_and_ended() {
        let mut fanout = Fanout::default();
        let mut slow = fanout.subscribe(None);
        let mut quick = fanout.subscribe(None);
        for rv in 1..=10 {
            fanout.send(&event(rv), 30, 100);
            assert_eq!(quick.try_recv().map(|e| e.map(|e| e.rv)), Ok(Some(rv)));
        }
        assert_eq!(slow.try_recv().map(|e| e.is_some()), Err(Ended::Lagged));
        assert!(slow.slot.queue().events.is_empty(), "nothing kept for it");
        assert_eq!(fanout.slots.len(), 1, "the sender forgets it");
    }

    #[test]
    fn dropped_watchers_are_forgotten_and_closing_ends_the_others() {
        let mut fanout = Fanout::default();
        drop(fanout.subscribe(None));
        let mut kept = fanout.subscribe(None);
        assert_eq!(fanout.slots.len(), 1);
        fanout.close();
        assert_eq!(kept.try_recv().map(|e| e.is_some()), Err(Ended::Closed));
    }
}
