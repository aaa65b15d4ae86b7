//! The operator's start-up, up to serving: its health and metrics, the
//! endpoints and probes, the login and the client, the permission check,
//! the Event poster, the start-up handlers (which may change the settings
//! and fill the memo), then the webhooks.

use std::sync::Arc;

use kube::Client;

use super::activities::{self, Activity};
use super::{Background, Operator, OperatorError, Started, Stop, log_urls, measured_if};
use crate::model::handlers::{Handler, HandlerKind};
use crate::model::kwargs::Memo;
use crate::operations::endpoints::{EndpointState, Endpoints};
use crate::operations::health::{Health, Phase};
use crate::operations::metrics::{self, Metrics};
use crate::operations::probing::Probes;
use crate::operations::scraping::ScrapeTime;
use crate::operator::login::Vault;
use crate::posting::EventPoster;
use crate::processing::indexing::OperatorIndexes;
use crate::settings::{OperatorSettings, PostingSettings, StartupSettings};
use crate::webhooks::{self, WebhookServer};

/// Whether `handler` is an admission handler.
pub(super) fn is_webhook(handler: &Handler) -> bool {
    matches!(
        handler.kind(),
        HandlerKind::OnValidate | HandlerKind::OnMutate
    )
}

impl Operator {
    /// Refuses admission handlers without a webhook server (as Kopf does).
    pub(super) fn check_webhooks(&self) -> Result<(), OperatorError> {
        if self.webhooks.is_none()
            && let Some(handler) = self.registry.handlers().iter().find(|h| is_webhook(h))
        {
            return Err(OperatorError::NoWebhookServer {
                handler: handler.source().to_string(),
            });
        }
        Ok(())
    }

    /// Starts the operator, up to serving; `None` if `stop` completed
    /// meanwhile (then nothing is served and nothing cleaned up).
    pub(super) async fn start(
        &mut self,
        stop: &mut Stop<'_>,
        background: &Background,
    ) -> Result<Option<Started>, OperatorError> {
        let endpoints = self.endpoints.take();
        let health = endpoints.as_ref().map(|_| Arc::new(Health::default()));
        let metrics = match (&endpoints, &health) {
            (Some(endpoints), Some(health)) => endpoints.api_metrics().map(|api| {
                Arc::new(Metrics::new(
                    ScrapeTime::new(Arc::clone(health), self.task_counters.clone()),
                    api.clone(),
                ))
            }),
            _ => None,
        };
        // The operator's memo: for the login, start-up and clean-up
        // handlers, and, as the start-up handlers leave it, what every
        // object's memo starts as.
        let memo = self.memo.clone();
        // Login handlers, if any, give the credentials of every request.
        let vault = self.vault(metrics.as_ref(), &memo);
        if let (Some(health), Some(_)) = (&health, &vault) {
            health.enter(Phase::LoggingIn);
        }
        // Made before the probes, which may read them as any handler.
        let indexes = OperatorIndexes::new(&self.registry);
        let endpoint_state = self.serve_endpoints(
            endpoints,
            health.as_ref(),
            metrics.as_ref(),
            &memo,
            &indexes,
            background,
        );

        let client = match &vault {
            Some(vault) => {
                let counting = metrics.as_ref().map(|metrics| metrics.api_layer());
                tokio::select! {
                    client = vault.client(counting.cloned()) => client.map_err(OperatorError::Login)?,
                    () = &mut *stop => return Ok(None),
                }
            }
            None => self.connect(metrics.as_ref()).await?,
        };
        if let Some(vault) = vault {
            background
                .tasks
                .spawn(vault.authenticate(background.root.child_token()));
        }
        if let Some(state) = &endpoint_state {
            state.health.enter(Phase::Starting);
            if let Some(probes) = &state.probes {
                probes.connect(client.clone());
            }
        }
        tokio::select! {
            checked = self.check_permissions(&client) => checked?,
            () = &mut *stop => return Ok(None),
        }
        let startup_poster = start_poster(&client, &self.settings.posting, background);
        let startup = self.run_startup_handlers(
            &client,
            startup_poster.as_ref(),
            &memo,
            metrics.as_ref(),
            stop,
            background,
        );
        let Some(settings) = startup.await? else {
            return Ok(None);
        };
        // Everything from here on runs with the settings and the memo as
        // the start-up handlers left them.
        let settings = Arc::new(settings);
        let memo_base = memo.freeze();
        if let Some(server) = self.webhooks.take() {
            let served = webhooks::Admission {
                client: &client,
                memo: &memo_base,
                indexes: indexes.kwarg(),
                metrics: metrics.as_ref(),
            };
            self.serve_webhooks(server, &served, background)?;
        }
        // The start-up handlers' Events are posted as the operator started;
        // the rest as they left `posting` (that poster ends once it has
        // posted what is queued).
        let poster = if settings.posting == self.settings.posting {
            startup_poster
        } else {
            drop(startup_poster);
            start_poster(&client, &settings.posting, background)
        };
        Ok(Some(Started {
            client,
            settings,
            memo,
            memo_base,
            poster,
            indexes,
            health,
            metrics,
        }))
    }

