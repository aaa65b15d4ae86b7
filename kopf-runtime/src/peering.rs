//! [`Peering`]: the Lease replicas elect on, and as whom this replica
//! competes: what `--peering`, `--peering-namespace`, `--identity`,
//! `--priority`, `--dev` and `--shards` give, with their defaults and the
//! checks that refuse what could not elect safely.

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::peering::leadership::ElectionSettings;
use crate::peering::sharding::{MAX_SHARDS, Seating, Ward};
use crate::settings::PeeringSettings;

/// Kopf's development priority (`--dev`).
pub(crate) const DEV_PRIORITY: i64 = 666;

/// The Lease this replica serves under, and as whom it competes for it:
/// what `--peering`, `--peering-namespace`, `--identity`, `--priority`
/// and `--dev` give, for [`Operator::peering`](crate::Operator::peering).
///
/// Only the replica holding the Lease serves the resources; the others
/// wait, with their probes, metrics, start-up and clean-up handlers
/// running. The timings are [`settings.peering`](crate::settings::PeeringSettings).
///
/// # Guarantees
/// - A replica acts only while its Lease is valid on its own monotonic
///   clock: from the start of its last successful renewal until the renew
///   deadline has passed. Before every queued event is processed, every
///   timer tick and every daemon call, and on every write through the
///   operator's client (results, progress, finalizers, patches, the
///   handlers' `client`), the clock is read and the Lease checked; with
///   `--shards`, every slot the replica serves. Work found too late is
///   held back, counted in `kopf_fenced_total{what}` (`event`, `timer`,
///   `daemon`, `write`), and reported in one warning per term.
/// - So a replica paused for longer than its Lease (`SIGSTOP`, a frozen
///   VM, a starved node) acts on nothing when it resumes, even before its
///   elector has seen that another replica leads; it then steps down, and,
///   if its tasks were running when the Lease may have passed to another
///   replica, exits with code 3.
///
/// # Caveats
/// - A handler already running when the pause began goes on when the
///   process resumes: nothing can stop its code between two statements,
///   but every write it makes through the operator is refused. Its other
///   side effects (another system's API) are not fenced.
/// - The check rests on the replicas' clocks running at the same rate, as
///   client-go's election does, not on them agreeing on the time.
///
/// ```
/// use kopf_runtime::Peering;
///
/// let peering = Peering::new("my-operator").namespace("operators").priority(10);
/// assert_eq!(peering.name(), "my-operator");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peering {
    name: String,
    namespace: String,
    identity: String,
    priority: i64,
    shards: u32,
}

