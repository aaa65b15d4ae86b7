//! Which objects a replica serves: the Leases it holds, as a set of shard
//! slots.
//!
//! Without sharding, a replica competes for one Lease, and holds the one
//! slot of every object while it leads. With `--shards S` (a power of two,
//! at most [`MAX_SHARDS`]), an object's slot is the top `log2(S)` bits of
//! the 64-bit FNV-1a hash of its UID ([`slot_of`]): the ranges of
//! Kubernetes' sharded list-and-watch proposal (KEP-5866,
//! `shardRange(object.metadata.uid, …)`), so that the filtering can later
//! move to the API server. Each slot is a Lease (`NAME-shard-I-of-S`) run by
//! the same [`Elector`] as a leader's; each replica also keeps a member
//! Lease (`NAME-member-IDENTITY`, labelled [`PEERING_LABEL`]), and takes
//! free or expired slots while it holds fewer than `ceil(S / live
//! members)` ([`Quota`]). A member is live while its Lease changes within
//! the lease duration less a retry period, judged on the local monotonic
//! clock as for any Lease: a little early, so that when a replica dies,
//! the others' share has risen by the time its slots' Leases expire. (A
//! member judged gone too early costs nothing but balance: the slots it
//! renews stay its own, and a free slot taken beyond a share is yielded
//! again at the next count.) A replica holding more than its share yields
//! the surplus: each such slot pauses, then is released.
//!
//! [`Ward`] is what the operator sees of it: the slots held ([`SlotSet`]),
//! when they change, and when a slot given up may be another replica's.
//!
//! # Guarantees
//! - Every object has exactly one slot, the same in every replica.
//! - A replica yields or releases a slot only once the operator has paused
//!   (see [`Ward::paused`]); a slot that could not be renewed is given up
//!   before its Lease may expire for the others, as a leader steps down.
//!
//! # Caveats
//! - All replicas watch every object. The objects of other replicas' slots
//!   are skipped by the watch before they are decoded (their UID is read
//!   from the text), and cost a scan of their text; with an index on the
//!   resource, which holds every object, they are decoded and indexed, and
//!   skipped by the handling.
//! - A change of the slots a replica holds pauses every object it serves
//!   and serves the new set from a fresh listing, as a change of leadership
//!   does: slots move only when replicas join or leave.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::select_all;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::peering::fencing::Tenure;
use crate::peering::leadership::{ElectionSettings, Elector, Quota, Role, lease_seconds};

/// The most slots objects can be spread over.
pub(crate) const MAX_SHARDS: u32 = 64;

/// The label of the member Leases, naming the peering.
pub(crate) const PEERING_LABEL: &str = "kopf.dev/peering";

/// The 64-bit FNV-1a hash of `uid`.
fn fnv1a(uid: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    uid.bytes().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

/// The slot of the object with `uid`, of `shards` (a power of two).
pub(crate) fn slot_of(uid: &str, shards: u32) -> u32 {
    match shards.trailing_zeros() {
        0 => 0,
        bits => u32::try_from(fnv1a(uid) >> (64 - bits)).unwrap_or(0),
    }
}

/// A set of shard slots, of `shards` in all (a bit set): those a replica
/// holds, and whether an object is in them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlotSet {
    shards: u32,
    held: u64,
}

impl SlotSet {
    /// None of `shards`.
    pub(crate) fn none(shards: u32) -> Self {
        Self { shards, held: 0 }
    }

    /// These and `slot`.
    pub(crate) fn with(mut self, slot: u32) -> Self {
        self.held |= 1 << slot;
        self
    }

    /// Whether `slot` is one of them.
    pub(crate) fn has(self, slot: u32) -> bool {
        self.held & (1 << slot) != 0
    }

    /// How many are held.
    pub(crate) fn len(self) -> u32 {
        self.held.count_ones()
    }

    /// Whether the object with `uid` is in one of them.
    pub(crate) fn serve(self, uid: &str) -> bool {
        self.has(slot_of(uid, self.shards))
    }

    /// Whether they are every slot there is (nothing to filter).
    pub(crate) fn is_all(self) -> bool {
        self.len() == self.shards
    }

    /// Whether some of `self` is not in `other`.
    pub(crate) fn loses_to(self, other: SlotSet) -> bool {
        self.held & !other.held != 0
    }
}

