//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's
//! semantics and defaults, and a handover to candidates of a higher
//! priority.
//!
//! One [`Elector`] per replica competes for one Lease:
//! - **Acquiring.** A candidate takes the Lease when it is missing, has no
//!   holder, or its holder has not renewed it for `lease_duration`, judged
//!   on this process's monotonic clock from the moment the candidate last
//!   saw the Lease's record change (never from the timestamps written in
//!   it: the replicas' clocks need not agree).
//! - **Writes are conditional** on the Lease's `resourceVersion`: of two
//!   candidates writing at once, one gets a conflict and stays a candidate.
//! - **Renewing.** The leader renews every `retry_period`. When it cannot
//!   renew within `renew_deadline` of its last renewal (API errors, or the
//!   API unreachable), it steps down by itself, before the Lease can expire
//!   for the others (`renew_deadline` < `lease_duration`).
//! - **Priorities.** The holder writes its priority on the Lease. A
//!   candidate with a strictly higher priority asks for a handover (an
//!   annotation naming it); the holder steps down ([`Role::HandingOver`]),
//!   waits until its work is paused, and releases the Lease, which then
//!   goes to the one who asked: while a request is fresh (younger than
//!   `lease_duration`), candidates of a lower priority leave a free Lease
//!   alone. Equal priorities elect as client-go does.
//! - **Releasing.** On exit the leader releases the Lease (no holder), so
//!   that another replica takes it within its `retry_period`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::peering::fencing::{Fence, Held, Tenure};
use crate::settings::PeeringSettings;

/// The annotation with the holder's priority.
pub(crate) const PRIORITY: &str = "kopf.dev/priority";
/// The annotation with a handover request: `<priority> <identity>`.
pub(crate) const HANDOVER: &str = "kopf.dev/handover-requested-by";

/// A write refused because the term it belongs to is over.
#[derive(Debug, thiserror::Error)]
#[error(
    "this replica no longer leads on the Lease {lease}: the write is refused, \
     so that two replicas never act on one object"
)]
pub(crate) struct NotLeading {
    lease: String,
}

/// `client` for what one term of leadership does: once `over` is
/// cancelled, or while `fence` holds work back, it refuses every write
/// (anything but `GET`, `HEAD` and `OPTIONS`) with [`NotLeading`], so that
/// a handler still finishing after its replica stepped down, or resumed
/// after a pause past its Lease, changes nothing.
pub(crate) fn term_client(
    client: kube::Client,
    over: &CancellationToken,
    fence: Fence,
    lease: &str,
) -> kube::Client {
    let namespace = client.default_namespace().to_owned();
    let over = over.clone();
    let lease = lease.to_owned();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let writes = !matches!(
            *request.method(),
            http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
        );
        let refused = writes && (over.is_cancelled() || !fence.allows_now(Held::Write));
        let refusal = refused.then(|| NotLeading {
            lease: lease.clone(),
        });
        let client = client.clone();
        async move {
            match refusal {
                Some(refusal) => Err(kube::Error::Service(Box::new(refusal))),
                None => client.send(request).await,
            }
        }
    });
    kube::Client::new(service, namespace)
}

/// How one replica competes for the Lease (client-go's defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ElectionSettings {
    /// This replica's name on the Lease (`holderIdentity`).
    pub identity: String,
    /// Higher wins a handover; equal priorities elect normally.
    pub priority: i64,
    /// How long a Lease that is not renewed stays its holder's.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it steps down.
    pub renew_deadline: Duration,
    /// How often candidates try to acquire, and the leader renews.
    pub retry_period: Duration,
}

impl ElectionSettings {
    /// `identity` at `priority`, with client-go's timings (15 s, 10 s, 2 s).
    #[cfg(test)]
    fn new(identity: impl Into<String>, priority: i64) -> Self {
        Self::with_timings(identity, priority, &PeeringSettings::default())
    }

    /// `identity` at `priority`, with the timings of `peering`.
    pub(crate) fn with_timings(
        identity: impl Into<String>,
        priority: i64,
        peering: &PeeringSettings,
    ) -> Self {
        Self {
            identity: identity.into(),
            priority,
            lease_duration: peering.lease_duration,
            renew_deadline: peering.renew_deadline,
            retry_period: peering.retry_period,
        }
    }

