//! What the [`Spawner`](super::Spawner) keeps per object: its tasks, the
//! handlers finished for good, its live body and its last change.
//!
//! Sized for the common case of tens of thousands of objects with one timer
//! or daemon each: an object with one task holds it inline, with no table
//! of its own.

use std::sync::Arc;

use smallvec::SmallVec;
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::liveness::TaskShared;
use super::task::Owner;
use crate::model::kwargs::{BodyCell, EncodedBody};
use crate::spawning::stopping::StopReason;

/// A live task of an object.
pub(super) struct Entry {
    pub(super) shared: Arc<TaskShared>,
    pub(super) abort: AbortHandle,
    pub(super) stopping: bool,
}

impl Entry {
    /// The handler's id.
    fn id(&self) -> &str {
        &self.shared.id
    }
}

/// The live tasks of one object, by handler id (their own): a handful at
/// most, so a list searched in order, with room for one inline.
#[derive(Default)]
pub(super) struct SlotTasks(SmallVec<[Entry; 1]>);

impl SlotTasks {
    pub(super) fn get(&self, id: &str) -> Option<&Entry> {
        self.0.iter().find(|entry| entry.id() == id)
    }

    pub(super) fn get_mut(&mut self, id: &str) -> Option<&mut Entry> {
        self.0.iter_mut().find(|entry| entry.id() == id)
    }

    /// Adds a task; the caller checked that its handler has none.
    pub(super) fn insert(&mut self, entry: Entry) {
        debug_assert!(self.get(entry.id()).is_none(), "one task per handler");
        self.0.push(entry);
    }

    pub(super) fn remove(&mut self, id: &str) -> Option<Entry> {
        let at = self.0.iter().position(|entry| entry.id() == id)?;
        Some(self.0.swap_remove(at))
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(Entry::id)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Entry> {
        self.0.iter()
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Entry> {
        self.0.iter_mut()
    }
}

/// Everything the spawner remembers about one object.
pub(super) struct ObjectSlot {
    /// The object's latest body, as text: its tasks decode it when a call
    /// reads it (see [`Body`](crate::Body)).
    pub(super) body: Arc<BodyCell>,
    pub(super) changed: LastChange,
    pub(super) tasks: SlotTasks,
    /// The handlers whose task ended on its own for good (not spawned again).
    pub(super) finished: Finished,
    pub(super) state: SlotState,
    /// The resource whose tasks serve the object.
    pub(super) owner: Owner,
}

impl ObjectSlot {
    pub(super) fn new(body: EncodedBody, owner: Owner) -> Self {
        Self {
            body: BodyCell::new(body),
            changed: LastChange::new(),
            tasks: SlotTasks::default(),
            finished: Finished::default(),
            state: SlotState::Open,
            owner,
        }
    }

    /// A new body: running tasks see it live, and idle timers start waiting
    /// afresh. An identical body is not a change.
    pub(super) fn update_body(&mut self, body: &EncodedBody) -> bool {
        let modified = self.body.replace(body.clone());
        if modified {
            self.changed.bump();
        }
        modified
    }

    pub(super) fn is_finished(&self, id: &str) -> bool {
        self.finished.contains(id)
    }

    pub(super) fn finish(&mut self, id: &Arc<str>) {
        if !self.is_finished(id) {
            self.finished.push(Arc::clone(id));
        }
    }
}

/// The handlers that finished for good on an object: one word while there
/// are none, as on almost every object (a slot is kept per object).
#[derive(Default)]
#[expect(
    clippy::box_collection,
    reason = "one word in every object's slot; the second allocation is made only once a handler finishes for good"
)]
pub(super) struct Finished(Option<Box<Vec<Arc<str>>>>);

impl Finished {
    fn contains(&self, id: &str) -> bool {
        self.0
            .iter()
            .flat_map(|ids| ids.iter())
            .any(|done| &**done == id)
    }

    fn push(&mut self, id: Arc<str>) {
        self.0.get_or_insert_default().push(id);
    }

    pub(super) fn clear(&mut self) {
        self.0 = None;
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |ids| ids.len())
    }
}

/// Where an object is in its life, as far as its tasks go; it only ever
/// moves forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum SlotState {
    /// Tasks are spawned as its handlers match.
    Open,
    /// Being deleted: nothing more is spawned.
    Closed,
    /// Stopped as gone (deleted, vanished): kept as a tombstone, so that a
    /// late [`Spawner::ensure_encoded`](super::Spawner::ensure_encoded) for the UID (from
    /// processing that was already under way when the deletion was seen)
    /// spawns nothing.
    Gone,
    /// [`Spawner::forget`](super::Spawner::forget) was called: the slot goes
    /// once its tasks ended.
    Forgotten,
}

impl SlotState {
    /// The state after a stop for `reason`.
    pub(super) fn after(self, reason: StopReason) -> Self {
        let next = if reason.object_is_gone() {
            Self::Gone
        } else if reason.ends_spawning() {
            Self::Closed
        } else {
            Self::Open
        };
        self.max(next)
    }
}

/// When an object last changed, for timers with `idle`. A channel only once
/// such a timer subscribes: most objects never have one, and a channel costs
/// about 360 bytes per object.
pub(super) struct LastChange {
    at: Instant,
    pub(super) watched: Option<watch::Sender<Instant>>,
}

impl LastChange {
    fn new() -> Self {
        Self {
            at: Instant::now(),
            watched: None,
        }
    }

    /// The object changed now.
    pub(super) fn bump(&mut self) {
        self.at = Instant::now();
        if let Some(watched) = &self.watched {
            watched.send_replace(self.at);
        }
    }

    /// A receiver of the changes from now on, seeing the last one first.
    pub(super) fn subscribe(&mut self) -> watch::Receiver<Instant> {
        let at = self.at;
        self.watched
            .get_or_insert_with(|| watch::Sender::new(at))
            .subscribe()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// The spawner's table holds a slot per object inline, at half its
    /// capacity or more: every word of a slot costs about two per object.
    #[test]
    fn a_slot_is_at_most_80_bytes() {
        assert!(std::mem::size_of::<ObjectSlot>() <= 80);
    }

    #[test]
    fn finished_handlers_are_remembered_once() {
        let mut slot = ObjectSlot::new(EncodedBody::new(&Value::Null), Owner::default());
        let id: Arc<str> = Arc::from("d");
        assert!(!slot.is_finished("d"));
        slot.finish(&id);
        slot.finish(&id);
        assert!(slot.is_finished("d"));
        assert_eq!(slot.finished.len(), 1);
    }
}
