//! The operator's terms: what it serves between two changes of what it
//! leads. Without a Lease, one term, from the first discovery to the stop;
//! with one, a term per set of shard slots held, each with a spawner of its
//! own and a client whose writes are refused once the term is over
//! (`leadership::term_client`), ended with its tasks stopped before the
//! elector may let the Lease go.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::resources::{Resources, ServeContext};
use super::{Background, Operator, OperatorError, Started, Stop};
use crate::operations::health::Phase;
use crate::peering::fencing::{self, Fence};
use crate::peering::leadership;
use crate::peering::sharding::{SlotSet, Ward};
use crate::settings::OperatorSettings;
use crate::spawning::resource::TaskObserver;
use crate::spawning::stopping::StopReason;
use crate::spawning::{Observer, Spawner, SpawnerSettings};

/// The Lease this replica competes for, and its elector(s).
struct Election {
    ward: Ward,
    /// The Lease, as `namespace/name`.
    lease: String,
}

/// How a term ended.
struct Ended {
    /// What serving the resources returned.
    served: Result<(), OperatorError>,
    /// Whether the slots held changed (else the operator stopped).
    moved: bool,
    /// Whether everything the term served stopped in time.
    paused: bool,
}

/// What every term shares.
struct Terms<'a> {
    operator: &'a Operator,
    started: &'a Started,
    background: &'a Background,
    observer: Arc<TaskObserver>,
}

impl Operator {
    /// Serves the resources until `stop` completes: in one term without a
    /// Lease; with one, in a term per set of slots held while leading.
    ///
    /// # Errors
    /// [`OperatorError::Peering`] when the replica cannot compete for its
    /// Lease, [`OperatorError::LeaseOutlived`] when a term's tasks outlived
    /// its Lease, and the errors of the first discovery (see
    /// `Resources::serve_until`).
    pub(super) async fn serve(
        &mut self,
        started: &Started,
        stop: &mut Stop<'_>,
        background: &Background,
    ) -> Result<(), OperatorError> {
        let settings = &started.settings;
        let mut election = match self.peering.take() {
            None => None,
            Some(peering) => {
                let ward = peering.ward(
                    &started.client,
                    &settings.peering,
                    background.root.child_token(),
                    &background.tasks,
                );
                match ward {
                    Ok(ward) => Some(Election {
                        ward,
                        lease: peering.lease(),
                    }),
                    Err(problem) => {
                        return Err(OperatorError::Peering {
                            lease: peering.lease(),
                            problem,
                        });
                    }
                }
            }
        };
        let terms = Terms {
            operator: self,
            started,
            background,
            observer: TaskObserver::new(started.poster.clone()),
        };
        let Some(election) = &mut election else {
            if let Some(health) = &started.health {
                health.enter(Phase::Discovering);
            }
            return terms.run(None, stop).await.served;
        };
        if let Some(health) = &started.health {
            health.lead(false, 0);
            health.enter(Phase::Serving);
        }
        loop {
            let held = tokio::select! {
                held = election.ward.hold_some(settings.peering.retry_period / 2) => held,
                () = &mut *stop => return Ok(()),
            };
            let lease = &election.lease;
            tracing::info!(%lease, slots = held.len(), "leading: serving the resources");
            if let Some(health) = &started.health {
                let shards = if election.ward.sharded() {
                    held.len()
                } else {
                    0
                };
                health.lead(true, shards);
            }
            let ended = terms.run(Some((&mut *election, held)), stop).await;
            if !ended.paused {
                return Err(OperatorError::LeaseOutlived {
                    lease: election.lease.clone(),
                });
            }
            if !ended.moved {
                // Released now that it is paused, not competed for again.
                election.ward.stop_paused();
                return ended.served;
            }
            ended.served?;
            // What the watches saw goes stale; the next term lists anew.
            started.indexes.reset();
            election.ward.paused();
            tracing::info!(lease = %election.lease, "paused: competing for the Lease again");
        }
    }
}

