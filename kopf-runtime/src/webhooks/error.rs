//! [`WebhookError`]: why the webhook server could not be set up.

use std::path::PathBuf;

/// How to get admission webhooks in a build without them, for every error
/// that refuses them there.
pub(crate) const ENABLE_WEBHOOKS: &str = "enable kopf-runtime's `webhooks` feature: \
     kopf-runtime = { version = \"0.1\", features = [\"webhooks\"] }";

/// Why the webhook server could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// A webhook flag is given, or a server asked for, in a build without
    /// kopf-runtime's `webhooks` feature.
    #[error(
        "this build has no admission webhooks: {}, or drop the --webhook-* flags",
        ENABLE_WEBHOOKS
    )]
    Disabled,
    /// The flags do not make a server.
    #[error("{0}")]
    Flags(String),
    /// `--webhook-server` is not a URL that can be served.
    #[error("the webhook server URL {url:?} cannot be served: {why}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong, and what would do.
        why: String,
    },
    /// The address cannot be listened on.
    #[error(
        "cannot listen on {address} for the webhook server: {source}; pick another port or address"
    )]
    Bind {
        /// `host:port`.
        address: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// The certificates do not load, or cannot be made.
    #[error("the webhook server's certificate: {0}")]
    Certificate(String),
    /// The CA bundle cannot be written to `--webhook-ca-dump`.
    #[error("cannot write the CA bundle to {path}: {source}")]
    CaDump {
        /// The file.
        path: PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
}
