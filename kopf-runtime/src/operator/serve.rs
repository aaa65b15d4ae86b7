//! The serving of one resource ([`ServeResource`]): its processor, its
//! queue and its watcher, and the loop that indexes each event and does
//! what [`Dispatcher::route`] says with it.

use std::sync::Arc;

use kube::Client;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::dispatch::{Dispatcher, Report, Route};
use crate::fields::object_name;
use crate::operations::health::ResourceHealth;
use crate::operator::namespaces::NamespaceSelector;
use crate::peering::fencing::{Fence, Held};
use crate::peering::sharding::SlotSet;
use crate::persistence::patching::ResourceTarget;
use crate::posting::{self, EventPoster, ObjectReference};
use crate::processing::indexing::{IndexGate, ResourceIndexer};
use crate::processing::queueing::{ProcessFn, Processed, Queue, QueueSettings};
use crate::processing::{ResourceHandlers, ResourceProcessor, Work};
use crate::settings::OperatorSettings;
use crate::spawning::Spawner;
use crate::spawning::resource::ResourceTasks;
use crate::watching::{ObjectEvent, ResourceWatcher};

/// How many watch events wait for the processing of a resource.
const EVENT_BUFFER: usize = 64;

/// Everything needed to serve one resource.
pub(super) struct ServeResource {
    pub(super) target: ResourceTarget,
    pub(super) handlers: ResourceHandlers,
    pub(super) client: Client,
    pub(super) settings: Arc<OperatorSettings>,
    pub(super) poster: Option<EventPoster>,
    pub(super) namespaces: NamespaceSelector,
    pub(super) spawner: Arc<Spawner>,
    /// Runs the resource's `#[index]` handlers on each event, if it has any.
    pub(super) indexer: Option<ResourceIndexer>,
    /// Holds the processing back until the indexes its handlers take are filled.
    pub(super) gate: Option<IndexGate>,
    /// Where the watches report, for the probes and the metrics.
    pub(super) health: Option<Arc<ResourceHealth>>,
    /// The shard slots whose objects are served, if not all.
    pub(super) slots: Option<SlotSet>,
    /// What holds the processing back once the term's Leases lapse.
    pub(super) fence: Option<Fence>,
}

/// What the watch loop of one resource feeds and does.
struct Serving {
    target: ResourceTarget,
    queue: Queue<String, Work>,
    tasks: Arc<ResourceTasks>,
    indexer: Option<ResourceIndexer>,
    /// Posts the reports of undecodable objects.
    reporter: Option<EventPoster>,
    /// The operator's finalizer, named in those reports.
    finalizer: String,
    measures_latency: bool,
}

impl ServeResource {
    /// Once the servings `after` have ended, watches the resource and feeds
    /// its queue until `stop` (a child of `exiting`, the operator's exit)
    /// is cancelled; then drains the queue, and, when the resource stops
    /// being served while the operator goes on, stops its objects' daemons
    /// and timers. `done` is dropped at the end.
    pub(super) async fn run(
        self,
        stop: CancellationToken,
        exiting: CancellationToken,
        after: Vec<CancellationToken>,
        done: DropGuard,
    ) {
        for previous in after {
            tokio::select! {
                () = previous.cancelled() => {}
                () = stop.cancelled() => return,
            }
        }
        let exit_timeout = self.settings.queueing.exit_timeout;
        let dispatcher = Dispatcher::new(self.slots, self.settings.persistence.finalizer.clone());
        let (mut serving, watcher) = self.start(&stop);
        // A short channel: when processing lags, the watch waits rather than
        // decoding bodies ahead that would only sit here (a burst of
        // creations would otherwise leave the memory of a thousand bodies
        // behind after they are processed).
        let (tx, rx) = mpsc::channel::<ObjectEvent>(EVENT_BUFFER);
        let watch = tokio::spawn(watcher.run(tx, stop.clone()));
        serving.feed(rx, dispatcher).await;
        let target = &serving.target;
        if let Err(error) = watch.await {
            tracing::error!(%error, resource = %target.api.plural, "the watcher task failed");
        }
        serving.queue.shutdown(exit_timeout).await;
        serving.tasks.pause(&exiting).await;
        if !exiting.is_cancelled()
            && let Some(indexer) = &mut serving.indexer
        {
            indexer.clear();
        }
        drop(done);
    }

