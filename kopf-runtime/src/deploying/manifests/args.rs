//! [`ManifestsArgs`]: the command line of `my-operator manifests`.

use crate::running::cli::Args;

/// The command line of `my-operator manifests`: the run flags, and where
/// and how the operator is deployed.
///
/// ```
/// use clap::Parser;
/// use kopf_runtime::ManifestsArgs;
///
/// let args = ManifestsArgs::try_parse_from(["manifests", "-n", "shop", "--image", "op:1.0"])?;
/// assert_eq!((args.run.namespaces.as_slice(), args.replicas), (&["shop".to_owned()][..], 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, clap::Parser)]
#[command(
    about = "Print the manifests that deploy this operator, as multi-document YAML.",
    long_about = "Print the manifests that deploy this operator, as multi-document YAML: a \
ServiceAccount, the RBAC roles it needs (derived from the handlers, the run flags, \
#[kopf::rbac] and Runner::rbac), a Deployment, a Service for the webhook server when \
admission webhooks are served, and a PodDisruptionBudget with --replicas above 1. \
Nothing is contacted. Apply with: `my-operator manifests --image IMAGE | kubectl apply -f -`.\n\n\
The run flags (-n, -A, --peering, --liveness, --webhook-*, …) mean what they mean to the \
operator and are passed to the container as they are written. Without --liveness, the \
container gets --liveness=http://0.0.0.0:8080/healthz, so that the pods are probed. \
--emulator, --kubeconfig, --context, --identity, --dev and --webhook-ca-dump are refused: they mean \
something on a developer's machine only.",
    after_long_help = "Example: my-operator manifests -n shop --image registry.example/op:1.0 | kubectl apply -f -"
)]
pub struct ManifestsArgs {
    /// The run flags, given to the deployed operator.
    #[command(flatten)]
    pub run: Args,

    /// The namespace the operator is deployed in: its ServiceAccount,
    /// Deployment and Service; `-n` keeps its meaning, the namespaces
    /// served [default: the one served when exactly one plain `-n
    /// NAMESPACE` is given, else `default`; it must exist].
    #[arg(long, value_name = "NAMESPACE")]
    pub deploy_namespace: Option<String>,

    /// The name of the objects [default: the binary's file name, with `_`
    /// as `-`].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,

    /// The container image that holds this operator's binary as its
    /// entrypoint (required: there is no good guess).
    #[arg(long, value_name = "IMAGE")]
    pub image: String,

    /// How many pods run the operator; above 1 needs `--peering` when the
    /// operator handles objects, else every replica would act on each.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub replicas: u32,

    /// Print the CRDs the operator owns (`Runner::crd`) too.
    #[arg(long)]
    pub crds: bool,
}
