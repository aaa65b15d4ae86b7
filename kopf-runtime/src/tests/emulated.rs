//! Tests of the engine's modules against the Kubernetes API emulator from
//! kopf-testing (with the `emulator` feature): watching (creation, deletion,
//! dropped watches, compaction, namespace globs), patching (versions, gone
//! objects, throttling), finalizer patches and Event posting, all over real
//! HTTP on 127.0.0.1.
//!
//! The same behaviours are also covered with paused time against a scripted
//! in-process API in the unit tests of `watching`, `patching` and `posting`.

use std::time::Duration;

use kopf_testing::{Emulator, FailRule};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::ApiResource;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::fields::meta_str;
use crate::operator::namespaces::NamespaceSelector;
use crate::persistence::finalizers::merge_patch;
use crate::persistence::patching::{ObjectVersion, PatchError, PatchOutcome, PatchTarget, Patcher};
use crate::posting::EventPoster;
use crate::settings::{NetworkingSettings, PostingSettings, WatchingSettings};
use crate::watching::{DeletedBy, ObjectEvent, ResourceWatcher, Seen};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const LIMIT: Duration = Duration::from_secs(30);

fn configmaps() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
    }
}

fn namespaces() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Namespace".into(),
        plural: "namespaces".into(),
    }
}

async fn create_namespace(client: &kube::Client, name: &str) -> Result<DynamicObject> {
    let api = Api::<DynamicObject>::all_with(client.clone(), &namespaces());
    let obj = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )?;
    Ok(api.create(&PostParams::default(), &obj).await?)
}

async fn create_cm(client: &kube::Client, ns: &str, name: &str) -> Result<DynamicObject> {
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &configmaps());
    let obj = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"},
    }))?;
    Ok(api.create(&PostParams::default(), &obj).await?)
}

async fn delete_cm(client: &kube::Client, ns: &str, name: &str) -> Result {
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &configmaps());
    api.delete(name, &DeleteParams::default()).await?;
    Ok(())
}

struct Watching {
    rx: mpsc::Receiver<ObjectEvent>,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

impl Watching {
    fn start(client: kube::Client, selector: NamespaceSelector) -> Self {
        let settings = WatchingSettings {
            error_backoffs: vec![Duration::from_millis(100)],
            ..Default::default()
        };
        Self::start_with(client, selector, settings, 64)
    }

    /// A watcher with `settings` whose channel holds `capacity` events.
    fn start_with(
        client: kube::Client,
        selector: NamespaceSelector,
        settings: WatchingSettings,
        capacity: usize,
    ) -> Self {
        let watcher = ResourceWatcher::new(client, configmaps(), true, selector, settings);
        let (tx, rx) = mpsc::channel(capacity);
        let cancel = CancellationToken::new();
        let tasks = TaskTracker::new();
        tasks.spawn(watcher.run(tx, cancel.clone()));
        Self { rx, cancel, tasks }
    }

    async fn next(&mut self) -> ObjectEvent {
        tokio::time::timeout(LIMIT, self.rx.recv())
            .await
            .expect("an event in time")
            .expect("open")
    }

    /// Skip events until one matches.
    async fn until(&mut self, pred: impl Fn(&ObjectEvent) -> bool) -> ObjectEvent {
        loop {
            let event = self.next().await;
            if pred(&event) {
                return event;
            }
        }
    }

