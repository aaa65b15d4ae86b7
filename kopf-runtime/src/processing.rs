//! Processing one object's events: event handlers, the finalizer, change
//! handlers, and one patch per step (Kopf's `process_resource_event`).
//!
//! A [`ResourceProcessor`] serves one resource; the queue calls it with the
//! newest event of one object at a time. Per object it remembers only what
//! Kopf remembers in memory (the memo and whether the object was first seen
//! at start-up; see [`memories`]); everything else lives on
//! the object itself.
//!
//! Which handlers serve an object is decided first, as Kopf's `prematch`:
//! change handlers with a `field` look it up in the object's old and new
//! essences (built then, and used by the change handlers too), every other
//! filter looks at the body. The essences keep the fields of all the
//! resource's handlers (see [`DiffBaseStorage::with_extra_fields`]).
//!
//! # Guarantees
//! - The finalizer is added before any handler runs when some matching
//!   handler needs it, and removed once none does or the deletion handlers
//!   are done. Objects no handler matches are never touched.
//! - Once its patch is accepted, the object is handled on at once from the
//!   server's answer (the object at that patch's version, as its watch
//!   event will carry it): daemons and timers start, change handlers run,
//!   without waiting for that event. At start-up it would come only after
//!   the whole listing, every listed object's worker waiting meanwhile.
//! - On deletion, the finalizer is released once the change handlers are
//!   done and the tasks of finalizer-keeping daemons and timers have
//!   stopped (awaited within their stop limits, not polled); tasks of
//!   `no_finalizers` handlers are stopped, never waited for. When to add,
//!   keep and release the finalizer is [`finalizers::Finalizing`]'s to say.
//! - What the `on_event` handlers patch (one [`Patch`] shared by all of
//!   them, in order) goes out with the step's own patch, in one request,
//!   as in Kopf; after a deletion event it is not applied, the object being
//!   gone.
//! - A patch that finds its object gone ends the processing quietly.
//! - A patch that settles the object (it records the handled change and
//!   nothing else, and nothing is left to do) is conditional on the handled
//!   body's `resourceVersion` when only change handlers serve the resource.
//!   Accepted, its echo is known and skipped (see
//!   [`echoes`](crate::watching::echoes)); refused with `409 Conflict`, it is sent
//!   again at once without the condition, and its echo is processed.
//! - The finalizer's patch comes back with nothing new when the object was
//!   handled from its answer and nothing was left to do: its echo is
//!   skipped too, unless event or index handlers serve the resource.

use std::cell::OnceCell;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use smallvec::SmallVec;
use tokio_util::sync::CancellationToken;

use crate::fields::{merge_into, meta_str, object_name};
use crate::model::filters::{FieldPath, FieldValues};
use crate::model::handlers::Handler;
use crate::model::kwargs::{Diff, EventType, Kwargs, Level, LogSink, Logger, Memo, Patch, Reason};
use crate::persistence::diffbase::DiffBaseStorage;
use crate::persistence::finalizers::{self, Action, Finalizing};
use crate::persistence::patching::{
    ObjectVersion, PatchOutcome, PatchTarget, Patcher, ResourceTarget,
};
use crate::persistence::progress::ProgressStorage;
use crate::posting::{EventPoster, ObjectReference};
use crate::processing::causes::{CauseInput, ChangeCause};
use crate::processing::execution::{CauseContext, Progression};
use crate::processing::memories::{Handled, Memories, ObjectMemory};
use crate::processing::queueing::{Processed, Versioned};
use crate::settings::OperatorSettings;
use crate::spawning::Spawner;
use crate::spawning::resource::{self, ResourceTasks, TaskEnvironment};
use crate::watching::echoes::Echoes;
use crate::watching::{DeletedBy, ObjectEvent, Seen};

pub(crate) mod causes;
pub(crate) mod execution;
mod handlers;
pub(crate) mod indexing;
pub(crate) mod memories;
pub(crate) mod queueing;
mod sending;

pub(crate) use handlers::ResourceHandlers;
use sending::{PatchSender, gone, require_version, unpatched};

/// The old (stored, if any) and the new essence of an object.
type Essences = (Option<Value>, Value);

/// What is known of an object's essences before its change handlers run.
enum Known {
    /// The essences, built for the handlers' filters.
    Essences(Essences),
    /// Not built: the body whose changes were handled last, if any (see
    /// [`Handled`]).
    Handled(Option<Box<Handled>>),
}

/// One unit of work for an object's worker.
#[derive(Debug)]
pub(crate) struct Work {
    /// What the watch reported.
    pub event: ObjectEvent,
    /// Whether the event comes from the operator's first listing.
    pub initial_listing: bool,
    /// When it was queued, if the queue's latency is measured.
    pub queued_at: Option<tokio::time::Instant>,
}

impl Versioned for Work {
    fn version(&self) -> Option<&str> {
        match &self.event {
            ObjectEvent::Upserted { object, .. } => meta_str(object, "resourceVersion"),
            ObjectEvent::Deleted { .. }
            | ObjectEvent::Synced { .. }
            | ObjectEvent::Undecodable { .. } => None,
        }
    }
}

/// Processes the objects of one resource.
pub(crate) struct ResourceProcessor {
    target: ResourceTarget,
    handlers: ResourceHandlers,
    settings: Arc<OperatorSettings>,
    /// Where the handlers' progress lives, and their default backoff.
    progression: Progression,
    diffbase: DiffBaseStorage,
    sender: PatchSender,
    poster: Option<EventPoster>,
    client: kube::Client,
    memories: Memories,
    tasks: Arc<ResourceTasks>,
    /// The operator's own patches that come back with nothing new; kept
    /// unless event or index handlers serve the resource (they see every
    /// event). See [`EchoRule`] for which patches are expected back.
    echoes: Option<Echoes>,
    echo_rule: EchoRule,
}

