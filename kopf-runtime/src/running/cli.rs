//! The command line of an operator, mirroring `kopf run` ([`Args`]), and
//! logging setup.

use std::io::IsTerminal as _;
use std::path::PathBuf;

use tracing::Subscriber;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer};

use crate::deploying::MissingPermissions;
use crate::operator::namespaces::{NamespaceSelector, SelectorError};
use crate::peering::{DEV_PRIORITY, Peering};
use crate::settings::NetworkingSettings;
use crate::webhooks::WebhookArgs;

/// A failure to act on the command line: logging or cluster configuration.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// `RUST_LOG` holds directives that do not parse.
    #[error("invalid RUST_LOG directives: {0}")]
    InvalidFilter(#[source] tracing_subscriber::filter::FromEnvError),
    /// A global tracing subscriber is already installed.
    #[error("a global tracing subscriber is already installed")]
    LoggerInstalled(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// `--kubeconfig` or `--context` could not be loaded.
    #[error("cannot load the kubeconfig")]
    Kubeconfig(#[source] kube::config::KubeconfigError),
    /// No cluster configuration found (no kubeconfig, not in a cluster).
    #[error("cannot find a cluster configuration")]
    InferConfig(#[source] kube::config::InferConfigError),
}

/// How log lines look (`--log-format`), as in Kopf.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Level and message only, for humans at a terminal.
    Plain,
    /// Timestamp, level, target, spans and message.
    #[default]
    Full,
    /// One JSON object per line, for log collectors.
    Json,
}

/// The command-line arguments of an operator (`kopf run`'s options).
#[derive(Debug, Clone, PartialEq, Eq, clap::Parser)]
#[command(
    about = "Run a Kopf-style Kubernetes operator.",
    after_help = "To print the manifests that deploy it instead: `<binary> manifests --image IMAGE [flags]` (see `<binary> manifests --help`)."
)]
pub struct Args {
    /// Serve this namespace; repeatable. Globs (`dev-*`), comma-separated
    /// lists and exclusions (`!dev-skip`) as in Kopf.
    #[arg(short = 'n', long = "namespace", value_name = "PATTERN")]
    pub namespaces: Vec<String>,

    /// Serve all namespaces (cluster-wide); only exclusions may be added.
    #[arg(short = 'A', long = "all-namespaces")]
    pub all_namespaces: bool,

    /// Run without coordinating with other replicas, even if `--peering`
    /// or `KOPF_RUN_PEERING` names a Lease (as without them).
    #[arg(long)]
    pub standalone: bool,

    /// Elect the one replica that serves on this `coordination.k8s.io/v1`
    /// Lease (created if missing); the others wait and take over when it
    /// exits or cannot renew the Lease.
    #[arg(short = 'P', long, value_name = "NAME", env = "KOPF_RUN_PEERING")]
    pub peering: Option<String>,

    /// The Lease's namespace [default: the pod's own, else `default`].
    #[arg(long, value_name = "NAMESPACE", requires = "peering")]
    pub peering_namespace: Option<String>,

    /// This replica's name on the Lease, unique among the replicas
    /// [default: the pod's name, else the host's with a random suffix].
    #[arg(long, value_name = "NAME", requires = "peering")]
    pub identity: Option<String>,

