//! The pure state machine behind a watch: which objects are alive, by UID.
//!
//! Fed with listing and watch inputs, it emits [`ObjectEvent`]s. It keeps
//! only the UID, namespace, name and `resourceVersion` of each object; bodies
//! stay with the consumer.
//!
//! # Guarantees
//!
//! - Every listed or applied object is reported as [`ObjectEvent::Upserted`],
//!   marked [`Seen::New`], [`Seen::Changed`] or [`Seen::Unchanged`]
//!   (same `resourceVersion` as last seen, e.g. in a re-list); one that does
//!   not decode is tracked by its identity alike and reported as
//!   [`ObjectEvent::Undecodable`].
//! - A re-listed object whose body the consumer has at its version (see
//!   [`ObjectTracker::relisted`]) may be marked seen without being fed: it is
//!   not reported, nor vanished when the listing completes.
//! - When a listing completes, every UID known before but absent from it is
//!   reported as [`DeletedBy::Vanished`], then [`ObjectEvent::Synced`].
//! - Objects are keyed by UID: a UID seen under a different namespace/name is
//!   the old object vanished plus a new one; a namespace/name seen with a new
//!   UID while the old UID is still known reports the old UID vanished first.
//!   So no two live UIDs ever share a name, and the consumer never confuses a
//!   re-created object with its predecessor.
//!
//! # Memory
//!
//! A tracker may hold tens of thousands of objects, so each one is packed into
//! a 20-byte entry in a dense slab, and the texts of all entries (UID,
//! `resourceVersion`, name) lie end to end in one buffer; the namespace is an
//! index into a list of the namespaces seen. Two hash tables of slab indexes
//! (4 bytes and a control byte per bucket) find an entry by UID and by
//! namespace/name. So a tracker makes a handful of large allocations, not one
//! per object: about 30 to 60 bytes per object for the slab and tables, by
//! how full they are, plus the texts themselves (62 bytes for a 36-byte UID,
//! a 9-byte `resourceVersion` and a 17-byte name) and the slack of their
//! growing buffer. Between watch events, the memory freed by bodies is not
//! pinned by small allocations of the tracker scattered among it. Texts of
//! removed or updated entries are garbage until they are most of the
//! buffer, which is then rewritten.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::{DefaultHashBuilder, HashTable};
use kube::api::DynamicObject;
use kube::core::ApiResource;
use serde_json::{Value, json};

use super::{DeletedBy, ObjectEvent, Seen};
use crate::fields::{meta_str, meta_strs};

/// One input to the [`ObjectTracker`]: a listing step or a watch event.
#[derive(Debug, Clone)]
pub(crate) enum WatchInput {
    /// A fresh listing begins (after start, `410 Gone`, or a restart).
    ListStarted,
    /// An object of the listing in progress (its JSON body).
    Listed(Value),
    /// The listing is complete.
    ListDone,
    /// A watch `ADDED` or `MODIFIED` event.
    Applied(Value),
    /// A watch `DELETED` event.
    Deleted(Value),
    /// A listed or applied object that does not decode (see
    /// the runtime's `decoding` module): its identity only, and why.
    Undecodable {
        /// `apiVersion`, `kind` and the identifying metadata.
        identity: Value,
        /// Why the object does not decode.
        reason: Arc<str>,
    },
    /// A watch `DELETED` event whose object does not decode: its identity.
    DeletedUndecodable(Value),
}

impl From<kube::runtime::watcher::Event<DynamicObject>> for WatchInput {
    fn from(event: kube::runtime::watcher::Event<DynamicObject>) -> Self {
        use kube::runtime::watcher::Event;
        // A DynamicObject is a JSON map with typed metadata: it always serializes.
        let body = |obj: DynamicObject| serde_json::to_value(obj).unwrap_or(Value::Null);
        match event {
            Event::Init => Self::ListStarted,
            Event::InitApply(obj) => Self::Listed(body(obj)),
            Event::InitDone => Self::ListDone,
            Event::Apply(obj) => Self::Applied(body(obj)),
            Event::Delete(obj) => Self::Deleted(body(obj)),
        }
    }
}

/// The namespace index of cluster-scoped objects.
const CLUSTER_SCOPED: u32 = u32::MAX;

/// Garbage in the text buffer below which it is never compacted.
const COMPACT_MIN_GARBAGE: usize = 64 * 1024;

/// One live object, packed into 20 bytes. Its UID, `resourceVersion` and
/// name are in the tracker's text buffer, end to end, from `start`.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Where the entry's text begins in the buffer.
    start: u32,
    /// The length of the entry's text (UID, `resourceVersion` and name).
    len: u32,
    /// The length of the UID, in bytes.
    uid_len: u16,
    /// The length of the `resourceVersion`, in bytes.
    rv_len: u16,
    /// An index into [`ObjectTracker::namespaces`], or [`CLUSTER_SCOPED`].
    namespace: u32,
    /// The listing in which the object was last seen alive. Epochs wrap
    /// around and are only compared for equality.
    epoch: u32,
}

impl Entry {
    /// Whether an object's UID, `resourceVersion` and name fit an entry:
    /// under 64 KiB for the first two (UIDs are 36 bytes, versions are
    /// numbers), and under 4 GiB together.
    fn fits(uid: &str, rv: &str, name: &str) -> bool {
        u16::try_from(uid.len()).is_ok()
            && u16::try_from(rv.len()).is_ok()
            && u32::try_from(uid.len() + rv.len() + name.len()).is_ok()
    }

    fn text<'a>(&self, buffer: &'a str) -> &'a str {
        &buffer[self.start as usize..][..self.len as usize]
    }

    fn uid<'a>(&self, buffer: &'a str) -> &'a str {
        &self.text(buffer)[..usize::from(self.uid_len)]
    }

    fn resource_version<'a>(&self, buffer: &'a str) -> &'a str {
        &self.text(buffer)[usize::from(self.uid_len)..][..usize::from(self.rv_len)]
    }

    fn name<'a>(&self, buffer: &'a str) -> &'a str {
        &self.text(buffer)[usize::from(self.uid_len) + usize::from(self.rv_len)..]
    }
}

