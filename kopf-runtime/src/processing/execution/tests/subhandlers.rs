//! Tests of the sub-handlers: their runs, retries, records and patches.

use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};

use super::super::*;
use super::{apply, cause, progression, resource, storage};
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
