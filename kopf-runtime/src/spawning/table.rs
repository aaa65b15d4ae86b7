//! The spawner's objects by UID ([`ObjectTable`]): a dense vector of
//! entries, and a hash table of their places in it.
//!
//! Every object with a task has an entry, so whatever an entry costs
//! beyond its own size, every timer pays. A `HashMap` keeps its entries in
//! its buckets, a power of two of them and at most seven-eighths full: with
//! 1,000 objects, 2,048 buckets of 96 bytes, 199 bytes per object. Here the
//! buckets hold 4-byte places (5 bytes with the table's control byte), and
//! the entries lie in a vector that grows by doubling and whose spare room
//! is never written: 1,024 × 96 + 2,048 × 5 bytes, 108 per object. (This is
//! `indexmap`'s layout, but its vector grows to the table's capacity, 1,792
//! entries for 1,000.)
//!
//! Removing an entry moves the last one into its place: the order means
//! nothing. A table drained by removals gives its memory back (see
//! [`capacity`](crate::capacity)).

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::{DefaultHashBuilder, HashTable, hash_table};

use super::slots::ObjectSlot;
use crate::capacity;

/// The spawner's object slots by UID.
#[derive(Default)]
pub(super) struct ObjectTable {
    entries: Vec<(Arc<str>, ObjectSlot)>,
    /// The place of every entry in `entries`, hashed by its UID.
    places: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

impl ObjectTable {
    /// Where the entry of `uid` is.
    fn place_of(&self, uid: &str) -> Option<usize> {
        let entries = &self.entries;
        self.places
            .find(self.hasher.hash_one(uid), |&place| {
                *entries[place as usize].0 == *uid
            })
            .map(|&place| place as usize)
    }

    /// The slot of `uid`.
    pub(super) fn get(&self, uid: &str) -> Option<&ObjectSlot> {
        self.place_of(uid).map(|place| &self.entries[place].1)
    }

    /// The slot of `uid`, to change.
    pub(super) fn get_mut(&mut self, uid: &str) -> Option<&mut ObjectSlot> {
        self.place_of(uid).map(|place| &mut self.entries[place].1)
    }

    /// The slot of `uid`, made by `make` if there is none, with the table's
    /// key (`uid` itself when new) and whether it is new.
    pub(super) fn get_or_insert_with(
        &mut self,
        uid: &Arc<str>,
        make: impl FnOnce() -> ObjectSlot,
    ) -> (&Arc<str>, &mut ObjectSlot, bool) {
        let Self {
            entries,
            places,
            hasher,
        } = self;
        let found = places.entry(
            hasher.hash_one(&**uid),
            |&place| *entries[place as usize].0 == **uid,
            |&place| hasher.hash_one(&*entries[place as usize].0),
        );
        let (place, new) = match found {
            hash_table::Entry::Occupied(occupied) => (*occupied.get() as usize, false),
            hash_table::Entry::Vacant(vacant) => {
                let place = entries.len();
                vacant.insert(u32::try_from(place).expect("invariant: fewer than 2^32 objects"));
                entries.push((Arc::clone(uid), make()));
                (place, true)
            }
        };
        let (key, slot) = &mut entries[place];
        (key, slot, new)
    }

    /// Takes the slot of `uid` out; the last entry moves into its place.
    pub(super) fn remove(&mut self, uid: &str) -> Option<ObjectSlot> {
        let Self {
            entries,
            places,
            hasher,
        } = self;
        let found = places.find_entry(hasher.hash_one(uid), |&place| {
            *entries[place as usize].0 == *uid
        });
        let (place, _) = found.ok()?.remove();
        let last = entries.len() - 1;
        if place as usize != last {
            let moved = places
                .find_mut(hasher.hash_one(&*entries[last].0), |&other| {
                    other as usize == last
                })
                .expect("invariant: every entry has a place");
            *moved = place;
        }
        let (_, slot) = entries.swap_remove(place as usize);
        self.shrink();
        Some(slot)
    }

    /// Gives back what a drained table holds beyond twice its entries.
    fn shrink(&mut self) {
        let Some(capacity) = capacity::shrunk(self.entries.len(), self.entries.capacity()) else {
            return;
        };
        let Self {
            entries,
            places,
            hasher,
        } = self;
        entries.shrink_to(capacity);
        places.shrink_to(capacity, |&place| {
            hasher.hash_one(&*entries[place as usize].0)
        });
    }

