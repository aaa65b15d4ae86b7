//! Sub-handlers: child handlers that a change handler registers while it
//! runs (Kopf's `@kopf.subhandler` and `kopf.execute()`).
//!
//! A parent takes a [`Subhandlers`] parameter and registers children on
//! it. After the parent returns successfully, its children run (or earlier,
//! where the parent awaits [`Subhandlers::execute`]), with Kopf's state
//! layout:
//! - a child's id is `parent/child`, and its progress is stored on the
//!   object as a handler's is, so each child has its own retries, backoff,
//!   timeout and errors mode;
//! - the parent's record lists its children of any depth in `subrefs`;
//! - while children are unfinished, the parent is retried (with a debug
//!   line, not an error): it runs again, registers its children again, and
//!   the finished ones are skipped. An operator restarted in between
//!   resumes the same way, without re-running finished children;
//! - children that fail for good do not fail the parent, as in Kopf;
//! - the children's results go to `status.<parent/child>`, their patches
//!   join the parent's, and every record is purged with the parent's when
//!   the cause is done.

use std::any::Any;
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::json;

use super::{CauseContext, Lifecycle, Progression, fetch, next_delay, run_planned};
use crate::model::errors::{Error, HandlerError, IntoOutcome, Outcome};
use crate::model::handlers::{Handler, HandlerKind};
use crate::model::kwargs::{Kwargs, Patch};
use crate::persistence::progress::ProgressRecord;

/// The sub-handlers of one call of a change handler (Kopf's sub-handlers).
///
/// Take it as the `subhandlers` parameter of an `on_create`, `on_update`,
/// `on_delete`, `on_resume` or `on_field` handler (builder closures:
/// [`Kwargs::subhandlers`]), and register children on it. They run after
/// the parent returns successfully, each with its own progress, retries and
/// errors, under the id `parent/child`; the parent is called again until
/// every child has finished, and only the unfinished children run again,
/// after a restart too. The parent's progress record lists its children of
/// any depth (`subrefs`), the children's results go to
/// `status.<parent/child>`, and their records are purged with the
/// parent's, all as Kopf stores them. A child that fails for good does not
/// fail its parent, as in Kopf.
///
/// ```
/// use kopf_runtime as kopf;
/// use serde_json::Value;
///
/// #[kopf::on_create("kopfexamples.kopf.dev/v1")]
/// async fn create_fn(spec: Value, subhandlers: kopf::Subhandlers) -> kopf::Result<()> {
///     let items = spec["items"].as_array().cloned().unwrap_or_default();
///     for item in items.into_iter().filter_map(|i| i.as_str().map(str::to_owned)) {
///         subhandlers.register(item.clone(), move |kw: kopf::Kwargs| {
///             let item = item.clone();
///             async move {
///                 kw.logger.info(format_args!("=== Handling creation for {item}. ==="));
///                 Ok::<_, kopf::Error>(())
///             }
///         });
///     }
///     Ok(())
/// }
/// ```
///
/// To run the children inside the parent (Kopf's `kopf.execute()`), await
/// [`execute`](Self::execute) and return its error with `?`: it says that
/// children are unfinished, and the parent is called again.
#[derive(Clone)]
pub struct Subhandlers {
    inner: Arc<Inner>,
}

struct Inner {
    /// The parent's id: the children's prefix.
    parent: String,
    /// The parent's kind, which its children take.
    kind: HandlerKind,
    /// The cause, as the parent sees it (field-scoped for field handlers).
    cause: CauseContext,
    progression: Progression,
    /// The parent's patch, which the children's records, results and
    /// patches join.
    patch: Patch,
    children: Mutex<Children>,
}

/// The children registered in one call of the parent, and how they fare.
#[derive(Default)]
struct Children {
    registered: Vec<Handler>,
    /// The children were run by [`Subhandlers::execute`]: they do not run
    /// again after the parent returns.
    executed: bool,
    /// How long until the unfinished children are due, after the last run.
    unfinished: Option<Duration>,
    /// The ids of the children of any depth (the parent's `subrefs`).
    subrefs: BTreeSet<String>,
}