/// One Lease this replica competes for.
struct Seat {
    roles: watch::Receiver<Role>,
    paused: Arc<Notify>,
    yielding: Arc<Notify>,
    tenure: Arc<Tenure>,
}

impl Seat {
    fn of(elector: &Elector) -> Self {
        Self {
            roles: elector.roles(),
            paused: elector.paused(),
            yielding: elector.yielding(),
            tenure: elector.tenure(),
        }
    }
}

/// The Leases this replica competes for, and the slots it holds: see the
/// [module](self) notes.
pub(crate) struct Ward {
    seats: Vec<Seat>,
    shards: u32,
    stop: CancellationToken,
}

/// Where and as whom the electors of a [`Ward`] compete.
pub(crate) struct Seating<'a> {
    pub(crate) client: &'a kube::Client,
    pub(crate) namespace: &'a str,
    pub(crate) name: &'a str,
    pub(crate) shards: u32,
    pub(crate) settings: ElectionSettings,
}

impl Ward {
    /// Starts competing on `tasks` until `stop`: for the Lease `name`, or,
    /// with more than one shard, for each slot's Lease beside a member
    /// Lease.
    pub(crate) fn start(
        seating: Seating<'_>,
        stop: CancellationToken,
        tasks: &TaskTracker,
    ) -> Self {
        let Seating {
            client,
            namespace,
            name,
            shards,
            settings,
        } = seating;
        if shards <= 1 {
            let elector = Elector::new(client.clone(), namespace, name, settings);
            let seat = Seat::of(&elector);
            tasks.spawn(elector.run(stop.clone()));
            return Self {
                seats: vec![seat],
                shards: 1,
                stop,
            };
        }
        let quota = Arc::new(Quota::default());
        let seats: Vec<Seat> = (0..shards)
            .map(|slot| {
                let lease = format!("{name}-shard-{slot}-of-{shards}");
                let elector = Elector::new(client.clone(), namespace, &lease, settings.clone())
                    .with_quota(Arc::clone(&quota));
                let seat = Seat::of(&elector);
                tasks.spawn(elector.run(stop.clone()));
                seat
            })
            .collect();
        let membership = Membership {
            api: Api::namespaced(client.clone(), namespace),
            peering: name.to_owned(),
            me: member_name(name, &settings.identity),
            identity: settings.identity.clone(),
            shards,
            lease_duration: settings.lease_duration,
            retry_period: settings.retry_period,
            quota,
            seats: seats
                .iter()
                .map(|s| (s.roles.clone(), Arc::clone(&s.yielding)))
                .collect(),
            observed: HashMap::new(),
        };
        tasks.spawn(membership.run(stop.clone()));
        Self {
            seats,
            shards,
            stop,
        }
    }

    /// Whether objects are spread over several slots.
    pub(crate) fn sharded(&self) -> bool {
        self.shards > 1
    }

    /// The slots held now.
    pub(crate) fn held(&self) -> SlotSet {
        self.seats
            .iter()
            .zip(0..)
            .filter(|(seat, _)| *seat.roles.borrow() == Role::Leader)
            .fold(SlotSet::none(self.shards), |slots, (_, slot)| {
                slots.with(slot)
            })
    }

    /// How long each of `slots` is held, on this process's clock.
    pub(crate) fn tenures(&self, slots: SlotSet) -> Vec<Arc<Tenure>> {
        self.seats
            .iter()
            .zip(0..)
            .filter(|(_, slot)| slots.has(*slot))
            .map(|(seat, _)| Arc::clone(&seat.tenure))
            .collect()
    }

    /// Waits until some slot is held: those held then. With shards, the
    /// slots held must also have stayed the same for `settle`, so that
    /// slots taken one after another are served in one term.
    ///
    /// It is called between terms, when nothing is served: a slot given up
    /// meanwhile is let go at once.
    pub(crate) async fn hold_some(&mut self, settle: Duration) -> SlotSet {
        let mut held = self.held();
        loop {
            self.paused();
            if held.len() == 0 {
                self.moved_from(held).await;
                held = self.held();
                continue;
            }
            if !self.sharded() {
                return held;
            }
            tokio::select! {
                () = self.moved_from(held) => held = self.held(),
                () = tokio::time::sleep(settle) => return held,
            }
        }
    }

