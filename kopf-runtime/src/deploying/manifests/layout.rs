//! What the `manifests` command line decides ([`Layout`]): the objects'
//! name, labels and namespace, the container's arguments, its ports, and the
//! [`Plan`] the RBAC rules are derived from; and the flags it refuses.

use std::collections::BTreeMap;

use super::args::ManifestsArgs;
use super::error::ManifestError;
use crate::deploying::permissions::{Permission, Plan};
use crate::model::handlers::HandlerKind;
use crate::model::registry::Registry;
use crate::operations::listening::ListenUrl;
use crate::operator::namespaces::NamespaceSelector;
use crate::webhooks::ServiceRef;

/// The liveness URL the container is given when none is: every interface,
/// so that the kubelet can probe the pod.
pub(crate) const DEFAULT_LIVENESS: &str = "http://0.0.0.0:8080/healthz";

/// The webhook server URL the container is given when the operator has
/// admission handlers but no `--webhook-server` is given.
pub(crate) const DEFAULT_WEBHOOK_SERVER: &str = "https://0.0.0.0:9443";

/// The port the webhook Service listens on: the API server's default for a
/// webhook's `service` reference.
const WEBHOOK_SERVICE_PORT: u16 = 443;

/// The flags of `manifests` alone, which the container is not given, and
/// whether each takes a value.
const MANIFESTS_ONLY: [(&str, bool); 5] = [
    ("--deploy-namespace", true),
    ("--name", true),
    ("--image", true),
    ("--replicas", true),
    ("--crds", false),
];

/// An HTTP listener of the container: its port and path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) port: u16,
    pub(crate) path: String,
}

/// The webhook server of the container, and the Service in front of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Webhooks {
    /// The port the server listens on in the container.
    pub(crate) port: u16,
    /// The Service's name (in the deploy namespace) and port.
    pub(crate) service: String,
    pub(crate) service_port: u16,
}

/// Everything the objects are made from.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) image: String,
    pub(crate) replicas: u32,
    /// The container's arguments: the run flags as given, and those the
    /// deployment needs.
    pub(crate) args: Vec<String>,
    pub(crate) liveness: Endpoint,
    /// `None` when metrics are not served.
    pub(crate) metrics: Option<Endpoint>,
    pub(crate) webhooks: Option<Webhooks>,
    /// Whether the replicas elect on a Lease (`--peering`).
    pub(crate) peering: bool,
    pub(crate) plan: Plan,
    /// Said on stderr: what is allowed but likely wrong.
    pub(crate) warnings: Vec<String>,
}

/// The command line as given: its parsed flags, its tokens after
/// `manifests`, and whether `--peering` came from `KOPF_RUN_PEERING`.
#[derive(Debug, Clone)]
pub(crate) struct Invocation {
    pub(crate) args: ManifestsArgs,
    pub(crate) tokens: Vec<String>,
    pub(crate) peering_from_env: bool,
    /// The binary's file name, the default `--name`.
    pub(crate) binary: String,
}

impl Layout {
    /// Decides the layout of `invocation` for the handlers of `registry`,
    /// with the permissions `declared` for what they do themselves.
    pub(crate) fn decide(
        invocation: &Invocation,
        registry: &Registry,
        declared: Vec<Permission>,
    ) -> Result<Self, ManifestError> {
        let args = &invocation.args;
        let run = &args.run;
        refuse_local_flags(args)?;
        let selector = run
            .namespace_selector()
            .map_err(|error| usage(format!("invalid --namespace pattern: {error}")))?;
        let name = match &args.name {
            Some(name) => name.clone(),
            None => name_of_binary(&invocation.binary),
        };
        check_label("--name", &name)?;
        let namespace = match &args.deploy_namespace {
            Some(namespace) => namespace.clone(),
            None => deploy_namespace(&selector),
        };
        check_label("--deploy-namespace", &namespace)?;
        let peering = if run.standalone {
            None
        } else {
            run.peering.clone()
        };
        if args.replicas > 1 && peering.is_none() && watches(registry) {
            return Err(usage(format!(
                "--replicas {} without --peering: every replica would handle every object, \
                 acting twice on each; add --peering NAME (one replica serves, the others wait), \
                 with --shards S to spread the objects over them",
                args.replicas
            )));
        }

        let liveness_url = run.liveness.as_deref().unwrap_or(DEFAULT_LIVENESS);
        let liveness = endpoint("--liveness", liveness_url)?;
        let metrics = run
            .metrics
            .as_deref()
            .map(|url| endpoint("--metrics", url))
            .transpose()?;
        let webhooks = webhooks(invocation, registry, &name, &namespace)?;
        distinct_ports(&liveness, metrics.as_ref(), webhooks.as_ref())?;

        let mut warnings = Vec::new();
        if args.replicas > 1 && webhooks.is_some() && run.webhooks.cert.is_none() {
            warnings.push(
                "with --replicas above 1 and no --webhook-cert, each replica makes its own CA: \
                 the managed configurations hold one replica's CA at a time, and the API server \
                 fails the calls that reach another; give every replica one certificate \
                 (--webhook-cert and --webhook-key from a mounted Secret)"
                    .to_owned(),
            );
        }

        let mut plan = Plan::new(selector, &namespace);
        plan.peering = peering.as_ref().map(|lease| {
            let lease_namespace = run
                .peering_namespace
                .clone()
                .unwrap_or_else(|| namespace.clone());
            (lease_namespace, lease.clone(), run.shards.unwrap_or(1))
        });
        plan.webhooks = webhooks.is_some();
        plan.webhooks_managed = run.webhooks.managed.clone();
        plan.declared = declared;

        let container_args = container_args(invocation, webhooks.as_ref(), &namespace);
        Ok(Self {
            name,
            namespace,
            image: args.image.clone(),
            replicas: args.replicas,
            args: container_args,
            liveness,
            metrics,
            webhooks,
            peering: peering.is_some(),
            plan,
            warnings,
        })
    }
}

