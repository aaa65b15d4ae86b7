//! What becomes of each event of a served resource's watch: a pure step,
//! [`Dispatcher::route`], which says what to do ([`Route`]) and keeps
//! what it must remember (whether the first listing is complete, which
//! objects were reported as undecodable); the serving loop
//! (`ServeResource::run`) does it.
//!
//! # Guarantees
//! - Every event of another replica's shard slot ends after the indexes:
//!   it is never handled.
//! - A gone object's daemons and timers are stopped before its deletion is
//!   queued.
//! - An undecodable object is reported once while it stays so, and once
//!   more if its deletion then waits on the operator's finalizer (or Kopf's
//!   legacy marker); a state that decodes, or its deletion, forgets it.
//! - Once the first listing is complete, an unchanged object is not queued
//!   again.

use std::collections::HashMap;

use crate::peering::sharding::SlotSet;
use crate::persistence::finalizers::Finalizing;
use crate::watching::{DeletedBy, ObjectEvent, Seen};

/// What to do with one event. The resource's `#[index]` handlers see
/// every event before it is routed, whatever the route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Route {
    /// Nothing more: an event without a UID, or an object unchanged since
    /// the listing completed.
    Ignore,
    /// Another replica's object (a shard slot not held): indexed as every
    /// object, not handled.
    Foreign,
    /// A listing completed; `first` for the first one.
    Synced {
        /// How many objects its scope holds.
        count: usize,
        /// Whether it completes the first listing.
        first: bool,
    },
    /// Queue the object for handling; it is live (its daemons and timers
    /// are paused if the resource stops being served).
    Enqueue {
        /// The object's UID.
        uid: String,
        /// Whether the first listing is still under way.
        initial_listing: bool,
    },
    /// The object is gone: stop its daemons and timers at once, then queue
    /// its deletion.
    Gone {
        /// The object's UID.
        uid: String,
        /// How the deletion was noticed.
        how: DeletedBy,
        /// Whether the first listing is still under way.
        initial_listing: bool,
    },
    /// The object does not decode: it is live, but nothing handles it;
    /// reported if `report` says so.
    Undecodable {
        /// What to report, if it is to be reported now.
        report: Option<Report>,
    },
}

/// What to report of an undecodable object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Report {
    /// It is skipped.
    Skipped,
    /// It is skipped, and its deletion waits on the operator's finalizer.
    DeletionHeld,
}

/// Routes the events of one served resource's watch.
#[derive(Debug)]
pub(super) struct Dispatcher {
    /// The shard slots whose objects are handled, if not all.
    slots: Option<SlotSet>,
    /// The operator's finalizer.
    finalizer: String,
    /// Whether the first listing is complete.
    synced: bool,
    /// The objects reported as undecodable, until a later state of theirs
    /// decodes or they are gone, and whether their deletion was reported
    /// as held by the finalizer.
    undecodable: HashMap<String, bool>,
}

impl Dispatcher {
    /// A dispatcher handling the objects of `slots` (all without), whose
    /// deletions `finalizer` holds.
    pub(super) fn new(slots: Option<SlotSet>, finalizer: String) -> Self {
        Self {
            slots,
            finalizer,
            synced: false,
            undecodable: HashMap::new(),
        }
    }