/// Which of the operator's patches the watch may skip when they come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EchoRule {
    /// The finalizer's patch, when nothing is left to do after it: the
    /// object was handled from the server's answer, the body that the
    /// patch's event carries.
    Finalizer,
    /// Also a settling patch, guarded by the handled body's version. Only
    /// when change handlers alone serve the resource: daemons and timers
    /// see every body, the annotations such a patch adds too.
    FinalizerAndSettling,
}

/// What handling an object came to.
struct Handling {
    /// When to come back, if at all.
    delay: Option<Duration>,
    /// Whether a handler ran (its outcome is in the patch).
    ran: bool,
    /// Whether all is handled: the patch only records it, and the patched
    /// object will need nothing more.
    settled: bool,
    /// Whether the patch adds the finalizer, and nothing is handled before
    /// it is on.
    adds_finalizer: bool,
}

impl std::fmt::Debug for ResourceProcessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceProcessor")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl ResourceProcessor {
    /// A processor for the objects of `target`; its daemons and timers run
    /// in `spawner`, and a deletion stops waiting for them once `exiting`
    /// (the operator's exit) is cancelled.
    pub(crate) fn new(
        target: ResourceTarget,
        handlers: ResourceHandlers,
        settings: Arc<OperatorSettings>,
        client: kube::Client,
        poster: Option<EventPoster>,
        spawner: Arc<Spawner>,
        exiting: CancellationToken,
    ) -> Self {
        let patcher = Patcher::new(client.clone(), &settings.networking);
        let memories = Memories::new(handlers.memo.clone());
        let env = TaskEnvironment {
            target: target.clone(),
            client: client.clone(),
            patcher: patcher.clone(),
            poster: poster.clone(),
            memories: memories.clone(),
            indexes: handlers.indexes.clone(),
            default_backoff: settings.execution.default_backoff,
        };
        let tasks = Arc::new(ResourceTasks::new(
            &handlers.spawning,
            &env,
            spawner,
            exiting,
        ));
        // Index handlers see every body too: one may index what the patch changed.
        let echoes =
            (handlers.watching.is_empty() && handlers.indexing.is_empty()).then(Echoes::default);
        let echo_rule = if tasks.is_empty() && !handlers.changing.is_empty() {
            EchoRule::FinalizerAndSettling
        } else {
            EchoRule::Finalizer
        };
        Self {
            progression: Progression {
                storage: Arc::new(ProgressStorage::from_settings(&settings.persistence)),
                default_backoff: settings.execution.default_backoff,
            },
            // As Kopf: the fields of every handler of the resource, change
            // handlers or not, are kept in the essence.
            diffbase: DiffBaseStorage::from_settings(&settings.persistence).with_extra_fields(
                handlers
                    .changing
                    .iter()
                    .chain(&handlers.watching)
                    .chain(&handlers.spawning)
                    .filter_map(|h| h.filters().field.as_ref().map(FieldPath::as_str)),
            ),
            sender: PatchSender::new(patcher, settings.persistence.finalizer.clone()),
            target,
            handlers,
            settings,
            poster,
            client,
            memories,
            tasks,
            echoes,
            echo_rule,
        }
    }

    /// The operator's own patches the processor expects back with nothing
    /// new, for the watch to skip (see [`Echoes`]); `None` when every event
    /// must be processed: the resource has event or index handlers.
    pub(crate) fn echoes(&self) -> Option<&Echoes> {
        self.echoes.as_ref()
    }

    /// Whether no change handler, daemon or timer serves the resource.
    fn only_event_handlers(&self) -> bool {
        self.handlers.changing.is_empty() && self.tasks.is_empty()
    }

    /// Processes the newest event of the object `uid`.
    pub(crate) async fn process(&self, uid: String, work: Arc<Work>) -> Processed {
        match &work.event {
            ObjectEvent::Upserted { object, seen } => {
                let event_type = match (work.initial_listing, seen) {
                    (true, _) => None,
                    (false, Seen::New) => Some(EventType::Added),
                    (false, _) => Some(EventType::Modified),
                };
                self.upserted(&uid, object, event_type, work.initial_listing)
                    .await
            }
            ObjectEvent::Deleted { object, how } => {
                // Boxed, as are the event handlers: the future of every
                // event is only as large as the common path needs.
                Box::pin(self.deleted(&uid, object, *how)).await;
                Processed::default()
            }
            // Reported by the watch loop; nothing handles it.
            ObjectEvent::Synced { .. } | ObjectEvent::Undecodable { .. } => Processed::default(),
        }
    }

    /// The daemons and timers of the resource. The watch loop stops a
    /// deleted object's tasks through them the moment it sees the deletion,
    /// before the object's turn in the queue (its worker may be busy in a
    /// slow handler, or behind a burst of other objects); the queued
    /// deletion then only forgets the object here.
    pub(crate) fn tasks(&self) -> &Arc<ResourceTasks> {
        &self.tasks
    }

    async fn deleted(&self, uid: &str, body: &Arc<Value>, how: DeletedBy) {
        if let Some(echoes) = &self.echoes {
            echoes.forget(uid);
        }
        let known = self.memories.forget(uid);
        let logger = Logger::new(object_name(body));
        if !self.tasks.is_empty() {
            // Its tasks were stopped when the watch saw the deletion (see
            // `tasks`); what is left is to forget the object.
            self.tasks.forget(uid);
        }
        // As in Kopf, what the event handlers patch is not applied: the
        // object is gone.
        let mut unapplied = json!({});
        self.run_event_handlers(
            Some(EventType::Deleted),
            body,
            known.as_ref().map(|m| m.memo.clone()),
            &logger,
            &mut unapplied,
        )
        .await;
        if known.is_some() {
            match how {
                DeletedBy::Event => logger.debug("Deleted, really."),
                DeletedBy::Vanished => logger.debug("Gone while the watch was down: deleted."),
            }
        }
        if !self.tasks.is_empty() {
            self.tasks.wait_forgotten(uid).await;
        }
    }

    async fn upserted(
        &self,
        uid: &str,
        body: &Arc<Value>,
        event_type: Option<EventType>,
        initial_listing: bool,
    ) -> Processed {
        let handled_version = meta_str(body, "resourceVersion");
        if let Some(echoes) = &self.echoes
            && let Some(version) = handled_version
            && echoes.take(uid, version)
        {
            // The operator's own patch, back before its answer was read (so
            // the watch could not skip it): the handled body, plus the patch.
            return Processed::default();
        }
        let memory = self.memories.recall(uid, initial_listing);
        let logger = self.logger(body);
        // The event handlers' patch goes out with the step's, in one request.
        let mut patch = json!({});
        self.run_event_handlers(
            event_type,
            body,
            Some(memory.memo.clone()),
            &logger,
            &mut patch,
        )
        .await;

        let mut handling = self
            .handle_object(uid, body, &memory, &logger, &mut patch)
            .await;
        let mut body = Arc::clone(body);
        let mut echoes = self
            .echoes
            .as_ref()
            .filter(|_| self.echo_rule == EchoRule::FinalizerAndSettling);
        // The finalizer's patch, if it was sent and answered.
        let mut finalized = false;
        if handling.adds_finalizer {
            // Boxed: once per object, and every processing's future stays
            // as small as the common path needs.
            body = match Box::pin(self.add_finalizer(&body, &logger, &mut patch, handling.ran))
                .await
            {
                Ok(patched) => patched,
                Err(processed) => return processed,
            };
            patch = json!({});
            handling = self
                .handle_object(uid, &body, &memory, &logger, &mut patch)
                .await;
            // The finalizer's own event is still to come, older than what
            // this patch makes: the worker waits past it for this one's.
            echoes = None;
            finalized = true;
        }
        let Handling {
            delay,
            ran,
            settled,
            adds_finalizer: _,
        } = handling;
        let memory = if self.only_event_handlers() {
            // Nothing is due later, so the memory is kept only for a memo
            // the event handlers filled or kept. Only what they patched is
            // patched.
            memory.mark_fully_handled();
            drop(memory);
            self.memories.release_if_unused(uid);
            None
        } else {
            Some(memory)
        };
        if patch.as_object().is_none_or(|p| p.is_empty()) {
            // Handled from the finalizer patch's answer, with nothing left to
            // do: that patch's event carries this very body (at start-up, one
            // event per object that would be decoded and processed for
            // nothing). Not with a retry due: it would process the newest
            // event the queue holds, the one before the patch.
            if finalized
                && delay.is_none()
                && let Some(echoes) = &self.echoes
                && let Some(version) = meta_str(&body, "resourceVersion")
            {
                expect_echo(echoes, uid, memory.as_deref(), version);
            }
            return Processed {
                expect_version: None,
                retry_after: delay,
            };
        }
        let Some(target) = self.patch_target(&body) else {
            return Processed::default();
        };
        // A patch that settles the object is guarded by the handled body's
        // version: accepted, it comes back with nothing new (see `Echoes`).
        // One request only: a status subresource would be a second one.
        let echoes = echoes.filter(|_| {
            settled
                && self
                    .diffbase
                    .only_bookkeeping(&body, &patch, &self.progression.storage)
                && !(self.target.status_subresource && patch.get("status").is_some())
        });
        let precondition = echoes.and_then(|_| require_version(&mut patch, &body));
        let handled_version = meta_str(&body, "resourceVersion");
        match self
            .sender
            .send::<ObjectVersion>(&target, &mut patch, ran, precondition, &logger)
            .await
        {
            Ok((PatchOutcome::Patched(patched), guarded)) => {
                let version = patched.into_resource_version();
                if let Some(echoes) = echoes
                    && guarded
                    && let Some(version) = version.as_deref()
                    && Some(version) != handled_version
                {
                    expect_echo(echoes, uid, memory.as_deref(), version);
                    return Processed {
                        expect_version: None,
                        retry_after: delay,
                    };
                }
                Processed {
                    expect_version: version,
                    retry_after: delay,
                }
            }
            Ok((PatchOutcome::Gone, _)) => gone(&logger),
            Err(error) => unpatched(&error, &logger),
        }
    }

    /// Where the object's patches go; `None` only for an object without a
    /// name, which the watch never hands on.
    fn patch_target(&self, body: &Value) -> Option<PatchTarget> {
        PatchTarget::for_body(
            body,
            Arc::clone(&self.target.api),
            self.target.status_subresource,
        )
    }

    /// Adds the finalizer (`patch`, with what the event handlers patched)
    /// and returns the object as the server answered: the body at the
    /// patch's version, which its watch event will carry too. The object is
    /// handled on from it at once (its daemons and timers start) rather
    /// than when that event comes, which at start-up is only after the
    /// whole listing, with every listed object's processing waiting for it
    /// meanwhile. Otherwise, what is left to do.
    async fn add_finalizer(
        &self,
        body: &Arc<Value>,
        logger: &Logger,
        patch: &mut Value,
        ran: bool,
    ) -> Result<Arc<Value>, Processed> {
        let Some(target) = self.patch_target(body) else {
            return Err(Processed::default());
        };
        match self
            .sender
            .send::<Value>(&target, patch, ran, None, logger)
            .await
        {
            Ok((PatchOutcome::Patched(patched), _)) => {
                logger.debug("Handling the object as the patch left it.");
                Ok(Arc::new(*patched))
            }
            Ok((PatchOutcome::Gone, _)) => Err(gone(logger)),
            Err(error) => Err(unpatched(&error, logger)),
        }
    }

    /// The finalizer, the daemons and timers, and the change handlers of an
    /// object; returns when to come back, and whether a handler ran (its
    /// outcome is in `patch`).
    async fn handle_object(
        &self,
        uid: &str,
        body: &Arc<Value>,
        memory: &ObjectMemory,
        logger: &Logger,
        patch: &mut Value,
    ) -> Handling {
        let mut handling = Handling {
            delay: None,
            ran: false,
            settled: false,
            adds_finalizer: false,
        };
        if self.only_event_handlers() {
            return handling;
        }
        // Taken whatever this body brings: it is kept for one processing.
        let handled = memory.take_handled();
        // The old and new essences, built if a change handler's field asks
        // for its values, and then used by the change handlers too.
        let essences = OnceCell::new();
        let (changing, spawning) = {
            // Kwargs for the filters, made when the first handler with any
            // filter asks (and gone before anything awaits).
            let probe = OnceCell::new();
            let kwargs = || {
                probe.get_or_init(|| {
                    Kwargs::of(Arc::clone(body), memory.memo.clone(), logger.clone())
                        .with_cluster(None, self.handlers.indexes.clone())
                })
            };
            let matches =
                |h: &Handler| h.filters().is_empty() || h.filters().matches_object(kwargs());
            // Kopf's prematch: a change handler's field is looked up in the
            // essences, not in the body.
            let prematches = |h: &Handler| {
                if h.filters().is_empty() {
                    return true;
                }
                let values =
                    h.filters()
                        .field
                        .as_ref()
                        .map_or_else(FieldValues::default, |field| {
                            let (old, new): &Essences = essences.get_or_init(|| {
                                self.diffbase.essences(body, &self.progression.storage)
                            });
                            FieldValues {
                                old: old.as_ref().and_then(|old| field.resolve(old)),
                                new: field.resolve(new),
                            }
                        });
                h.filters().prematches_change(kwargs(), values)
            };
            // Inline: an operator has a handful of handlers per resource.
            let changing: SmallVec<[&Handler; 4]> = self
                .handlers
                .changing
                .iter()
                .filter(|h| prematches(h))
                .collect();
            let spawning: SmallVec<[bool; 8]> = self.tasks.handlers().map(matches).collect();
            (changing, spawning)
        };
        let any_spawning = spawning.iter().any(|m| *m);
        let finalizer = self.settings.persistence.finalizer.as_str();
        let lifecycle = Finalizing::of(body, finalizer);
        let deleting = lifecycle.deleting();
        let serving = changing.iter().copied().chain(
            self.tasks
                .handlers()
                .zip(&spawning)
                .filter_map(|(h, m)| m.then_some(h)),
        );
        match lifecycle.on_apply(serving) {
            Some(action @ Action::Add) => {
                lifecycle.enact(action, body, patch, logger);
                handling.adds_finalizer = true;
                return handling;
            }
            Some(action) => lifecycle.enact(action, body, patch, logger),
            None => {}
        }

        // Daemons and timers start before the change handlers and stop after them.
        let mut delay = None;
        let mut tasks_running = false;
        if !self.tasks.is_empty() && (any_spawning || self.tasks.any_running(uid)) {
            if deleting {
                tasks_running = self.tasks.stop_for_deletion(uid);
            } else {
                delay = self.tasks.serve(&memory.uid, body, &spawning);
            }
        }

        let mut deletion_done = true;
        if !changing.is_empty() {
            let known = match essences.into_inner() {
                Some(essences) => Known::Essences(essences),
                None => Known::Handled(handled),
            };
            let (outcome, stored) = self
                .handle_changes(body, memory, known, logger, patch, &changing)
                .await;
            deletion_done = outcome.done;
            handling.ran = outcome.ran;
            // Settled if nothing is due later either (see below).
            handling.settled = stored;
            delay = min_delay(delay, outcome.delay);
        }
        let mut cleanup = lifecycle.on_cleanup(deletion_done, tasks_running);
        if cleanup == Some(Action::Keep) && deletion_done {
            // Only the tasks hold the finalizer back: their end is awaited.
            logger.debug("Waiting for the daemons and timers to stop before releasing the object.");
            // Boxed: only a deletion waits, and every processing's future
            // stays as small as the common path needs.
            tasks_running = !Box::pin(self.tasks.wait_for_deletion(uid)).await;
            cleanup = lifecycle.on_cleanup(deletion_done, tasks_running);
        }
        match cleanup {
            // Only if the wait was cut short: the operator is stopping.
            Some(Action::Keep) if tasks_running => {
                delay = min_delay(delay, Some(resource::RECHECK));
            }
            Some(action) => lifecycle.enact(action, body, patch, logger),
            None => {}
        }
        handling.settled &= delay.is_none() && !deleting;
        handling.delay = delay;
        handling
    }

    /// The change handlers (the object's cause); returns whether the cause is
    /// done and when to come back, and whether the patch stores the handled
    /// essence as the new diff-base.
    async fn handle_changes(
        &self,
        body: &Arc<Value>,
        memory: &ObjectMemory,
        known: Known,
        logger: &Logger,
        patch: &mut Value,
        matching: &[&Handler],
    ) -> (execution::StepOutcome, bool) {
        let finalizer = self.settings.persistence.finalizer.as_str();
        let (old, new) = match known {
            Known::Essences(essences) => essences,
            Known::Handled(handled) => {
                // The operator's own patch came back with the diff-base it
                // stored, and nothing an essence is made of changed
                // meanwhile: the essence is that diff-base, so there is
                // nothing to handle (as building and comparing both
                // essences would find, for more).
                if let Some(handled) = handled
                    && !memory.initial()
                    && !finalizers::is_deletion_ongoing(body)
                    && self.diffbase.holds(body, &handled.diffbase)
                    && self
                        .diffbase
                        .same_essence(&handled.body, body, &self.progression.storage)
                {
                    memory.mark_fully_handled();
                    logger.debug(
                        "Something has changed, but we are not interested (the essence is the same).",
                    );
                    return (done(), false);
                }
                self.diffbase.essences(body, &self.progression.storage)
            }
        };
        let old_changed = old.as_ref() != Some(&new);
        let (old, new) = (old.map(Arc::new), Arc::new(new));
        // Found only if asked for: by the cause of an object with a
        // diff-base, by handlers that read it.
        let diff = Diff::between_shared(old.clone(), Some(Arc::clone(&new)));
        let initial = memory.initial();
        let cause = causes::detect(CauseInput {
            body,
            gone: false,
            finalizer,
            old: old.as_deref(),
            diff: &diff,
            initial,
        });
        let reason = match cause {
            ChangeCause::Handle(reason) => reason,
            ChangeCause::Noop => {
                memory.mark_fully_handled();
                logger.debug(
                    "Something has changed, but we are not interested (the essence is the same).",
                );
                return (done(), false);
            }
            ChangeCause::Free => {
                logger.debug("Deletion, but we are done with it, and we do not care.");
                return (done(), false);
            }
            ChangeCause::Gone => return (done(), false),
        };
        let context = CauseContext {
            reason,
            initial: causes::resume_mixes_in(reason, initial),
            body: Arc::clone(body),
            old,
            new: Some(new),
            diff,
            memo: memory.memo.clone(),
            logger: logger.clone(),
            client: Some(self.client.clone()),
            indexes: self.handlers.indexes.clone(),
        };
        let selected: SmallVec<[&Handler; 4]> = matching
            .iter()
            .copied()
            .filter(|h| context.selects(h))
            .collect();
        let (done, delay, ran) = if selected.is_empty() {
            (true, None, false)
        } else {
            let step = execution::step(
                &context,
                &selected,
                &self.handlers.changing,
                &self.progression,
                patch,
            )
            .await;
            if step.done {
                logger.info(format_args!(
                    "{} is processed: {} succeeded; {} failed.",
                    title(reason),
                    step.succeeded,
                    step.failed
                ));
            }
            (step.done, step.delay, step.ran)
        };
        let mut stored = false;
        if done {
            if reason != Reason::Delete
                && old_changed
                && let Some(new) = &context.new
            {
                let diffbase = self.diffbase.store(body, new, patch);
                memory.remember_handled(Handled {
                    body: Arc::clone(body),
                    diffbase,
                });
                stored = true;
            }
            memory.mark_fully_handled();
        }
        let outcome = execution::StepOutcome {
            done,
            delay,
            ran,
            ..Default::default()
        };
        (outcome, stored)
    }

    /// The `on_event` handlers of an event, if there are any; what they
    /// patch is merged into `patch`. Their calls are boxed: held inline,
    /// they would make every processing's future larger, with or without
    /// event handlers.
    async fn run_event_handlers(
        &self,
        event_type: Option<EventType>,
        body: &Arc<Value>,
        memo: Option<Memo>,
        logger: &Logger,
        patch: &mut Value,
    ) {
        if !self.handlers.watching.is_empty() {
            let patched = Box::pin(self.call_event_handlers(event_type, body, memo, logger)).await;
            if !patched.is_empty() {
                merge_into(patch, patched.take());
            }
        }
    }

    /// Calls the matching event handlers in order, all with one shared
    /// [`Patch`] (as in Kopf, each sees what the ones before it patched),
    /// which is returned.
    async fn call_event_handlers(
        &self,
        event_type: Option<EventType>,
        body: &Arc<Value>,
        memo: Option<Memo>,
        logger: &Logger,
    ) -> Patch {
        let raw = Arc::new(json!({
            "type": event_type.map(|t| t.as_str()),
            "object": &**body,
        }));
        let patch = Patch::new();
        for handler in &self.handlers.watching {
            let memo = memo.clone().unwrap_or_else(|| self.memories.fresh_memo());
            let kwargs = Kwargs::of(Arc::clone(body), memo, logger.clone())
                .with_cluster(Some(self.client.clone()), self.handlers.indexes.clone())
                .with_event(Arc::clone(&raw), event_type, patch.clone());
            if !handler.filters().matches_object(&kwargs) {
                continue;
            }
            if let Err(error) = execution::invoke(handler, kwargs, handler.options().timeout).await
            {
                logger.error(format_args!(
                    "Handler '{}' failed with an exception. Will ignore: {error}",
                    handler.id()
                ));
            }
        }
        patch
    }

    /// The object's logger: messages go to `tracing`, and with
    /// `settings.posting.loggers` also to the object's Kubernetes Events.
    fn logger(&self, body: &Value) -> Logger {
        let name = object_name(body);
        let poster = self
            .poster
            .clone()
            .filter(|_| self.settings.posting.loggers);
        let Some(poster) = poster else {
            return Logger::new(name);
        };
        let reference = ObjectReference::from_body(body);
        let sink: LogSink = Arc::new(move |level, message| match level {
            Level::Debug => {}
            Level::Info => poster.info(reference.clone(), "Logging", message),
            Level::Warning | Level::Error => poster.warn(reference.clone(), "Logging", message),
        });
        Logger::new(name).with_sink(sink)
    }
}

