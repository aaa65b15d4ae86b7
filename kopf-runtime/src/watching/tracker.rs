//! The pure state machine behind a watch: which objects are alive, by UID.
//!
//! Fed with listing and watch inputs, it emits [`ObjectEvent`]s. It keeps
//! only `UID → (namespace, name, resourceVersion)` per object; bodies stay
//! with the consumer.
//!
//! # Guarantees
//!
//! - Every listed or applied object is reported as [`ObjectEvent::Upserted`],
//!   marked [`Seen::New`], [`Seen::Changed`] or [`Seen::Unchanged`]
//!   (same `resourceVersion` as last seen, e.g. in a re-list).
//! - When a listing completes, every UID known before but absent from it is
//!   reported as [`DeletedBy::Vanished`], then [`ObjectEvent::Synced`].
//! - Objects are keyed by UID: a UID seen under a different namespace/name is
//!   the old object vanished plus a new one; a namespace/name seen with a new
//!   UID while the old UID is still known reports the old UID vanished first.
//!   So no two live UIDs ever share a name, and the consumer never confuses a
//!   re-created object with its predecessor.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kube::api::DynamicObject;
use kube::core::ApiResource;
use serde_json::{Value, json};

use super::{DeletedBy, ObjectEvent, Seen};
use crate::patching::meta_str;

/// One input to the [`ObjectTracker`]: a listing step or a watch event.
#[derive(Debug, Clone)]
pub enum WatchInput {
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

/// Where an object lives: namespace (`None` if cluster-scoped) and name.
type ObjectKey = (Option<Arc<str>>, Arc<str>);

#[derive(Debug)]
struct Entry {
    key: ObjectKey,
    resource_version: Box<str>,
    /// The listing in which the object was last seen alive.
    epoch: u64,
}

/// Tracks the live objects of one watch scope; see the [module docs](self).
#[derive(Debug)]
pub struct ObjectTracker {
    resource: ApiResource,
    objects: HashMap<Arc<str>, Entry>,
    names: HashMap<ObjectKey, Arc<str>>,
    /// Namespace names, shared by all objects in them.
    namespaces: HashSet<Arc<str>>,
    epoch: u64,
}

impl ObjectTracker {
    /// An empty tracker for objects of `resource`.
    pub fn new(resource: ApiResource) -> Self {
        Self {
            resource,
            objects: HashMap::new(),
            names: HashMap::new(),
            namespaces: HashSet::new(),
            epoch: 0,
        }
    }

    /// How many objects are alive.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether no object is alive.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Whether the UID is alive.
    pub fn contains(&self, uid: &str) -> bool {
        self.objects.contains_key(uid)
    }

    /// Apply one input; the resulting events are appended to `out`.
    pub fn feed(&mut self, input: WatchInput, out: &mut Vec<ObjectEvent>) {
        match input {
            WatchInput::ListStarted => self.epoch += 1,
            WatchInput::Listed(obj) | WatchInput::Applied(obj) => self.upsert(obj, out),
            WatchInput::ListDone => self.list_done(out),
            WatchInput::Deleted(obj) => self.delete(obj, out),
        }
    }

    /// Forget every object, reporting each as [`DeletedBy::Vanished`] (for a
    /// scope that stops existing, e.g. a deleted namespace).
    pub fn drain(&mut self, out: &mut Vec<ObjectEvent>) {
        let mut uids: Vec<Arc<str>> = self.objects.keys().cloned().collect();
        uids.sort_by(|a, b| self.objects[a].key.cmp(&self.objects[b].key));
        for uid in uids {
            self.vanish(&uid, out);
        }
    }

    fn upsert(&mut self, obj: Value, out: &mut Vec<ObjectEvent>) {
        let (Some(uid), Some(name)) = (meta_str(&obj, "uid"), meta_str(&obj, "name")) else {
            tracing::warn!(kind = %self.resource.kind, name = ?meta_str(&obj, "name"), "ignoring an object without uid or name");
            return;
        };
        let namespace = meta_str(&obj, "namespace");
        let rv = meta_str(&obj, "resourceVersion").unwrap_or_default();
        let epoch = self.epoch;

        // The same UID under another name: the old identity is gone.
        if let Some(entry) = self.objects.get(uid)
            && (entry.key.0.as_deref() != namespace || &*entry.key.1 != name)
        {
            self.vanish(uid, out);
        }
        // The same name under another UID: the predecessor is gone.
        let key: ObjectKey = (namespace.map(|ns| self.intern(ns)), Arc::from(name));
        if let Some(other) = self
            .names
            .get(&key)
            .filter(|other| &***other != uid)
            .cloned()
        {
            self.vanish(&other, out);
        }

        let seen = match self.objects.get_mut(uid) {
            Some(entry) => {
                entry.epoch = epoch;
                if &*entry.resource_version == rv {
                    Seen::Unchanged
                } else {
                    entry.resource_version = rv.into();
                    Seen::Changed
                }
            }
            None => {
                let uid: Arc<str> = Arc::from(uid);
                self.names.insert(key.clone(), uid.clone());
                self.objects.insert(
                    uid,
                    Entry {
                        key,
                        resource_version: rv.into(),
                        epoch,
                    },
                );
                Seen::New
            }
        };
        out.push(ObjectEvent::Upserted {
            object: Arc::new(obj),
            seen,
        });
    }

    fn intern(&mut self, namespace: &str) -> Arc<str> {
        if let Some(shared) = self.namespaces.get(namespace) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(namespace);
        self.namespaces.insert(shared.clone());
        shared
    }

    fn delete(&mut self, obj: Value, out: &mut Vec<ObjectEvent>) {
        let Some(uid) = meta_str(&obj, "uid") else {
            tracing::warn!(kind = %self.resource.kind, name = ?meta_str(&obj, "name"), "ignoring a deletion without uid");
            return;
        };
        if let Some(entry) = self.objects.remove(uid) {
            self.names.remove(&entry.key);
        }
        out.push(ObjectEvent::Deleted {
            object: Arc::new(obj),
            how: DeletedBy::Event,
        });
    }

    fn list_done(&mut self, out: &mut Vec<ObjectEvent>) {
        let epoch = self.epoch;
        let mut stale: Vec<Arc<str>> = self
            .objects
            .iter()
            .filter(|(_, e)| e.epoch != epoch)
            .map(|(uid, _)| uid.clone())
            .collect();
        stale.sort_by(|a, b| self.objects[a].key.cmp(&self.objects[b].key));
        for uid in stale {
            self.vanish(&uid, out);
        }
        out.push(ObjectEvent::Synced {
            count: self.objects.len(),
        });
    }

    fn vanish(&mut self, uid: &str, out: &mut Vec<ObjectEvent>) {
        let Some(entry) = self.objects.remove(uid) else {
            return;
        };
        if self
            .names
            .get(&entry.key)
            .is_some_and(|owner| &**owner == uid)
        {
            self.names.remove(&entry.key);
        }
        let mut metadata = json!({
            "name": &*entry.key.1,
            "uid": uid,
            "resourceVersion": &*entry.resource_version,
        });
        if let Some(namespace) = entry.key.0.as_deref() {
            metadata["namespace"] = json!(namespace);
        }
        let object = json!({
            "apiVersion": self.resource.api_version,
            "kind": self.resource.kind,
            "metadata": metadata,
        });
        out.push(ObjectEvent::Deleted {
            object: Arc::new(object),
            how: DeletedBy::Vanished,
        });
    }
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
