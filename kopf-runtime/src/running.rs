//! [`run`] and [`Runner`]: an operator binary's command line, as `kopf run`.
//!
//! `run()` parses the command line ([`Args`]), sets up logging, collects the
//! handlers declared with the attribute macros, connects to the cluster (or,
//! with `--emulator`, to an in-process Kubernetes API emulator) and runs the
//! [`Operator`] until SIGINT or SIGTERM.
//!
//! With `--peering NAME`, only the replica that leads on the Lease `NAME`
//! serves the resources ([`Operator::peering`]). A replica that stops
//! leading while its handlers, daemons or timers outlive the moment
//! another replica may take the Lease exits at once with code 3
//! ([`OperatorError::LeaseOutlived`]), rather than let two replicas act on
//! one object.

use std::future::Future;
use std::pin::Pin;

use clap::Parser;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::deploying::Permission;
use crate::deploying::manifests;
use crate::model::registry::{Registry, RegistryError};
use crate::operations::endpoints::{EndpointError, Endpoints};
use crate::operator::namespaces::SelectorError;
use crate::operator::{Operator, OperatorError};
use crate::running::cli::{Args, CliError};
use crate::settings::OperatorSettings;
use crate::webhooks::{WebhookArgs, WebhookError, WebhookServer};

pub(crate) mod cli;
pub(crate) mod logbuffer;

/// The exit code of a replica whose tasks outlived its leadership.
const EXIT_LEASE_OUTLIVED: i32 = 3;

/// Why [`run`] could not run the operator.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// Logging or the cluster configuration could not be set up.
    #[error(transparent)]
    Cli(#[from] CliError),
    /// A `-n/--namespace` pattern is invalid.
    #[error("invalid --namespace pattern: {0}")]
    Namespaces(#[from] SelectorError),
    /// The declared handlers are inconsistent.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The operator failed to start.
    #[error(transparent)]
    Operator(#[from] OperatorError),
    /// The kube client could not be built from the configuration.
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    /// `--emulator` was given, but this build has no emulator.
    #[error(
        "this build has no emulator: enable kopf-runtime's `emulator` feature, or drop --emulator"
    )]
    NoEmulator,
    /// `--emulator-rbac` without `--emulator` (arguments given to
    /// [`Runner::args`]).
    #[error(
        "--emulator-rbac applies to the embedded emulator: add --emulator, or drop --emulator-rbac"
    )]
    EmulatorRbacWithoutEmulator,
    /// The embedded emulator did not start.
    #[error("the embedded emulator did not start: {0}")]
    Emulator(String),
    /// `--liveness` or `--metrics` cannot be served.
    #[error(transparent)]
    Endpoints(#[from] EndpointError),
    /// The admission webhook server cannot be served.
    #[error(transparent)]
    Webhooks(#[from] WebhookError),
}

/// Runs the operator that the attribute macros declared, with the command
/// line of the current process: parses it ([`Args`]), sets up logging,
/// collects the handlers declared with the attribute macros, connects to the
/// cluster (or, with `--emulator`, to an in-process Kubernetes API emulator)
/// and runs the [`Operator`] until SIGINT or SIGTERM.
///
/// ```no_run
/// #[tokio::main(flavor = "current_thread")]
/// async fn main() -> Result<(), kopf_runtime::RunError> {
///     kopf_runtime::run().await
/// }
/// ```
///
/// # Errors
/// [`RunError`] when the operator cannot start; runtime failures of handlers
/// are logged, retried and posted as Events, never returned.
pub async fn run() -> Result<(), RunError> {
    Runner::new().run().await
}

type Setup = Box<dyn FnOnce(kube::Client) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// [`run`] with options: other arguments, settings, a registry built without
/// macros, or demo objects to create when running on the emulator.
#[must_use]
pub struct Runner {
    args: Option<Args>,
    settings: OperatorSettings,
    registry: Option<Registry>,
    on_emulator: Option<Setup>,
    crds: Vec<CustomResourceDefinition>,
    rbac: Vec<Permission>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("args", &self.args)
            .finish_non_exhaustive()
    }
}

impl Default for Runner {
    fn default() -> Self {
        Self::new()
    }
}

impl Runner {
    /// Parses the process's command line when run.
    pub fn new() -> Self {
        Self {
            args: None,
            settings: OperatorSettings::default(),
            registry: None,
            on_emulator: None,
            crds: Vec::new(),
            rbac: Vec::new(),
        }
    }

