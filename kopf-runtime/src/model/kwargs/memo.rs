//! [`Memo`]: what handlers keep in memory: one memo for the whole operator,
//! and one per object, which starts as a copy of the operator's.
//!
//! The operator-wide memo is frozen once the start-up handlers have ended
//! ([`Memo::freeze`]); each object's memo is a fork of that snapshot
//! ([`MemoBase::fork`]), which reads the snapshot in place until the object's
//! handlers change their memo, and copies it then (copy on write). A fork of
//! an empty snapshot is what [`Memo::new`] makes.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

type Map = HashMap<TypeId, Arc<dyn Any + Send + Sync>>;

/// The values of one memo.
enum Slots {
    /// Values of its own.
    Own(Map),
    /// The operator-wide values it was forked from, unchanged since: read
    /// in place, copied on the first change (never empty).
    Shared(Arc<Map>),
}

impl Default for Slots {
    fn default() -> Self {
        Slots::Own(Map::new())
    }
}

impl Slots {
    fn map(&self) -> &Map {
        match self {
            Slots::Own(map) => map,
            Slots::Shared(map) => map,
        }
    }

    /// Its own values, copied from the shared ones first if need be.
    fn own(&mut self) -> &mut Map {
        if let Slots::Shared(shared) = self {
            *self = Slots::Own(Map::clone(shared));
        }
        match self {
            Slots::Own(map) => map,
            Slots::Shared(_) => unreachable!("invariant: shared values were just copied"),
        }
    }
}

/// In-memory state that handlers keep (Kopf's `memo`): a type map, one
/// value per Rust type, each behind an `Arc`.
///
/// There is one memo for the whole operator and one per object:
///
/// - **The operator's memo** is what `on_startup`, `on_cleanup` and
///   `on_login` handlers receive: one memo, the same for all of them, for
///   the whole life of the operator. Start-up handlers fill it; clean-up
///   handlers find there what start-up handlers put. An embedding
///   application may pass its own ([`Operator::memo`](crate::Operator::memo)).
/// - **An object's memo** is what its change, event and index handlers, its
///   daemons and its timers receive, for as long as the object lives. It
///   starts as a shallow copy of the operator's memo as the start-up
///   handlers left it: **the values they put there are shared** (the same
///   `Arc`, so what is changed inside them, behind a `Mutex` or an atomic,
///   is seen by every object and by the clean-up handlers), while **what an
///   object's handlers insert, replace or remove stays with that object**.
///   What is put in the operator's memo after the start-up is not seen by
///   the objects. Index handlers receive such a copy too, but a new one at
///   each call, not the object's.
///
/// Put shared state behind interior mutability (e.g. `Mutex`, atomics) to
/// change it later.
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use kopf_runtime as kopf;
///
/// /// How many ConfigMaps were created: one counter for the whole operator.
/// #[derive(Default)]
/// struct Created(AtomicU32);
///
/// /// What one object's handlers keep for that object only.
/// struct Greeted(String);
///
/// #[kopf::on_startup]
/// async fn boot(memo: &kopf::Memo) {
///     memo.insert(Created::default());
/// }
///
/// #[kopf::on_create("", "v1", "configmaps")]
/// async fn created(memo: &kopf::Memo, name: &str) -> kopf::Result<()> {
///     // The start-up handler's value: the same `Arc` for every object.
///     if let Some(created) = memo.get::<Created>() {
///         created.0.fetch_add(1, Ordering::Relaxed);
///     }
///     // This object's own value: no other object's memo has it.
///     memo.insert(Greeted(format!("hello, {name}")));
///     Ok(())
/// }
///
/// #[kopf::on_cleanup]
/// async fn bye(memo: &kopf::Memo, logger: &kopf::Logger) {
///     let created = memo.get::<Created>().map_or(0, |c| c.0.load(Ordering::Relaxed));
///     logger.info(format!("{created} ConfigMaps were created"));
///     assert!(memo.get::<Greeted>().is_none(), "the objects' own values are theirs");
/// }
/// # fn main() {}
/// ```
///
/// A memo on its own:
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// let memo = kopf_runtime::Memo::new();
/// let counter = memo.get_or_insert_with(|| AtomicU32::new(0));
/// counter.fetch_add(1, Ordering::SeqCst);
/// assert_eq!(memo.get::<AtomicU32>().map(|c| c.load(Ordering::SeqCst)), Some(1));
/// ```
#[derive(Clone, Default)]
pub struct Memo {
    slots: Arc<Mutex<Slots>>,
}

