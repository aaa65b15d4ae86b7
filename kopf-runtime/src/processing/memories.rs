//! What the operator remembers about live objects between their events:
//! Kopf's in-memory state, the memo and whether an object was first seen
//! in the operator's first listing. Everything else lives on the objects.
//!
//! One [`Memories`] serves one resource and is shared by its change
//! handlers and its daemons and timers, so they all see the same memo.
//! Each object's memo starts as a fork of the operator's memo as the
//! start-up handlers left it (see [`Memo`]): their values shared, the
//! object's own changes kept apart.
//!
//! # Guarantees
//! - An object's memo lives as long as the object is alive and something
//!   needs it: change handlers, daemons or timers, or a memo that a handler
//!   filled or kept.
//! - An object that needs none of it (e.g. an operator with only `on_event`
//!   handlers that leave the memo alone) costs no memory between events:
//!   see [`Memories::release_if_unused`]. A memo that holds only the
//!   operator's values, unchanged, counts as unused: a fresh fork is the same.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use hashbrown::HashMap;

use serde_json::Value;

use crate::model::kwargs::{Memo, MemoBase};

/// What the operator remembers about one live object.
#[derive(Debug, Default)]
pub(crate) struct ObjectMemory {
    /// The object's UID: one allocation for the object, shared with its
    /// daemons and timers.
    pub uid: Arc<str>,
    /// The memo its handlers share.
    pub memo: Memo,
    noticed_by_listing: bool,
    fully_handled_once: AtomicBool,
    /// The body whose changes were just handled, and the diff-base stored
    /// for it, until the next body of the object comes (see [`Handled`]).
    handled: Mutex<Option<Box<Handled>>>,
}

/// A body whose changes were all handled, and the diff-base (as encoded in
/// its annotation) that the operator's patch stored for it. When the patch
/// comes back, a body that carries this diff-base and has the same essence
/// has nothing to handle: it is known without building and comparing the
/// essences again.
#[derive(Debug)]
pub(crate) struct Handled {
    /// The body that was handled.
    pub body: Arc<Value>,
    /// The diff-base stored for it, as its annotation holds it.
    pub diffbase: String,
}

impl ObjectMemory {
    /// Whether resume handlers are due (Kopf's `initial`): the object was
    /// first seen in a listing and not yet fully handled.
    pub(crate) fn initial(&self) -> bool {
        self.noticed_by_listing && !self.fully_handled_once.load(Ordering::Relaxed)
    }

    /// Records that every change handler of the object is done once.
    pub(crate) fn mark_fully_handled(&self) {
        self.fully_handled_once.store(true, Ordering::Relaxed);
    }

    /// Remembers the body just handled and the diff-base stored for it, until
    /// the next [`take_handled`](Self::take_handled).
    pub(crate) fn remember_handled(&self, handled: Handled) {
        *self.lock_handled() = Some(Box::new(handled));
    }

    /// What [`remember_handled`](Self::remember_handled) left, if anything;
    /// it is forgotten here, so it is kept for one processing at most.
    pub(crate) fn take_handled(&self) -> Option<Box<Handled>> {
        self.lock_handled().take()
    }

    fn lock_handled(&self) -> MutexGuard<'_, Option<Box<Handled>>> {
        // An `Option` has no invariant a panicking holder could break.
        self.handled.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The memories of one resource's objects, by UID; cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub(crate) struct Memories {
    objects: Arc<Mutex<HashMap<Arc<str>, Arc<ObjectMemory>>>>,
    /// What every object's memo starts as.
    base: MemoBase,
}