    /// Uses these arguments instead of the process's.
    pub fn args(mut self, args: Args) -> Self {
        self.args = Some(args);
        self
    }

    /// Uses these settings.
    pub fn settings(mut self, settings: OperatorSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Runs these handlers instead of the ones the macros declared.
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// With `--emulator`, calls `setup` with a client of the fresh emulator
    /// once the operator is about to start (e.g. to create demo objects).
    pub fn on_emulator<F, Fut>(mut self, setup: F) -> Self
    where
        F: FnOnce(kube::Client) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.on_emulator = Some(Box::new(move |client| Box::pin(setup(client))));
        self
    }

    /// Declares a CRD this operator owns (e.g. `MyResource::crd()` of
    /// `kube::CustomResourceExt`): `--emulator` registers it as it is
    /// declared, with its short names, printer columns and schema, as
    /// `kubectl apply -f crd.yaml` would (the handlers' other custom
    /// resources get a minimal CRD each), and `manifests --crds` prints it.
    pub fn crd(mut self, crd: CustomResourceDefinition) -> Self {
        self.crds.push(crd);
        self
    }

    /// Declares a permission that the handlers need for what they do with
    /// their own `client`, as `#[kopf::rbac]` does: `manifests` grants it
    /// beside those the runtime needs.
    ///
    /// ```no_run
    /// use kopf_runtime::{Permission, Runner};
    ///
    /// # async fn example() -> Result<(), kopf_runtime::RunError> {
    /// Runner::new()
    ///     .rbac(Permission::new("", "configmaps").verbs(["get", "create", "patch"]))
    ///     .run()
    ///     .await
    /// # }
    /// ```
    pub fn rbac(mut self, permission: Permission) -> Self {
        self.rbac.push(permission);
        self
    }

    /// Runs until SIGINT or SIGTERM; or, when the process's first
    /// argument is `manifests` (and no [`Runner::args`] are given), prints
    /// the manifests that deploy the operator ([`ManifestsArgs`](crate::ManifestsArgs)) and
    /// returns, contacting nothing; a command line that cannot be deployed
    /// then ends the process with code 2, a failure to derive the
    /// permissions with code 1.
    ///
    /// # Errors
    /// See [`run`].
    pub async fn run(self) -> Result<(), RunError> {
        self.run_boxed().await
    }

    /// [`Runner::run`]'s one body, polled through one boxed future, as
    /// [`Operator::run_until`] is: a future that every caller's crate
    /// would otherwise compile a copy of, in each of its units that
    /// awaits it.
    fn run_boxed(self) -> Pin<Box<dyn Future<Output = Result<(), RunError>> + Send>> {
        Box::pin(self.run_unboxed())
    }