    /// The handlers of `kind`, carrying their metrics if any.
    pub(super) fn measured_of(
        &self,
        metrics: Option<&Arc<Metrics>>,
        kind: HandlerKind,
    ) -> Vec<Handler> {
        measured_if(metrics, self.registry.of_kind(kind).cloned().collect())
    }

    /// The vault of the `on_login` handlers' credentials, if there are any.
    fn vault(&self, metrics: Option<&Arc<Metrics>>, memo: &Memo) -> Option<Arc<Vault>> {
        let logins = self.measured_of(metrics, HandlerKind::OnLogin);
        (!logins.is_empty()).then(|| {
            Vault::new(
                logins,
                self.settings.networking.error_backoffs.clone(),
                self.settings.execution.default_backoff,
                memo.clone(),
            )
        })
    }

    /// Serves the endpoints, if given, before anything else, the login
    /// included, so that the probes answer while the operator starts.
    fn serve_endpoints(
        &self,
        endpoints: Option<Endpoints>,
        health: Option<&Arc<Health>>,
        metrics: Option<&Arc<Metrics>>,
        memo: &Memo,
        indexes: &OperatorIndexes,
        background: &Background,
    ) -> Option<Arc<EndpointState>> {
        let probe_handlers = self.measured_of(metrics, HandlerKind::OnProbe);
        let (Some(endpoints), Some(health)) = (endpoints, health) else {
            if !probe_handlers.is_empty() {
                tracing::info!(
                    "the on_probe handlers run only when a liveness endpoint is served (--liveness)"
                );
            }
            return None;
        };
        log_urls(&endpoints);
        let state = Arc::new(EndpointState {
            probes: (!probe_handlers.is_empty())
                .then(|| Probes::new(probe_handlers, memo.clone(), indexes.kwarg().clone())),
            health: Arc::clone(health),
            metrics: metrics.cloned(),
        });
        endpoints.serve(
            Arc::clone(&state),
            background.root.child_token(),
            &background.tasks,
        );
        Some(state)
    }

    /// The client given, counting its requests if metrics are served, or
    /// the one kube infers from the environment.
    async fn connect(&self, metrics: Option<&Arc<Metrics>>) -> Result<Client, OperatorError> {
        match (self.client.clone(), metrics) {
            (Some(client), Some(metrics)) if !self.client_measured => {
                Ok(metrics::instrument(client, metrics))
            }
            (Some(client), _) => Ok(client),
            (None, metrics) => metrics::infer_client(metrics.map(|metrics| metrics.api_layer()))
                .await
                .map_err(OperatorError::Client),
        }
    }

    /// Runs the start-up handlers; returns the settings they left, or
    /// `None` if `stop` completed meanwhile: then, as in Kopf, nothing is
    /// served and nothing cleaned up, and the background tasks are stopped.
    async fn run_startup_handlers(
        &self,
        client: &Client,
        poster: Option<&EventPoster>,
        memo: &Memo,
        metrics: Option<&Arc<Metrics>>,
        stop: &mut Stop<'_>,
        background: &Background,
    ) -> Result<Option<OperatorSettings>, OperatorError> {
        let handlers = self.measured_of(metrics, HandlerKind::OnStartup);
        let settings = StartupSettings::new(self.settings.clone());
        let startup = Activity {
            client,
            poster,
            memo,
            settings: activities::Settings::Changing(&settings),
        };
        tokio::select! {
            started = activities::run(&handlers, &startup) => started.map_err(|failure| OperatorError::Startup {
                handler: failure.handler,
                message: failure.message,
            })?,
            () = &mut *stop => {
                tracing::warn!("stopped before the start-up handlers finished");
                background.stop(settings.get().queueing.exit_timeout).await;
                return Ok(None);
            }
        }
        Ok(Some(settings.close()))
    }

    /// Serves the admission handlers with `server`, and keeps its managed
    /// configurations, if any, up to date.
    fn serve_webhooks(
        &self,
        server: WebhookServer,
        served: &webhooks::Admission<'_>,
        background: &Background,
    ) -> Result<(), OperatorError> {
        let handlers: Vec<Handler> = self
            .registry
            .handlers()
            .iter()
            .filter(|h| is_webhook(h))
            .cloned()
            .collect();
        let handlers = measured_if(served.metrics, handlers);
        if let Some(metrics) = served.metrics {
            metrics.admission_webhooks(handlers.iter().map(|h| h.id()));
        }
        webhooks::start(
            server,
            handlers,
            served,
            &background.root,
            &background.tasks,
        )?;
        Ok(())
    }
}

/// Starts an Event poster for `posting`, if it is enabled.
fn start_poster(
    client: &Client,
    posting: &PostingSettings,
    background: &Background,
) -> Option<EventPoster> {
    posting.enabled.then(|| {
        let (poster, task) = EventPoster::new(client.clone(), posting.clone());
        background
            .tasks
            .spawn(task.run(background.root.child_token()));
        poster
    })
}