    /// Waits until the slots held are not `slots`.
    pub(crate) async fn moved_from(&mut self, slots: SlotSet) {
        while self.held() == slots {
            let changes = self
                .seats
                .iter_mut()
                .map(|seat| Box::pin(seat.roles.changed()));
            let (changed, ..) = select_all(changes).await;
            if changed.is_err() {
                // The electors have ended: nothing will change any more.
                std::future::pending::<()>().await;
            }
        }
    }

    /// The operator has paused what it served: the slots given up may go.
    /// (The electors still leading are not told: they lead on.)
    pub(crate) fn paused(&self) {
        for seat in &self.seats {
            if matches!(
                *seat.roles.borrow(),
                Role::HandingOver | Role::SteppedDown { .. }
            ) {
                seat.paused.notify_one();
            }
        }
    }

    /// The earliest moment a slot given up without a release may be
    /// another replica's, if any was.
    pub(crate) fn others_may_lead_at(&self) -> Option<Instant> {
        self.seats
            .iter()
            .filter_map(|seat| match *seat.roles.borrow() {
                Role::SteppedDown { others_may_lead_at } => Some(others_may_lead_at),
                _ => None,
            })
            .min()
    }

    /// Stops competing, once the operator has paused what it served:
    /// each Lease held is released. Every elector is told of the pause,
    /// whatever its role now: one still leading leaves it only on seeing
    /// the stop, and then finds the pause already told.
    pub(crate) fn stop_paused(&self) {
        self.stop.cancel();
        for seat in &self.seats {
            seat.paused.notify_one();
        }
    }
}

/// The member Lease of `identity`, a valid object name.
fn member_name(peering: &str, identity: &str) -> String {
    let identity: String = identity
        .to_lowercase()
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '.' => c,
            _ => '-',
        })
        .collect();
    format!("{peering}-member-{}", identity.trim_matches(['-', '.']))
}

/// Keeps this replica's member Lease, counts the live members, and sets
/// the quota of slots from them, yielding the surplus.
struct Membership {
    api: Api<Lease>,
    peering: String,
    me: String,
    identity: String,
    shards: u32,
    lease_duration: Duration,
    retry_period: Duration,
    quota: Arc<Quota>,
    seats: Vec<(watch::Receiver<Role>, Arc<Notify>)>,
    /// Each member Lease's last `resourceVersion`, and when it was first
    /// seen so.
    observed: HashMap<String, (String, Instant)>,
}