    /// This replica's priority on the Lease: a waiting replica of a
    /// strictly higher priority is handed the Lease; equal priorities
    /// elect normally [default: 0].
    #[arg(
        short = 'p',
        long,
        value_name = "N",
        requires = "peering",
        conflicts_with = "dev",
        allow_negative_numbers = true
    )]
    pub priority: Option<i64>,

    /// Development mode: priority 666, to take the Lease over from the
    /// deployed replicas while debugging.
    #[arg(long, requires = "peering")]
    pub dev: bool,

    /// Spread the objects over this many slots (a power of two, at most
    /// 64), each a Lease of its own, so that every replica serves about
    /// its share of them [default: 1, one leader serves every object].
    #[arg(long, value_name = "S", requires = "peering")]
    pub shards: Option<u32>,

    /// The kubeconfig file to use instead of `$KUBECONFIG` / `~/.kube/config`.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use instead of the current one.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,

    /// More logs: `-v` is debug, `-vv` is trace.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,

    /// Debug logs, including the libraries' own (kube, hyper): trace level.
    #[arg(short = 'd', long, conflicts_with = "quiet")]
    pub debug: bool,

    /// Fewer logs: warnings and errors only.
    #[arg(short = 'q', long)]
    pub quiet: bool,

    /// How log lines look.
    #[arg(long, value_enum, default_value_t = LogFormat::Full)]
    pub log_format: LogFormat,

    /// Run against an in-process Kubernetes API emulator instead of a cluster.
    #[arg(long)]
    pub emulator: bool,

    /// With `--emulator`: the emulator enforces RBAC, and the operator runs
    /// as its own ServiceAccount (`default/NAME`, NAME from the binary's
    /// name, as `manifests` names it), granted exactly the rules that
    /// `manifests` prints for the same flags; the emulator records which
    /// rule allowed each request and every request denied
    /// (`GET /_emulator/rbac/usage`).
    #[arg(long, requires = "emulator")]
    pub emulator_rbac: bool,

    /// Serve the liveness probe at this URL (e.g.
    /// `http://0.0.0.0:8080/healthz`), running the `on_probe` handlers, and
    /// the readiness probe at `/readyz` beside it.
    #[arg(short = 'L', long, value_name = "URL")]
    pub liveness: Option<String>,

    /// Serve Prometheus metrics (OpenMetrics text) at this URL (e.g.
    /// `http://0.0.0.0:9090/metrics`); the same host and port as
    /// `--liveness` share its listener.
    #[arg(long, value_name = "URL")]
    pub metrics: Option<String>,

    /// The admission webhook server (`--webhook-*`).
    #[command(flatten)]
    pub webhooks: WebhookArgs,

    /// What to do when the API server says, at start-up, that the operator
    /// lacks permissions it needs (asked with SelfSubjectAccessReviews):
    /// report them all and exit, or report them and serve anyway.
    #[arg(long, value_enum, value_name = "WHAT", default_value_t = MissingPermissions::Fail)]
    pub missing_permissions: MissingPermissions,
}

impl Args {
    /// The namespaces to serve, from `-n` and `-A`.
    ///
    /// ```
    /// use clap::Parser;
    /// use kopf_runtime::{Args, LogFormat};
    ///
    /// let args = Args::try_parse_from(["operator", "-n", "dev-*", "-n", "!dev-skip", "-v"])?;
    /// assert_eq!(args.log_format, LogFormat::Full);
    /// let selector = args.namespace_selector()?;
    /// assert!(selector.matches("dev-1") && !selector.matches("dev-skip"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`SelectorError`] as [`NamespaceSelector::new`] reports it.
    pub fn namespace_selector(&self) -> Result<NamespaceSelector, SelectorError> {
        NamespaceSelector::new(&self.namespaces, self.all_namespaces)
    }

    /// The Lease to elect the serving replica on, from `--peering` (unless
    /// `--standalone`), `--peering-namespace`, `--identity`, `--priority`
    /// and `--dev`; `None` to run without coordination.
    ///
    /// ```
    /// use clap::Parser;
    /// use kopf_runtime::{Args, Peering};
    ///
    /// let args = Args::try_parse_from([
    ///     "operator", "--peering", "team", "--peering-namespace", "ops", "--identity", "a", "--dev",
    /// ])?;
    /// let expected = Peering::new("team").namespace("ops").identity("a").priority(666);
    /// assert_eq!(args.peering(), Some(expected));
    /// assert!(Args::try_parse_from(["operator", "--standalone", "--peering", "team"])?.peering().is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn peering(&self) -> Option<Peering> {
        if self.standalone {
            return None;
        }
        let mut peering = Peering::new(self.peering.as_deref()?);
        if let Some(namespace) = &self.peering_namespace {
            peering = peering.namespace(namespace);
        }
        if let Some(identity) = &self.identity {
            peering = peering.identity(identity);
        }
        let priority = if self.dev {
            DEV_PRIORITY
        } else {
            self.priority.unwrap_or(0)
        };
        Some(peering.priority(priority).shards(self.shards.unwrap_or(1)))
    }

    /// The client configuration: `--kubeconfig` and `--context` if given,
    /// otherwise kube's inference (`$KUBECONFIG`, `~/.kube/config`, then the
    /// in-cluster service account); `networking.connect_timeout` applies if set.
    /// (`--emulator` is handled by the runtime before this is called.)
    ///
    /// # Errors
    ///
    /// [`CliError::Kubeconfig`] or [`CliError::InferConfig`].
    pub(crate) async fn kube_config(
        &self,
        networking: &NetworkingSettings,
    ) -> Result<kube::Config, CliError> {
        let options = kube::config::KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        let mut config = match (&self.kubeconfig, &self.context) {
            (Some(path), _) => {
                let kubeconfig =
                    kube::config::Kubeconfig::read_from(path).map_err(CliError::Kubeconfig)?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(CliError::Kubeconfig)?
            }
            (None, Some(_)) => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(CliError::Kubeconfig)?,
            (None, None) => kube::Config::infer().await.map_err(CliError::InferConfig)?,
        };
        if let Some(timeout) = networking.connect_timeout {
            config.connect_timeout = Some(timeout);
        }
        Ok(config)
    }

    /// The level used when `RUST_LOG` does not say otherwise.
    pub(crate) fn default_level(&self) -> LevelFilter {
        if self.debug {
            return LevelFilter::TRACE;
        }
        match (self.quiet, self.verbose) {
            (true, _) => LevelFilter::WARN,
            (false, 0) => LevelFilter::INFO,
            (false, 1) => LevelFilter::DEBUG,
            (false, _) => LevelFilter::TRACE,
        }
    }

    /// The log filter: `RUST_LOG` when set, otherwise [`Self::default_level`].
    /// `RUST_LOG` directives refine the default level rather than replace it.
    ///
    /// # Errors
    ///
    /// [`CliError::InvalidFilter`] if `RUST_LOG` does not parse.
    pub(crate) fn env_filter(&self) -> Result<EnvFilter, CliError> {
        EnvFilter::builder()
            .with_default_directive(self.default_level().into())
            .from_env()
            .map_err(CliError::InvalidFilter)
    }
}