/// Tracks the live objects of one watch scope; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct ObjectTracker {
    resource: ApiResource,
    /// The live objects, densely packed in no particular order.
    entries: Vec<Entry>,
    /// The texts of the entries, end to end; texts of removed or updated
    /// entries stay as garbage until the buffer is compacted.
    texts: String,
    /// How many bytes of `texts` belong to no entry.
    garbage: usize,
    /// Indexes into `entries`, hashed by the UID of the entry.
    by_uid: HashTable<u32>,
    /// Indexes into `entries`, hashed by the namespace index and name of the
    /// entry. Like `by_uid`, it holds every live entry exactly once.
    by_name: HashTable<u32>,
    /// The hasher of both tables.
    hasher: DefaultHashBuilder,
    /// Namespace names, shared by all objects in them; never forgotten.
    namespaces: Vec<Arc<str>>,
    /// The index of each name in `namespaces`.
    namespace_ids: HashMap<Arc<str>, u32>,
    epoch: u32,
    /// Whether a listing has completed: the consumer has the body of every
    /// live object at the version recorded (see [`Self::relisted`]).
    listed: bool,
}

impl ObjectTracker {
    /// An empty tracker for objects of `resource`.
    pub(crate) fn new(resource: ApiResource) -> Self {
        Self {
            resource,
            entries: Vec::new(),
            texts: String::new(),
            garbage: 0,
            by_uid: HashTable::new(),
            by_name: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            namespaces: Vec::new(),
            namespace_ids: HashMap::new(),
            epoch: 0,
            listed: false,
        }
    }

    /// How many objects are alive.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether a listing has completed, so that a listing now is a re-list.
    pub(crate) fn has_listed(&self) -> bool {
        self.listed
    }

    #[cfg(test)]
    /// Whether no object is alive.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    #[cfg(test)]
    /// Whether the UID is alive.
    pub(crate) fn contains(&self, uid: &str) -> bool {
        self.find_uid(uid).is_some()
    }

    /// Records a new `resourceVersion` of a live object whose event is not
    /// reported (the operator's own patch coming back, see
    /// [`Echoes`](crate::watching::echoes::Echoes)), as if it had been applied. Returns
    /// `false`, changing nothing, for a UID that is not alive: such an event
    /// must be applied in full.
    pub(crate) fn advance(&mut self, uid: &str, rv: &str) -> bool {
        self.find_uid(uid)
            .is_some_and(|index| self.advance_at(index, uid, rv))
    }

    /// Whether a re-listed object is known to the consumer at `rv` already,
    /// so that its body need not even be decoded; if so, it is recorded as
    /// seen by this listing (and at `rv`).
    ///
    /// That is so only after a listing has completed (the first listing
    /// reports every object), for a live object listed at the version last
    /// seen (which a re-list would report [`Seen::Unchanged`]) or at the
    /// version `echo` says the operator's own patch was expected back at,
    /// which its watch event would have been skipped for. `echo` is asked only
    /// for a live object listed at another version. Otherwise nothing
    /// changes, and the object must be fed in full.
    pub(crate) fn relisted(&mut self, uid: &str, rv: &str, echo: impl FnOnce() -> bool) -> bool {
        if !self.listed {
            return false;
        }
        let Some(index) = self.find_uid(uid) else {
            return false;
        };
        if self.entries[index].resource_version(&self.texts) == rv {
            self.entries[index].epoch = self.epoch;
            return true;
        }
        // A fresh entry is of the current epoch.
        echo() && self.advance_at(index, uid, rv)
    }

    /// [`Self::advance`] for the live entry at `index`, whose UID is `uid`.
    fn advance_at(&mut self, index: usize, uid: &str, rv: &str) -> bool {
        let entry = self.entries[index];
        let name = entry.name(&self.texts).to_owned();
        if !Entry::fits(uid, rv, &name) {
            return false;
        }
        let fresh = self.entry(uid, rv, &name, entry.namespace);
        let old = std::mem::replace(&mut self.entries[index], fresh);
        self.discard(old);
        true
    }

    /// Apply one input; the resulting events are appended to `out`.
    pub(crate) fn feed(&mut self, input: WatchInput, out: &mut Vec<ObjectEvent>) {
        match input {
            WatchInput::ListStarted => self.epoch = self.epoch.wrapping_add(1),
            WatchInput::Listed(obj) | WatchInput::Applied(obj) => {
                if let Some((object, seen)) = self.upsert(obj, out) {
                    out.push(ObjectEvent::Upserted { object, seen });
                }
            }
            WatchInput::Undecodable { identity, reason } => {
                if let Some((object, _)) = self.upsert(identity, out) {
                    out.push(ObjectEvent::Undecodable { object, reason });
                }
            }
            WatchInput::ListDone => self.list_done(out),
            WatchInput::Deleted(obj) => self.delete(obj, DeletedBy::Event, out),
            WatchInput::DeletedUndecodable(identity) => {
                self.delete(identity, DeletedBy::Vanished, out);
            }
        }
    }

    /// Forget every object, reporting each as [`DeletedBy::Vanished`] (for a
    /// scope that stops existing, e.g. a deleted namespace).
    pub(crate) fn drain(&mut self, out: &mut Vec<ObjectEvent>) {
        self.vanish_all((0..self.entries.len()).collect(), out);
    }

    /// Records a live object (vanishing whatever it replaces into `out`);
    /// the object and how it was seen, for the caller to report, unless it
    /// is ignored for want of an identity.
    fn upsert(&mut self, obj: Value, out: &mut Vec<ObjectEvent>) -> Option<(Arc<Value>, Seen)> {
        let [uid, name, rv, namespace] =
            meta_strs(&obj, ["uid", "name", "resourceVersion", "namespace"]);
        let (Some(uid), Some(name)) = (uid, name) else {
            tracing::warn!(kind = %self.resource.kind, ?name, "ignoring an object without uid or name");
            return None;
        };
        let rv = rv.unwrap_or_default();
        if !Entry::fits(uid, rv, name) {
            tracing::warn!(kind = %self.resource.kind, name, "ignoring an object with an oversized uid, resourceVersion or name");
            return None;
        }
        let namespace = match namespace {
            Some(namespace) => self.intern(namespace),
            None => CLUSTER_SCOPED,
        };

        // The same UID under another name: the old identity is gone.
        let mut found = self.find_uid(uid);
        if let Some(index) = found {
            let entry = self.entries[index];
            if entry.namespace != namespace || entry.name(&self.texts) != name {
                self.vanish(index, out);
                found = None;
            }
        }
        // The same name under another UID: the predecessor is gone. (An
        // entry still found by this UID has this name, so only a new UID can
        // meet another's name.)
        if found.is_none()
            && let Some(index) = self.find_name(namespace, name)
        {
            self.vanish(index, out);
        }

        let epoch = self.epoch;
        let seen = match found {
            Some(index) => {
                // Same UID, namespace and name: the keys of both tables stay.
                self.entries[index].epoch = epoch;
                if self.entries[index].resource_version(&self.texts) == rv {
                    Seen::Unchanged
                } else {
                    let fresh = self.entry(uid, rv, name, namespace);
                    let old = std::mem::replace(&mut self.entries[index], fresh);
                    self.discard(old);
                    Seen::Changed
                }
            }
            None => {
                let fresh = self.entry(uid, rv, name, namespace);
                self.insert(fresh);
                Seen::New
            }
        };
        Some((Arc::new(obj), seen))
    }