    /// Why these settings cannot elect safely, if they cannot.
    pub(crate) fn problem(&self) -> Option<String> {
        if self.identity.is_empty() {
            return Some("the identity is empty: pass --identity NAME".into());
        }
        if self.lease_duration < Duration::from_secs(1) {
            return Some(format!(
                "settings.peering.lease_duration ({:?}) must be at least 1 s: \
                 a Lease holds its duration in whole seconds",
                self.lease_duration
            ));
        }
        if self.retry_period.is_zero() || self.renew_deadline <= self.retry_period {
            return Some(format!(
                "settings.peering.renew_deadline ({:?}) must be longer than \
                 settings.peering.retry_period ({:?})",
                self.renew_deadline, self.retry_period
            ));
        }
        if self.lease_duration <= self.renew_deadline {
            return Some(format!(
                "settings.peering.lease_duration ({:?}) must be longer than \
                 settings.peering.renew_deadline ({:?}), or two replicas may lead at once",
                self.lease_duration, self.renew_deadline
            ));
        }
        None
    }
}

/// `duration` as a Lease holds it, in whole seconds, rounded up: the others
/// count the Lease from what is written on it, which must never be shorter
/// than what its holder counts.
pub(crate) fn lease_seconds(duration: Duration) -> i32 {
    let seconds = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    i32::try_from(seconds).unwrap_or(i32::MAX)
}

/// What this replica is, as the elector sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Waiting for the Lease.
    Candidate,
    /// Holding the Lease: act.
    Leader,
    /// A candidate of a higher priority asked for the Lease: pause, then
    /// report it with [`Elector::paused`]; the Lease is released after.
    HandingOver,
    /// The Lease could not be renewed in time: stop acting at once, and
    /// before `others_may_lead_at`, when another replica may take the
    /// Lease.
    SteppedDown {
        /// When the Lease may be another replica's, at the earliest.
        others_may_lead_at: Instant,
    },
}

impl Role {
    /// Whether `self` and `other` are the same role, whatever they carry.
    #[cfg(all(test, feature = "emulator"))]
    fn is(self, other: Role) -> bool {
        std::mem::discriminant(&self) == std::mem::discriminant(&other)
    }
}

/// The Lease's record as client-go compares it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Record {
    holder: String,
    version: String,
    renew: Option<String>,
    handover: Option<String>,
}

impl Record {
    fn of(lease: &Lease) -> Self {
        let spec = lease.spec.clone().unwrap_or_default();
        Self {
            holder: spec.holder_identity.unwrap_or_default(),
            version: lease.metadata.resource_version.clone().unwrap_or_default(),
            renew: spec.renew_time.map(|t| t.0.to_string()),
            handover: annotation(lease, HANDOVER).map(str::to_owned),
        }
    }
}

fn annotation<'a>(lease: &'a Lease, key: &str) -> Option<&'a str> {
    lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// A handover request: the priority and identity of who asked.
fn parse_request(text: &str) -> Option<(i64, &str)> {
    let (priority, identity) = text.split_once(' ')?;
    Some((priority.parse().ok()?, identity))
}

/// Why a term of leadership ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// The replica stops, or yields the Lease to its quota: it pauses and
    /// releases.
    Released,
    /// A candidate of a higher priority asked for the Lease: it pauses,
    /// releases, and leaves the Lease to that candidate for a while.
    Asked,
    /// The Lease could not be renewed in time.
    SteppedDown {
        /// When the Lease may be another replica's, at the earliest.
        others_may_lead_at: Instant,
    },
}

impl Ending {
    /// The role it leaves the replica in until the Lease is let go.
    fn role(self) -> Role {
        match self {
            Ending::Released | Ending::Asked => Role::HandingOver,
            Ending::SteppedDown { others_may_lead_at } => Role::SteppedDown { others_may_lead_at },
        }
    }
}

/// What one attempt to acquire or renew found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// This replica holds the Lease now.
    Held,
    /// Another replica holds it (or it is reserved for a handover).
    Taken,
    /// A candidate of a higher priority asks for it.
    Requested,
}

/// How many Leases of a kind (shard slots) one replica may hold, and
/// holds: an elector with a quota takes a Lease only while the replica
/// holds fewer than its target.
#[derive(Debug, Default)]
pub(crate) struct Quota {
    target: AtomicUsize,
    held: AtomicUsize,
    /// Told when the target rises: the electors waiting try at once.
    raised: Notify,
}

impl Quota {
    /// Sets how many this replica may hold.
    pub(crate) fn aim(&self, target: usize) {
        let before = self.target.swap(target, Ordering::AcqRel);
        if target > before {
            self.raised.notify_waiters();
        }
    }

    /// How many this replica holds.
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Counts one more held if fewer than the target are: whether it did.
    /// (Of electors trying at once, only as many as the target allows
    /// pass.)
    fn reserve(&self) -> bool {
        let target = self.target.load(Ordering::Acquire);
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (held < target).then_some(held + 1)
            })
            .is_ok()
    }
}