/// Install the global tracing subscriber as the arguments say.
///
/// A terminal gets every line as it comes, in colour. Any other stdout (a
/// file, a pipe: a container's log) gets them without colours, in batches
/// while the operator runs, at the latest 0.1 s after they were logged and
/// at once from `WARN` up; the operator writes what is left when it exits.
///
/// # Errors
///
/// [`CliError`] if `RUST_LOG` is invalid or a subscriber is already set.
pub(crate) fn init_logging(args: &Args) -> Result<(), CliError> {
    let filter = args.env_filter()?;
    // Colours only for a terminal: not in log files and collectors.
    let lines = if std::io::stdout().is_terminal() {
        lines(args.log_format, true, std::io::stdout)
    } else {
        lines(
            args.log_format,
            false,
            crate::running::logbuffer::Batched::stdout(),
        )
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(lines)
        .try_init()
        .map_err(|error| CliError::LoggerInstalled(error.into()))
}

/// The layer that writes log lines in `format` to `writer`.
fn lines<S, W>(format: LogFormat, ansi: bool, writer: W) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(writer);
    match format {
        LogFormat::Plain => layer.without_time().with_target(false).compact().boxed(),
        LogFormat::Full => layer.boxed(),
        LogFormat::Json => layer
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .boxed(),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn parse(argv: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("op").chain(argv.iter().copied())).expect("valid argv")
    }

    #[test]
    fn defaults() {
        let args = parse(&[]);
        assert!(args.namespaces.is_empty());
        assert!(!args.all_namespaces && !args.standalone && !args.emulator && !args.quiet);
        assert_eq!(args.verbose, 0);
        assert_eq!(args.log_format, LogFormat::Full);
        assert_eq!(args.default_level(), LevelFilter::INFO);
        assert!(args.namespace_selector().expect("valid").is_cluster_wide());
    }

    #[test]
    fn all_options_parse() {
        let args = parse(&[
            "-n",
            "a",
            "--namespace",
            "b-*",
            "--standalone",
            "--kubeconfig",
            "/tmp/kc",
            "--context",
            "ctx",
            "--log-format",
            "json",
            "--emulator",
        ]);
        assert_eq!(args.namespaces, ["a", "b-*"]);
        assert!(args.standalone && args.emulator);
        assert_eq!(args.kubeconfig, Some(PathBuf::from("/tmp/kc")));
        assert_eq!(args.context.as_deref(), Some("ctx"));
        assert_eq!(args.log_format, LogFormat::Json);
    }

    #[test]
    fn verbosity_levels() {
        assert_eq!(parse(&["-v"]).default_level(), LevelFilter::DEBUG);
        assert_eq!(parse(&["-vv"]).default_level(), LevelFilter::TRACE);
        assert_eq!(parse(&["-q"]).default_level(), LevelFilter::WARN);
        assert!(Args::try_parse_from(["op", "-v", "-q"]).is_err());
    }

    #[test]
    fn logging_installs_once() {
        // The only test that installs the global subscriber.
        assert!(init_logging(&parse(&["--log-format", "json", "-v"])).is_ok());
        tracing::debug!(test = "logging_installs_once", "a json line");
        let again = init_logging(&parse(&[]));
        assert!(
            matches!(again, Err(CliError::LoggerInstalled(_))),
            "{again:?}"
        );
    }

    /// The lines `emit` logs in `format` without colours, at every level.
    fn logged(format: LogFormat, emit: impl Fn()) -> String {
        #[derive(Clone, Default)]
        struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Captured {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().expect("not poisoned").extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::registry()
            .with(lines(format, false, move || writer.clone()))
            .with(LevelFilter::TRACE);
        tracing::subscriber::with_default(subscriber, emit);
        let bytes = captured.0.lock().expect("not poisoned").clone();
        String::from_utf8(bytes).expect("utf-8")
    }

    /// A handler's line inside the spans an object is processed in.
    fn handler_line() {
        let span = tracing::info_span!("object", resource = "configmaps", n = 2);
        span.in_scope(|| {
            tracing::info!(target: "kopf::objects", object = %"ns/name", retries = 3, "Handler 'x' succeeded.");
        });
    }

    #[test]
    fn full_lines_show_time_level_spans_target_message_and_fields() {
        let text = logged(LogFormat::Full, handler_line);
        let (time, rest) = text.split_once(' ').expect("a time, then the rest");
        let _: jiff::Timestamp = time.parse().expect("RFC 3339");
        assert!(
            time.len() == "2026-11-30T23:58:16.123456Z".len() && time.ends_with('Z'),
            "{time}"
        );
        assert_eq!(
            rest,
            " INFO object{resource=\"configmaps\" n=2}: kopf::objects: \
             Handler 'x' succeeded. object=ns/name retries=3\n"
        );
    }

    #[test]
    fn plain_lines_show_level_message_and_fields() {
        assert_eq!(
            logged(LogFormat::Plain, handler_line),
            " INFO object: Handler 'x' succeeded. object=ns/name retries=3 \
             resource=\"configmaps\" n=2\n"
        );
    }

    #[test]
    fn json_lines_hold_the_fields_at_the_top_and_the_span() {
        let text = logged(LogFormat::Json, handler_line);
        let line: serde_json::Value = serde_json::from_str(&text).expect("one JSON object");
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["target"], "kopf::objects");
        assert_eq!(line["message"], "Handler 'x' succeeded.");
        assert_eq!(line["object"], "ns/name");
        assert_eq!(line["retries"], 3);
        assert_eq!(line["span"]["name"], "object");
        assert_eq!(line["span"]["resource"], "configmaps");
    }

    #[test]
    fn control_characters_in_messages_are_escaped() {
        let text = logged(LogFormat::Full, || {
            tracing::info!("bell \x07 escape \x1b[2J csi \u{9b} é 日本");
        });
        assert!(
            text.ends_with(": bell \\x07 escape \\x1b[2J csi \\u{9b} é 日本\n"),
            "{text}"
        );
    }

    #[test]
    fn peering_flags_make_the_lease_to_elect_on() {
        let given = |argv: &[&str]| {
            let mut all = vec!["--peering-namespace", "ops", "--identity", "me"];
            all.extend_from_slice(argv);
            parse(&all).peering()
        };
        let lease = |priority| {
            Some(
                Peering::new("team")
                    .namespace("ops")
                    .identity("me")
                    .priority(priority),
            )
        };
        assert_eq!(given(&["-P", "team"]), lease(0));
        assert_eq!(given(&["--peering", "team", "-p", "10"]), lease(10));
        assert_eq!(given(&["--peering", "team", "--priority", "-3"]), lease(-3));
        assert_eq!(given(&["--peering", "team", "--dev"]), lease(666));
        assert_eq!(
            given(&["--peering", "team", "--shards", "8"]),
            lease(0).map(|p| p.shards(8))
        );
        assert_eq!(given(&["--peering", "team", "--standalone"]), None);
        assert_eq!(parse(&["--standalone", "-A", "-v"]).peering(), None);
        assert_eq!(parse(&[]).peering(), None);
        assert_eq!(parse(&["-d"]).default_level(), LevelFilter::TRACE);
    }

    #[test]
    fn peering_options_without_a_lease_are_refused() {
        for argv in [
            &["--priority", "10"][..],
            &["--dev"],
            &["--identity", "me"],
            &["--peering-namespace", "ops"],
            &["--shards", "8"],
        ] {
            let error = Args::try_parse_from(std::iter::once("op").chain(argv.iter().copied()))
                .expect_err("refused");
            assert!(error.to_string().contains("--peering"), "{argv:?}: {error}");
        }
        let error = Args::try_parse_from(["op", "-P", "team", "--dev", "-p", "1"])
            .expect_err("one priority");
        assert!(error.to_string().contains("cannot be used with"), "{error}");
    }

    #[test]
    fn liveness_and_metrics_are_taken() {
        for argv in [
            &[
                "-L",
                "http://0.0.0.0:8080/healthz",
                "--metrics",
                "http://0.0.0.0:9090/metrics",
            ][..],
            &[
                "--liveness",
                "http://0.0.0.0:8080/healthz",
                "--metrics",
                "http://0.0.0.0:9090/metrics",
            ],
        ] {
            let args = parse(argv);
            assert_eq!(
                args.liveness.as_deref(),
                Some("http://0.0.0.0:8080/healthz")
            );
            assert_eq!(args.metrics.as_deref(), Some("http://0.0.0.0:9090/metrics"));
        }
    }

    #[test]
    fn the_help_lists_every_flag() {
        use clap::CommandFactory as _;
        let help = Args::command().render_long_help().to_string();
        for shown in [
            "--standalone",
            "--peering",
            "--peering-namespace",
            "--identity",
            "--priority",
            "--dev",
            "--shards",
            "--liveness",
            "--metrics",
        ] {
            assert!(help.contains(shown), "{shown} not in:\n{help}");
        }
    }

    #[test]
    fn log_formats() {
        assert_eq!(
            parse(&["--log-format", "plain"]).log_format,
            LogFormat::Plain
        );
        assert_eq!(parse(&["--log-format", "full"]).log_format, LogFormat::Full);
        assert!(Args::try_parse_from(["op", "--log-format", "xml"]).is_err());
    }

    #[test]
    fn namespaces_with_all_namespaces() {
        let args = parse(&["-A", "-n", "!kube-system"]);
        let selector = args
            .namespace_selector()
            .expect("exclusions are allowed with -A");
        assert!(selector.is_cluster_wide() && !selector.matches("kube-system"));
        assert!(parse(&["-A", "-n", "dev"]).namespace_selector().is_err());
    }

    #[tokio::test]
    async fn kubeconfig_and_context_are_honoured() {
        let path = std::env::temp_dir().join(format!("kopf-cli-test-{}.yaml", std::process::id()));
        let kubeconfig = r#"
apiVersion: v1
kind: Config
current-context: one
clusters:
- name: one
  cluster: {server: "http://127.0.0.1:6001"}
- name: two
  cluster: {server: "http://127.0.0.1:6002"}
contexts:
- name: one
  context: {cluster: one, user: u, namespace: ns-one}
- name: two
  context: {cluster: two, user: u, namespace: ns-two}
users:
- name: u
  user: {token: t}
"#;
        std::fs::write(&path, kubeconfig).expect("temp dir is writable");
        let path_arg = path.to_string_lossy().into_owned();
        let networking = NetworkingSettings {
            connect_timeout: Some(std::time::Duration::from_secs(3)),
            ..NetworkingSettings::default()
        };

        let config = parse(&["--kubeconfig", &path_arg])
            .kube_config(&networking)
            .await
            .expect("loads");
        assert_eq!(config.cluster_url.to_string(), "http://127.0.0.1:6001/");
        assert_eq!(config.default_namespace, "ns-one");
        assert_eq!(
            config.connect_timeout,
            Some(std::time::Duration::from_secs(3))
        );

        let args = parse(&["--kubeconfig", &path_arg, "--context", "two"]);
        let config = args.kube_config(&networking).await.expect("loads");
        assert_eq!(config.cluster_url.to_string(), "http://127.0.0.1:6002/");

        let args = parse(&["--kubeconfig", &path_arg, "--context", "three"]);
        assert!(matches!(
            args.kube_config(&networking).await,
            Err(CliError::Kubeconfig(_))
        ));
        let missing = parse(&["--kubeconfig", "/nonexistent/kubeconfig"]);
        assert!(matches!(
            missing.kube_config(&networking).await,
            Err(CliError::Kubeconfig(_))
        ));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn kopf_style_glob_and_exclusion() {
        let selector = parse(&["-n", "dev-*", "-n", "!dev-skip"])
            .namespace_selector()
            .expect("valid");
        assert!(selector.matches("dev-a"));
        assert!(!selector.matches("dev-skip"));
        assert!(!selector.matches("prod"));
    }
}