    /// A new entry of the current epoch, its text appended to the buffer.
    /// The parts must [fit](Entry::fits).
    fn entry(&mut self, uid: &str, rv: &str, name: &str, namespace: u32) -> Entry {
        debug_assert!(Entry::fits(uid, rv, name));
        let len = uid.len() + rv.len() + name.len();
        if u32::try_from(self.texts.len() + len).is_err() {
            self.compact_texts();
        }
        let entry = Entry {
            start: to_u32(self.texts.len()),
            len: to_u32(len),
            uid_len: u16::try_from(uid.len()).unwrap_or(u16::MAX),
            rv_len: u16::try_from(rv.len()).unwrap_or(u16::MAX),
            namespace,
            epoch: self.epoch,
        };
        self.texts.push_str(uid);
        self.texts.push_str(rv);
        self.texts.push_str(name);
        entry
    }

    /// Count the text of an entry that is gone as garbage, and compact the
    /// buffer once garbage is most of it.
    fn discard(&mut self, entry: Entry) {
        self.garbage += entry.len as usize;
        if self.garbage > COMPACT_MIN_GARBAGE && self.garbage * 2 > self.texts.len() {
            self.compact_texts();
        }
    }

    /// Rewrite the text buffer with the texts of live entries only.
    fn compact_texts(&mut self) {
        let mut texts = String::with_capacity(self.texts.len() - self.garbage);
        for entry in &mut self.entries {
            let text = entry.text(&self.texts);
            entry.start = to_u32(texts.len());
            texts.push_str(text);
        }
        self.texts = texts;
        self.garbage = 0;
    }

    /// The index of the namespace in `namespaces`, added if new.
    fn intern(&mut self, namespace: &str) -> u32 {
        if let Some(&id) = self.namespace_ids.get(namespace) {
            return id;
        }
        let id = to_u32(self.namespaces.len());
        let shared: Arc<str> = Arc::from(namespace);
        self.namespaces.push(shared.clone());
        self.namespace_ids.insert(shared, id);
        id
    }

    fn delete(&mut self, obj: Value, how: DeletedBy, out: &mut Vec<ObjectEvent>) {
        let Some(uid) = meta_str(&obj, "uid") else {
            tracing::warn!(kind = %self.resource.kind, name = ?meta_str(&obj, "name"), "ignoring a deletion without uid");
            return;
        };
        if let Some(index) = self.find_uid(uid) {
            self.remove(index);
        }
        out.push(ObjectEvent::Deleted {
            object: Arc::new(obj),
            how,
        });
    }

    fn list_done(&mut self, out: &mut Vec<ObjectEvent>) {
        self.listed = true;
        let epoch = self.epoch;
        let stale = (0..self.entries.len())
            .filter(|&index| self.entries[index].epoch != epoch)
            .collect();
        self.vanish_all(stale, out);
        out.push(ObjectEvent::Synced {
            count: self.entries.len(),
        });
    }

    /// Forget the entries at these slab indexes, reporting them vanished in
    /// (namespace, name) order.
    fn vanish_all(&mut self, mut indexes: Vec<usize>, out: &mut Vec<ObjectEvent>) {
        indexes.sort_by(|&a, &b| self.sort_key(a).cmp(&self.sort_key(b)));
        out.extend(indexes.iter().map(|&index| self.vanished(index)));
        // Highest first: removing an entry moves only the last one, which is
        // never among the indexes still to remove.
        indexes.sort_unstable_by(|a, b| b.cmp(a));
        for index in indexes {
            self.remove(index);
        }
    }

    fn vanish(&mut self, index: usize, out: &mut Vec<ObjectEvent>) {
        out.push(self.vanished(index));
        self.remove(index);
    }

    /// The event reporting the entry at `index` vanished: its identity only.
    fn vanished(&self, index: usize) -> ObjectEvent {
        let entry = &self.entries[index];
        let mut metadata = json!({
            "name": entry.name(&self.texts),
            "uid": entry.uid(&self.texts),
            "resourceVersion": entry.resource_version(&self.texts),
        });
        if let Some(namespace) = self.namespace_of(entry) {
            metadata["namespace"] = json!(namespace);
        }
        let object = json!({
            "apiVersion": self.resource.api_version,
            "kind": self.resource.kind,
            "metadata": metadata,
        });
        ObjectEvent::Deleted {
            object: Arc::new(object),
            how: DeletedBy::Vanished,
        }
    }

    fn namespace_of(&self, entry: &Entry) -> Option<&str> {
        // `CLUSTER_SCOPED` is never an index of `namespaces`.
        self.namespaces
            .get(entry.namespace as usize)
            .map(|namespace| &**namespace)
    }

    /// The order of vanished objects: cluster-scoped first, then by
    /// namespace, then by name.
    fn sort_key(&self, index: usize) -> (Option<&str>, &str) {
        let entry = &self.entries[index];
        (self.namespace_of(entry), entry.name(&self.texts))
    }

    fn uid_hash(&self, uid: &str) -> u64 {
        self.hasher.hash_one(uid)
    }

    fn name_hash(&self, namespace: u32, name: &str) -> u64 {
        self.hasher.hash_one((namespace, name))
    }

    /// The slab index of the entry with this UID.
    fn find_uid(&self, uid: &str) -> Option<usize> {
        self.by_uid
            .find(self.uid_hash(uid), |&index| {
                self.entries[index as usize].uid(&self.texts) == uid
            })
            .map(|&index| index as usize)
    }

