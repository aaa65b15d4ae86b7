//! The webhook flags of the command line ([`WebhookArgs`]), flattened into
//! [`Args`](crate::Args).

use std::path::PathBuf;

use super::error::WebhookError;

/// Whether this build lacks the `webhooks` feature: its flags are then
/// left out of `--help`, and refused when given.
const UNBUILT: bool = !cfg!(feature = "webhooks");

/// The admission webhook server's flags, as Kopf's `WebhookServer`
/// options (`addr`, `port`, `path`, `host`, `certfile`, `pkeyfile`,
/// `cafile`, `cadump`, `extra_sans`) and `settings.admission.managed`.
///
/// ```
/// use clap::Parser;
/// use kopf_runtime::Args;
///
/// let args = Args::try_parse_from([
///     "operator",
///     "--webhook-server", "https://0.0.0.0:9443/admission",
///     "--webhook-managed", "auto.kopf.dev",
///     "--webhook-service", "operators/kopf-webhooks:443",
/// ])?;
/// assert_eq!(args.webhooks.managed.as_deref(), Some("auto.kopf.dev"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, clap::Args)]
pub struct WebhookArgs {
    /// Serve the `on_validate` and `on_mutate` handlers over HTTPS at this
    /// URL (e.g. `https://0.0.0.0:9443`, with an optional root path); each
    /// handler answers at the path of its id beneath it, as in Kopf.
    #[arg(id = "webhook_server", long = "webhook-server", value_name = "URL", hide = UNBUILT)]
    pub server: Option<String>,

    /// The host name or address that clients reach the server at, in the
    /// configurations' URLs and in a generated certificate (default: the
    /// listening address; `127.0.0.1` for `0.0.0.0`).
    #[arg(id = "webhook_host", long = "webhook-host", value_name = "NAME", hide = UNBUILT)]
    pub host: Option<String>,

    /// The server's certificate chain (PEM), re-read when it changes;
    /// without it, a CA and a certificate are made at start.
    #[arg(
        id = "webhook_cert",
        long = "webhook-cert",
        value_name = "FILE",
        requires = "webhook_key",
        hide = UNBUILT
    )]
    pub cert: Option<PathBuf>,

    /// The private key (PEM) of `--webhook-cert`.
    #[arg(
        id = "webhook_key",
        long = "webhook-key",
        value_name = "FILE",
        requires = "webhook_cert",
        hide = UNBUILT
    )]
    pub key: Option<PathBuf>,

    /// The CA bundle (PEM) that clients verify `--webhook-cert` with, for
    /// the managed configurations (default: the certificate file itself).
    #[arg(
        id = "webhook_ca",
        long = "webhook-ca",
        value_name = "FILE",
        requires = "webhook_cert",
        hide = UNBUILT
    )]
    pub ca: Option<PathBuf>,

    /// One more name (DNS or IP) for the generated certificate; repeatable.
    #[arg(
        id = "webhook_extra_san",
        long = "webhook-extra-san",
        value_name = "NAME",
        conflicts_with = "webhook_cert",
        hide = UNBUILT
    )]
    pub extra_sans: Vec<String>,

    /// Write the CA bundle (PEM) to this file, and again when it changes
    /// (e.g. for `curl --cacert`).
    #[arg(id = "webhook_ca_dump", long = "webhook-ca-dump", value_name = "FILE", hide = UNBUILT)]
    pub ca_dump: Option<PathBuf>,

    /// Create and keep up to date the ValidatingWebhookConfiguration and
    /// MutatingWebhookConfiguration of this name, one webhook per handler.
    #[arg(id = "webhook_managed", long = "webhook-managed", value_name = "NAME", hide = UNBUILT)]
    pub managed: Option<String>,

    /// In the managed configurations, reach the server through this Service
    /// instead of its URL.
    #[arg(
        id = "webhook_service",
        long = "webhook-service",
        value_name = "NAMESPACE/NAME[:PORT]",
        requires = "webhook_managed",
        hide = UNBUILT
    )]
    pub service: Option<String>,
}

impl WebhookArgs {
    /// Whether any webhook flag is given.
    pub(crate) fn any(&self) -> bool {
        *self != WebhookArgs::default()
    }

    /// Refuses flags that mean nothing without `--webhook-server`, and in
    /// a build without the `webhooks` feature any flag, rather than ignore
    /// them.
    ///
    /// # Errors
    /// [`WebhookError::Flags`] naming the flag, [`WebhookError::Disabled`].
    pub(crate) fn check(&self) -> Result<(), WebhookError> {
        self.check_in(cfg!(feature = "webhooks"))
    }