    async fn run_unboxed(self) -> Result<(), RunError> {
        let args = match self.args {
            Some(args) => args,
            None => {
                if let Some(argv) = manifests::invoked() {
                    let registry = match self.registry {
                        Some(registry) => registry,
                        None => Registry::from_inventory()?,
                    };
                    let owned = manifests::Owned {
                        registry: &registry,
                        crds: &self.crds,
                        rbac: &self.rbac,
                        events: self.settings.posting.enabled,
                    };
                    manifests::main(argv, owned);
                    return Ok(());
                }
                Args::parse()
            }
        };
        if args.emulator_rbac && !args.emulator {
            return Err(RunError::EmulatorRbacWithoutEmulator);
        }
        cli::init_logging(&args)?;
        // Log lines are batched while the operator runs, and what waits is
        // written out on every way out of here.
        let _logs = crate::running::logbuffer::batch_on(tokio::runtime::Handle::current());
        let registry = match self.registry {
            Some(registry) => registry,
            None => Registry::from_inventory()?,
        };
        let namespaces = args.namespace_selector()?;
        let endpoints = bind_endpoints(&args).await?;
        let webhooks = bind_webhooks(&args, &registry).await?;
        tracing::info!(handlers = registry.len(), "starting the operator");

        #[cfg(feature = "emulator")]
        let mut _emulator = None;
        // The demo setup on the emulator, stopped with the operator if it
        // is still at work then.
        #[cfg(feature = "emulator")]
        let mut setup_task: Option<tokio::task::JoinHandle<()>> = None;
        let client = if args.emulator {
            #[cfg(feature = "emulator")]
            {
                let emulator = start_emulator(&registry, &self.crds, args.emulator_rbac).await?;
                let config = emulator_config(&emulator, emulator.token())?;
                let client = build_client(config, endpoints.as_ref())?;
                tracing::info!(
                    url = %emulator.url(),
                    "running against the embedded Kubernetes API emulator (--emulator), not a cluster"
                );
                if let Some(setup) = self.on_emulator {
                    setup_task = Some(tokio::spawn(setup(client.clone())));
                }
                _emulator = Some(emulator);
                client
            }
            #[cfg(not(feature = "emulator"))]
            return Err(RunError::NoEmulator);
        } else {
            let config = args.kube_config(&self.settings.networking).await?;
            build_client(config, endpoints.as_ref())?
        };

        let mut operator = Operator::new(registry)
            .settings(self.settings)
            .namespaces(namespaces)
            .missing_permissions(args.missing_permissions);
        for permission in self.rbac {
            operator = operator.rbac(permission);
        }
        if let Some(peering) = args.peering() {
            operator = operator.peering(peering);
        }
        if let Some(webhooks) = webhooks {
            operator = operator.webhooks(webhooks);
        }
        #[cfg(feature = "emulator")]
        let client = match &_emulator {
            Some(emulator) if args.emulator_rbac => {
                run_as_service_account(emulator, &operator, endpoints.as_ref()).await?
            }
            _ => client,
        };
        let operator = match endpoints {
            Some(endpoints) if endpoints.api_metrics().is_some() => {
                operator.measured_client(client).endpoints(endpoints)
            }
            Some(endpoints) => operator.client(client).endpoints(endpoints),
            None => operator.client(client),
        };
        let outcome = operator.run().await;
        if let Err(error @ OperatorError::LeaseOutlived { .. }) = &outcome {
            // Its tasks may still run, even on threads that the runtime
            // would wait for on its way out: end the process now.
            tracing::error!("{error}");
            drop(_logs);
            std::process::exit(EXIT_LEASE_OUTLIVED);
        }
        #[cfg(feature = "emulator")]
        {
            if let Some(task) = setup_task {
                task.abort();
                let _ = task.await;
            }
            if let Some(emulator) = _emulator {
                emulator.shutdown().await;
            }
        }
        outcome?;
        Ok(())
    }
}

/// A client for `config`; with metrics served, one that counts its
/// requests in them.
fn build_client(
    config: kube::Config,
    endpoints: Option<&Endpoints>,
) -> Result<kube::Client, RunError> {
    match endpoints.and_then(Endpoints::api_metrics) {
        Some(layer) => Ok(kube::client::ClientBuilder::try_from(config)
            .map_err(RunError::Client)?
            .with_layer(layer)
            .build()),
        None => kube::Client::try_from(config).map_err(RunError::Client),
    }
}

/// The listeners of `--liveness` and `--metrics`; with `--emulator`, those
/// not given are served on a free loopback port (one for both), so that
/// the demo can be probed and scraped.
async fn bind_endpoints(args: &Args) -> Result<Option<Endpoints>, EndpointError> {
    const LOOPBACK_LIVENESS: &str = "http://127.0.0.1:0/healthz";
    const LOOPBACK_METRICS: &str = "http://127.0.0.1:0/metrics";
    let (liveness, metrics) = if args.emulator {
        (
            args.liveness.as_deref().or(Some(LOOPBACK_LIVENESS)),
            args.metrics.as_deref().or(Some(LOOPBACK_METRICS)),
        )
    } else {
        (args.liveness.as_deref(), args.metrics.as_deref())
    };
    if liveness.is_none() && metrics.is_none() {
        return Ok(None);
    }
    Endpoints::bind(liveness, metrics).await.map(Some)
}

/// The configurations' name when `--emulator` sets up the webhooks.
const EMULATOR_MANAGED: &str = "auto.kopf.dev";