    /// The slab index of the entry with this namespace index and name.
    fn find_name(&self, namespace: u32, name: &str) -> Option<usize> {
        self.by_name
            .find(self.name_hash(namespace, name), |&index| {
                let entry = &self.entries[index as usize];
                entry.namespace == namespace && entry.name(&self.texts) == name
            })
            .map(|&index| index as usize)
    }

    /// Add an entry whose UID and name are in neither table.
    fn insert(&mut self, entry: Entry) {
        let index = to_u32(self.entries.len());
        let uid_hash = self.uid_hash(entry.uid(&self.texts));
        let name_hash = self.name_hash(entry.namespace, entry.name(&self.texts));
        self.entries.push(entry);
        // Growing a table rehashes its indexes by the entries they point to.
        let Self {
            entries,
            texts,
            by_uid,
            by_name,
            hasher,
            ..
        } = self;
        by_uid.insert_unique(uid_hash, index, |&i| {
            hasher.hash_one(entries[i as usize].uid(texts))
        });
        by_name.insert_unique(name_hash, index, |&i| {
            let entry = &entries[i as usize];
            hasher.hash_one((entry.namespace, entry.name(texts)))
        });
    }

    /// Remove the entry at `index` from the slab and both tables. The last
    /// entry of the slab moves into its place, so its indexes are updated.
    fn remove(&mut self, index: usize) {
        let last = self.entries.len() - 1;
        let (uid_hash, name_hash) = self.hashes(index);
        relink(&mut self.by_uid, uid_hash, index, None);
        relink(&mut self.by_name, name_hash, index, None);
        if index != last {
            let (uid_hash, name_hash) = self.hashes(last);
            relink(&mut self.by_uid, uid_hash, last, Some(index));
            relink(&mut self.by_name, name_hash, last, Some(index));
        }
        let gone = self.entries.swap_remove(index);
        self.discard(gone);
    }

    /// The hashes of the entry at `index` in `by_uid` and `by_name`.
    fn hashes(&self, index: usize) -> (u64, u64) {
        let entry = &self.entries[index];
        (
            self.uid_hash(entry.uid(&self.texts)),
            self.name_hash(entry.namespace, entry.name(&self.texts)),
        )
    }
}

/// Point the slot of slab index `from` (found by its entry's `hash`) to slab
/// index `to`, or remove it if `None`.
fn relink(table: &mut HashTable<u32>, hash: u64, from: usize, to: Option<usize>) {
    let from = to_u32(from);
    let slot = table.find_entry(hash, |&index| index == from);
    debug_assert!(slot.is_ok(), "every live entry is in both tables");
    match (slot, to) {
        (Ok(slot), None) => {
            slot.remove();
        }
        (Ok(mut slot), Some(to)) => *slot.get_mut() = to_u32(to),
        (Err(_), _) => {}
    }
}

/// An index, offset or length as stored in a `u32`. All stay below
/// `u32::MAX` (which is also [`CLUSTER_SCOPED`]): entries and namespaces are
/// counted far below it, and the text buffer is compacted before it would
/// reach 4 GiB, which holds far more texts than a process can watch.
fn to_u32(index: usize) -> u32 {
    u32::try_from(index)
        .ok()
        .filter(|&index| index != CLUSTER_SCOPED)
        .expect("invariant: fewer than u32::MAX objects, namespaces and bytes of text")
}

#[cfg(test)]
mod tests {
    use kube::core::GroupVersionKind;

    use super::*;