/// Competes for one Lease: see the [module](self) notes.
pub(crate) struct Elector {
    api: Api<Lease>,
    name: String,
    settings: ElectionSettings,
    /// The record last seen, and when it was first seen so.
    observed: Option<(Record, Instant)>,
    role: watch::Sender<Role>,
    paused: Arc<Notify>,
    /// What the replica may hold of Leases like this one, if limited.
    quota: Option<Arc<Quota>>,
    /// Whether this elector's Lease is counted as held in the quota.
    counted: bool,
    /// Notified to give the Lease up while leading (as a handover).
    yielding: Arc<Notify>,
    /// Until when the Lease is held, on this process's clock.
    tenure: Arc<Tenure>,
    /// When the last successful write of the Lease began.
    renewed: Option<Instant>,
}

impl Elector {
    /// An elector for the Lease `namespace/name`.
    pub(crate) fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        settings: ElectionSettings,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            settings,
            observed: None,
            role: watch::Sender::new(Role::Candidate),
            paused: Arc::new(Notify::new()),
            quota: None,
            counted: false,
            yielding: Arc::new(Notify::new()),
            tenure: Arc::default(),
            renewed: None,
        }
    }

    /// Until when the Lease is held, as the work it covers must read it:
    /// the start of the last successful renewal plus the renew deadline,
    /// and nothing once the elector stepped down or released it.
    pub(crate) fn tenure(&self) -> Arc<Tenure> {
        Arc::clone(&self.tenure)
    }

    /// Takes the Lease only while `quota` allows.
    pub(crate) fn with_quota(mut self, quota: Arc<Quota>) -> Self {
        self.quota = Some(quota);
        self
    }

    /// What makes the leader give the Lease up, as for a handover: it
    /// pauses, releases, and leaves the Lease to others for a while.
    pub(crate) fn yielding(&self) -> Arc<Notify> {
        Arc::clone(&self.yielding)
    }

    /// The role, as it changes.
    pub(crate) fn roles(&self) -> watch::Receiver<Role> {
        self.role.subscribe()
    }

    /// What the operator notifies (`notify_one`) once per term, when its
    /// work is paused after leading: the elector waits for it after
    /// [`Role::HandingOver`] or [`Role::SteppedDown`], and releases the
    /// Lease only then. A notification given first is kept for the wait.
    pub(crate) fn paused(&self) -> Arc<Notify> {
        Arc::clone(&self.paused)
    }

    /// Competes until `stop`, then releases the Lease if held (once the work
    /// is paused).
    pub(crate) async fn run(mut self, stop: CancellationToken) {
        loop {
            self.role.send_replace(Role::Candidate);
            if !self.acquire(&stop).await {
                return;
            }
            // A pause told for an earlier term is no pause of this one.
            let _ = self.paused.notified().now_or_never();
            self.role.send_replace(Role::Leader);
            tracing::info!(lease = %self.name, identity = %self.settings.identity, "Became the leader.");
            let ending = self.renew(&stop).await;
            self.count_out();
            if let Ending::SteppedDown { .. } = ending {
                self.tenure.revoke();
            }
            self.role.send_replace(ending.role());
            // Nothing may act on another replica's behalf: wait for the work
            // to pause before the Lease can go to anyone else.
            self.paused.notified().await;
            match ending {
                Ending::SteppedDown { .. } => {
                    tracing::warn!(lease = %self.name, "Could not renew the lease in time; stepped down.");
                }
                Ending::Released | Ending::Asked => self.release().await,
            }
            self.tenure.revoke();
            if stop.is_cancelled() {
                return;
            }
            // A Lease yielded to the quota is not taken back while the quota
            // is full, and goes on being watched: the elector sees at once
            // when it is free again or no longer renewed.
            if ending == Ending::Asked {
                // Leave the Lease to the one who asked.
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(self.settings.lease_duration) => {}
                }
            }
        }
    }

    /// Tries every `retry_period`, and at once when the quota rises, until
    /// the Lease is held (`true`) or `stop`.
    async fn acquire(&mut self, stop: &CancellationToken) -> bool {
        let quota = self.quota.clone();
        loop {
            // Before the try, so that a rise during it is not missed.
            let raised = quota.as_ref().map(|quota| quota.raised.notified());
            let raised = async {
                match raised {
                    Some(raised) => raised.await,
                    None => std::future::pending().await,
                }
            };
            match self.try_acquire_or_renew().await {
                Ok(Attempt::Held | Attempt::Requested) => return true,
                Ok(Attempt::Taken) => {}
                Err(error) => {
                    tracing::debug!(lease = %self.name, %error, "Could not acquire the lease.")
                }
            }
            tokio::select! {
                () = stop.cancelled() => return false,
                () = tokio::time::sleep(self.jittered()) => {}
                () = raised => {}
            }
        }
    }

    /// Renews every `retry_period` while leading: the role it ends in.
    async fn renew(&mut self, stop: &CancellationToken) -> Ending {
        // A renewal is written before it is answered: the others count the
        // lease from their sight of it, which is no sooner.
        let mut renewing = self.renewed.unwrap_or_else(Instant::now);
        loop {
            tokio::select! {
                () = stop.cancelled() => return Ending::Released,
                () = self.yielding.notified() => return Ending::Released,
                () = tokio::time::sleep(self.settings.retry_period) => {}
            }
            let deadline = renewing + self.settings.renew_deadline;
            let expiry = renewing + self.settings.lease_duration;
            let stepped_down = |others_may_lead_at| Ending::SteppedDown { others_may_lead_at };
            loop {
                let attempt_began = Instant::now();
                let attempt = tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await;
                match attempt {
                    Err(_elapsed) => return stepped_down(expiry),
                    Ok(Ok(Attempt::Held)) => {
                        renewing = attempt_began;
                        break;
                    }
                    Ok(Ok(Attempt::Requested)) => return Ending::Asked,
                    // Another replica holds it already.
                    Ok(Ok(Attempt::Taken)) => return stepped_down(Instant::now()),
                    Ok(Err(error)) => {
                        tracing::debug!(lease = %self.name, %error, "Could not renew the lease.");
                        let retry = Instant::now() + self.settings.retry_period;
                        if retry >= deadline {
                            tokio::time::sleep_until(deadline).await;
                            return stepped_down(expiry);
                        }
                        tokio::time::sleep_until(retry).await;
                    }
                }
            }
        }
    }

    /// client-go's `tryAcquireOrRenew`, with handover requests; a Lease held
    /// is held until the attempt's start plus the renew deadline.
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let began = Instant::now();
        let attempt = self.try_acquire_or_renew_once().await;
        if let Ok(Attempt::Held) = attempt {
            self.renewed = Some(began);
            self.tenure.grant(began + self.settings.renew_deadline);
        }
        attempt
    }

    /// One attempt of [`Self::try_acquire_or_renew`].
    async fn try_acquire_or_renew_once(&mut self) -> Result<Attempt, kube::Error> {
        let me = self.settings.identity.clone();
        let now = MicroTime(jiff::Timestamp::now());
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let Some(fresh) = self.count_in(false) else {
                return Ok(Attempt::Taken);
            };
            let lease = self.lease_for_me(None, now);
            let created = self.api.create(&PostParams::default(), &lease).await;
            let created = self.counted_unless_failed(fresh, created)?;
            self.observe(&created);
            return Ok(Attempt::Held);
        };
        self.observe(&lease);
        let record = Record::of(&lease);
        let (_, seen) = self.observed.clone().expect("observed just now");
        let expired = seen + self.lease_duration_of(&lease) <= Instant::now();
        let request = record.handover.as_deref().and_then(parse_request);
        if record.holder == me {
            if let Some((priority, _)) = request
                && priority > self.settings.priority
            {
                self.count_in(true);
                return Ok(Attempt::Requested);
            }
        } else if !record.holder.is_empty() && !expired {
            self.request_handover(&mut lease, request).await;
            return Ok(Attempt::Taken);
        } else if let Some((priority, identity)) = request
            && identity != me
            && priority > self.settings.priority
            && !expired
        {
            // Reserved for the one who asked, while the request is fresh.
            return Ok(Attempt::Taken);
        }
        let Some(fresh) = self.count_in(record.holder == me) else {
            return Ok(Attempt::Taken);
        };
        let mine = self.lease_for_me(Some(&lease), now);
        let replaced = self
            .api
            .replace(&self.name, &PostParams::default(), &mine)
            .await;
        let replaced = self.counted_unless_failed(fresh, replaced)?;
        self.observe(&replaced);
        Ok(Attempt::Held)
    }

    /// Counts the Lease about to be written as held in the quota, if there
    /// is one and it is not counted yet: `None` if the replica holds its
    /// share already, else whether it was counted just now. A Lease that
    /// still names this replica (`mine`) is counted whatever the share:
    /// the surplus is yielded after.
    fn count_in(&mut self, mine: bool) -> Option<bool> {
        let Some(quota) = self.quota.as_ref().filter(|_| !self.counted) else {
            return Some(false);
        };
        if mine {
            quota.held.fetch_add(1, Ordering::AcqRel);
        } else if !quota.reserve() {
            return None;
        }
        self.counted = true;
        Some(true)
    }

    /// Un-counts the Lease if the write that was to take it failed.
    fn counted_unless_failed<T>(
        &mut self,
        fresh: bool,
        written: Result<T, kube::Error>,
    ) -> Result<T, kube::Error> {
        if fresh && written.is_err() {
            self.count_out();
        }
        written
    }

    /// The Lease is no longer held: it leaves the quota's count.
    fn count_out(&mut self) {
        if let Some(quota) = self.quota.as_ref().filter(|_| self.counted) {
            quota.held.fetch_sub(1, Ordering::AcqRel);
        }
        self.counted = false;
    }

    /// Asks the holder to hand over, if this replica outranks it and has
    /// not asked already.
    async fn request_handover(&mut self, lease: &mut Lease, request: Option<(i64, &str)>) {
        let holder_priority = annotation(lease, PRIORITY)
            .and_then(|p| p.parse::<i64>().ok())
            .unwrap_or(0);
        let mine = self.settings.priority;
        let outranked = request.is_some_and(|(priority, _)| priority >= mine);
        if mine <= holder_priority || outranked {
            return;
        }
        let text = format!("{mine} {}", self.settings.identity);
        lease
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(HANDOVER.into(), text);
        match self
            .api
            .replace(&self.name, &PostParams::default(), lease)
            .await
        {
            Ok(replaced) => {
                tracing::info!(lease = %self.name, "Asked the leader to hand over.");
                self.observe(&replaced);
            }
            Err(error) => {
                tracing::debug!(lease = %self.name, %error, "Could not ask for a handover.")
            }
        }
    }

    /// The Lease as this replica holds it: a holder change counts a
    /// transition and a new acquire time; its own handover request is done.
    fn lease_for_me(&self, current: Option<&Lease>, now: MicroTime) -> Lease {
        let me = &self.settings.identity;
        let spec = current.and_then(|l| l.spec.clone()).unwrap_or_default();
        let keeps = spec.holder_identity.as_deref() == Some(me.as_str());
        let transitions = spec.lease_transitions.unwrap_or(0);
        let mut metadata = current
            .map(|l| l.metadata.clone())
            .unwrap_or_else(|| ObjectMeta {
                name: Some(self.name.clone()),
                ..ObjectMeta::default()
            });
        let annotations = metadata.annotations.get_or_insert_default();
        annotations.insert(PRIORITY.into(), self.settings.priority.to_string());
        let answered = annotations
            .get(HANDOVER)
            .and_then(|r| parse_request(r))
            .is_some_and(|(_, identity)| identity == me);
        if answered {
            annotations.remove(HANDOVER);
        }
        Lease {
            metadata,
            spec: Some(LeaseSpec {
                holder_identity: Some(me.clone()),
                lease_duration_seconds: Some(lease_seconds(self.settings.lease_duration)),
                acquire_time: if keeps {
                    spec.acquire_time
                } else {
                    Some(now.clone())
                },
                renew_time: Some(now),
                lease_transitions: Some(if keeps || current.is_none() {
                    transitions
                } else {
                    transitions + 1
                }),
                ..spec
            }),
        }
    }

    /// Releases the Lease if this replica holds it: no holder, so that the
    /// next candidate takes it at its next try.
    async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_default();
        if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(lease = %self.name, "Released the lease."),
            Err(error) => {
                tracing::warn!(lease = %self.name, %error, "Could not release the lease; it expires.")
            }
        }
    }

    /// Notes `lease`'s record, and when it was first seen so.
    fn observe(&mut self, lease: &Lease) {
        let record = Record::of(lease);
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|(seen, _)| *seen != record);
        if changed {
            self.observed = Some((record, Instant::now()));
        }
    }

    /// The duration the holder wrote, else this replica's setting.
    fn lease_duration_of(&self, lease: &Lease) -> Duration {
        lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_duration_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.settings.lease_duration, Duration::from_secs)
    }

    /// The retry period with client-go's jitter (up to 20 % more).
    fn jittered(&self) -> Duration {
        self.settings
            .retry_period
            .mul_f64(1.0 + fastrand::f64() * 0.2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The others count the Lease from the duration written on it: never
    /// shorter than the holder's own, or they take it over before the
    /// holder has stepped down (1.5 s written as 1 s, against a renew
    /// deadline of 1 s).
    #[test]
    fn the_lease_is_written_with_no_shorter_a_duration_than_the_holders() {
        assert_eq!(lease_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(lease_seconds(Duration::from_secs(15)), 15);
        assert_eq!(lease_seconds(Duration::from_millis(1)), 1);
        let short = ElectionSettings {
            lease_duration: Duration::from_millis(900),
            renew_deadline: Duration::from_millis(500),
            retry_period: Duration::from_millis(100),
            ..ElectionSettings::new("a", 0)
        };
        let problem = short.problem().expect("refused");
        assert!(problem.contains("at least 1 s"), "{problem}");
    }

    #[test]
    fn settings_that_could_elect_two_leaders_are_refused() {
        assert_eq!(ElectionSettings::new("a", 0).problem(), None);
        let long_deadline = ElectionSettings {
            renew_deadline: Duration::from_secs(20),
            ..ElectionSettings::new("a", 0)
        };
        let problem = long_deadline.problem().expect("refused");
        assert!(
            problem.contains("settings.peering.lease_duration"),
            "{problem}"
        );
        assert!(ElectionSettings::new("", 0).problem().is_some());
    }

    /// Electors against the emulator, over real HTTP.
    #[cfg(feature = "emulator")]
    mod emulated {
        use kopf_testing::{Emulator, FailRule};

        use super::super::*;

        const PATIENCE: Duration = Duration::from_secs(30);

        /// Short periods, in client-go's proportions.
        fn settings(identity: &str, priority: i64) -> ElectionSettings {
            ElectionSettings {
                lease_duration: Duration::from_millis(1500),
                renew_deadline: Duration::from_millis(1000),
                retry_period: Duration::from_millis(200),
                ..ElectionSettings::new(identity, priority)
            }
        }

        /// How often the Lease `name` was read: an elector's tries.
        fn tries(emulator: &Emulator, name: &str) -> usize {
            let path = format!("/leases/{name}");
            emulator
                .requests()
                .iter()
                .filter(|r| r.verb == "get" && r.path.ends_with(&path))
                .count()
        }

        /// A running elector: its roles, what pauses it, and what stops it.
        struct Replica {
            roles: watch::Receiver<Role>,
            paused: Arc<Notify>,
            stop: CancellationToken,
            done: tokio::task::JoinHandle<()>,
        }

        impl Replica {
            fn start(emulator: &Emulator, settings: ElectionSettings) -> Self {
                let elector = Elector::new(emulator.client(), "default", "op", settings);
                let roles = elector.roles();
                let paused = elector.paused();
                let stop = CancellationToken::new();
                let done = tokio::spawn(elector.run(stop.clone()));
                Self {
                    roles,
                    paused,
                    stop,
                    done,
                }
            }

            /// Waits until the role is `role`; how long that took.
            async fn reaches(&mut self, role: Role) -> Duration {
                let begun = Instant::now();
                tokio::time::timeout(PATIENCE, self.roles.wait_for(|r| r.is(role)))
                    .await
                    .unwrap_or_else(|_| panic!("never became {role:?}"))
                    .expect("the elector runs");
                begun.elapsed()
            }

            fn role(&self) -> Role {
                *self.roles.borrow()
            }
        }

        async fn lease(emulator: &Emulator) -> Lease {
            let api: Api<Lease> = Api::namespaced(emulator.client(), "default");
            api.get("op").await.expect("the lease exists")
        }

        fn holder(lease: &Lease) -> Option<String> {
            lease.spec.as_ref().and_then(|s| s.holder_identity.clone())
        }

        /// Waits until the lease has been renewed `n` more times.
        async fn renewals(emulator: &Emulator, n: usize) {
            let mut last = lease(emulator).await.metadata.resource_version;
            for _ in 0..n {
                tokio::time::timeout(PATIENCE, async {
                    loop {
                        let now = lease(emulator).await.metadata.resource_version;
                        if now != last {
                            last = now;
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
                .await
                .expect("the lease is renewed");
            }
        }

        #[tokio::test]
        async fn one_of_two_candidates_leads_and_a_release_hands_the_lease_over() {
            let emulator = Emulator::start().await.expect("emulator starts");
            let mut a = Replica::start(&emulator, settings("a", 0));
            a.reaches(Role::Leader).await;
            let mut b = Replica::start(&emulator, settings("b", 0));
            renewals(&emulator, 3).await;
            assert_eq!(b.role(), Role::Candidate, "the lease is held and renewed");
            let held = lease(&emulator).await;
            assert_eq!(holder(&held).as_deref(), Some("a"));
            assert_eq!(annotation(&held, PRIORITY), Some("0"));

            // `a` exits: it releases once its work is paused.
            a.stop.cancel();
            a.reaches(Role::HandingOver).await;
            assert_eq!(
                holder(&lease(&emulator).await).as_deref(),
                Some("a"),
                "not before"
            );
            a.paused.notify_one();
            let took = b.reaches(Role::Leader).await;
            assert!(
                took < Duration::from_secs(2),
                "within a retry period: {took:?}"
            );
            a.done.await.expect("a ends");
            let taken = lease(&emulator).await;
            assert_eq!(holder(&taken).as_deref(), Some("b"));
            assert_eq!(taken.spec.and_then(|s| s.lease_transitions), Some(1));
            b.stop.cancel();
            b.paused.notify_one();
            b.done.await.expect("b ends");
        }

        #[tokio::test]
        async fn a_leader_that_cannot_renew_steps_down_before_the_lease_expires() {
            let emulator = Emulator::start().await.expect("emulator starts");
            let mut a = Replica::start(&emulator, settings("a", 0));
            a.reaches(Role::Leader).await;
            renewals(&emulator, 1).await;
            let renewed = Instant::now();
            emulator
                .faults()
                .fail_next(10_000, FailRule::status(500).path_contains("/leases"));
            a.reaches(Role::SteppedDown {
                others_may_lead_at: Instant::now(),
            })
            .await;
            let after = renewed.elapsed();
            assert!(
                after < Duration::from_millis(1500),
                "stepped down {after:?} after the last renewal, before the lease expired"
            );
            a.stop.cancel();
            a.paused.notify_one();
            a.done.await.expect("a ends");
        }

        #[tokio::test]
        async fn a_quota_bounds_what_is_taken_and_a_yield_hands_the_lease_over() {
            let emulator = Emulator::start().await.expect("emulator starts");
            let quota = Arc::new(Quota::default());
            let elector = Elector::new(emulator.client(), "default", "op", settings("a", 0))
                .with_quota(Arc::clone(&quota));
            let (mut roles, paused, yielding) =
                (elector.roles(), elector.paused(), elector.yielding());
            let stop = CancellationToken::new();
            let done = tokio::spawn(elector.run(stop.clone()));
            // Five tries, with no quota: the Lease is never even created.
            let api: Api<Lease> = Api::namespaced(emulator.client(), "default");
            tokio::time::timeout(PATIENCE, async {
                loop {
                    if tries(&emulator, "op") >= 5 {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .expect("it tries");
            assert_eq!(*roles.borrow(), Role::Candidate);
            assert!(api.get_opt("op").await.expect("read").is_none());

            quota.aim(1);
            tokio::time::timeout(PATIENCE, roles.wait_for(|r| *r == Role::Leader))
                .await
                .expect("led within the quota")
                .expect("runs");
            assert_eq!(quota.held(), 1);
            // As the members' count does: a lower share, then the surplus yielded.
            quota.aim(0);
            yielding.notify_one();
            tokio::time::timeout(PATIENCE, roles.wait_for(|r| *r == Role::HandingOver))
                .await
                .expect("yielded")
                .expect("runs");
            assert_eq!(quota.held(), 0);
            paused.notify_one();
            tokio::time::timeout(PATIENCE, async {
                loop {
                    let lease = api.get("op").await.expect("the lease exists");
                    if holder(&lease).is_none() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .expect("released once paused");
            // Watched on, not taken back while the share is full.
            let gets = || tries(&emulator, "op");
            let released_at = gets();
            tokio::time::timeout(PATIENCE, async {
                while gets() < released_at + 3 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .expect("it tries on");
            assert_eq!(*roles.borrow(), Role::Candidate);
            let lease = api.get("op").await.expect("the lease exists");
            assert_eq!(holder(&lease), None, "not taken back");
            stop.cancel();
            done.await.expect("ends");
        }

        #[tokio::test]
        async fn a_raised_quota_is_tried_at_once() {
            let emulator = Emulator::start().await.expect("emulator starts");
            let quota = Arc::new(Quota::default());
            // A retry period far longer than the test waits.
            let slow = ElectionSettings {
                lease_duration: Duration::from_secs(300),
                renew_deadline: Duration::from_secs(200),
                retry_period: Duration::from_secs(100),
                ..ElectionSettings::new("a", 0)
            };
            let elector = Elector::new(emulator.client(), "default", "op", slow)
                .with_quota(Arc::clone(&quota));
            let (mut roles, paused) = (elector.roles(), elector.paused());
            let stop = CancellationToken::new();
            let done = tokio::spawn(elector.run(stop.clone()));
            tokio::time::timeout(PATIENCE, async {
                while tries(&emulator, "op") == 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .expect("it tries once");
            quota.aim(0);
            quota.aim(1);
            tokio::time::timeout(PATIENCE, roles.wait_for(|r| *r == Role::Leader))
                .await
                .expect("led at once, not a retry period later")
                .expect("runs");
            stop.cancel();
            paused.notify_one();
            done.await.expect("ends");
        }

        #[tokio::test]
        async fn electors_sharing_a_quota_take_no_more_than_it_at_once() {
            let emulator = Emulator::start().await.expect("emulator starts");
            let quota = Arc::new(Quota::default());
            let stop = CancellationToken::new();
            let mut electors = Vec::new();
            for name in ["op-0", "op-1", "op-2"] {
                let elector = Elector::new(emulator.client(), "default", name, settings("a", 0))
                    .with_quota(Arc::clone(&quota));
                let (roles, paused) = (elector.roles(), elector.paused());
                let done = tokio::spawn(elector.run(stop.clone()));
                electors.push((name, roles, paused, done));
            }
            let tries = |name: &str| tries(&emulator, name);
            let tried_by_all = || electors.iter().all(|(name, ..)| tries(name) > 0);
            tokio::time::timeout(PATIENCE, async {
                while !tried_by_all() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .expect("they try");
            // All three are woken by the rise at once, and race.
            quota.aim(2);
            let leading = || {
                electors
                    .iter()
                    .filter(|(_, roles, ..)| *roles.borrow() == Role::Leader)
                    .count()
            };
            tokio::time::timeout(PATIENCE, async {
                while leading() < 2 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .expect("two lead");
            // The third keeps trying, in vain.
            let (third, ..) = electors
                .iter()
                .find(|(_, roles, ..)| *roles.borrow() == Role::Candidate)
                .expect("one is left");
            let before = tries(third);
            tokio::time::timeout(PATIENCE, async {
                while tries(third) < before + 3 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .expect("it tries again");
            assert_eq!((leading(), quota.held()), (2, 2));
            stop.cancel();
            for (_, _, paused, done) in electors {
                paused.notify_one();
                done.await.expect("ends");
            }
        }

        #[tokio::test]
        async fn a_terms_client_refuses_writes_once_the_term_is_over() {
            use k8s_openapi::api::core::v1::ConfigMap;
            use kube::api::{Patch, PatchParams};

            let emulator = Emulator::start().await.expect("emulator starts");
            let over = CancellationToken::new();
            let tenure = Arc::new(Tenure::default());
            tenure.grant(Instant::now() + Duration::from_secs(3600));
            let fence = Fence::new(vec![tenure], None, Duration::from_secs(1));
            let client = term_client(emulator.client(), &over, fence.clone(), "default/op");
            let api: Api<ConfigMap> = Api::namespaced(client, "default");
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some("cm".into()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            };
            api.create(&PostParams::default(), &cm)
                .await
                .expect("written during the term");
            over.cancel();
            let patch = Patch::Merge(serde_json::json!({"data": {"k": "v"}}));
            let error = api
                .patch("cm", &PatchParams::default(), &patch)
                .await
                .expect_err("refused after the term");
            let message = format!("{error}: {:?}", std::error::Error::source(&error));
            assert!(
                message.contains("no longer leads on the Lease default/op"),
                "{message}"
            );
            let read = api.get("cm").await.expect("reads still go through");
            assert_eq!(read.data, None, "nothing written");
            assert_eq!(fence.held_back(), vec![], "a term over is not a fence");
        }

        /// A replica resumed after a pause past its Lease writes nothing,
        /// even before its elector has seen that it lost the Lease.
        #[tokio::test]
        async fn a_terms_client_refuses_writes_once_its_lease_lapsed() {
            use k8s_openapi::api::core::v1::ConfigMap;

            let emulator = Emulator::start().await.expect("emulator starts");
            let tenure = Arc::new(Tenure::default());
            tenure.grant(Instant::now() + Duration::from_secs(3600));
            let fence = Fence::new(vec![Arc::clone(&tenure)], None, Duration::from_secs(1));
            let over = CancellationToken::new();
            let client = term_client(emulator.client(), &over, fence.clone(), "default/op");
            let api: Api<ConfigMap> = Api::namespaced(client, "default");
            let cm = |name: &str| ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            };
            api.create(&PostParams::default(), &cm("held"))
                .await
                .expect("written while the Lease is held");
            tenure.grant(Instant::now());
            let error = api
                .create(&PostParams::default(), &cm("lapsed"))
                .await
                .expect_err("refused once the Lease lapsed");
            let message = format!("{error}: {:?}", std::error::Error::source(&error));
            assert!(message.contains("no longer leads"), "{message}");
            assert!(api.get_opt("lapsed").await.expect("reads").is_none());
            assert_eq!(fence.held_back(), vec![(Held::Write, 1)]);
        }

        #[tokio::test]
        async fn a_candidate_of_a_higher_priority_is_handed_the_lease() {
            let emulator = Emulator::start().await.expect("emulator starts");
            let mut low = Replica::start(&emulator, settings("low", 0));
            low.reaches(Role::Leader).await;
            let mut dev = Replica::start(&emulator, settings("dev", 666));
            low.reaches(Role::HandingOver).await;
            assert_eq!(dev.role(), Role::Candidate, "not before the leader paused");
            low.paused.notify_one();
            dev.reaches(Role::Leader).await;
            low.reaches(Role::Candidate).await;
            renewals(&emulator, 5).await;
            assert_eq!(low.role(), Role::Candidate, "the lease stays with dev");
            let held = lease(&emulator).await;
            assert_eq!(annotation(&held, HANDOVER), None, "the request is answered");
            assert_eq!(annotation(&held, PRIORITY), Some("666"));
            for replica in [low, dev] {
                replica.stop.cancel();
                replica.paused.notify_one();
                replica.done.await.expect("ends");
            }
        }
    }
}
