//! [`Memo`]: per-object in-memory state shared by all handlers of that object.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

type Slots = HashMap<TypeId, Arc<dyn Any + Send + Sync>>;

/// Per-object memory, kept by the engine for as long as the object exists (Kopf's `memo`).
///
/// A type map: each Rust type has one slot. Put shared state behind interior
/// mutability (e.g. `Mutex`, atomics) to change it later.
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
            .field("slots", &self.lock().len())
            .finish()
    }
}

impl Memo {
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
        let slot = self.lock().get(&TypeId::of::<T>()).cloned()?;
        slot.downcast::<T>().ok()
    }

    /// Stores a value of type `T`, returning the previous one.
    pub fn insert<T: Any + Send + Sync>(&self, value: T) -> Option<Arc<T>> {
        let previous = self.lock().insert(TypeId::of::<T>(), Arc::new(value))?;
        previous.downcast::<T>().ok()
    }

    /// The value of type `T`, storing `init()` first if absent.
    pub fn get_or_insert_with<T: Any + Send + Sync>(&self, init: impl FnOnce() -> T) -> Arc<T> {
        let mut slots = self.lock();
        let slot = slots
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(init()));
        match slot.clone().downcast::<T>() {
            Ok(value) => value,
            Err(_) => unreachable!("invariant: slots are keyed by their own TypeId"),
        }
    }

    /// Removes the value of type `T`.
    pub fn remove<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.lock().remove(&TypeId::of::<T>())?.downcast::<T>().ok()
    }

    /// Whether this handle is the only one and holds nothing: dropping it
    /// loses nothing.
    pub(crate) fn is_unused(&self) -> bool {
        Arc::strong_count(&self.slots) == 1 && self.lock().is_empty()
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
}