impl Terms<'_> {
    /// Serves one term: with a Lease, the slots `held` until they change
    /// or the operator stops; without, until the operator stops. Then stops
    /// what the term served.
    async fn run(
        &self,
        mut leading: Option<(&mut Election, SlotSet)>,
        stop: &mut Stop<'_>,
    ) -> Ended {
        let started = self.started;
        let settings = &started.settings;
        // What the term starts waits for its Leases to be held on this
        // process's clock.
        let fence = leading.as_ref().map(|(election, held)| {
            Fence::new(
                election.ward.tenures(*held),
                started.metrics.as_deref().map(fencing::counters),
                settings.peering.retry_period,
            )
        });
        let spawner = self.spawner(fence.as_ref());
        // What the term writes is refused once it is over.
        let over = CancellationToken::new();
        let watching = self.background.root.child_token();
        let serving = TaskTracker::new();
        let context = ServeContext {
            client: match (&leading, &fence) {
                (Some((election, _)), Some(fence)) => leadership::term_client(
                    started.client.clone(),
                    &over,
                    fence.clone(),
                    &election.lease,
                ),
                _ => started.client.clone(),
            },
            fence: fence.clone(),
            settings: Arc::clone(settings),
            poster: started.poster.clone(),
            namespaces: self.operator.namespaces.clone(),
            spawner: Arc::clone(&spawner),
            watching: watching.clone(),
            tasks: serving.clone(),
            indexes: started.indexes.clone(),
            health: started.health.clone(),
            metrics: started.metrics.clone(),
            memo: started.memo_base.clone(),
            slots: leading
                .as_ref()
                .map(|(_, held)| *held)
                .filter(|slots| !slots.is_all()),
        };
        // The term ends when the operator stops, or when the slots held
        // change.
        let mut moved = false;
        let served = {
            let mut term: Stop<'_> = match &mut leading {
                Some((election, held)) => {
                    let (held, ward) = (*held, &mut election.ward);
                    let (stop, moved) = (&mut *stop, &mut moved);
                    Box::pin(async move {
                        tokio::select! {
                            () = stop => {}
                            () = ward.moved_from(held) => *moved = true,
                        }
                    })
                }
                None => Box::pin(&mut *stop),
            };
            Resources::new(context, &self.operator.registry)
                .serve_until(&mut term)
                .await
        };
        watching.cancel();
        serving.close();
        let lost = match &leading {
            Some((election, held)) if moved => held.loses_to(election.ward.held()),
            _ => false,
        };
        if !moved && served.is_ok() {
            tracing::info!("stopping the operator");
        } else if moved {
            tracing::warn!(lost, "the slots held changed: pausing the resources");
            if let Some(health) = &started.health {
                health.lead(false, 0);
            }
        }
        let reason = if moved {
            StopReason::LeadershipLost
        } else {
            StopReason::OperatorExiting
        };
        let deadline = leading
            .as_ref()
            .and_then(|(election, _)| election.ward.others_may_lead_at())
            .filter(|_| lost);
        let paused = end_term(&serving, &spawner, reason, settings, &over, deadline).await;
        if let (Some((election, _)), Some(fence)) = (&leading, &fence) {
            fence.report(&election.lease);
        }
        Ended {
            served,
            moved,
            paused,
        }
    }

    /// The term's spawner, fenced by the term's Leases if any.
    fn spawner(&self, fence: Option<&Fence>) -> Arc<Spawner> {
        let settings = &self.started.settings;
        let spawner = Spawner::with_counters(
            tokio::runtime::Handle::current(),
            Arc::clone(&self.observer) as Arc<dyn Observer>,
            SpawnerSettings {
                graceful_exit_limit: settings.background.graceful_exit_limit,
                default_cancellation_timeout: settings.background.default_cancellation_timeout,
            },
            Arc::clone(&self.operator.task_counters.0),
        );
        Arc::new(match fence {
            Some(fence) => spawner.fenced(fence.clone()),
            None => spawner,
        })
    }
}

/// Waits for what a term served to stop: the served resources, then the
/// daemons and timers, told `reason`. Each is bounded as on exit (each
/// queue gets `exit_timeout`, then a grace to cancel; the tasks get
/// `shutdown_timeout`), and what remains is abandoned. With a `deadline`
/// (a slot given up without a release, which may be another replica's
/// then), the term's writes are refused at once, and the result says
/// whether everything stopped before it.
async fn end_term(
    serving: &TaskTracker,
    spawner: &Spawner,
    reason: StopReason,
    settings: &OperatorSettings,
    over: &CancellationToken,
    deadline: Option<Instant>,
) -> bool {
    let shutdown_timeout = settings.background.shutdown_timeout;
    if let Some(deadline) = deadline {
        over.cancel();
        let drained = async {
            serving.wait().await;
            spawner.shutdown_for(reason, shutdown_timeout).await.is_ok()
        };
        return tokio::time::timeout_at(deadline, drained).await == Ok(true);
    }
    let exit_timeout = settings.queueing.exit_timeout;
    if tokio::time::timeout(exit_timeout + Duration::from_secs(2), serving.wait())
        .await
        .is_err()
    {
        tracing::warn!("the served resources did not stop in time; abandoning them");
    }
    if let Err(error) = spawner.shutdown_for(reason, shutdown_timeout).await {
        tracing::warn!(%error, "daemons and timers did not all stop in time");
    }
    true
}
