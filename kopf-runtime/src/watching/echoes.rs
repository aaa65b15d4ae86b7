//! The operator's own patches coming back on the watch stream.
//!
//! Every patch the operator sends comes back as a `MODIFIED` event. When
//! handling an object ends with a patch that only records what was done (the
//! handlers' outcomes and the new diff-base, nothing left to do later), and
//! that patch carries the handled body's `resourceVersion` as a precondition,
//! the server applies it only if the object is still exactly that body. The
//! object at the version the server answers with is then the handled body
//! with the patch applied, and nothing else: its event holds nothing to
//! handle. [`Echoes`] remembers that version, so the watch recognises the
//! event by UID and version alone and does not even decode its body. A
//! re-list after `410 Gone`, which the event may have been lost to,
//! recognises the listed object so too.
//!
//! So too for the patch that adds the finalizer, when the object is then
//! handled from the server's answer and nothing is left to do: the object
//! at the answered version is the body that was handled. At start-up that
//! is one event per object that daemons or timers keep.
//!
//! An expectation lives until the next event or processing of its object,
//! whichever comes first, so the book holds only the patches still in flight.
//!
//! # Guarantees
//! - An event is skipped only at the exact version the server answered a
//!   guarded patch with, or the finalizer's patch whose answer was
//!   handled. A patch refused with `409 Conflict` (the object changed
//!   meanwhile) is re-sent unguarded, and its echo is handled.
//! - Any other event of the object drops its expectation.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use hashbrown::HashMap;

use crate::capacity;

/// The versions at which the operator's guarded patches will come back, by
/// the UID of their object; cheap to clone (shared by the processing of a
/// resource and its watch). See the [module docs](self).
#[derive(Debug, Clone, Default)]
pub(crate) struct Echoes {
    /// By the object's UID, shared with its memory: no copy of it here.
    expected: Arc<Mutex<HashMap<Arc<str>, Box<str>>>>,
}

impl Echoes {
    fn lock(&self) -> MutexGuard<'_, HashMap<Arc<str>, Box<str>>> {
        // The map holds no invariant a panicking holder could break halfway.
        self.expected.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Expects the object `uid` back at `version` with nothing new in it.
    pub(crate) fn expect(&self, uid: &Arc<str>, version: &str) {
        let mut expected = self.lock();
        match expected.get_mut(&**uid) {
            Some(known) => *known = version.into(),
            None => {
                expected.insert(Arc::clone(uid), version.into());
            }
        }
    }

    /// Gives back most of a table that a burst of patches grew (one per
    /// listed object at start-up) once their echoes have come (see
    /// [`capacity`](crate::capacity)).
    fn removed(expected: &mut HashMap<Arc<str>, Box<str>>) {
        if let Some(capacity) = capacity::shrunk(expected.len(), expected.capacity()) {
            expected.shrink_to(capacity);
        }
    }

    /// Whether the object `uid` at `version` is an expected echo. The
    /// object's expectation, if any, is dropped either way.
    pub(crate) fn take(&self, uid: &str, version: &str) -> bool {
        let mut expected = self.lock();
        if expected.is_empty() {
            return false;
        }
        let taken = expected.remove(uid);
        Self::removed(&mut expected);
        taken.is_some_and(|known| &*known == version)
    }

    /// Drops the expectation of `uid` (its object is gone).
    pub(crate) fn forget(&self, uid: &str) {
        let mut expected = self.lock();
        if !expected.is_empty() {
            expected.remove(uid);
            Self::removed(&mut expected);
        }
    }

    #[cfg(test)]
    /// How many echoes the table has room for.
    fn capacity(&self) -> usize {
        self.lock().capacity()
    }

    #[cfg(test)]
    /// How many echoes are expected.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no echo is expected.
    pub(crate) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uid(uid: &str) -> Arc<str> {
        Arc::from(uid)
    }

    #[test]
    fn a_drained_burst_gives_its_table_back() {
        let echoes = Echoes::default();
        let uids: Vec<_> = (0..10_000).map(|n| uid(&n.to_string())).collect();
        for uid in &uids {
            echoes.expect(uid, "1");
        }
        let grown = echoes.capacity();
        for uid in &uids[..9_990] {
            assert!(echoes.take(uid, "1"));
        }
        assert!(echoes.capacity() <= 64, "{} of {grown}", echoes.capacity());
        for uid in &uids[9_990..] {
            assert!(echoes.take(uid, "1"), "kept through the shrinks");
        }
        assert!(echoes.is_empty());
    }

    #[test]
    fn another_version_drops_the_expectation() {
        let echoes = Echoes::default();
        echoes.expect(&uid("uid-1"), "42");
        assert!(
            !echoes.take("uid-1", "41"),
            "another version is not the echo"
        );
        assert!(
            !echoes.take("uid-1", "42"),
            "and it dropped the expectation"
        );
        echoes.expect(&uid("uid-1"), "43");
        assert!(echoes.take("uid-1", "43"));
        assert!(echoes.is_empty());
    }

    #[test]
    fn an_echo_is_taken_once() {
        let echoes = Echoes::default();
        echoes.expect(&uid("u"), "5");
        assert!(echoes.take("u", "5"));
        assert!(!echoes.take("u", "5"), "taken already");
    }

    #[test]
    fn a_newer_expectation_replaces_the_older() {
        let echoes = Echoes::default();
        echoes.expect(&uid("u"), "5");
        echoes.expect(&uid("u"), "7");
        assert_eq!(echoes.len(), 1);
        assert!(echoes.take("u", "7"));
    }

    #[test]
    fn objects_are_kept_apart() {
        let echoes = Echoes::default();
        echoes.expect(&uid("u"), "5");
        assert!(!echoes.take("v", "5"), "another object at the same version");
        assert!(echoes.take("u", "5"), "the expectation of u is untouched");
    }

    #[test]
    fn forgetting_drops_the_expectation() {
        let echoes = Echoes::default();
        echoes.expect(&uid("u"), "5");
        echoes.forget("u");
        assert!(echoes.is_empty());
        assert!(!echoes.take("u", "5"));
    }
}