/// A cause that needs no more steps.
fn done() -> execution::StepOutcome {
    execution::StepOutcome {
        done: true,
        ..Default::default()
    }
}

/// Expects the object `uid`'s own patch back at `version` with nothing new
/// in it, for the watch to skip (see [`Echoes`]); keyed by the UID its
/// memory holds. Nothing handled is kept to compare it with.
fn expect_echo(echoes: &Echoes, uid: &str, memory: Option<&ObjectMemory>, version: &str) {
    match memory {
        Some(memory) => {
            echoes.expect(&memory.uid, version);
            drop(memory.take_handled());
        }
        None => echoes.expect(&Arc::from(uid), version),
    }
}

/// The earlier of two optional delays.
fn min_delay(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn title(reason: Reason) -> &'static str {
    match reason {
        Reason::Create => "Creation",
        Reason::Update => "Updating",
        Reason::Delete => "Deletion",
        Reason::Resume => "Resuming",
        Reason::Noop => "Nothing",
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::sending::refresh_finalizer;
    use super::*;
    use crate::mock_api::{self, Recorded, Reply, example};
    use crate::model::errors::Error;
    use crate::model::registry::{Registry, RegistryBuilder};
    use crate::model::resources::ResourceRef;
    use crate::spawning::{Observer, SpawnerSettings};

    fn examples() -> ResourceRef {
        ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples")
    }

    /// An on-create handler that does nothing.
    fn creating() -> RegistryBuilder {
        Registry::builder().on_create(examples(), "create_fn", |_kw: Kwargs| async {
            Ok::<_, Error>(())
        })
    }

    /// A processor of `registry`'s handlers against the mock API, and its
    /// requests.
    fn processor(
        registry: RegistryBuilder,
        handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
    ) -> (ResourceProcessor, Arc<Mutex<Vec<Recorded>>>) {
        processor_of(registry, false, handler)
    }

    /// [`processor`], for a resource with or without a status subresource.
    fn processor_of(
        registry: RegistryBuilder,
        status_subresource: bool,
        handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
    ) -> (ResourceProcessor, Arc<Mutex<Vec<Recorded>>>) {
        let registry = registry.build().expect("a valid registry");
        let (client, log) = mock_api::client(handler);
        let observer = crate::spawning::resource::TaskObserver::new(None);
        let spawner = Spawner::new(
            Arc::clone(&observer) as Arc<dyn Observer>,
            SpawnerSettings::default(),
        );
        let target = ResourceTarget {
            api: Arc::new(mock_api::example_resource()),
            namespaced: true,
            status_subresource,
        };
        let processor = ResourceProcessor::new(
            target,
            ResourceHandlers::new(registry.handlers()),
            Arc::new(OperatorSettings::default()),
            client,
            None,
            Arc::new(spawner),
            CancellationToken::new(),
        );
        (processor, log)
    }

    fn upserted(body: Value, seen: Seen) -> Arc<Work> {
        Arc::new(Work {
            event: ObjectEvent::Upserted {
                object: Arc::new(body),
                seen,
            },
            initial_listing: false,
            queued_at: None,
        })
    }

    /// Processes the object `u1` at version 1, new.
    async fn process_new(processor: &ResourceProcessor) -> Processed {
        let body = example("ns", "a", "u1", "1");
        processor
            .process("u1".into(), upserted(body, Seen::New))
            .await
    }

    fn patches(log: &Mutex<Vec<Recorded>>) -> Vec<Value> {
        let log = log.lock().expect("not poisoned");
        log.iter()
            .filter(|r| r.method == "PATCH")
            .map(|r| r.body.clone())
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_settling_patch_is_guarded_and_its_echo_not_processed() {
        let (processor, log) = processor(creating(), |_| {
            Reply::Json(200, example("ns", "a", "u1", "2"))
        });
        let echoes = processor.echoes().expect("only change handlers").clone();
        let processed = process_new(&processor).await;
        let sent = patches(&log);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0]["metadata"]["resourceVersion"], "1", "{sent:?}");
        assert!(sent[0]["metadata"]["annotations"].is_object());
        assert_eq!(processed, Processed::default(), "no wait for the echo");
        assert_eq!(echoes.len(), 1);

        // The echo (here without the patch's annotations: processed, it
        // would be created again) is known and left alone.
        echo_is_skipped(&processor, &log, &echoes, example("ns", "a", "u1", "2")).await;
    }

    /// Processes `echo` as `u1`'s next event, after one patch: it is known,
    /// and nothing more is sent.
    async fn echo_is_skipped(
        processor: &ResourceProcessor,
        log: &Mutex<Vec<Recorded>>,
        echoes: &Echoes,
        echo: Value,
    ) {
        let processed = processor
            .process("u1".into(), upserted(echo, Seen::Changed))
            .await;
        assert_eq!(processed, Processed::default());
        assert_eq!(patches(log).len(), 1, "nothing more is sent");
        assert!(echoes.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_guard_is_dropped_and_the_patch_sent_again_at_once() {
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let (processor, log) = processor(creating(), move |_| {
            if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                Reply::Json(409, mock_api::status(409, "Conflict", 0))
            } else {
                Reply::Json(200, example("ns", "a", "u1", "3"))
            }
        });
        let started = tokio::time::Instant::now();
        let processed = process_new(&processor).await;
        let sent = patches(&log);
        assert_eq!(sent.len(), 2, "{sent:?}");
        assert_eq!(sent[0]["metadata"]["resourceVersion"], "1");
        assert!(
            sent[1]["metadata"].get("resourceVersion").is_none(),
            "re-sent unguarded: {sent:?}"
        );
        assert_eq!(
            sent[0]["metadata"]["annotations"], sent[1]["metadata"]["annotations"],
            "the same outcome"
        );
        assert_eq!(started.elapsed(), Duration::ZERO, "at once");
        assert_eq!(processed.expect_version.as_deref(), Some("3"));
        assert!(
            processor.echoes().expect("kept").is_empty(),
            "its echo may carry others' changes: it is processed"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_handlers_result_is_guarded_unless_the_status_is_a_second_request() {
        let returning = || {
            Registry::builder().on_create(examples(), "create_fn", |_kw: Kwargs| async {
                Ok::<_, Error>(json!({"message": "created"}))
            })
        };
        let answer = |_: &Recorded| Reply::Json(200, example("ns", "a", "u1", "2"));
        let (processor, log) = processor_of(returning(), false, answer);
        process_new(&processor).await;
        let sent = patches(&log);
        assert_eq!(sent[0]["status"]["create_fn"]["message"], "created");
        assert_eq!(sent[0]["metadata"]["resourceVersion"], "1", "{sent:?}");
        assert_eq!(processor.echoes().expect("kept").len(), 1);

        let (processor, log) = processor_of(returning(), true, answer);
        process_new(&processor).await;
        let sent = patches(&log);
        assert_eq!(sent.len(), 2, "the object, then its status: {sent:?}");
        assert!(
            sent.iter()
                .all(|p| p["metadata"].get("resourceVersion").is_none()),
            "unguarded: {sent:?}"
        );
        assert!(processor.echoes().expect("kept").is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn with_event_handlers_every_event_is_processed() {
        let registry = creating().on_event(examples(), "event_fn", |_kw: Kwargs| async {
            Ok::<_, Error>(())
        });
        let (processor, log) = processor(registry, |_| {
            Reply::Json(200, example("ns", "a", "u1", "2"))
        });
        assert!(processor.echoes().is_none());
        let processed = process_new(&processor).await;
        let sent = patches(&log);
        assert!(
            sent[0]["metadata"].get("resourceVersion").is_none(),
            "unguarded: {sent:?}"
        );
        assert_eq!(processed.expect_version.as_deref(), Some("2"));
    }

    /// Two event handlers: the first patches, the second sees its patch
    /// and adds to it.
    fn patching_events(registry: RegistryBuilder) -> RegistryBuilder {
        registry
            .on_event(examples(), "a_first", |kw: Kwargs| async move {
                kw.patch.set("metadata.labels.seen", json!("yes"));
                Ok::<_, Error>(())
            })
            .on_event(examples(), "b_second", |kw: Kwargs| async move {
                let before = kw.patch.to_value();
                kw.patch
                    .set("status.before", before["metadata"]["labels"].clone());
                Ok::<_, Error>(())
            })
    }

    #[tokio::test(start_paused = true)]
    async fn event_handlers_patch_in_one_request_with_the_steps_patch() {
        let answer = |_: &Recorded| Reply::Json(200, example("ns", "a", "u1", "2"));
        let (events_and_changes, log) = processor(patching_events(creating()), answer);
        let processed = process_new(&events_and_changes).await;
        let sent = patches(&log);
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(sent[0]["metadata"]["labels"], json!({"seen": "yes"}));
        assert_eq!(sent[0]["status"]["before"], json!({"seen": "yes"}));
        assert!(
            sent[0]["metadata"]["annotations"].is_object(),
            "with the step's own changes (the diff-base): {sent:?}"
        );
        assert_eq!(processed.expect_version.as_deref(), Some("2"));

        // With event handlers alone, their patch alone.
        let (events_only, log) = processor(patching_events(Registry::builder()), answer);
        let processed = process_new(&events_only).await;
        let sent = patches(&log);
        assert_eq!(
            sent,
            [
                json!({"metadata": {"labels": {"seen": "yes"}}, "status": {"before": {"seen": "yes"}}})
            ]
        );
        assert_eq!(processed.expect_version.as_deref(), Some("2"));

        // Nothing for a deleted object, as in Kopf.
        let deleted = Arc::new(Work {
            event: ObjectEvent::Deleted {
                object: Arc::new(example("ns", "a", "u1", "3")),
                how: DeletedBy::Event,
            },
            initial_listing: false,
            queued_at: None,
        });
        events_only.process("u1".into(), deleted).await;
        assert_eq!(patches(&log).len(), 1);
    }

    #[test]
    fn a_refreshed_finalizer_change_keeps_its_direction_and_others_finalizers() {
        let mut patch = json!({
            "metadata": {"finalizers": null, "resourceVersion": "7", "annotations": {"x": null}},
        });
        let fresh =
            json!({"metadata": {"resourceVersion": "9", "finalizers": ["ours/f", "theirs/g"]}});
        refresh_finalizer(&mut patch, &fresh, "ours/f");
        assert_eq!(
            patch,
            json!({"metadata": {
                "finalizers": ["theirs/g"], "resourceVersion": "9", "annotations": {"x": null},
            }})
        );
    }

    const FINALIZER: &str = "kopf.zalando.org/KopfFinalizerMarker";

    /// A daemon that takes `lingers` to exit once asked to stop.
    fn daemon(registry: RegistryBuilder, id: &str, lingers: Duration) -> RegistryBuilder {
        registry.daemon(examples(), id, move |kw: Kwargs| async move {
            if let Some(stopped) = kw.stopped {
                stopped.cancelled().await;
            }
            tokio::time::sleep(lingers).await;
        })
    }

    /// Processes `u1` with the finalizer as it runs, then as it is deleted;
    /// returns how long the deletion took, its outcome, and the last patch.
    async fn delete(
        processor: &ResourceProcessor,
        log: &Mutex<Vec<Recorded>>,
    ) -> (Duration, Processed, Value) {
        let mut body = example("ns", "a", "u1", "1");
        body["metadata"]["finalizers"] = json!([FINALIZER]);
        processor
            .process("u1".into(), upserted(body.clone(), Seen::New))
            .await;
        assert!(processor.tasks.any_running("u1"), "its daemon runs");
        body["metadata"]["resourceVersion"] = json!("2");
        body["metadata"]["deletionTimestamp"] = json!("2020-01-01T00:00:00Z");
        let started = tokio::time::Instant::now();
        let processed = processor
            .process("u1".into(), upserted(body, Seen::Changed))
            .await;
        let last = patches(log).pop().expect("a patch");
        (started.elapsed(), processed, last)
    }

    #[tokio::test(start_paused = true)]
    async fn a_deletion_awaits_the_end_of_its_finalizer_keeping_tasks_then_releases() {
        let registry = daemon(Registry::builder(), "slow", Duration::from_secs(3));
        let (processor, log) = processor(registry, |_| {
            Reply::Json(200, example("ns", "a", "u1", "3"))
        });
        let (took, processed, patch) = delete(&processor, &log).await;
        assert_eq!(
            took,
            Duration::from_secs(3),
            "released the moment the daemon ended"
        );
        assert_eq!(processed.retry_after, None, "nothing to come back for");
        assert_eq!(patch["metadata"]["finalizers"], Value::Null, "{patch}");
        assert!(!processor.tasks.any_running("u1"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_deletion_without_the_finalizer_waits_for_no_task() {
        let registry = daemon(Registry::builder(), "slow", Duration::from_secs(3));
        let (processor, log) = processor(registry, |_| {
            Reply::Json(200, example("ns", "a", "u1", "3"))
        });
        let mut body = example("ns", "a", "u1", "1");
        body["metadata"]["finalizers"] = json!([FINALIZER]);
        processor
            .process("u1".into(), upserted(body.clone(), Seen::New))
            .await;
        assert!(processor.tasks.any_running("u1"), "its daemon runs");
        // Someone else took the finalizer off; only theirs holds the object.
        body["metadata"]["resourceVersion"] = json!("2");
        body["metadata"]["finalizers"] = json!(["other"]);
        body["metadata"]["deletionTimestamp"] = json!("2020-01-01T00:00:00Z");
        let started = tokio::time::Instant::now();
        let processed = processor
            .process("u1".into(), upserted(body, Seen::Changed))
            .await;
        assert_eq!(started.elapsed(), Duration::ZERO, "nothing to release");
        assert_eq!(processed.retry_after, None);
        assert!(patches(&log).is_empty(), "{:?}", patches(&log));
        assert!(processor.tasks.any_running("u1"), "stopping");
    }

    /// The object `u1` at `version`, as the finalizer's patch leaves it.
    fn finalized(version: &str) -> Value {
        let mut body = example("ns", "a", "u1", version);
        body["metadata"]["finalizers"] = json!([FINALIZER]);
        body
    }

    #[tokio::test(start_paused = true)]
    async fn the_finalizers_echo_is_skipped_once_its_answer_is_handled() {
        let registry = daemon(Registry::builder(), "slow", Duration::ZERO);
        let (processor, log) = processor(registry, |_| Reply::Json(200, finalized("2")));
        let echoes = processor.echoes().expect("no event handlers").clone();
        let processed = process_new(&processor).await;
        assert_eq!(patches(&log).len(), 1, "the finalizer");
        assert!(processor.tasks.any_running("u1"), "started from the answer");
        assert_eq!(processed, Processed::default(), "no wait for the echo");
        assert_eq!(echoes.len(), 1, "its echo is expected");

        // Processed after all (it came before the answer was read): known.
        echo_is_skipped(&processor, &log, &echoes, finalized("2")).await;
    }

    #[tokio::test(start_paused = true)]
    async fn with_tasks_and_change_handlers_only_the_finalizers_echo_is_skipped() {
        let registry = daemon(creating(), "slow", Duration::ZERO);
        let (processor, log) = processor(registry, |_| Reply::Json(200, finalized("2")));
        let processed = process_new(&processor).await;
        let sent = patches(&log);
        assert_eq!(sent.len(), 2, "the finalizer, then the outcome: {sent:?}");
        assert!(
            sent[1]["metadata"].get("resourceVersion").is_none(),
            "the tasks see every body: unguarded: {sent:?}"
        );
        assert_eq!(processed.expect_version.as_deref(), Some("2"));
        assert!(
            processor.echoes().expect("kept").is_empty(),
            "the outcome's echo is processed, for the tasks' live body"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_deletion_never_waits_for_tasks_without_finalizers() {
        let registry = daemon(Registry::builder(), "slow", Duration::from_secs(3))
            .no_finalizers()
            .on_delete(examples(), "gone", |_kw: Kwargs| async {
                Ok::<_, Error>(())
            });
        let (processor, log) = processor(registry, |_| {
            Reply::Json(200, example("ns", "a", "u1", "3"))
        });
        let (took, _, patch) = delete(&processor, &log).await;
        assert_eq!(took, Duration::ZERO, "released at once");
        assert_eq!(patch["metadata"]["finalizers"], Value::Null, "{patch}");
        assert!(processor.tasks.any_running("u1"), "still stopping");
    }
}