impl std::fmt::Debug for Subhandlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("Subhandlers")
            .field("parent", &self.inner.parent)
            .field(
                "registered",
                &state.registered.iter().map(|h| h.id()).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Subhandlers {
    /// The sub-handlers of one call of `parent`, a change handler (`None`
    /// for handlers of other kinds, which have none). `kwargs` are the
    /// parent's.
    pub(crate) fn of_parent(
        parent: &Handler,
        cause: &CauseContext,
        kwargs: &Kwargs,
        progression: &Progression,
    ) -> Option<Self> {
        if !parent.kind().is_changing() {
            return None;
        }
        let cause = CauseContext {
            old: kwargs.old.clone(),
            new: kwargs.new.clone(),
            diff: kwargs.diff.clone(),
            ..cause.clone()
        };
        Some(Subhandlers {
            inner: Arc::new(Inner {
                parent: parent.id().to_owned(),
                kind: parent.kind(),
                cause,
                progression: progression.clone(),
                patch: kwargs.patch.clone(),
                children: Mutex::new(Children::default()),
            }),
        })
    }

    /// The form [`Kwargs`] carry.
    pub(crate) fn erased(&self) -> Arc<dyn Any + Send + Sync> {
        Arc::new(self.clone())
    }

    fn state(&self) -> MutexGuard<'_, Children> {
        self.inner
            .children
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a child `id` with Kopf's default options (retried after
    /// the default backoff on any error); it is stored as `parent/id`.
    pub fn register<F, Fut, R>(&self, id: impl Into<String>, f: F)
    where
        F: Fn(Kwargs) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: IntoOutcome,
    {
        self.add(Handler::subhandler(id, f));
    }

    /// Registers a child made with [`Handler::subhandler`], with its own
    /// options (`retries`, `backoff`, `timeout`, `errors`, `param`) and
    /// filters (`label`, `annotation`, `when`, `field`, `value`). A second
    /// child with the same id replaces the first.
    pub fn add(&self, child: Handler) {
        let child = child.child_of(&self.inner.parent, self.inner.kind);
        let mut state = self.state();
        match state.registered.iter_mut().find(|h| h.id() == child.id()) {
            Some(known) => *known = child,
            None => state.registered.push(child),
        }
    }

    /// Runs the registered children now, one per call as Kopf's default
    /// lifecycle does (see [`execute_with`](Self::execute_with)).
    pub async fn execute(&self) -> crate::Result<()> {
        self.execute_with(Lifecycle::Asap).await
    }

    /// Runs the registered children now (Kopf's `kopf.execute()`), as many
    /// and in the order `lifecycle` says, and records their progress. The
    /// children then do not run again after the parent returns.
    ///
    /// # Errors
    /// A temporary error while some children are unfinished: return it from
    /// the parent (with `?`), which is then called again once they are due.
    pub async fn execute_with(&self, lifecycle: Lifecycle) -> crate::Result<()> {
        self.state().executed = true;
        match Box::pin(self.run(lifecycle)).await {
            None => Ok(()),
            Some(delay) => Err(Error::temporary(
                "some sub-handlers are not finished yet",
                delay,
            )),
        }
    }

    /// Whether the parent registered any child: without one, there is
    /// nothing to run or wait for after its call.
    pub(crate) fn any(&self) -> bool {
        !self.state().registered.is_empty()
    }

    /// After the parent's call: runs the children unless the parent did,
    /// and says how long until the unfinished ones are due, if any are.
    /// Children unfinished after [`execute`](Self::execute) count only if
    /// the parent returned the error that says so.
    pub(crate) async fn after_parent(&self, outcome: &Outcome) -> Option<Duration> {
        let (executed, unfinished) = {
            let state = self.state();
            (state.executed, state.unfinished)
        };
        match outcome {
            Ok(_) if !executed => self.run(Lifecycle::Asap).await,
            Err(HandlerError::Temporary { .. }) if executed => unfinished,
            _ => None,
        }
    }

    /// Adds the children of any depth to the parent's `subrefs`.
    pub(crate) fn list_in(&self, record: &mut ProgressRecord) {
        let state = self.state();
        if state.subrefs.is_empty() {
            return;
        }
        let mut subrefs: BTreeSet<String> = record.subrefs.take().into_iter().flatten().collect();
        subrefs.extend(state.subrefs.iter().cloned());
        record.subrefs = Some(subrefs.into_iter().collect());
    }

    /// Runs the due children that `lifecycle` picks; how long until the
    /// unfinished ones are due, if any are.
    async fn run(&self, lifecycle: Lifecycle) -> Option<Duration> {
        let inner = &*self.inner;
        let registered = self.state().registered.clone();
        let cause = &inner.cause;
        let children: Vec<&Handler> = registered
            .iter()
            .filter(|h| h.filters().is_empty() || h.matches(&cause.kwargs(h)))
            .collect();
        let storage = &*inner.progression.storage;
        let mut records = fetch(storage, &children, &cause.body);
        let mut stored = json!({});
        let ran = run_planned(
            lifecycle,
            cause,
            &children,
            &mut records,
            &inner.progression,
            &mut stored,
        )
        .await;
        // Unlike a top-level cause's, the children's records are stored even
        // when finished: their parent is not yet, and runs them again.
        for (i, stamps) in ran {
            if let Some(record) = &mut records[i] {
                stamps.write(record);
                storage.store(children[i].id(), record, &cause.body, &mut stored);
            }
        }
        if stored.as_object().is_some_and(|s| !s.is_empty()) {
            inner.patch.merge(stored);
        }
        let unfinished = next_delay(&records);
        let mut state = self.state();
        state.unfinished = unfinished;
        for (child, record) in children.iter().zip(&records) {
            state.subrefs.insert(child.id().to_owned());
            let grandchildren = record.as_ref().and_then(|r| r.subrefs.as_ref());
            state
                .subrefs
                .extend(grandchildren.into_iter().flatten().cloned());
        }
        unfinished
    }
}

impl Kwargs {
    /// The sub-handlers of this call of a change handler (`None` for other
    /// kinds): the `subhandlers` parameter, for builder closures.
    pub fn subhandlers(&self) -> Option<Subhandlers> {
        self.subhandlers
            .as_ref()
            .and_then(|erased| erased.downcast_ref::<Subhandlers>())
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use serde_json::{Value, json};

    use super::super::tests::{apply, cause, progression, resource, storage};
    use super::super::{StepOutcome, step};
    use super::*;
    use crate::model::errors::Error;

    /// Counts the calls of each child by id.
    #[derive(Clone, Default)]
    struct Calls(Arc<Mutex<Vec<String>>>);

    impl Calls {
        fn hit(&self, id: &str) {
            self.0.lock().expect("not poisoned").push(id.to_owned());
        }
        fn of(&self, id: &str) -> usize {
            let calls = self.0.lock().expect("not poisoned");
            calls.iter().filter(|c| *c == id).count()
        }
    }

    /// A child that records its call and returns `outcome`.
    fn child(calls: &Calls, id: &'static str, outcome: crate::Result<Value>) -> Handler {
        let calls = calls.clone();
        Handler::subhandler(id, move |_kw: Kwargs| {
            calls.hit(id);
            let outcome = outcome.clone();
            async move { outcome }
        })
    }

    /// A parent `parent` that registers `children()` and returns; with a
    /// lifecycle, it executes them itself.
    fn parent(
        calls: &Calls,
        lifecycle: Option<Lifecycle>,
        children: impl Fn(&Calls) -> Vec<Handler> + Send + Sync + 'static,
    ) -> Handler {
        let calls = calls.clone();
        let children = Arc::new(children);
        Handler::on_create(resource(), "parent", move |kw: Kwargs| {
            calls.hit("parent");
            let subhandlers = kw.subhandlers().expect("a change handler has sub-handlers");
            for handler in children(&calls) {
                subhandlers.add(handler);
            }
            async move {
                if let Some(lifecycle) = lifecycle {
                    subhandlers.execute_with(lifecycle).await?;
                }
                Ok::<_, Error>(())
            }
        })
    }

    /// One step on `body`, whose patch is then applied to it.
    async fn step_on(handler: &Handler, body: &mut Value) -> (StepOutcome, Value) {
        let mut patch = json!({});
        let out = step(
            &cause(body.clone()),
            &[handler],
            std::slice::from_ref(handler),
            &progression(storage(), Duration::from_secs(60)),
            &mut patch,
        )
        .await;
        apply(body, patch.clone());
        (out, patch)
    }

    fn record(body: &Value, id: &str) -> Option<ProgressRecord> {
        storage().fetch(id, body)
    }

    #[tokio::test]
    async fn children_run_one_per_step_and_the_parent_is_retried_until_they_finish() {
        let calls = Calls::default();
        let handler = parent(&calls, None, |calls| {
            vec![
                child(calls, "a", Ok(json!({"n": 1}))),
                child(calls, "b", Ok(Value::Null)),
            ]
        });
        let mut body = json!({"metadata": {}});

        let (first, patch) = step_on(&handler, &mut body).await;
        assert!(!first.done, "{patch}");
        assert_eq!(first.delay, Some(Duration::ZERO), "b is due at once");
        assert_eq!((calls.of("a"), calls.of("b")), (1, 0));
        let parent = record(&body, "parent").expect("the parent's record");
        assert_eq!(parent.retries, Some(1));
        assert!(!parent.is_finished());
        assert_eq!(parent.message, None, "no error: {parent:?}");
        assert_eq!(
            parent.subrefs,
            Some(vec!["parent/a".to_owned(), "parent/b".to_owned()])
        );
        let a = record(&body, "parent/a").expect("the child's record");
        assert_eq!((a.success, a.retries), (Some(true), Some(1)));
        assert!(a.started.is_some() && a.stopped.is_some());
        assert_eq!(body["status"]["parent/a"], json!({"n": 1}));

        let (second, patch) = step_on(&handler, &mut body).await;
        assert!(second.done, "{patch}");
        assert_eq!(second.succeeded, 1);
        assert_eq!(
            (calls.of("parent"), calls.of("a"), calls.of("b")),
            (2, 1, 1)
        );
        for id in ["parent", "parent/a", "parent/b"] {
            assert_eq!(record(&body, id), None, "{id} purged: {body}");
        }
    }

    #[tokio::test]
    async fn executing_all_at_once_finishes_the_parent_in_one_step() {
        let calls = Calls::default();
        let handler = parent(&calls, Some(Lifecycle::AllAtOnce), |calls| {
            vec![
                child(calls, "a", Ok(Value::Null)),
                child(calls, "b", Ok(Value::Null)),
            ]
        });
        let mut body = json!({"metadata": {}});
        let (out, patch) = step_on(&handler, &mut body).await;
        assert!(out.done, "{patch}");
        assert_eq!(
            (calls.of("parent"), calls.of("a"), calls.of("b")),
            (1, 1, 1)
        );
        assert_eq!(record(&body, "parent/a"), None, "purged with the parent");
    }

    #[tokio::test]
    async fn a_failing_child_is_retried_alone_and_a_finished_one_never_reruns() {
        let calls = Calls::default();
        let handler = parent(&calls, Some(Lifecycle::AllAtOnce), |calls| {
            vec![
                child(calls, "ok", Ok(Value::Null)),
                child(
                    calls,
                    "flaky",
                    Err(Error::temporary("not yet", Duration::from_secs(5))),
                ),
            ]
        });
        let mut body = json!({"metadata": {}});
        let (out, _) = step_on(&handler, &mut body).await;
        assert!(!out.done);
        let delay = out.delay.expect("a retry");
        assert!(
            delay > Duration::from_secs(3) && delay <= Duration::from_secs(5),
            "{delay:?}"
        );
        let flaky = record(&body, "parent/flaky").expect("stored");
        assert_eq!(flaky.message.as_deref(), Some("not yet"));
        assert!(flaky.delayed.is_some());
        let parent = record(&body, "parent").expect("stored");
        assert!(parent.delayed.is_some(), "the parent waits for its child");

        // Once due (as after a restart: only the stored progress counts).
        let past = "2000-01-01T00:00:00.000000+00:00";
        for id in ["parent", "parent/flaky"] {
            let mut record = record(&body, id).expect("stored");
            record.delayed = Some(past.to_owned());
            let mut patch = json!({});
            storage().store(id, &record, &body, &mut patch);
            apply(&mut body, patch);
        }
        let (out, _) = step_on(&handler, &mut body).await;
        assert!(!out.done);
        assert_eq!(
            (calls.of("parent"), calls.of("ok"), calls.of("flaky")),
            (2, 1, 2)
        );
        assert_eq!(
            record(&body, "parent/flaky").and_then(|r| r.retries),
            Some(2)
        );
    }

    #[tokio::test]
    async fn a_child_failing_for_good_does_not_fail_its_parent() {
        let calls = Calls::default();
        let handler = parent(&calls, None, |calls| {
            vec![child(calls, "bad", Err(Error::permanent("no")))]
        });
        let mut body = json!({"metadata": {}});
        let (out, _) = step_on(&handler, &mut body).await;
        assert!(out.done);
        assert_eq!((out.succeeded, out.failed), (1, 0));
    }

    #[tokio::test]
    async fn grandchildren_are_listed_in_the_parents_subrefs_and_purged() {
        let calls = Calls::default();
        let handler = parent(&calls, None, |calls| {
            let calls = calls.clone();
            let middle = Handler::subhandler("mid", move |kw: Kwargs| {
                calls.hit("mid");
                let subhandlers = kw.subhandlers().expect("children have sub-handlers too");
                let calls = calls.clone();
                subhandlers.register("leaf", move |_kw: Kwargs| {
                    calls.hit("leaf");
                    async { Err::<(), _>(Error::temporary("later", Duration::ZERO)) }
                });
                async { Ok::<_, Error>(()) }
            });
            vec![middle]
        });
        let mut body = json!({"metadata": {}});
        let (out, patch) = step_on(&handler, &mut body).await;
        assert!(!out.done, "{patch}");
        assert_eq!(
            record(&body, "parent").and_then(|r| r.subrefs),
            Some(vec!["parent/mid".to_owned(), "parent/mid/leaf".to_owned()])
        );
        assert_eq!(
            record(&body, "parent/mid").and_then(|r| r.subrefs),
            Some(vec!["parent/mid/leaf".to_owned()])
        );
        assert!(record(&body, "parent/mid/leaf").is_some());
    }

    #[tokio::test]
    async fn a_child_patch_joins_the_parents_and_filters_apply() {
        let hits = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&hits);
        let handler = Handler::on_create(resource(), "parent", move |kw: Kwargs| {
            let subhandlers = kw.subhandlers().expect("sub-handlers");
            let counted = Arc::clone(&counted);
            subhandlers.register("labels", move |kw: Kwargs| {
                counted.fetch_add(1, Ordering::SeqCst);
                kw.patch.set("metadata.labels.done", json!("yes"));
                async { Ok::<_, Error>(()) }
            });
            subhandlers.add(
                Handler::subhandler("skipped", |_kw: Kwargs| async {
                    Err::<(), _>(Error::permanent("never called"))
                })
                .label("absent", "x"),
            );
            kw.patch.set("metadata.labels.parent", json!("yes"));
            async { Ok::<_, Error>(()) }
        });
        let mut body = json!({"metadata": {}});
        let (out, _) = step_on(&handler, &mut body).await;
        assert!(out.done);
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        assert_eq!(
            body["metadata"]["labels"],
            json!({"parent": "yes", "done": "yes"})
        );
    }
}