impl fmt::Debug for Memo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Memo")
            .field("slots", &self.lock().map().len())
            .finish()
    }
}

impl Memo {
    /// Reads the reference count of its slots with a plain load, for
    /// `Run::warm` (in `spawning/runner.rs`): the value means nothing.
    pub(crate) fn warm(&self) -> usize {
        Arc::strong_count(&self.slots)
    }

    /// An empty memo.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Slots> {
        self.slots
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The value of type `T`, if stored.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let slot = self.lock().map().get(&TypeId::of::<T>()).cloned()?;
        slot.downcast::<T>().ok()
    }

    /// Stores a value of type `T`, returning the previous one.
    pub fn insert<T: Any + Send + Sync>(&self, value: T) -> Option<Arc<T>> {
        let previous = self
            .lock()
            .own()
            .insert(TypeId::of::<T>(), Arc::new(value))?;
        previous.downcast::<T>().ok()
    }

    /// The value of type `T`, storing `init()` first if absent.
    pub fn get_or_insert_with<T: Any + Send + Sync>(&self, init: impl FnOnce() -> T) -> Arc<T> {
        let mut slots = self.lock();
        let key = TypeId::of::<T>();
        let slot = match slots.map().get(&key) {
            Some(slot) => Arc::clone(slot),
            None => Arc::clone(slots.own().entry(key).or_insert_with(|| Arc::new(init()))),
        };
        match slot.downcast::<T>() {
            Ok(value) => value,
            Err(_) => unreachable!("invariant: slots are keyed by their own TypeId"),
        }
    }

    /// Removes the value of type `T`.
    pub fn remove<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let key = TypeId::of::<T>();
        let mut slots = self.lock();
        if !slots.map().contains_key(&key) {
            return None;
        }
        slots.own().remove(&key)?.downcast::<T>().ok()
    }

    /// The memo as it is now, for the objects' memos to start from; later
    /// changes of this memo are not seen by them.
    pub(crate) fn freeze(&self) -> MemoBase {
        match &*self.lock() {
            Slots::Shared(shared) => MemoBase(Some(Arc::clone(shared))),
            Slots::Own(map) if map.is_empty() => MemoBase(None),
            Slots::Own(map) => MemoBase(Some(Arc::new(map.clone()))),
        }
    }

    /// Whether this handle is the only one and holds what a fresh fork of
    /// `base` would: dropping it loses nothing.
    pub(crate) fn is_unused(&self, base: &MemoBase) -> bool {
        Arc::strong_count(&self.slots) == 1
            && match (&*self.lock(), &base.0) {
                (Slots::Own(map), None) => map.is_empty(),
                (Slots::Shared(shared), Some(base)) => Arc::ptr_eq(shared, base),
                // A fork of a non-empty base that was changed, or one of
                // another base: it differs from a fresh one.
                _ => false,
            }
    }
}

/// The operator's memo as the start-up handlers left it, frozen: what every
/// object's memo starts as. Cheap to clone (shared).
#[derive(Clone, Default)]
pub(crate) struct MemoBase(Option<Arc<Map>>);

impl fmt::Debug for MemoBase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("MemoBase")
            .field(&self.0.as_ref().map_or(0, |map| map.len()))
            .finish()
    }
}