    fn resource() -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"),
            "kopfexamples",
        )
    }

    fn obj(ns: &str, name: &str, uid: &str, rv: &str) -> Value {
        json!({
            "apiVersion": "kopf.dev/v1",
            "kind": "KopfExample",
            "metadata": {"namespace": ns, "name": name, "uid": uid, "resourceVersion": rv},
        })
    }

    fn dynamic(ns: &str, name: &str, uid: &str, rv: &str) -> DynamicObject {
        let mut obj = DynamicObject::new(name, &resource()).within(ns);
        obj.metadata.uid = Some(uid.into());
        obj.metadata.resource_version = Some(rv.into());
        obj
    }

    /// A compact rendering of events: `+uid(new)`, `-uid(event)`, `synced:N`.
    fn render(events: &[ObjectEvent]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                ObjectEvent::Upserted { object, seen } => {
                    format!("+{}({seen:?})", meta_str(object, "uid").unwrap_or("?"))
                }
                ObjectEvent::Deleted { object, how } => {
                    format!("-{}({how:?})", meta_str(object, "uid").unwrap_or("?"))
                }
                ObjectEvent::Undecodable { object, .. } => {
                    format!("!{}", meta_str(object, "uid").unwrap_or("?"))
                }
                ObjectEvent::Synced { count } => format!("synced:{count}"),
            })
            .collect()
    }

    fn feed_all(tracker: &mut ObjectTracker, inputs: Vec<WatchInput>) -> Vec<String> {
        let mut out = Vec::new();
        for input in inputs {
            tracker.feed(input, &mut out);
        }
        render(&out)
    }

    fn listing(objs: Vec<Value>) -> Vec<WatchInput> {
        std::iter::once(WatchInput::ListStarted)
            .chain(objs.into_iter().map(WatchInput::Listed))
            .chain(std::iter::once(WatchInput::ListDone))
            .collect()
    }

    #[test]
    fn initial_listing_reports_every_object_then_synced() {
        let mut t = ObjectTracker::new(resource());
        let events = feed_all(
            &mut t,
            listing(vec![obj("ns", "a", "u1", "1"), obj("ns", "b", "u2", "1")]),
        );
        assert_eq!(events, ["+u1(New)", "+u2(New)", "synced:2"]);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn an_advanced_version_counts_as_seen() {
        let mut t = ObjectTracker::new(resource());
        feed_all(&mut t, listing(vec![obj("ns", "a", "u1", "1")]));
        assert!(t.advance("u1", "2"), "a live object advances");
        assert!(!t.advance("u9", "2"), "an unknown one does not");
        assert!(!t.contains("u9"));
        // A re-list at the advanced version finds it unchanged, and its
        // identity is kept for the vanished report.
        let events = feed_all(&mut t, listing(vec![obj("ns", "a", "u1", "2")]));
        assert_eq!(events, ["+u1(Unchanged)", "synced:1"]);
        let mut out = Vec::new();
        t.drain(&mut out);
        let object = out[0].object().expect("an object");
        assert_eq!(
            meta_strs(object, ["name", "namespace", "resourceVersion"]),
            [Some("a"), Some("ns"), Some("2")]
        );
    }

    #[test]
    fn a_relisted_object_known_at_its_version_is_seen_without_its_body() {
        let mut t = ObjectTracker::new(resource());
        let mut out = Vec::new();
        t.feed(WatchInput::ListStarted, &mut out);
        t.feed(WatchInput::Listed(obj("ns", "a", "u1", "1")), &mut out);
        assert!(
            !t.relisted("u1", "1", || true),
            "the first listing reports every object"
        );
        t.feed(WatchInput::Listed(obj("ns", "b", "u2", "1")), &mut out);
        t.feed(WatchInput::Listed(obj("ns", "c", "u3", "1")), &mut out);
        t.feed(WatchInput::ListDone, &mut out);

        out.clear();
        t.feed(WatchInput::ListStarted, &mut out);
        let never = || -> bool { panic!("no echo is asked for at the version last seen") };
        assert!(t.relisted("u1", "1", never), "unchanged");
        assert!(t.relisted("u2", "2", || true), "the operator's own patch");
        assert!(!t.relisted("u3", "2", || false), "changed by another");
        assert!(!t.relisted("u9", "1", || true), "unknown");
        assert_eq!(out.len(), 0, "nothing is reported of them");
        t.feed(WatchInput::Listed(obj("ns", "d", "u4", "1")), &mut out);
        t.feed(WatchInput::ListDone, &mut out);
        assert_eq!(
            render(&out),
            ["+u4(New)", "-u3(Vanished)", "synced:3"],
            "objects seen without their bodies did not vanish"
        );
        // The patch's version is now the one last seen.
        let events = feed_all(&mut t, listing(vec![obj("ns", "b", "u2", "2")]));
        assert_eq!(
            events,
            [
                "+u2(Unchanged)",
                "-u1(Vanished)",
                "-u4(Vanished)",
                "synced:1"
            ]
        );
    }

    #[test]
    fn empty_listing_is_synced_with_zero() {
        let mut t = ObjectTracker::new(resource());
        assert_eq!(feed_all(&mut t, listing(vec![])), ["synced:0"]);
        assert!(t.is_empty());
    }

    #[test]
    fn relist_reports_vanished_objects_after_the_listing() {
        let mut t = ObjectTracker::new(resource());
        feed_all(
            &mut t,
            listing(vec![
                obj("ns", "a", "u1", "1"),
                obj("ns", "b", "u2", "1"),
                obj("ns", "c", "u3", "1"),
            ]),
        );
        let events = feed_all(
            &mut t,
            listing(vec![obj("ns", "a", "u1", "1"), obj("ns", "c", "u3", "5")]),
        );
        assert_eq!(
            events,
            [
                "+u1(Unchanged)",
                "+u3(Changed)",
                "-u2(Vanished)",
                "synced:2"
            ]
        );
        assert!(!t.contains("u2"));
    }

    #[test]
    fn vanished_objects_carry_identity_metadata() {
        let mut t = ObjectTracker::new(resource());
        feed_all(&mut t, listing(vec![obj("ns", "a", "u1", "7")]));
        let mut out = Vec::new();
        for input in listing(vec![]) {
            t.feed(input, &mut out);
        }
        let ObjectEvent::Deleted {
            object,
            how: DeletedBy::Vanished,
        } = &out[0]
        else {
            panic!("expected vanished")
        };
        assert_eq!(meta_str(object, "name"), Some("a"));
        assert_eq!(meta_str(object, "namespace"), Some("ns"));
        assert_eq!(meta_str(object, "resourceVersion"), Some("7"));
        assert_eq!(object["kind"], "KopfExample");
        assert_eq!(object["apiVersion"], "kopf.dev/v1");
        assert_eq!(out[0].uid(), Some("u1"));
    }

    #[test]
    fn watch_events_update_the_set() {
        let mut t = ObjectTracker::new(resource());
        let events = feed_all(
            &mut t,
            vec![
                WatchInput::Applied(obj("ns", "a", "u1", "1")),
                WatchInput::Applied(obj("ns", "a", "u1", "2")),
                WatchInput::Applied(obj("ns", "a", "u1", "2")),
                WatchInput::Deleted(obj("ns", "a", "u1", "3")),
            ],
        );
        assert_eq!(
            events,
            ["+u1(New)", "+u1(Changed)", "+u1(Unchanged)", "-u1(Event)"]
        );
        assert!(t.is_empty());
    }

    #[test]
    fn deleted_object_is_not_vanished_again_at_relist() {
        let mut t = ObjectTracker::new(resource());
        feed_all(&mut t, listing(vec![obj("ns", "a", "u1", "1")]));
        feed_all(&mut t, vec![WatchInput::Deleted(obj("ns", "a", "u1", "2"))]);
        assert_eq!(feed_all(&mut t, listing(vec![])), ["synced:0"]);
    }

    #[test]
    fn undecodable_objects_are_tracked_by_identity_and_their_deletion_reported() {
        let mut t = ObjectTracker::new(resource());
        let poisoned = |rv: &str| WatchInput::Undecodable {
            identity: obj("ns", "p", "u2", rv),
            reason: "too deep".into(),
        };
        let events = feed_all(
            &mut t,
            vec![
                WatchInput::ListStarted,
                WatchInput::Listed(obj("ns", "a", "u1", "1")),
                poisoned("1"),
                WatchInput::ListDone,
            ],
        );
        assert_eq!(events, ["+u1(New)", "!u2", "synced:2"]);
        // A re-list does not vanish it.
        let events = feed_all(
            &mut t,
            vec![WatchInput::ListStarted, poisoned("1"), WatchInput::ListDone],
        );
        assert_eq!(events, ["!u2", "-u1(Vanished)", "synced:1"]);
        // Its DELETED event, undecodable too, reports it gone by identity.
        let events = feed_all(
            &mut t,
            vec![WatchInput::DeletedUndecodable(obj("ns", "p", "u2", "2"))],
        );
        assert_eq!(events, ["-u2(Vanished)"]);
        assert!(t.is_empty());
    }

    #[test]
    fn unknown_deletion_is_still_reported() {
        let mut t = ObjectTracker::new(resource());
        assert_eq!(
            feed_all(&mut t, vec![WatchInput::Deleted(obj("ns", "a", "u9", "1"))]),
            ["-u9(Event)"]
        );
    }

    #[test]
    fn recreated_object_with_same_name_gets_a_new_identity() {
        let mut t = ObjectTracker::new(resource());
        feed_all(&mut t, listing(vec![obj("ns", "a", "u1", "1")]));
        // Deleted and re-created during a watch gap: the re-list shows a new UID.
        let events = feed_all(&mut t, listing(vec![obj("ns", "a", "u2", "9")]));
        assert_eq!(events, ["-u1(Vanished)", "+u2(New)", "synced:1"]);
        assert!(t.contains("u2") && !t.contains("u1"));
    }

    #[test]
    fn same_name_new_uid_in_watch_vanishes_the_predecessor() {
        let mut t = ObjectTracker::new(resource());
        let events = feed_all(
            &mut t,
            vec![
                WatchInput::Applied(obj("ns", "a", "u1", "1")),
                WatchInput::Applied(obj("ns", "a", "u2", "2")),
            ],
        );
        assert_eq!(events, ["+u1(New)", "-u1(Vanished)", "+u2(New)"]);
        // The late DELETED of the predecessor does not touch the successor.
        let events = feed_all(&mut t, vec![WatchInput::Deleted(obj("ns", "a", "u1", "3"))]);
        assert_eq!(events, ["-u1(Event)"]);
        assert!(t.contains("u2"));
        assert_eq!(
            feed_all(&mut t, listing(vec![obj("ns", "a", "u2", "2")])),
            ["+u2(Unchanged)", "synced:1"]
        );
    }

    #[test]
    fn uid_seen_under_a_new_name_is_a_different_object() {
        let mut t = ObjectTracker::new(resource());
        feed_all(&mut t, listing(vec![obj("ns", "a", "u1", "1")]));
        let events = feed_all(&mut t, vec![WatchInput::Applied(obj("ns", "b", "u1", "2"))]);
        assert_eq!(events, ["-u1(Vanished)", "+u1(New)"]);
        let events = feed_all(
            &mut t,
            vec![WatchInput::Applied(obj("other", "b", "u1", "3"))],
        );
        assert_eq!(events, ["-u1(Vanished)", "+u1(New)"]);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn objects_applied_during_a_listing_count_as_seen() {
        let mut t = ObjectTracker::new(resource());
        feed_all(
            &mut t,
            listing(vec![obj("ns", "a", "u1", "1"), obj("ns", "b", "u2", "1")]),
        );
        let events = feed_all(
            &mut t,
            vec![
                WatchInput::ListStarted,
                WatchInput::Applied(obj("ns", "b", "u2", "2")),
                WatchInput::Listed(obj("ns", "c", "u3", "1")),
                WatchInput::ListDone,
            ],
        );
        assert_eq!(
            events,
            ["+u2(Changed)", "+u3(New)", "-u1(Vanished)", "synced:2"]
        );
    }

    #[test]
    fn interrupted_listing_is_superseded_by_the_next() {
        let mut t = ObjectTracker::new(resource());
        feed_all(
            &mut t,
            listing(vec![obj("ns", "a", "u1", "1"), obj("ns", "b", "u2", "1")]),
        );
        // A listing that fails midway (no ListDone) vanishes nothing…
        assert_eq!(
            feed_all(
                &mut t,
                vec![
                    WatchInput::ListStarted,
                    WatchInput::Listed(obj("ns", "a", "u1", "1"))
                ]
            ),
            ["+u1(Unchanged)"]
        );
        assert_eq!(t.len(), 2);
        // …and the next complete one decides.
        let events = feed_all(&mut t, listing(vec![obj("ns", "b", "u2", "1")]));
        assert_eq!(events, ["+u2(Unchanged)", "-u1(Vanished)", "synced:1"]);
    }

    #[test]
    fn cluster_scoped_objects_are_keyed_without_namespace() {
        let mut t = ObjectTracker::new(resource());
        let mut a = obj("ns", "a", "u1", "1");
        a["metadata"].as_object_mut().unwrap().remove("namespace");
        let events = feed_all(&mut t, listing(vec![a]));
        assert_eq!(events, ["+u1(New)", "synced:1"]);
        let events = feed_all(&mut t, vec![WatchInput::Applied(obj("ns", "a", "u2", "1"))]);
        assert_eq!(events, ["+u2(New)"], "a namespaced `a` is another object");
    }

    #[test]
    fn objects_without_uid_or_name_are_ignored() {
        let mut t = ObjectTracker::new(resource());
        let mut no_uid = obj("ns", "a", "u1", "1");
        no_uid["metadata"].as_object_mut().unwrap().remove("uid");
        let mut no_name = obj("ns", "a", "u2", "1");
        no_name["metadata"].as_object_mut().unwrap().remove("name");
        let events = feed_all(
            &mut t,
            vec![
                WatchInput::Applied(no_uid.clone()),
                WatchInput::Applied(no_name),
                WatchInput::Deleted(no_uid),
            ],
        );
        assert!(events.is_empty());
        assert!(t.is_empty());
    }

    #[test]
    fn drain_vanishes_everything_in_name_order() {
        let mut t = ObjectTracker::new(resource());
        feed_all(
            &mut t,
            listing(vec![obj("ns", "b", "u2", "1"), obj("ns", "a", "u1", "1")]),
        );
        let mut out = Vec::new();
        t.drain(&mut out);
        assert_eq!(render(&out), ["-u1(Vanished)", "-u2(Vanished)"]);
        assert!(t.is_empty());
    }

    #[test]
    fn tens_of_thousands_of_objects_relist_in_one_pass() {
        let mut t = ObjectTracker::new(resource());
        let objs = |n: usize| {
            (0..n).map(move |i| {
                obj(
                    &format!("ns{}", i % 50),
                    &format!("o{i}"),
                    &format!("u{i}"),
                    "1",
                )
            })
        };
        let mut out = Vec::new();
        for input in listing(objs(30_000).collect()) {
            t.feed(input, &mut out);
        }
        assert_eq!(out.len(), 30_001);
        assert_eq!(
            t.namespaces.len(),
            50,
            "namespaces are shared, not copied per object"
        );
        out.clear();
        for input in listing(objs(29_000).collect()) {
            t.feed(input, &mut out);
        }
        let vanished = out
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    ObjectEvent::Deleted {
                        how: DeletedBy::Vanished,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(vanished, 1_000);
        assert_eq!(t.len(), 29_000);
    }

    /// Every entry is found at its own slab index by UID and by name, and
    /// both tables hold nothing else.
    fn assert_consistent(t: &ObjectTracker) {
        assert_eq!(t.by_uid.len(), t.entries.len());
        assert_eq!(t.by_name.len(), t.entries.len());
        for (index, entry) in t.entries.iter().enumerate() {
            assert_eq!(t.find_uid(entry.uid(&t.texts)), Some(index));
            assert_eq!(
                t.find_name(entry.namespace, entry.name(&t.texts)),
                Some(index)
            );
        }
        let live: usize = t.entries.iter().map(|e| e.len as usize).sum();
        assert_eq!(
            live + t.garbage,
            t.texts.len(),
            "garbage is counted exactly"
        );
    }

    /// The `(namespace, name, uid, resourceVersion)` of vanished events, in order.
    fn vanished(events: &[ObjectEvent]) -> Vec<(Option<String>, String, String, String)> {
        events
            .iter()
            .filter_map(|e| match e {
                ObjectEvent::Deleted {
                    object,
                    how: DeletedBy::Vanished,
                } => Some((
                    meta_str(object, "namespace").map(String::from),
                    meta_str(object, "name")?.to_owned(),
                    meta_str(object, "uid")?.to_owned(),
                    meta_str(object, "resourceVersion")?.to_owned(),
                )),
                _ => None,
            })
            .collect()
    }

    fn cluster_obj(name: &str, uid: &str, rv: &str) -> Value {
        let mut obj = obj("", name, uid, rv);
        obj["metadata"].as_object_mut().unwrap().remove("namespace");
        obj
    }

    #[test]
    fn entries_are_20_bytes() {
        assert!(std::mem::size_of::<Entry>() <= 20);
    }

    #[test]
    fn the_text_buffer_is_compacted_once_mostly_garbage() {
        let mut t = ObjectTracker::new(resource());
        let objects = |rv: usize| -> Vec<Value> {
            (0..1000)
                .map(|i| {
                    obj(
                        "ns",
                        &format!("object-{i:04}"),
                        &format!("uid-{i:04}"),
                        &rv.to_string(),
                    )
                })
                .collect()
        };
        feed_all(&mut t, listing(objects(1)));
        let one_generation = t.texts.len();
        let mut peak = 0;
        // Every object changes 100 times: 100 generations of texts.
        for rv in 2..=100 {
            let events = feed_all(
                &mut t,
                objects(rv).into_iter().map(WatchInput::Applied).collect(),
            );
            assert!(events.iter().all(|e| e.ends_with("(Changed)")));
            peak = peak.max(t.texts.len());
        }
        assert_consistent(&t);
        assert!(
            peak <= 3 * one_generation + COMPACT_MIN_GARBAGE,
            "peak {peak} with generations of {one_generation} bytes"
        );
        // The texts survive compactions: every version reads back.
        for (index, entry) in t.entries.iter().enumerate() {
            assert_eq!(entry.resource_version(&t.texts), "100", "entry {index}");
        }
        // Deleting all but one object leaves its text only, once compacted.
        let events = feed_all(
            &mut t,
            listing(vec![obj("ns", "object-0007", "uid-0007", "100")]),
        );
        assert_eq!(
            events.iter().filter(|e| e.ends_with("(Vanished)")).count(),
            999
        );
        assert_consistent(&t);
        assert_eq!(t.len(), 1);
        assert!(t.texts.len() <= one_generation + COMPACT_MIN_GARBAGE);
        let vanished_again = feed_all(&mut t, listing(vec![]));
        assert_eq!(vanished_again, ["-uid-0007(Vanished)", "synced:0"]);
    }

    #[test]
    fn mixed_insertions_and_deletions_keep_both_indexes_right() {
        // Objects 0..1000 in three namespaces and cluster-scoped.
        let object = |i: usize| match i % 4 {
            3 => cluster_obj(&format!("o{i}"), &format!("u{i}"), "1"),
            ns => obj(&format!("ns{ns}"), &format!("o{i}"), &format!("u{i}"), "1"),
        };
        let mut t = ObjectTracker::new(resource());
        let mut out = Vec::new();
        // Applied in a scrambled order: 0, 7, 14, … (mod 1000).
        for i in (0..1000).map(|k| k * 7 % 1000) {
            t.feed(WatchInput::Applied(object(i)), &mut out);
        }
        assert_eq!(t.len(), 1000);
        assert_consistent(&t);

        // Every third object deleted by event, from the middle outwards.
        let mut deleted: Vec<usize> = (0..1000).filter(|i| i % 3 == 0).collect();
        deleted.sort_by_key(|&i| i.abs_diff(500));
        for &i in &deleted {
            t.feed(WatchInput::Deleted(object(i)), &mut out);
        }
        assert_eq!(t.len(), 1000 - deleted.len());
        assert_consistent(&t);
        for i in 0..1000 {
            assert_eq!(t.contains(&format!("u{i}")), i % 3 != 0, "u{i}");
        }

        // A re-list with the survivors not divisible by 5, plus 100 new ones.
        out.clear();
        let relisted: Vec<usize> = (0..1100)
            .filter(|i| *i >= 1000 || (i % 3 != 0 && i % 5 != 0))
            .collect();
        for input in listing(relisted.iter().rev().map(|&i| object(i)).collect()) {
            t.feed(input, &mut out);
        }
        assert_consistent(&t);
        assert_eq!(t.len(), relisted.len());
        for i in 0..1100 {
            assert_eq!(t.contains(&format!("u{i}")), relisted.contains(&i), "u{i}");
        }
        let mut expected: Vec<_> = (0..1000)
            .filter(|i| i % 3 != 0 && i % 5 == 0)
            .map(|i| {
                let obj = object(i);
                (
                    meta_str(&obj, "namespace").map(String::from),
                    format!("o{i}"),
                    format!("u{i}"),
                    "1".to_owned(),
                )
            })
            .collect();
        expected.sort();
        assert_eq!(vanished(&out), expected, "in (namespace, name) order");
        assert!(
            matches!(out.last(), Some(ObjectEvent::Synced { count }) if *count == relisted.len())
        );

        // Draining forgets the rest, in (namespace, name) order too.
        out.clear();
        t.drain(&mut out);
        assert!(t.is_empty());
        assert_consistent(&t);
        let drained = vanished(&out);
        assert_eq!(drained.len(), relisted.len());
        assert!(drained.is_sorted());
    }

    #[test]
    fn uid_reappearing_under_another_name_frees_the_old_name() {
        let mut t = ObjectTracker::new(resource());
        feed_all(
            &mut t,
            listing(vec![
                obj("ns", "a", "u1", "1"),
                obj("ns", "b", "u2", "1"),
                obj("ns", "c", "u3", "1"),
            ]),
        );
        let mut out = Vec::new();
        t.feed(WatchInput::Applied(obj("ns", "z", "u1", "2")), &mut out);
        assert_eq!(render(&out), ["-u1(Vanished)", "+u1(New)"]);
        assert_eq!(
            vanished(&out),
            [(Some("ns".into()), "a".into(), "u1".into(), "1".into())]
        );
        assert_consistent(&t);
        // The old name is free: a new object there vanishes nothing.
        let events = feed_all(&mut t, vec![WatchInput::Applied(obj("ns", "a", "u4", "1"))]);
        assert_eq!(events, ["+u4(New)"]);
        // The new name belongs to the UID now.
        let events = feed_all(&mut t, vec![WatchInput::Applied(obj("ns", "z", "u1", "2"))]);
        assert_eq!(events, ["+u1(Unchanged)"]);
        let events = feed_all(&mut t, vec![WatchInput::Applied(obj("ns", "z", "u5", "1"))]);
        assert_eq!(events, ["-u1(Vanished)", "+u5(New)"]);
        assert_eq!(t.len(), 4);
        assert_consistent(&t);
    }

    #[test]
    fn cluster_scoped_and_namespaced_objects_may_share_a_name() {
        let mut t = ObjectTracker::new(resource());
        let events = feed_all(
            &mut t,
            listing(vec![
                obj("ns", "a", "u1", "1"),
                cluster_obj("a", "u2", "1"),
                obj("other", "a", "u3", "1"),
            ]),
        );
        assert_eq!(events, ["+u1(New)", "+u2(New)", "+u3(New)", "synced:3"]);
        assert_consistent(&t);
        // Each is updated and deleted on its own.
        let events = feed_all(
            &mut t,
            vec![
                WatchInput::Applied(cluster_obj("a", "u2", "2")),
                WatchInput::Deleted(obj("ns", "a", "u1", "2")),
            ],
        );
        assert_eq!(events, ["+u2(Changed)", "-u1(Event)"]);
        assert!(t.contains("u2") && t.contains("u3") && !t.contains("u1"));
        // Cluster-scoped objects come first, and carry no namespace.
        let mut out = Vec::new();
        t.drain(&mut out);
        assert_eq!(
            vanished(&out),
            [
                (None, "a".into(), "u2".into(), "2".into()),
                (Some("other".into()), "a".into(), "u3".into(), "1".into()),
            ]
        );
        let ObjectEvent::Deleted { object, .. } = &out[0] else {
            panic!("expected vanished")
        };
        assert!(object["metadata"].get("namespace").is_none());
    }

    #[test]
    fn long_and_empty_resource_versions_are_kept_exactly() {
        let long = "9".repeat(300);
        let mut t = ObjectTracker::new(resource());
        let mut no_rv = obj("ns", "b", "u2", "");
        no_rv["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        let events = feed_all(
            &mut t,
            listing(vec![obj("ns", "a", "u1", &long), no_rv.clone()]),
        );
        assert_eq!(events, ["+u1(New)", "+u2(New)", "synced:2"]);
        let events = feed_all(
            &mut t,
            vec![
                WatchInput::Applied(obj("ns", "a", "u1", &long)),
                WatchInput::Applied(no_rv),
                WatchInput::Applied(obj("ns", "b", "u2", "")),
            ],
        );
        assert_eq!(
            events,
            ["+u1(Unchanged)", "+u2(Unchanged)", "+u2(Unchanged)"]
        );
        let events = feed_all(&mut t, vec![WatchInput::Applied(obj("ns", "a", "u1", "1"))]);
        assert_eq!(events, ["+u1(Changed)"]);
        let events = feed_all(
            &mut t,
            vec![WatchInput::Applied(obj("ns", "a", "u1", &long))],
        );
        assert_eq!(events, ["+u1(Changed)"]);
        assert_consistent(&t);
        let mut out = Vec::new();
        t.drain(&mut out);
        assert_eq!(
            vanished(&out),
            [
                (Some("ns".into()), "a".into(), "u1".into(), long),
                (Some("ns".into()), "b".into(), "u2".into(), String::new()),
            ]
        );
    }

    #[test]
    fn epochs_wrap_around() {
        let mut t = ObjectTracker::new(resource());
        t.epoch = u32::MAX - 1;
        feed_all(
            &mut t,
            listing(vec![obj("ns", "a", "u1", "1"), obj("ns", "b", "u2", "1")]),
        );
        assert_eq!(t.epoch, u32::MAX);
        let events = feed_all(&mut t, listing(vec![obj("ns", "b", "u2", "1")]));
        assert_eq!(t.epoch, 0);
        assert_eq!(events, ["+u2(Unchanged)", "-u1(Vanished)", "synced:1"]);
    }

    #[test]
    fn kube_watcher_events_map_to_inputs() {
        use kube::runtime::watcher::Event;
        let mut t = ObjectTracker::new(resource());
        let mut out = Vec::new();
        for event in [
            Event::Init,
            Event::InitApply(dynamic("ns", "a", "u1", "1")),
            Event::InitDone,
        ] {
            t.feed(event.into(), &mut out);
        }
        t.feed(Event::Apply(dynamic("ns", "a", "u1", "2")).into(), &mut out);
        t.feed(
            Event::Delete(dynamic("ns", "a", "u1", "2")).into(),
            &mut out,
        );
        assert_eq!(
            render(&out),
            ["+u1(New)", "synced:1", "+u1(Changed)", "-u1(Event)"]
        );
    }
}