    async fn stop(self) {
        self.cancel.cancel();
        self.tasks.close();
        tokio::time::timeout(LIMIT, self.tasks.wait())
            .await
            .expect("stops in time");
    }
}

fn named(event: &ObjectEvent) -> Option<&str> {
    event.object().and_then(|o| meta_str(o, "name"))
}

#[tokio::test]
async fn watch_reports_creation_and_deletion() -> Result {
    let emulator = Emulator::start().await?;
    let client = emulator.client();
    create_namespace(&client, "t1").await?;
    let mut watching = Watching::start(client.clone(), NamespaceSelector::new(["t1"], false)?);
    assert!(matches!(
        watching.next().await,
        ObjectEvent::Synced { count: 0 }
    ));

    let created = create_cm(&client, "t1", "a").await?;
    let event = watching.next().await;
    assert!(
        matches!(
            event,
            ObjectEvent::Upserted {
                seen: Seen::New,
                ..
            }
        ),
        "{event:?}"
    );
    assert_eq!(event.uid(), created.metadata.uid.as_deref());

    delete_cm(&client, "t1", "a").await?;
    let event = watching
        .until(|e| matches!(e, ObjectEvent::Deleted { .. }))
        .await;
    assert!(matches!(
        event,
        ObjectEvent::Deleted {
            how: DeletedBy::Event,
            ..
        }
    ));
    watching.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_watcher_lists_then_ends_when_cancelled() -> Result {
    let emulator = Emulator::start().await?;
    let client = emulator.client();
    create_namespace(&client, "dev-1").await?;
    create_cm(&client, "dev-1", "a").await?;
    let selector = NamespaceSelector::new(["dev-*"], false)?;
    let watcher = ResourceWatcher::new(
        client,
        configmaps(),
        true,
        selector,
        WatchingSettings::default(),
    );
    let (tx, mut rx) = mpsc::channel(1024);
    let cancel = CancellationToken::new();
    let task = tokio::spawn(watcher.run(tx, cancel.clone()));
    loop {
        let event = tokio::time::timeout(LIMIT, rx.recv()).await?;
        if let ObjectEvent::Synced { count } = event.expect("open until cancelled") {
            assert_eq!(count, 1, "the one object in dev-1");
            break;
        }
    }
    cancel.cancel();
    tokio::time::timeout(LIMIT, task).await??;
    Ok(())
}

#[tokio::test]
async fn dropped_watches_are_resumed() -> Result {
    let emulator = Emulator::start().await?;
    let client = emulator.client();
    create_namespace(&client, "t1").await?;
    let mut watching = Watching::start(client.clone(), NamespaceSelector::new(["t1"], false)?);
    watching
        .until(|e| matches!(e, ObjectEvent::Synced { .. }))
        .await;

    emulator.faults().drop_watches();
    create_cm(&client, "t1", "after-drop").await?;
    let event = watching.until(|e| named(e) == Some("after-drop")).await;
    assert!(matches!(
        event,
        ObjectEvent::Upserted {
            seen: Seen::New,
            ..
        }
    ));
    watching.stop().await;
    Ok(())
}

#[tokio::test]
async fn compaction_relists_and_vanishes_what_was_deleted_meanwhile() -> Result {
    let emulator = Emulator::start().await?;
    let client = emulator.client();
    create_namespace(&client, "t1").await?;
    create_cm(&client, "t1", "keep").await?;
    create_cm(&client, "t1", "gone").await?;
    let mut watching = Watching::start(client.clone(), NamespaceSelector::new(["t1"], false)?);
    watching
        .until(|e| matches!(e, ObjectEvent::Synced { count: 2 }))
        .await;

    // Make the watcher miss the deletion: its watch requests fail while the
    // object is deleted and the history compacted, so it must re-list.
    emulator
        .faults()
        .fail_next(1000, FailRule::status(500).verb("watch"));
    emulator.faults().drop_watches();
    // The watch is down (its next attempt failed) before the deletion.
    tokio::time::timeout(LIMIT, async {
        while !emulator
            .requests()
            .iter()
            .any(|r| r.verb == "watch" && r.status == 500)
        {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await?;
    delete_cm(&client, "t1", "gone").await?;
    emulator.faults().compact();
    emulator.faults().clear();

    let event = watching.until(|e| named(e) == Some("gone")).await;
    assert!(
        matches!(
            event,
            ObjectEvent::Deleted {
                how: DeletedBy::Vanished,
                ..
            }
        ),
        "{event:?}"
    );
    let synced = watching
        .until(|e| matches!(e, ObjectEvent::Synced { .. }))
        .await;
    assert!(
        matches!(synced, ObjectEvent::Synced { count: 1 }),
        "{synced:?}"
    );
    watching.stop().await;
    Ok(())
}

#[tokio::test]
async fn globbed_namespaces_follow_namespace_lifecycle() -> Result {
    let emulator = Emulator::start().await?;
    let client = emulator.client();
    create_namespace(&client, "dev-1").await?;
    create_namespace(&client, "prod").await?;
    create_cm(&client, "prod", "not-served").await?;
    let mut watching = Watching::start(client.clone(), NamespaceSelector::new(["dev-*"], false)?);
    watching
        .until(|e| matches!(e, ObjectEvent::Synced { .. }))
        .await;

    create_namespace(&client, "dev-2").await?;
    create_cm(&client, "dev-2", "served").await?;
    let event = watching.until(|e| named(e).is_some()).await;
    assert_eq!(named(&event), Some("served"));
    watching.stop().await;
    Ok(())
}

fn target(obj: &DynamicObject) -> PatchTarget {
    PatchTarget::for_object(obj, configmaps(), false).expect("named")
}

#[tokio::test]
async fn patches_return_the_new_version_and_gone_objects() -> Result {
    let emulator = Emulator::start().await?;
    let client = emulator.client();
    create_namespace(&client, "t1").await?;
    let obj = create_cm(&client, "t1", "a").await?;
    let patcher = Patcher::new(client.clone(), &NetworkingSettings::default());

    let outcome = patcher
        .merge(&target(&obj), &json!({"metadata": {"labels": {"x": "y"}}}))
        .await?;
    let patched = outcome.object().expect("exists");
    assert_ne!(
        meta_str(patched, "resourceVersion"),
        obj.metadata.resource_version.as_deref()
    );
    // The version alone, as the engine decodes its own patches' answers.
    let versioned = patcher
        .merge_as::<ObjectVersion>(&target(&obj), &json!({"metadata": {"labels": {"x": "w"}}}))
        .await?;
    let version = versioned.object().and_then(ObjectVersion::resource_version);
    assert!(version.is_some());
    assert_ne!(version, meta_str(patched, "resourceVersion"));

    delete_cm(&client, "t1", "a").await?;
    let outcome = patcher
        .merge(&target(&obj), &json!({"metadata": {"labels": {"x": "z"}}}))
        .await?;
    assert!(matches!(outcome, PatchOutcome::Gone));
    Ok(())
}

#[tokio::test]
async fn throttled_patches_honour_retry_after() -> Result {
    let emulator = Emulator::start().await?;
    let client = emulator.client();
    create_namespace(&client, "t1").await?;
    let obj = create_cm(&client, "t1", "a").await?;
    let patcher = Patcher::new(client.clone(), &NetworkingSettings::default());

    emulator.faults().fail_next(
        1,
        FailRule {
            status: 429,
            retry_after: Some(1),
            ..Default::default()
        },
    );
    let started = std::time::Instant::now();
    let outcome = patcher
        .merge(&target(&obj), &json!({"metadata": {"labels": {"x": "y"}}}))
        .await?;
    assert!(outcome.object().is_some());
    assert!(started.elapsed() >= Duration::from_secs(1));
    Ok(())
}

#[tokio::test]
async fn finalizers_are_added_and_removed_without_clobbering_others() -> Result {
    let emulator = Emulator::start().await?;
    let client = emulator.client();
    create_namespace(&client, "t1").await?;
    let obj = create_cm(&client, "t1", "a").await?;
    let patcher = Patcher::new(client.clone(), &NetworkingSettings::default());
    let mine = "kopf.zalando.org/KopfFinalizerMarker";

    let patch_for = |body: &serde_json::Value, present: bool| {
        let mut patch = json!({});
        merge_patch(body, &mut patch, mine, present);
        patch
    };
    let body = serde_json::to_value(&obj)?;
    let outcome = patcher
        .merge(&target(&obj), &patch_for(&body, true))
        .await?;
    let with_mine = outcome.object().expect("exists").clone();

    // Someone else adds theirs meanwhile.
    let theirs = json!({"metadata": {"finalizers": [mine, "example.com/theirs"]}});
    patcher.merge(&target(&obj), &theirs).await?;

    // A removal built from the body seen before theirs was added is refused
    // instead of clobbering theirs.
    let stale = with_mine;
    let rejected = patcher
        .merge(&target(&obj), &patch_for(&stale, false))
        .await;
    assert!(
        matches!(rejected, Err(PatchError::Conflict { .. })),
        "{rejected:?}"
    );

    // Rebuilt from the object as it is now, the removal keeps theirs.
    let fresh = patcher.merge(&target(&obj), &json!({})).await?;
    let fresh = fresh.object().expect("exists").clone();
    let outcome = patcher
        .merge(&target(&obj), &patch_for(&fresh, false))
        .await?;
    let finalizers = &outcome.object().expect("exists")["metadata"]["finalizers"];
    assert_eq!(finalizers, &json!(["example.com/theirs"]));

    // An addition built from a stale list is rejected instead of clobbering.
    let rejected = patcher.merge(&target(&obj), &patch_for(&body, true)).await;
    assert!(
        matches!(
            rejected,
            Err(PatchError::Invalid { .. } | PatchError::Conflict { .. })
        ),
        "{rejected:?}"
    );
    Ok(())
}

#[tokio::test]
async fn events_are_posted_about_objects() -> Result {
    let emulator = Emulator::start().await?;
    let client = emulator.client();
    create_namespace(&client, "t1").await?;
    let obj = create_cm(&client, "t1", "a").await?;
    let (poster, task) = EventPoster::new(client.clone(), PostingSettings::default());
    let cancel = CancellationToken::new();
    let tasks = TaskTracker::new();
    tasks.spawn(task.run(cancel.clone()));
    poster.info(&obj, "Tested", "hello from kopf-rs");

    let events = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        "t1",
        &ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "Event".into(),
            plural: "events".into(),
        },
    );
    tokio::time::timeout(LIMIT, async {
        loop {
            let list = events.list(&ListParams::default()).await.expect("listable");
            if list.items.iter().any(|e| e.data["reason"] == "Tested") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await?;
    cancel.cancel();
    tasks.close();
    tasks.wait().await;
    Ok(())
}

#[tokio::test]
async fn deleted_namespaces_take_their_objects_with_them() -> Result {
    let emulator = Emulator::start().await?;
    let client = emulator.client();
    create_namespace(&client, "dev-1").await?;
    create_cm(&client, "dev-1", "doomed").await?;
    let mut watching = Watching::start(client.clone(), NamespaceSelector::new(["dev-*"], false)?);
    let event = watching.until(|e| named(e) == Some("doomed")).await;
    assert!(matches!(event, ObjectEvent::Upserted { .. }));

    let api = Api::<DynamicObject>::all_with(client.clone(), &namespaces());
    api.delete("dev-1", &DeleteParams::default()).await?;
    let event = watching.until(|e| named(e) == Some("doomed")).await;
    assert!(matches!(event, ObjectEvent::Deleted { .. }), "{event:?}");
    // Reported once: nothing more about it arrives.
    let more = tokio::time::timeout(
        Duration::from_millis(500),
        watching.until(|e| named(e) == Some("doomed")),
    )
    .await;
    assert!(more.is_err(), "reported twice: {more:?}");
    watching.stop().await;
    Ok(())
}

fn examples() -> ApiResource {
    let gvk = kube::core::GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample");
    ApiResource::from_gvk_with_plural(&gvk, "kopfexamples")
}

#[tokio::test]
async fn status_goes_to_the_subresource_of_a_crd() -> Result {
    let emulator = Emulator::builder()
        .crd("kopf.dev", "v1", "kopfexamples", "KopfExample", true)
        .start()
        .await?;
    let client = emulator.client();
    create_namespace(&client, "t1").await?;
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), "t1", &examples());
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kopf.dev/v1", "kind": "KopfExample", "metadata": {"name": "ex"}, "spec": {"field": "x"},
    }))?;
    let obj = api.create(&PostParams::default(), &obj).await?;
    let target = PatchTarget::for_object(&obj, examples(), true).expect("named");
    let patcher = Patcher::new(client.clone(), &NetworkingSettings::default());
    let patch =
        json!({"metadata": {"labels": {"l": "v"}}, "status": {"create_fn": {"message": "done"}}});
    let outcome = patcher.merge(&target, &patch).await?;
    let patched = outcome.object().expect("exists");
    assert_eq!(patched["status"]["create_fn"]["message"], "done");
    assert_eq!(patched["metadata"]["labels"]["l"], "v");
    Ok(())
}

#[tokio::test]
async fn kopf_state_round_trips_through_the_api() -> Result {
    use crate::persistence::diffbase::{DiffBaseStorage, diff};
    use crate::persistence::progress::{ProgressRecord, ProgressStorage};

    let emulator = Emulator::start().await?;
    let client = emulator.client();
    create_namespace(&client, "t1").await?;
    let obj = create_cm(&client, "t1", "a").await?;
    let patcher = Patcher::new(client.clone(), &NetworkingSettings::default());
    let progress = ProgressStorage::default();
    let diffbase = DiffBaseStorage::default();

    let body = serde_json::to_value(&obj)?;
    let mut patch = json!({});
    let record = ProgressRecord {
        retries: Some(1),
        success: Some(true),
        ..ProgressRecord::default()
    };
    progress.store("create_fn/sub", &record, &body, &mut patch);
    let (_, essence) = diffbase.essences(&body, &progress);
    diffbase.store(&body, &essence, &mut patch);
    let stored = patcher.merge(&target(&obj), &patch).await?;
    let stored = stored.object().expect("exists").clone();

    assert_eq!(progress.fetch("create_fn/sub", &stored), Some(record));
    let (old, new) = diffbase.essences(&stored, &progress);
    assert_eq!(
        old.as_ref(),
        Some(&new),
        "kopf's own annotations are not part of the essence"
    );
    assert!(diff(old.as_ref().unwrap_or(&serde_json::Value::Null), &new).is_empty());

    let mut purge = json!({});
    progress.purge("create_fn/sub", &stored, &mut purge);
    let purged = patcher.merge(&target(&obj), &purge).await?;
    let purged = purged.object().expect("exists").clone();
    assert_eq!(progress.fetch("create_fn/sub", &purged), None);
    Ok(())
}

#[tokio::test]
async fn throttled_listing_is_retried_after_the_hint() -> Result {
    let emulator = Emulator::start().await?;
    let client = emulator.client();
    create_namespace(&client, "t1").await?;
    create_cm(&client, "t1", "a").await?;
    let rule = FailRule {
        retry_after: Some(1),
        ..FailRule::status(429)
            .verb("list")
            .path_contains("configmaps")
    };
    emulator.faults().fail_next(1, rule);
    let started = std::time::Instant::now();
    let mut watching = Watching::start(client.clone(), NamespaceSelector::new(["t1"], false)?);
    let synced = watching
        .until(|e| matches!(e, ObjectEvent::Synced { .. }))
        .await;
    assert!(
        matches!(synced, ObjectEvent::Synced { count: 1 }),
        "{synced:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "the server's hint is honoured"
    );
    watching.stop().await;
    Ok(())
}

#[tokio::test]
async fn an_expired_continue_token_turns_the_listing_into_one_whole_list() -> Result {
    let emulator = Emulator::start().await?;
    let client = emulator.client();
    create_namespace(&client, "t1").await?;
    for name in ["a", "b", "c", "d", "e"] {
        create_cm(&client, "t1", name).await?;
    }
    let settings = WatchingSettings {
        error_backoffs: vec![Duration::from_millis(100)],
        list_page_size: 2,
        ..Default::default()
    };
    // One event in the channel: the listing waits on this test after its
    // first page, before it asks for the second.
    let mut watching = Watching::start_with(
        client.clone(),
        NamespaceSelector::new(["t1"], false)?,
        settings,
        1,
    );
    let lists = || {
        emulator
            .requests()
            .into_iter()
            .filter(|r| r.verb == "list" && r.path.ends_with("/configmaps"))
            .map(|r| (r.query, r.status))
            .collect::<Vec<_>>()
    };
    tokio::time::timeout(LIMIT, async {
        while lists().is_empty() {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await?;
    // Meanwhile "a" (on the first page) goes, "f" comes, and the first
    // page's version is compacted.
    delete_cm(&client, "t1", "a").await?;
    create_cm(&client, "t1", "f").await?;
    emulator.faults().compact();

    let mut seen = Vec::new();
    loop {
        let event = watching.next().await;
        let name = named(&event).unwrap_or_default().to_string();
        match event {
            ObjectEvent::Synced { count } => {
                seen.push(format!("synced:{count}"));
                break;
            }
            ObjectEvent::Upserted { seen: how, .. } => seen.push(format!("+{name}({how:?})")),
            ObjectEvent::Deleted { how, .. } => seen.push(format!("-{name}({how:?})")),
            ObjectEvent::Undecodable { .. } => seen.push(format!("!{name}")),
        }
    }
    assert_eq!(
        seen,
        [
            "+a(New)",
            "+b(New)",
            "+b(Unchanged)",
            "+c(New)",
            "+d(New)",
            "+e(New)",
            "+f(New)",
            "-a(Vanished)",
            "synced:5",
        ]
    );
    // The second page's token expired; the whole list followed at once,
    // without a limit, rather than pages from the start again.
    let lists = lists();
    assert_eq!(lists.len(), 3, "{lists:?}");
    let [(first, 200), (second, 410), (whole, 200)] = &lists[..] else {
        panic!("a page, its expired continuation, the whole list: {lists:?}");
    };
    assert!(first.contains("limit=2") && !first.contains("continue"));
    assert!(second.contains("limit=2") && second.contains("continue="));
    assert!(
        !whole.contains("limit") && !whole.contains("continue"),
        "{whole}"
    );
    watching.stop().await;
    Ok(())
}