impl Membership {
    async fn run(mut self, stop: CancellationToken) {
        loop {
            if let Err(error) = self.renew().await {
                tracing::debug!(lease = %self.me, %error, "Could not renew the member lease.");
            }
            match self.live_members().await {
                Ok(members) => self.share(members),
                Err(error) => {
                    tracing::debug!(%error, "Could not list the member leases.");
                }
            }
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(self.retry_period) => {}
            }
        }
        if let Err(error) = self.api.delete(&self.me, &DeleteParams::default()).await {
            tracing::debug!(lease = %self.me, %error, "Could not delete the member lease.");
        }
    }

    /// Writes the member Lease anew.
    async fn renew(&self) -> Result<(), kube::Error> {
        let now = MicroTime(jiff::Timestamp::now());
        let spec = LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(lease_seconds(self.lease_duration)),
            renew_time: Some(now),
            ..LeaseSpec::default()
        };
        match self.api.get_opt(&self.me).await? {
            Some(mut lease) => {
                lease.spec = Some(spec);
                self.api
                    .replace(&self.me, &PostParams::default(), &lease)
                    .await?;
            }
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.me.clone()),
                        labels: Some([(PEERING_LABEL.to_owned(), self.peering.clone())].into()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await?;
            }
        }
        Ok(())
    }

    /// How many members renewed their Lease within the lease duration less
    /// a retry period, as this replica has seen them change; itself
    /// included.
    async fn live_members(&mut self) -> Result<usize, kube::Error> {
        let selector = format!("{PEERING_LABEL}={}", self.peering);
        let leases = self
            .api
            .list(&ListParams::default().labels(&selector))
            .await?;
        let now = Instant::now();
        let mut seen = HashMap::new();
        for lease in leases.items {
            let (Some(name), Some(version)) =
                (lease.metadata.name, lease.metadata.resource_version)
            else {
                continue;
            };
            let since = match self.observed.remove(&name) {
                Some((last, since)) if last == version => since,
                _ => now,
            };
            seen.insert(name, (version, since));
        }
        self.observed = seen;
        let window = self.lease_duration.saturating_sub(self.retry_period);
        let live = self
            .observed
            .iter()
            .filter(|(name, (_, since))| **name == self.me || now < *since + window)
            .count();
        Ok(live.max(1))
    }

    /// Aims at this replica's share of the slots, and yields what it holds
    /// beyond it, from the highest slot down.
    fn share(&self, members: usize) {
        let shards = usize::try_from(self.shards).unwrap_or(usize::MAX);
        let target = shards.div_ceil(members);
        self.quota.aim(target);
        let surplus = self.quota.held().saturating_sub(target);
        let leading = self
            .seats
            .iter()
            .rev()
            .filter(|(roles, _)| *roles.borrow() == Role::Leader);
        for (_, yielding) in leading.take(surplus) {
            yielding.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slot_is_the_top_bits_of_the_fnv1a_hash_of_the_uid() {
        // The reference values of 64-bit FNV-1a.
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a("foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(slot_of("a", 1), 0);
        assert_eq!(slot_of("a", 2), 1, "0xa… has its top bit set");
        assert_eq!(slot_of("a", 16), 0xa);
        assert_eq!(slot_of("foobar", 256), 0x85);
    }

    #[test]
    fn slots_spread_uids_evenly() {
        let mut counts = [0_u32; 8];
        // UIDs are random (version 4 UUIDs): seeded here.
        let mut random = fastrand::Rng::with_seed(7);
        for _ in 0..8000 {
            let uid = format!(
                "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
                random.u32(..),
                random.u16(..),
                random.u16(..0x1000),
                random.u16(..),
                random.u64(..1 << 48)
            );
            counts[slot_of(&uid, 8) as usize] += 1;
        }
        assert!(counts.iter().all(|c| (800..1200).contains(c)), "{counts:?}");
    }

    #[test]
    fn a_set_of_slots_serves_the_objects_of_its_slots() {
        let none = SlotSet::none(16);
        let one = none.with(0xa);
        assert_eq!((none.len(), one.len()), (0, 1));
        assert!(one.serve("a") && !one.serve("foobar"));
        assert!(one.loses_to(none) && !none.loses_to(one));
        assert!(SlotSet::none(1).with(0).is_all() && !one.is_all());
        assert_eq!(one.with(3).len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slot_given_up_between_terms_is_let_go_at_once() {
        use futures::FutureExt;

        let (leading, handing_over) = (
            watch::Sender::new(Role::Leader),
            watch::Sender::new(Role::Leader),
        );
        let seat = |roles: &watch::Sender<Role>| Seat {
            roles: roles.subscribe(),
            paused: Arc::new(Notify::new()),
            yielding: Arc::new(Notify::new()),
            tenure: Arc::default(),
        };
        let mut ward = Ward {
            seats: vec![seat(&leading), seat(&handing_over)],
            shards: 2,
            stop: CancellationToken::new(),
        };
        let paused: Vec<Arc<Notify>> = ward.seats.iter().map(|s| Arc::clone(&s.paused)).collect();
        let settle = Duration::from_secs(1);
        // The second slot is given up while the next term waits to settle.
        let giving_up = async {
            tokio::time::sleep(settle / 2).await;
            handing_over.send_replace(Role::HandingOver);
        };
        let (held, ()) = tokio::join!(ward.hold_some(settle), giving_up);
        assert_eq!(held, SlotSet::none(2).with(0));
        assert!(
            paused[1].notified().now_or_never().is_some(),
            "told that nothing of its slot is served"
        );
        assert!(
            paused[0].notified().now_or_never().is_none(),
            "the slot still led is not"
        );
    }

    #[test]
    fn member_names_are_valid_object_names() {
        assert_eq!(member_name("op", "Pod_A.1"), "op-member-pod-a.1");
        assert_eq!(member_name("op", "_x_"), "op-member-x");
    }
}