impl Peering {
    /// The Lease `name`, in the pod's own namespace (else `default`),
    /// competed for as the pod (else as this host with a random suffix),
    /// at priority 0.
    pub fn new(name: impl Into<String>) -> Self {
        let in_pod = std::path::Path::new(SERVICE_ACCOUNT_NAMESPACE).exists();
        let pod_namespace = std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE).ok();
        Self {
            name: name.into(),
            namespace: default_namespace(pod_namespace),
            identity: default_identity(|key| std::env::var(key).ok(), in_pod),
            priority: 0,
            shards: 1,
        }
    }

    /// Spreads the objects over `shards` slots (a power of two, at most
    /// 64), each a Lease of its own, so that every replica serves about
    /// its share of them: see [`Operator::peering`](crate::Operator::peering).
    /// 1, the default, elects one leader that serves every object.
    #[must_use]
    pub fn shards(mut self, shards: u32) -> Self {
        self.shards = shards;
        self
    }

    /// The Lease's namespace.
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// This replica's name on the Lease; unique among the replicas.
    #[must_use]
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = identity.into();
        self
    }

    /// This replica's priority: a waiting replica of a strictly higher
    /// priority is handed the Lease; equal priorities elect normally.
    #[must_use]
    pub fn priority(mut self, priority: i64) -> Self {
        self.priority = priority;
        self
    }

    /// The Lease's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Lease's namespace, name and number of shards, for the
    /// permissions they need.
    pub(crate) fn coordinates(&self) -> (String, String, u32) {
        (self.namespace.clone(), self.name.clone(), self.shards)
    }

    /// The Lease as `namespace/name`, for messages.
    pub(crate) fn lease(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Competes for this Lease, or its shard slots, on `tasks` until
    /// `stop`, with the timings of `timings`.
    pub(crate) fn ward(
        &self,
        client: &kube::Client,
        timings: &PeeringSettings,
        stop: CancellationToken,
        tasks: &TaskTracker,
    ) -> Result<Ward, String> {
        if self.name.is_empty() {
            return Err("the Lease's name is empty: pass --peering NAME".into());
        }
        if !self.shards.is_power_of_two() || self.shards > MAX_SHARDS {
            return Err(format!(
                "{} shards cannot split the objects: pass --shards with a power of two \
                 from 1 to {MAX_SHARDS}",
                self.shards
            ));
        }
        if self.shards > 1 && self.name.len() > 63 {
            return Err(format!(
                "the Lease's name `{}` is longer than 63 characters, too long to label the \
                 member Leases of shards: pass a shorter --peering NAME",
                self.name
            ));
        }
        let settings = ElectionSettings::with_timings(&self.identity, self.priority, timings);
        if let Some(problem) = settings.problem() {
            return Err(problem);
        }
        let seating = Seating {
            client,
            namespace: &self.namespace,
            name: &self.name,
            shards: self.shards,
            settings,
        };
        Ok(Ward::start(seating, stop, tasks))
    }
}

/// Where a pod finds its own namespace.
pub(crate) const SERVICE_ACCOUNT_NAMESPACE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// The default `--identity`: the pod's name (`POD_NAME`, or `HOSTNAME`
/// inside a pod), else the host's name with a random suffix, so that two
/// processes on one machine never share an identity. `env` reads the
/// environment; `in_pod` says whether a service account is mounted.
pub(crate) fn default_identity(env: impl Fn(&str) -> Option<String>, in_pod: bool) -> String {
    let named = |key: &str| env(key).filter(|v| !v.trim().is_empty());
    if let Some(pod) = named("POD_NAME") {
        return pod;
    }
    let host = named("HOSTNAME");
    if in_pod && let Some(pod) = host.clone() {
        return pod;
    }
    let host = host.unwrap_or_else(|| "kopf".to_owned());
    format!("{host}-{:06x}", fastrand::u32(..0x0100_0000))
}

/// The default `--peering-namespace`: the pod's own (`pod_namespace`, read
/// from the service account), else `default`.
pub(crate) fn default_namespace(pod_namespace: Option<String>) -> String {
    pod_namespace
        .map(|ns| ns.trim().to_owned())
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_owned())
}

pub(crate) mod fencing;
pub(crate) mod leadership;
pub(crate) mod sharding;
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_is_the_pods_name_else_the_host_with_a_suffix() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |key: &str| {
                vars.iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let both = env(&[("POD_NAME", "op-7d9"), ("HOSTNAME", "node")]);
        assert_eq!(default_identity(both, false), "op-7d9");
        let host = env(&[("HOSTNAME", "op-5f4")]);
        assert_eq!(default_identity(host, true), "op-5f4", "in a pod");
        let outside = || env(&[("HOSTNAME", "laptop"), ("POD_NAME", " ")]);
        let (a, b) = (
            default_identity(outside(), false),
            default_identity(outside(), false),
        );
        assert!(
            a.starts_with("laptop-") && a.len() == "laptop-".len() + 6,
            "{a}"
        );
        assert_ne!(a, b, "two processes on one host differ");
        assert!(default_identity(env(&[]), false).starts_with("kopf-"));
    }

    #[test]
    fn the_namespace_is_the_pods_else_default() {
        assert_eq!(default_namespace(Some("operators\n".into())), "operators");
        assert_eq!(default_namespace(Some(" ".into())), "default");
        assert_eq!(default_namespace(None), "default");
    }
}