    /// Every UID and its slot, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &ObjectSlot)> {
        self.entries.iter().map(|(uid, slot)| (uid, slot))
    }

    /// Every UID.
    pub(super) fn keys(&self) -> impl Iterator<Item = &Arc<str>> {
        self.entries.iter().map(|(uid, _)| uid)
    }

    /// Every slot.
    pub(super) fn values(&self) -> impl Iterator<Item = &ObjectSlot> {
        self.entries.iter().map(|(_, slot)| slot)
    }

    /// Every slot, to change.
    #[cfg(test)]
    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut ObjectSlot> {
        self.entries.iter_mut().map(|(_, slot)| slot)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;
    use crate::model::kwargs::EncodedBody;
    use crate::spawning::slots::SlotState;
    use crate::spawning::task::Owner;

    fn slot() -> ObjectSlot {
        ObjectSlot::new(EncodedBody::new(&serde_json::json!({})), Owner::default())
    }

    fn insert(table: &mut ObjectTable, uid: &str) -> bool {
        table.get_or_insert_with(&Arc::from(uid), slot).2
    }

    #[test]
    fn finds_what_it_holds_and_keeps_its_first_key() {
        let mut table = ObjectTable::default();
        let first: Arc<str> = Arc::from("a");
        assert!(table.get_or_insert_with(&first, slot).2);
        let (key, _, new) = table.get_or_insert_with(&Arc::from("a"), || unreachable!());
        assert!(!new);
        assert!(
            Arc::ptr_eq(key, &first),
            "the table's key, not the caller's"
        );
        assert!(table.get("a").is_some());
        assert!(table.get("b").is_none());
        table.get_mut("a").expect("held").state = SlotState::Closed;
        assert!(
            table
                .get("a")
                .is_some_and(|slot| slot.state == SlotState::Closed)
        );
    }

    #[test]
    fn a_removal_moves_the_last_entry_and_it_is_still_found() {
        let mut table = ObjectTable::default();
        for uid in ["a", "b", "c"] {
            insert(&mut table, uid);
        }
        table.get_mut("c").expect("held").state = SlotState::Closed;
        assert!(table.remove("a").is_some());
        assert!(table.remove("a").is_none(), "removed once");
        assert!(
            table
                .get("c")
                .is_some_and(|slot| slot.state == SlotState::Closed)
        );
        assert!(table.get("b").is_some());
        assert_eq!(table.len(), 2);
        assert!(
            table.remove("c").is_some(),
            "the moved entry, from its new place"
        );
        assert_eq!(table.keys().map(|uid| &**uid).collect::<Vec<_>>(), ["b"]);
    }

    #[test]
    fn a_drained_table_gives_its_memory_back() {
        let mut table = ObjectTable::default();
        let uids: Vec<String> = (0..10_000).map(|i| format!("uid-{i}")).collect();
        for uid in &uids {
            insert(&mut table, uid);
        }
        let full = table.entries.capacity();
        for uid in &uids[10..] {
            assert!(table.remove(uid).is_some());
        }
        assert!(
            table.entries.capacity() <= capacity::KEPT_CAPACITY,
            "{full} kept"
        );
        assert!(table.places.capacity() <= capacity::KEPT_CAPACITY * 2);
        for uid in &uids[..10] {
            assert!(table.get(uid).is_some(), "{uid} kept through the shrinks");
        }
    }

    proptest! {
        /// Any series of inserts and removals leaves the table holding what a
        /// map would, each UID in its own place.
        #[test]
        fn holds_what_a_map_holds(ops in prop::collection::vec((any::<bool>(), 0u8..40), 0..400)) {
            let mut table = ObjectTable::default();
            let mut model: HashMap<String, ()> = HashMap::new();
            for (add, key) in ops {
                let uid = key.to_string();
                if add {
                    prop_assert_eq!(insert(&mut table, &uid), model.insert(uid, ()).is_none());
                } else {
                    prop_assert_eq!(table.remove(&uid).is_some(), model.remove(&uid).is_some());
                }
            }
            prop_assert_eq!(table.len(), model.len());
            for uid in model.keys() {
                prop_assert!(table.get(uid).is_some());
            }
            let mut keys: Vec<&str> = table.keys().map(|uid| &**uid).collect();
            keys.sort_unstable();
            keys.dedup();
            prop_assert_eq!(keys.len(), model.len());
        }
    }
}