    /// [`check`](Self::check) in a build with webhooks (`built`) or without.
    fn check_in(&self, built: bool) -> Result<(), WebhookError> {
        if !self.any() {
            return Ok(());
        }
        if !built {
            return Err(WebhookError::Disabled);
        }
        if self.server.is_some() {
            return Ok(());
        }
        Err(WebhookError::Flags(
            "the --webhook-* flags configure the webhook server: add --webhook-server https://0.0.0.0:9443"
                .to_owned(),
        ))
    }
}

/// A Service reference, `NAMESPACE/NAME[:PORT]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServiceRef {
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) port: Option<u16>,
}

impl ServiceRef {
    pub(crate) fn parse(text: &str) -> Result<Self, WebhookError> {
        let invalid = || {
            WebhookError::Flags(format!(
                "--webhook-service {text:?} is not NAMESPACE/NAME[:PORT], e.g. operators/kopf-webhooks:443"
            ))
        };
        let (namespace, rest) = text.split_once('/').ok_or_else(invalid)?;
        let (name, port) = match rest.split_once(':') {
            Some((name, port)) => (name, Some(port.parse::<u16>().map_err(|_| invalid())?)),
            None => (rest, None),
        };
        if namespace.is_empty() || name.is_empty() || name.contains('/') {
            return Err(invalid());
        }
        Ok(Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            port,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[test]
    fn flags_without_a_server_and_bad_combinations_are_refused() {
        let parse = |flags: &[&str]| {
            crate::Args::try_parse_from(std::iter::once("operator").chain(flags.iter().copied()))
        };
        let args = parse(&["--webhook-managed", "x"]).expect("parsed");
        assert!(matches!(
            args.webhooks.check_in(true),
            Err(WebhookError::Flags(_))
        ));
        assert!(parse(&["--webhook-cert", "c.pem"]).is_err());
        assert!(parse(&["--webhook-service", "ns/svc"]).is_err());
        let both = [
            "--webhook-cert",
            "c",
            "--webhook-key",
            "k",
            "--webhook-extra-san",
            "x",
        ];
        assert!(parse(&both).is_err());
        let args = parse(&["--webhook-server", "https://127.0.0.1:9443"]).expect("parsed");
        assert!(args.webhooks.check_in(true).is_ok());
        assert!(parse(&[]).expect("parsed").webhooks.check_in(true).is_ok());
    }

    #[test]
    fn without_the_webhooks_feature_every_flag_is_refused_with_the_remedy() {
        let refused = |flags: &[&str]| {
            let args = crate::Args::try_parse_from(
                std::iter::once("operator").chain(flags.iter().copied()),
            )
            .expect("parsed");
            args.webhooks.check_in(false)
        };
        for flags in [
            &["--webhook-server", "https://127.0.0.1:9443"][..],
            &["--webhook-managed", "x"],
            &["--webhook-host", "h"],
        ] {
            let error = refused(flags).expect_err("refused");
            assert!(matches!(error, WebhookError::Disabled), "{flags:?}");
            assert!(
                error.to_string().contains(r#"features = ["webhooks"]"#),
                "{error}"
            );
        }
        assert!(refused(&[]).is_ok(), "no flag, nothing to refuse");
        assert_eq!(
            crate::Args::try_parse_from(["operator", "--webhook-managed", "x"])
                .expect("parsed")
                .webhooks
                .check()
                .is_err_and(|e| matches!(e, WebhookError::Disabled)),
            !cfg!(feature = "webhooks"),
            "this build's own check"
        );
        let help = <crate::Args as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        assert_eq!(
            help.contains("--webhook-server"),
            cfg!(feature = "webhooks"),
            "the flags are in the help of a build that serves them only"
        );
    }

    #[test]
    fn services_are_namespace_name_and_an_optional_port() {
        assert_eq!(
            ServiceRef::parse("ops/hooks:8443").expect("valid"),
            ServiceRef {
                namespace: "ops".into(),
                name: "hooks".into(),
                port: Some(8443)
            }
        );
        assert_eq!(ServiceRef::parse("ops/hooks").expect("valid").port, None);
        for bad in ["hooks", "/hooks", "ops/", "ops/hooks:x", "a/b/c"] {
            assert!(ServiceRef::parse(bad).is_err(), "{bad}");
        }
    }
}