impl MemoBase {
    /// A new memo holding this base's values (the same `Arc`s); it copies
    /// them on its first change, so that its own insertions, replacements
    /// and removals stay its own. A fork of an empty base is a
    /// [`Memo::new`], at the same cost.
    pub(crate) fn fork(&self) -> Memo {
        let slots = match &self.0 {
            None => Slots::Own(Map::new()),
            Some(shared) => Slots::Shared(Arc::clone(shared)),
        };
        Memo {
            slots: Arc::new(Mutex::new(slots)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_slots_per_type() {
        let memo = Memo::new();
        assert_eq!(memo.clone().insert(5_u8), None);
        assert_eq!(memo.insert(String::from("x")), None);
        assert_eq!(memo.get::<u8>().as_deref(), Some(&5));
        assert_eq!(memo.insert(6_u8).as_deref(), Some(&5));
        assert_eq!(
            memo.remove::<String>().as_deref().map(String::as_str),
            Some("x")
        );
        assert!(memo.get::<String>().is_none());
    }

    #[test]
    fn forks_share_the_base_values_and_keep_their_own_changes() {
        let operator = Memo::new();
        operator.insert(String::from("from start-up"));
        operator.insert(1_u8);
        let base = operator.freeze();
        let (a, b) = (base.fork(), base.fork());

        let (in_a, in_b) = (a.get::<String>(), b.get::<String>());
        let (Some(in_a), Some(in_b)) = (in_a, in_b) else {
            panic!("both forks hold the base's values");
        };
        assert!(Arc::ptr_eq(&in_a, &in_b), "the same value, not a copy");

        a.insert(7_u32);
        assert_eq!(a.insert(2_u8).as_deref(), Some(&1));
        assert!(a.remove::<String>().is_some());
        assert_eq!(a.get::<u32>().as_deref(), Some(&7));
        assert!(b.get::<u32>().is_none(), "an insertion stays with its fork");
        assert_eq!(b.get::<u8>().as_deref(), Some(&1), "so does a replacement");
        assert!(b.get::<String>().is_some(), "and a removal");
        assert!(
            operator.get::<u32>().is_none(),
            "the operator's memo is apart"
        );
        assert!(base.fork().get::<String>().is_some(), "and so is the base");
    }

    #[test]
    fn reading_or_removing_what_is_absent_copies_nothing() {
        let operator = Memo::new();
        operator.insert(1_u8);
        let base = operator.freeze();
        let fork = base.fork();
        assert_eq!(*fork.get_or_insert_with(|| 9_u8), 1);
        assert!(fork.remove::<u32>().is_none());
        assert!(fork.is_unused(&base), "still the base's values, in place");
        fork.get_or_insert_with(|| 3_u32);
        assert!(!fork.is_unused(&base));
    }

    #[test]
    fn the_base_is_a_snapshot() {
        let operator = Memo::new();
        operator.insert(1_u8);
        let base = operator.freeze();
        let fork = base.fork();
        operator.insert(2_u8);
        operator.insert(String::from("later"));
        assert_eq!(fork.get::<u8>().as_deref(), Some(&1));
        assert!(base.fork().get::<String>().is_none());
        assert_eq!(operator.freeze().fork().get::<u8>().as_deref(), Some(&2));
    }

    #[test]
    fn a_fork_of_an_empty_base_is_a_new_memo() {
        let base = Memo::new().freeze();
        assert!(base.0.is_none());
        let fork = base.fork();
        assert!(matches!(&*fork.lock(), Slots::Own(map) if map.capacity() == 0));
        assert!(fork.is_unused(&base));
        fork.insert(1_u8);
        assert!(!fork.is_unused(&base));
        fork.remove::<u8>();
        assert!(fork.is_unused(&base), "empty again: as a fresh one");
    }

    #[test]
    fn a_fork_that_removed_the_base_values_is_not_unused() {
        let operator = Memo::new();
        operator.insert(1_u8);
        let base = operator.freeze();
        let fork = base.fork();
        fork.remove::<u8>();
        assert!(fork.get::<u8>().is_none());
        assert!(!fork.is_unused(&base), "a fresh fork would have the value");
        let held = base.fork();
        let _other = held.clone();
        assert!(!held.is_unused(&base), "another handle holds it");
    }

    #[test]
    fn a_memo_costs_what_it_did_before_forks() {
        // One allocation, as large as a bare map's mutex: a fork's variant
        // lives in the map's niche.
        assert_eq!(
            std::mem::size_of::<Mutex<Slots>>(),
            std::mem::size_of::<Mutex<Map>>()
        );
    }
}