/// A usage error: the command line asks for what cannot be deployed.
fn usage(message: String) -> ManifestError {
    ManifestError::Usage(message)
}

/// Refuses the flags that mean something on a developer's machine only.
fn refuse_local_flags(args: &ManifestsArgs) -> Result<(), ManifestError> {
    let run = &args.run;
    let refused = [
        (
            run.emulator,
            "--emulator",
            "a deployed operator serves the cluster it runs in",
        ),
        (
            run.kubeconfig.is_some(),
            "--kubeconfig",
            "a deployed operator uses its pod's service account",
        ),
        (
            run.context.is_some(),
            "--context",
            "a deployed operator uses its pod's service account",
        ),
        (
            run.identity.is_some(),
            "--identity",
            "each replica is named on the Lease by its pod's name (POD_NAME)",
        ),
        (
            run.dev,
            "--dev",
            "it is for taking the Lease over from a deployment while debugging",
        ),
        (
            run.webhooks.ca_dump.is_some(),
            "--webhook-ca-dump",
            "the container's root filesystem is read-only, and the managed configurations \
             carry the CA bundle",
        ),
    ];
    match refused.into_iter().find(|(given, _, _)| *given) {
        Some((_, flag, why)) => Err(usage(format!(
            "{flag} makes no sense in a deployment: {why}; drop it"
        ))),
        None => Ok(()),
    }
}

/// The labels of every object: `app.kubernetes.io/name: NAME`.
pub(super) fn labels(name: &str) -> BTreeMap<String, String> {
    [("app.kubernetes.io/name".to_owned(), name.to_owned())].into()
}

/// The default `--name`: the binary's file name, as a DNS label
/// (`ttl_secrets` → `ttl-secrets`).
pub(crate) fn name_of_binary(binary: &str) -> String {
    let file = std::path::Path::new(binary)
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    file.to_lowercase().replace(['_', '.'], "-")
}

/// The default `--deploy-namespace`: the one namespace served when exactly
/// one plain `-n NAMESPACE` is given, else `default`.
pub(crate) fn deploy_namespace(selector: &NamespaceSelector) -> String {
    match selector.exact_names() {
        Some(names) if names.len() == 1 => names.into_iter().next().unwrap_or_default(),
        _ => "default".to_owned(),
    }
}

/// Refuses a name that is not an RFC 1035 label, which every object made
/// (a Service's name included) accepts.
fn check_label(flag: &str, value: &str) -> Result<(), ManifestError> {
    let valid = !value.is_empty()
        && value.len() <= 63
        && value.starts_with(|c: char| c.is_ascii_lowercase())
        && value.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        return Ok(());
    }
    Err(usage(format!(
        "{flag} {value:?} is not a DNS label: at most 63 lowercase letters, digits and `-`, \
         starting with a letter and ending with a letter or digit"
    )))
}

/// Whether any handler acts on objects (admission handlers and activities
/// do not).
fn watches(registry: &Registry) -> bool {
    registry.handlers().iter().any(|h| {
        h.resource().is_some()
            && !matches!(h.kind(), HandlerKind::OnValidate | HandlerKind::OnMutate)
    })
}

/// Whether a listener on `host` cannot be reached from outside the pod.
fn is_loopback(host: &str) -> bool {
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host == "localhost",
    }
}

/// The port and path of `--liveness` or `--metrics`.
fn endpoint(flag: &'static str, url: &str) -> Result<Endpoint, ManifestError> {
    let kind = if flag == "--metrics" {
        "metrics"
    } else {
        "liveness"
    };
    let target =
        crate::operations::endpoints::target(kind, url).map_err(|e| usage(e.to_string()))?;
    reachable(flag, &target)?;
    Ok(Endpoint {
        port: target.port,
        path: target.path,
    })
}

