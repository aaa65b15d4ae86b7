//! The webhook server of a build without the `webhooks` feature: the same
//! API as `server.rs` and `serving.rs`, whose server cannot be bound, so
//! that a program written for either build compiles with both, and asking
//! for webhooks in this one is an error that says how to build them in.

use std::convert::Infallible;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::args::WebhookArgs;
use super::error::WebhookError;
use crate::model::handlers::Handler;
use crate::model::kwargs::{Indexes, MemoBase};
use crate::operations::listening::ListenUrl;
use crate::operations::metrics::Metrics;

/// The admission webhook server, which this build cannot serve: it has no
/// `webhooks` feature, so [`WebhookServer::bind`] always fails with
/// [`WebhookError::Disabled`], and no value of this type exists.
#[derive(Debug)]
pub struct WebhookServer {
    never: Infallible,
}

impl WebhookServer {
    /// Fails: this build has no admission webhooks.
    ///
    /// # Errors
    /// [`WebhookError::Disabled`], always.
    #[allow(clippy::unused_async)]
    pub async fn bind(args: &WebhookArgs) -> Result<Self, WebhookError> {
        let _ = args;
        Err(WebhookError::Disabled)
    }

    /// The URL clients reach the webhooks at.
    pub fn url(&self) -> &str {
        match self.never {}
    }

    /// The CA bundle (PEM) that clients verify the server with.
    pub fn ca_pem(&self) -> String {
        match self.never {}
    }

    /// The configurations to keep up to date.
    pub(crate) fn managed(&self) -> Option<&Managed> {
        match self.never {}
    }
}

/// The configurations a server would keep up to date.
pub(crate) struct Managed {
    pub(crate) name: String,
}

/// Refuses `--webhook-server`: this build cannot serve it.
pub(crate) fn target(url: &str) -> Result<ListenUrl, WebhookError> {
    let _ = url;
    Err(WebhookError::Disabled)
}

/// What the admission handlers would be called with.
#[expect(
    dead_code,
    reason = "the fields of `serving.rs`'s, for the same caller"
)]
pub(crate) struct Admission<'a> {
    pub(crate) client: &'a kube::Client,
    pub(crate) memo: &'a MemoBase,
    pub(crate) indexes: &'a Indexes,
    pub(crate) metrics: Option<&'a std::sync::Arc<Metrics>>,
}

/// Never called: there is no server to start.
pub(crate) fn start(
    server: WebhookServer,
    handlers: Vec<Handler>,
    served: &Admission<'_>,
    root: &CancellationToken,
    tasks: &TaskTracker,
) -> Result<(), WebhookError> {
    let _ = (handlers, served, root, tasks);
    match server.never {}
}