/// The webhook server of `--webhook-server`. With `--emulator` and
/// admission handlers but no `--webhook-server`, one on a free loopback
/// port, with a self-signed certificate and managed configurations
/// (`auto.kopf.dev` unless `--webhook-managed` names them); the other
/// `--webhook-*` flags apply to it as given.
async fn bind_webhooks(
    args: &Args,
    registry: &Registry,
) -> Result<Option<WebhookServer>, WebhookError> {
    let has_webhooks = registry.handlers().iter().any(|h| {
        matches!(
            h.kind(),
            crate::HandlerKind::OnValidate | crate::HandlerKind::OnMutate
        )
    });
    if args.webhooks.server.is_some() || !(args.emulator && has_webhooks) {
        args.webhooks.check()?;
        return match args.webhooks.server {
            Some(_) => WebhookServer::bind(&args.webhooks).await.map(Some),
            None => Ok(None),
        };
    }
    let local = WebhookArgs {
        server: Some("https://127.0.0.1:0".to_owned()),
        managed: Some(
            args.webhooks
                .managed
                .clone()
                .unwrap_or_else(|| EMULATOR_MANAGED.to_owned()),
        ),
        ..args.webhooks.clone()
    };
    let server = WebhookServer::bind(&local).await?;
    tracing::info!(
        url = %server.url(),
        "serving the admission webhooks on the loopback, with managed configurations (--emulator)"
    );
    Ok(Some(server))
}

/// Starts the emulator with the given CRDs, and a minimal CRD for every
/// other custom resource the handlers serve (built-in kinds are already
/// there).
#[cfg(feature = "emulator")]
async fn start_emulator(
    registry: &Registry,
    crds: &[CustomResourceDefinition],
    rbac: bool,
) -> Result<kopf_testing::Emulator, RunError> {
    const BUILT_IN_GROUPS: [&str; 4] = [
        "",
        "events.k8s.io",
        "coordination.k8s.io",
        "apiextensions.k8s.io",
    ];
    let mut builder = kopf_testing::Emulator::builder();
    if rbac {
        builder = builder.rbac();
    }
    for crd in crds {
        let manifest = serde_json::to_value(crd)
            .map_err(|error| RunError::Emulator(format!("an unserializable CRD: {error}")))?;
        builder = builder.crd_manifest(manifest);
    }
    for resource in registry.resources() {
        let Some(group) = resource.group() else {
            tracing::debug!(%resource, "no CRD is registered in the emulator for a resource without a group");
            continue;
        };
        if BUILT_IN_GROUPS.contains(&group) {
            continue;
        }
        let Some(api) = resource.api_resource() else {
            tracing::warn!(
                %resource,
                "cannot register a CRD in the emulator for a resource given without its version, plural and kind; create it through the API"
            );
            continue;
        };
        let declared = crds
            .iter()
            .any(|crd| crd.spec.group == api.group && crd.spec.names.plural == api.plural);
        if declared {
            continue;
        }
        builder = builder.crd(
            &api.group,
            &api.version,
            &api.plural,
            &api.kind,
            resource.namespaced().unwrap_or(true),
        );
    }
    builder
        .start()
        .await
        .map_err(|error| RunError::Emulator(error.to_string()))
}

/// With `--emulator-rbac`: grants the operator, as the ServiceAccount that
/// `manifests` names, exactly the rules `manifests` prints, and a client
/// acting as it.
#[cfg(feature = "emulator")]
async fn run_as_service_account(
    emulator: &kopf_testing::Emulator,
    operator: &Operator,
    endpoints: Option<&Endpoints>,
) -> Result<kube::Client, RunError> {
    use crate::deploying::emulated;

    let binary = std::env::args().next().unwrap_or_default();
    let name = crate::deploying::manifests::name_of_binary(&binary);
    operator
        .grant_on_emulator(emulator, &name)
        .await
        .map_err(|error| RunError::Emulator(error.to_string()))?;
    let token = emulator
        .service_account_token(emulated::NAMESPACE, &name)
        .map_err(|error| RunError::Emulator(format!("cannot mint a token of {name}: {error}")))?;
    let config = emulator_config(emulator, Some(token))?;
    tracing::info!(
        service_account = %format!("{}/{name}", emulated::NAMESPACE),
        "the emulator enforces RBAC (--emulator-rbac): running as the operator's ServiceAccount, granted what `manifests` grants"
    );
    build_client(config, endpoints)
}

/// The client configuration of `emulator`, with a bearer `token`.
#[cfg(feature = "emulator")]
fn emulator_config(
    emulator: &kopf_testing::Emulator,
    token: Option<String>,
) -> Result<kube::Config, RunError> {
    let url = emulator
        .url()
        .parse()
        .map_err(|error: http::uri::InvalidUri| {
            RunError::Emulator(format!("an unusable URL: {error}"))
        })?;
    let mut config = kube::Config::new(url);
    config.auth_info.token = token.map(Into::into);
    Ok(config)
}