    /// What to do with `event`.
    pub(super) fn route(&mut self, event: &ObjectEvent) -> Route {
        if let ObjectEvent::Synced { count } = event {
            let first = !self.synced;
            self.synced = true;
            return Route::Synced {
                count: *count,
                first,
            };
        }
        let Some(uid) = event.uid() else {
            return Route::Ignore;
        };
        if let Some(slots) = self.slots
            && !slots.serve(uid)
        {
            return Route::Foreign;
        }
        let initial_listing = !self.synced;
        match event {
            ObjectEvent::Undecodable { object, .. } => {
                let held = Finalizing::of(object, &self.finalizer).holds_deletion();
                let reported = self.undecodable.insert(uid.to_owned(), held);
                let report = match reported {
                    None => Some(if held {
                        Report::DeletionHeld
                    } else {
                        Report::Skipped
                    }),
                    Some(false) if held => Some(Report::DeletionHeld),
                    Some(_) => None,
                };
                Route::Undecodable { report }
            }
            ObjectEvent::Deleted { how, .. } => {
                self.undecodable.remove(uid);
                Route::Gone {
                    uid: uid.to_owned(),
                    how: *how,
                    initial_listing,
                }
            }
            ObjectEvent::Upserted { seen, .. } => {
                self.undecodable.remove(uid);
                if *seen == Seen::Unchanged && self.synced {
                    return Route::Ignore;
                }
                Route::Enqueue {
                    uid: uid.to_owned(),
                    initial_listing,
                }
            }
            ObjectEvent::Synced { .. } => Route::Ignore,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;
    use crate::persistence::finalizers::LEGACY_FINALIZER;

    const F: &str = "kopf.zalando.org/KopfFinalizerMarker";

    fn body(uid: &str) -> Arc<Value> {
        Arc::new(json!({"metadata": {"uid": uid, "name": uid, "resourceVersion": "1"}}))
    }

    fn upserted(uid: &str, seen: Seen) -> ObjectEvent {
        ObjectEvent::Upserted {
            object: body(uid),
            seen,
        }
    }

    fn deleted(uid: &str, how: DeletedBy) -> ObjectEvent {
        ObjectEvent::Deleted {
            object: body(uid),
            how,
        }
    }

    fn undecodable(uid: &str, finalizers: &[&str], deleting: bool) -> ObjectEvent {
        let mut object = json!({"metadata": {"uid": uid, "finalizers": finalizers}});
        if deleting {
            object["metadata"]["deletionTimestamp"] = json!("2020-01-01T00:00:00Z");
        }
        ObjectEvent::Undecodable {
            object: Arc::new(object),
            reason: Arc::from("too deep"),
        }
    }

    fn enqueue(uid: &str, initial_listing: bool) -> Route {
        Route::Enqueue {
            uid: uid.into(),
            initial_listing,
        }
    }

    fn report(report: Option<Report>) -> Route {
        Route::Undecodable { report }
    }

    fn dispatcher() -> Dispatcher {
        Dispatcher::new(None, F.into())
    }

    #[test]
    fn objects_listed_are_queued_as_the_initial_listing_until_it_is_synced() {
        let mut d = dispatcher();
        assert_eq!(d.route(&upserted("a", Seen::New)), enqueue("a", true));
        assert_eq!(
            d.route(&ObjectEvent::Synced { count: 1 }),
            Route::Synced {
                count: 1,
                first: true
            }
        );
        assert_eq!(d.route(&upserted("b", Seen::New)), enqueue("b", false));
        assert_eq!(
            d.route(&ObjectEvent::Synced { count: 2 }),
            Route::Synced {
                count: 2,
                first: false
            }
        );
    }

    #[test]
    fn an_unchanged_object_is_queued_while_listing_and_ignored_once_synced() {
        let mut d = dispatcher();
        assert_eq!(d.route(&upserted("a", Seen::Unchanged)), enqueue("a", true));
        d.route(&ObjectEvent::Synced { count: 1 });
        assert_eq!(d.route(&upserted("a", Seen::Unchanged)), Route::Ignore);
        assert_eq!(d.route(&upserted("a", Seen::Changed)), enqueue("a", false));
    }

    #[test]
    fn a_gone_object_has_its_tasks_stopped_and_its_deletion_queued() {
        let mut d = dispatcher();
        d.route(&ObjectEvent::Synced { count: 0 });
        for how in [DeletedBy::Event, DeletedBy::Vanished] {
            assert_eq!(
                d.route(&deleted("a", how)),
                Route::Gone {
                    uid: "a".into(),
                    how,
                    initial_listing: false
                }
            );
        }
    }

    #[test]
    fn another_replicas_objects_are_only_indexed() {
        let slots = SlotSet::none(2).with(0);
        let (mine, theirs) =
            (0..64)
                .map(|i| format!("{i}-uid"))
                .fold((None, None), |(m, t), uid| {
                    if slots.serve(&uid) {
                        (m.or(Some(uid)), t)
                    } else {
                        (m, t.or(Some(uid)))
                    }
                });
        let (mine, theirs) = (mine.expect("a slot-0 uid"), theirs.expect("a slot-1 uid"));
        let mut d = Dispatcher::new(Some(slots), F.into());
        assert_eq!(d.route(&upserted(&theirs, Seen::New)), Route::Foreign);
        assert_eq!(d.route(&deleted(&theirs, DeletedBy::Event)), Route::Foreign);
        assert_eq!(d.route(&undecodable(&theirs, &[F], true)), Route::Foreign);
        assert_eq!(d.route(&upserted(&mine, Seen::New)), enqueue(&mine, true));
    }

    #[test]
    fn an_event_without_a_uid_is_ignored() {
        let mut d = dispatcher();
        let event = ObjectEvent::Upserted {
            object: Arc::new(json!({"metadata": {"name": "a"}})),
            seen: Seen::New,
        };
        assert_eq!(d.route(&event), Route::Ignore);
    }

    #[test]
    fn an_undecodable_object_is_reported_once_while_it_stays_so() {
        let mut d = dispatcher();
        assert_eq!(
            d.route(&undecodable("a", &[], false)),
            report(Some(Report::Skipped))
        );
        assert_eq!(d.route(&undecodable("a", &[], false)), report(None));
        // A state that decodes forgets it: the next undecodable one is news.
        assert_eq!(d.route(&upserted("a", Seen::Changed)), enqueue("a", true));
        assert_eq!(
            d.route(&undecodable("a", &[], false)),
            report(Some(Report::Skipped))
        );
        // So does its deletion.
        d.route(&deleted("a", DeletedBy::Event));
        assert_eq!(
            d.route(&undecodable("a", &[], false)),
            report(Some(Report::Skipped))
        );
    }

    #[test]
    fn an_undecodable_deletion_held_by_the_finalizer_is_reported_once_more() {
        let mut d = dispatcher();
        assert_eq!(
            d.route(&undecodable("a", &[F], false)),
            report(Some(Report::Skipped))
        );
        assert_eq!(
            d.route(&undecodable("a", &[F], true)),
            report(Some(Report::DeletionHeld))
        );
        assert_eq!(d.route(&undecodable("a", &[F], true)), report(None));
        assert_eq!(
            d.route(&undecodable("b", &[F], true)),
            report(Some(Report::DeletionHeld))
        );
    }

    #[test]
    fn the_legacy_marker_holds_an_undecodable_deletion_and_others_do_not() {
        let mut d = dispatcher();
        assert_eq!(
            d.route(&undecodable("a", &["other", LEGACY_FINALIZER], true)),
            report(Some(Report::DeletionHeld))
        );
        assert_eq!(
            d.route(&undecodable("b", &["other"], true)),
            report(Some(Report::Skipped))
        );
    }
}