    /// The processor, its queue and the watcher of the resource.
    fn start(self, stop: &CancellationToken) -> (Serving, ResourceWatcher) {
        let target = self.target;
        let poster = self.poster.clone();
        let processor = Arc::new(ResourceProcessor::new(
            target.clone(),
            self.handlers,
            Arc::clone(&self.settings),
            self.client.clone(),
            self.poster,
            Arc::clone(&self.spawner),
            stop.clone(),
        ));
        let tasks = Arc::clone(processor.tasks());
        let echoes = processor.echoes().cloned();
        let latency = self
            .health
            .as_ref()
            .and_then(|health| health.queue_latency().cloned());
        let measures_latency = latency.is_some();
        let gate = self.gate;
        let fence = self.fence;
        let reporter = poster.clone();
        // Handlers post Events with `kopf_runtime::posting::{info, warn, …}`
        // through the poster in scope.
        let process: ProcessFn<String, Work> = Arc::new(move |uid, work| {
            let processor = Arc::clone(&processor);
            let poster = poster.clone();
            let gate = gate.clone();
            let fence = fence.clone();
            if let (Some(latency), Some(queued_at)) = (&latency, work.queued_at) {
                latency.observe(queued_at.elapsed().as_secs_f64());
            }
            Box::pin(async move {
                if let Some(gate) = gate {
                    // Boxed: only the start-up waits, every call's future stays small.
                    Box::pin(gate.wait(work.event.object().map(|o| &**o))).await;
                }
                // The Lease lapsed (the process was paused?): tried again
                // once renewed; the term ends first if it is not.
                if let Some(fence) = &fence
                    && !fence.allows_now(Held::Event)
                {
                    return Processed {
                        expect_version: None,
                        retry_after: Some(fence.retry()),
                    };
                }
                let processing = processor.process(uid, work);
                match poster {
                    Some(poster) => posting::scope(poster, processing).await,
                    None => processing.await,
                }
            })
        });
        let queueing = &self.settings.queueing;
        let queue = Queue::new(
            QueueSettings {
                max_workers: queueing.worker_limit.unwrap_or(usize::MAX >> 4),
                max_backlog: queueing.backlog_limit,
                max_listing_backlog: queueing.listing_backlog_limit,
                idle_timeout: queueing.idle_timeout,
                consistency_timeout: self.settings.persistence.consistency_timeout,
            },
            CancellationToken::new(),
            process,
        );
        let watcher = ResourceWatcher::new(
            self.client.clone(),
            (*target.api).clone(),
            target.namespaced,
            self.namespaces,
            self.settings.watching.clone(),
        );
        // The operator's own patches that come back with nothing new are
        // skipped by the watch, undecoded.
        let watcher = match echoes {
            Some(echoes) => watcher.with_echoes(echoes),
            None => watcher,
        };
        // Other replicas' objects are skipped undecoded, unless an index
        // needs every object.
        let watcher = match self.slots {
            Some(slots) if self.indexer.is_none() => watcher.with_slots(slots),
            _ => watcher,
        };
        let watcher = match &self.health {
            Some(health) => {
                health.set_queue_depth(queue.workers_reader());
                watcher.with_health(Arc::clone(health))
            }
            None => watcher,
        };
        let serving = Serving {
            target,
            queue,
            tasks,
            indexer: self.indexer,
            reporter,
            finalizer: self.settings.persistence.finalizer.clone(),
            measures_latency,
        };
        (serving, watcher)
    }
}

impl Serving {
    /// Indexes each event of the watch, then does what `dispatcher` says
    /// with it, until the watch ends.
    async fn feed(&mut self, mut events: mpsc::Receiver<ObjectEvent>, mut dispatcher: Dispatcher) {
        while let Some(event) = events.recv().await {
            if let Some(indexer) = &mut self.indexer {
                // Before the event is queued: its handlers see the index with it.
                Box::pin(indexer.observe(&event)).await;
            }
            match dispatcher.route(&event) {
                Route::Ignore | Route::Foreign => {}
                Route::Synced { count, first } => {
                    if first {
                        let resource = &self.target.api.plural;
                        tracing::debug!(%resource, count, "initial listing complete");
                    }
                }
                Route::Enqueue {
                    uid,
                    initial_listing,
                } => {
                    self.enqueue(uid, event, initial_listing).await;
                }
                Route::Gone {
                    uid,
                    how,
                    initial_listing,
                } => {
                    self.tasks.stop_gone(&uid, how);
                    self.enqueue(uid, event, initial_listing).await;
                }
                Route::Undecodable { report } => {
                    if let (Some(report), ObjectEvent::Undecodable { object, reason }) =
                        (report, &event)
                    {
                        let reporter = self.reporter.as_ref();
                        report_undecodable(reporter, object, reason, report, &self.finalizer);
                    }
                }
            }
        }
    }

    /// Queues `event` for the object's worker.
    async fn enqueue(&self, uid: String, event: ObjectEvent, initial_listing: bool) {
        let work = Work {
            event,
            initial_listing,
            queued_at: self.measures_latency.then(Instant::now),
        };
        if initial_listing {
            self.queue.push_listed(uid, work).await;
        } else {
            self.queue.push(uid, work).await;
        }
    }
}

/// Reports an object that does not decode, as `report` says (the
/// [`Dispatcher`] says when): a warning and a Kubernetes Event on it.
/// Nothing handles it meanwhile; its daemons and timers, if an earlier state started them, go on with that
/// state until it decodes again or is deleted. The finalizer stays until
/// the handlers it holds the object for can run on a state that decodes.
fn report_undecodable(
    poster: Option<&EventPoster>,
    object: &Value,
    reason: &str,
    report: Report,
    finalizer: &str,
) {
    let finalizer = (report == Report::DeletionHeld).then_some(finalizer);
    let name = object_name(object);
    let message = match finalizer {
        None => format!("The operator cannot decode this object and skips it: {reason}"),
        Some(finalizer) => format!(
            "The operator cannot decode this object, whose deletion waits for its \
             finalizer {finalizer}: {reason}. The finalizer stays until its handlers can \
             run: make the object decodable again, or remove the finalizer by hand \
             (its handlers then never run)."
        ),
    };
    tracing::warn!(object = %name, %reason, finalizer, "skipping an object that cannot be decoded");
    if let Some(poster) = poster {
        poster.warn(ObjectReference::from_body(object), "Undecodable", &message);
    }
}