impl Memories {
    /// Memories whose objects' memos start as forks of `base`.
    pub(crate) fn new(base: MemoBase) -> Self {
        Self {
            objects: Arc::default(),
            base,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Arc<str>, Arc<ObjectMemory>>> {
        self.objects.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The memory of `uid`, created if it is new; `initial_listing` says
    /// whether the object is being seen in the operator's first listing.
    pub(crate) fn recall(&self, uid: &str, initial_listing: bool) -> Arc<ObjectMemory> {
        let mut objects = self.lock();
        if let Some(memory) = objects.get(uid) {
            return Arc::clone(memory);
        }
        let uid: Arc<str> = Arc::from(uid);
        let memory = Arc::new(ObjectMemory {
            uid: Arc::clone(&uid),
            memo: self.base.fork(),
            noticed_by_listing: initial_listing,
            fully_handled_once: AtomicBool::new(false),
            handled: Mutex::new(None),
        });
        objects.insert(uid, Arc::clone(&memory));
        memory
    }

    /// The memo of `uid` (for its daemons and timers), created if needed.
    pub(crate) fn memo_of(&self, uid: &str) -> Memo {
        self.recall(uid, false).memo.clone()
    }

    /// A memo as a new object's starts, for handlers of an object that is not
    /// remembered (one deleted before it was ever handled).
    pub(crate) fn fresh_memo(&self) -> Memo {
        self.base.fork()
    }

    /// Forgets `uid` (its object is gone); its memory, if there was one.
    pub(crate) fn forget(&self, uid: &str) -> Option<Arc<ObjectMemory>> {
        self.lock().remove(uid)
    }

    /// Forgets `uid` if nothing would miss its memory: nobody holds it or
    /// its memo, the memo holds what a fresh one would (nothing, or the
    /// operator's values unchanged), and no resume handler is due (it was not
    /// first seen in a listing, or it has been fully handled since). A fresh
    /// memory later is then the same as this one. Returns whether it was
    /// forgotten.
    pub(crate) fn release_if_unused(&self, uid: &str) -> bool {
        let mut objects = self.lock();
        let unused = objects.get(uid).is_some_and(|memory| {
            Arc::strong_count(memory) == 1 && !memory.initial() && memory.memo.is_unused(&self.base)
        });
        if unused {
            objects.remove(uid);
        }
        unused
    }

    #[cfg(test)]
    /// How many objects are remembered.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    #[cfg(test)]
    /// Whether no object is remembered.
    pub(crate) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filled_memo_is_shared_and_kept() {
        let memories = Memories::default();
        let memory = memories.recall("uid-1", true);
        memory.memo.insert(42_u32);
        assert_eq!(memories.memo_of("uid-1").get::<u32>().as_deref(), Some(&42));
        drop(memory);
        assert!(
            !memories.release_if_unused("uid-1"),
            "a filled memo is kept"
        );
    }

    #[test]
    fn a_handled_body_is_kept_for_one_processing_only() {
        let memory = Memories::default().recall("u", false);
        assert!(memory.take_handled().is_none());
        let body = Arc::new(serde_json::json!({"data": {"k": "v"}}));
        memory.remember_handled(Handled {
            body: Arc::clone(&body),
            diffbase: "{}\n".into(),
        });
        let handled = memory.take_handled().expect("remembered");
        assert!(Arc::ptr_eq(&handled.body, &body));
        assert_eq!(handled.diffbase, "{}\n");
        assert!(memory.take_handled().is_none(), "taken once");
    }

    #[test]
    fn the_memo_is_shared_by_handlers_and_tasks() {
        let memories = Memories::default();
        let memory = memories.recall("u", false);
        memories.memo_of("u").insert("from a timer");
        assert_eq!(memory.memo.get::<&str>().as_deref(), Some(&"from a timer"));
        assert_eq!(memories.len(), 1);
    }

    #[test]
    fn the_first_sighting_decides_initial() {
        let memories = Memories::default();
        let listed = memories.recall("u", true);
        assert!(listed.initial());
        assert!(
            memories.recall("u", false).initial(),
            "kept from the first sighting"
        );
        listed.mark_fully_handled();
        assert!(!listed.initial());
        assert!(!memories.recall("v", false).initial());
    }

    #[test]
    fn an_unused_memory_is_released_and_a_used_one_kept() {
        let memories = Memories::default();
        drop(memories.recall("empty", false));
        assert!(memories.release_if_unused("empty"));
        assert!(memories.is_empty());

        drop(memories.recall("filled", false));
        memories.memo_of("filled").insert(1_u8);
        assert!(!memories.release_if_unused("filled"));

        let held = memories.memo_of("held");
        assert!(
            !memories.release_if_unused("held"),
            "a handler kept the memo"
        );
        drop(held);
        assert!(memories.release_if_unused("held"));

        let memory = memories.recall("busy", false);
        assert!(!memories.release_if_unused("busy"), "still in use");
        drop(memory);

        drop(memories.recall("listed", true));
        assert!(
            !memories.release_if_unused("listed"),
            "resume handlers may still be due"
        );
        memories.recall("listed", false).mark_fully_handled();
        assert!(memories.release_if_unused("listed"));
        assert_eq!(memories.len(), 2);
    }

    #[test]
    fn memos_start_from_the_operators_and_keep_their_own_changes() {
        let operator = Memo::new();
        operator.insert(String::from("from start-up"));
        let memories = Memories::new(operator.freeze());
        let a = memories.recall("a", false);
        let b = memories.recall("b", false);
        let (Some(in_a), Some(in_b)) = (a.memo.get::<String>(), b.memo.get::<String>()) else {
            panic!("both objects' memos hold the operator's value");
        };
        assert!(Arc::ptr_eq(&in_a, &in_b), "shared, not copied");
        a.memo.insert(1_u8);
        assert!(
            b.memo.get::<u8>().is_none(),
            "one object's value is its own"
        );
        assert!(memories.fresh_memo().get::<String>().is_some());
        assert!(memories.fresh_memo().get::<u8>().is_none());
        drop((a, b));

        assert!(
            memories.release_if_unused("b"),
            "the operator's values alone: a fresh memo is the same"
        );
        assert!(!memories.release_if_unused("a"), "its own value is kept");
        memories.memo_of("a").remove::<String>();
        memories.memo_of("a").remove::<u8>();
        assert!(
            !memories.release_if_unused("a"),
            "a fresh memo would have the operator's value back"
        );
    }

    #[test]
    fn forgetting_returns_the_memory() {
        let memories = Memories::default();
        memories.memo_of("u").insert(7_i32);
        let forgotten = memories.forget("u").expect("remembered");
        assert_eq!(forgotten.memo.get::<i32>().as_deref(), Some(&7));
        assert!(memories.forget("u").is_none());
    }
}