/// Refuses a listener that the kubelet or a Service cannot reach.
fn reachable(flag: &str, target: &ListenUrl) -> Result<(), ManifestError> {
    if is_loopback(&target.host) {
        return Err(usage(format!(
            "{flag} listens on the loopback ({}), which the kubelet and Services cannot reach: \
             listen on 0.0.0.0",
            target.url_host()
        )));
    }
    if target.port == 0 {
        return Err(usage(format!(
            "{flag} listens on port 0, which no probe or Service can name: give a port"
        )));
    }
    Ok(())
}

/// Refuses two servers on one port, which the operator could not bind;
/// metrics beside the liveness endpoint share its listener.
fn distinct_ports(
    liveness: &Endpoint,
    metrics: Option<&Endpoint>,
    webhooks: Option<&Webhooks>,
) -> Result<(), ManifestError> {
    let mut ports = vec![("--liveness", liveness.port)];
    ports.extend(metrics.map(|m| ("--metrics", m.port)));
    ports.extend(webhooks.map(|w| ("--webhook-server", w.port)));
    for (i, (flag, port)) in ports.iter().enumerate() {
        if let Some((other, _)) = ports[..i].iter().find(|(_, p)| p == port) {
            let shared = *flag == "--metrics" && *other == "--liveness";
            if !shared {
                return Err(usage(format!(
                    "{flag} and {other} both listen on port {port}: give them different ports"
                )));
            }
        }
    }
    Ok(())
}

/// The webhook server and its Service, when admission webhooks are
/// served: with `--webhook-server`, or for admission handlers.
fn webhooks(
    invocation: &Invocation,
    registry: &Registry,
    name: &str,
    namespace: &str,
) -> Result<Option<Webhooks>, ManifestError> {
    let flags = &invocation.args.run.webhooks;
    let admits = registry
        .handlers()
        .iter()
        .any(|h| matches!(h.kind(), HandlerKind::OnValidate | HandlerKind::OnMutate));
    if flags.server.is_none() && !admits {
        flags.check().map_err(|e| usage(e.to_string()))?;
        return Ok(None);
    }
    let url = flags.server.as_deref().unwrap_or(DEFAULT_WEBHOOK_SERVER);
    let target = crate::webhooks::target(url).map_err(|e| usage(e.to_string()))?;
    reachable("--webhook-server", &target)?;
    let (service, service_port) = match flags.service.as_deref() {
        Some(given) => {
            let service = ServiceRef::parse(given).map_err(|e| usage(e.to_string()))?;
            if service.namespace != namespace {
                return Err(usage(format!(
                    "--webhook-service {given} is not in the deploy namespace {namespace}, \
                     where the Service that reaches the operator's pods is: name one there, \
                     or drop it for {namespace}/{name}"
                )));
            }
            (service.name, service.port.unwrap_or(WEBHOOK_SERVICE_PORT))
        }
        None => (name.to_owned(), WEBHOOK_SERVICE_PORT),
    };
    Ok(Some(Webhooks {
        port: target.port,
        service,
        service_port,
    }))
}

/// The container's arguments: the run flags as given, without those of
/// `manifests` alone, with what the deployment needs that was not given.
fn container_args(
    invocation: &Invocation,
    webhooks: Option<&Webhooks>,
    namespace: &str,
) -> Vec<String> {
    let run = &invocation.args.run;
    let mut args = run_tokens(&invocation.tokens);
    if run.liveness.is_none() {
        args.push(format!("--liveness={DEFAULT_LIVENESS}"));
    }
    if invocation.peering_from_env
        && let Some(lease) = &run.peering
    {
        args.push(format!("--peering={lease}"));
    }
    if let Some(webhooks) = webhooks {
        let flags = &run.webhooks;
        if flags.server.is_none() {
            args.push(format!("--webhook-server={DEFAULT_WEBHOOK_SERVER}"));
        }
        if flags.managed.is_some() && flags.service.is_none() {
            args.push(format!(
                "--webhook-service={namespace}/{}:{}",
                webhooks.service, webhooks.service_port
            ));
        }
        // The API server calls a Service as `NAME.NAMESPACE.svc`, and
        // verifies the certificate for that name.
        let host = format!("{}.{namespace}.svc", webhooks.service);
        if flags.cert.is_none() && !flags.extra_sans.contains(&host) {
            args.push(format!("--webhook-extra-san={host}"));
        }
    }
    args
}

/// The tokens of the run flags: those of `manifests` alone dropped, with
/// their values.
pub(crate) fn run_tokens(tokens: &[String]) -> Vec<String> {
    let mut kept = Vec::new();
    let mut skip_value = false;
    for token in tokens {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        let own = MANIFESTS_ONLY.iter().find(|(flag, _)| {
            token == flag
                || token
                    .strip_prefix(flag)
                    .is_some_and(|rest| rest.starts_with('='))
        });
        match own {
            Some((flag, takes_value)) => skip_value = *takes_value && token == flag,
            None => kept.push(token.clone()),
        }
    }
    kept
}
