//! The admission webhooks of a running operator ([`start`]): the discovery
//! of their resources, the managed configurations kept up to date, and the
//! server answering with a [`Reviewer`].

use std::sync::Arc;

use kube::Client;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::admission::Reviewer;
use super::error::WebhookError;
use super::managed;
use super::server::{self, WebhookServer};
use crate::model::handlers::Handler;
use crate::model::kwargs::{Indexes, MemoBase};
use crate::operations::metrics::Metrics;

/// What the admission handlers are called with.
pub(crate) struct Admission<'a> {
    pub(crate) client: &'a Client,
    pub(crate) memo: &'a MemoBase,
    pub(crate) indexes: &'a Indexes,
    pub(crate) metrics: Option<&'a Arc<Metrics>>,
}

/// Serves the admission `handlers` with `server` in `tasks`, and keeps its
/// managed configurations, if any, up to date, until `root` is cancelled.
///
/// # Errors
/// [`WebhookError::Certificate`] when the server's TLS cannot be set up.
pub(crate) fn start(
    server: WebhookServer,
    handlers: Vec<Handler>,
    served: &Admission<'_>,
    root: &CancellationToken,
    tasks: &TaskTracker,
) -> Result<(), WebhookError> {
    let client = served.client;
    let (found, resources) = watch::channel(Arc::from(Vec::new()));
    tasks.spawn(managed::discover(
        client.clone(),
        handlers.clone(),
        found,
        root.child_token(),
    ));
    if let Some(configurations) = server.managed().cloned() {
        tasks.spawn(managed::manage(
            client.clone(),
            configurations,
            handlers.clone(),
            resources.clone(),
            server.ca(),
            root.child_token(),
        ));
    }
    let reviewer = Reviewer::new(
        handlers,
        resources,
        served.memo.clone(),
        served.indexes.clone(),
        Some(client.clone()),
    );
    server::serve(
        server,
        reviewer,
        served.metrics.cloned(),
        root.child_token(),
        tasks,
    )
}
