//! Which objects and events reach which handlers: label, annotation, `when`
//! and field filters, namespace globs, `on_event` types, and the operator's
//! own start-up and clean-up activities.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime::{
    ABSENT, Error, Kwargs, NamespaceSelector, Operator, OperatorError, PRESENT, Registry,
    ResourceRef,
};
use kopf_testing::Emulator;
use kopf_tests::{
    Calls, DIFFBASE, PATIENCE, Running, annotation, configmaps, create, create_namespace,
    eventually, get, logs, raw_api, test_settings, touch,
};
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

fn cms() -> ResourceRef {
    ResourceRef::of::<ConfigMap>()
}

/// A handler body recording `[id, namespace/name]` into `calls` as "hit".
fn hit(
    calls: &Calls,
    id: &'static str,
) -> impl Fn(Kwargs) -> futures::future::BoxFuture<'static, Result<(), Error>> + Send + Sync + 'static
{
    let calls = calls.clone();
    move |kw: Kwargs| {
        let calls = calls.clone();
        Box::pin(async move {
            let who = format!(
                "{}/{}",
                kw.namespace().unwrap_or("-"),
                kw.name().unwrap_or("-")
            );
            calls.push("hit", json!([id, who]));
            Ok(())
        })
    }
}

/// The `[id, object]` pairs recorded so far.
fn hits(calls: &Calls) -> BTreeSet<(String, String)> {
    calls
        .named("hit")
        .iter()
        .map(|h| {
            (
                h[0].as_str().unwrap_or("?").to_owned(),
                h[1].as_str().unwrap_or("?").to_owned(),
            )
        })
        .collect()
}

/// How many times the handler `id` was hit.
fn hits_of(calls: &Calls, id: &str) -> usize {
    calls.named("hit").iter().filter(|h| h[0] == id).count()
}

fn pairs(items: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    items
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

/// Waits until the stored diff-base of `ns/name` satisfies `check`.
async fn handled_as(emulator: &Emulator, ns: &str, name: &str, check: impl Fn(&Value) -> bool) {
    eventually(&format!("{ns}/{name} to be handled"), || async {
        let body = get(emulator, &configmaps(), ns, name).await?;
        let essence: Value = serde_json::from_str(annotation(&body, DIFFBASE)?).ok()?;
        check(&essence).then_some(())
    })
    .await;
}

#[tokio::test]
async fn label_annotation_and_when_filters_select_exactly_the_matching_objects() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let registry = Registry::builder()
        .on_create(cms(), "app_web", hit(&calls, "app_web"))
        .label("app", "web")
        .on_create(cms(), "tier_present", hit(&calls, "tier_present"))
        .label("tier", PRESENT)
        .on_create(cms(), "skip_absent", hit(&calls, "skip_absent"))
        .label("skip", ABSENT)
        .on_create(cms(), "owner_me", hit(&calls, "owner_me"))
        .annotation("owner", "me")
        .on_create(cms(), "note_present", hit(&calls, "note_present"))
        .annotation("note", PRESENT)
        .on_create(cms(), "when_c", hit(&calls, "when_c"))
        .when(|kw| kw.name() == Some("c"))
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    let objects = [
        (
            "a",
            json!({"labels": {"app": "web", "tier": "x"}, "annotations": {"owner": "me"}}),
        ),
        (
            "b",
            json!({"labels": {"app": "db", "skip": "y"}, "annotations": {"note": "hi", "owner": "you"}}),
        ),
        ("c", json!({})),
        ("d", json!({"labels": {"app": "db", "skip": "y"}})),
    ];
    for (name, meta) in objects {
        create(
            &emulator,
            &configmaps(),
            "default",
            name,
            json!({"metadata": meta}),
        )
        .await;
    }
    for name in ["a", "b", "c"] {
        handled_as(&emulator, "default", name, |_| true).await;
    }
    // A later object, served once the watch got past `d`; and the served
    // ones are touched, so that no call of them is still to come.
    create(
        &emulator,
        &configmaps(),
        "default",
        "e",
        json!({"metadata": {"labels": {"app": "web", "skip": "y"}}}),
    )
    .await;
    handled_as(&emulator, "default", "e", |_| true).await;
    for name in ["a", "b", "c"] {
        touch(&raw_api(&emulator, &configmaps(), "default"), name).await;
    }
    assert_eq!(
        hits(&calls),
        pairs(&[
            ("app_web", "default/a"),
            ("app_web", "default/e"),
            ("tier_present", "default/a"),
            ("skip_absent", "default/a"),
            ("skip_absent", "default/c"),
            ("owner_me", "default/a"),
            ("note_present", "default/b"),
            ("when_c", "default/c"),
        ])
    );
    assert_eq!(calls.named("hit").len(), 8, "each handler once per object");
    let d = get(&emulator, &configmaps(), "default", "d")
        .await
        .expect("d exists");
    assert!(
        d["metadata"].get("annotations").is_none() && d["metadata"].get("finalizers").is_none(),
        "an object no handler matches is not touched: {d}"
    );
    operator.stop().await;
}

#[tokio::test]
async fn field_value_old_and_new_filters_select_exactly_the_matching_updates() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let c = calls.clone();
    let registry = Registry::builder()
        .on_update(cms(), "mode_on", hit(&calls, "mode_on"))
        .field("data.mode")
        .value(json!("on"))
        .on_update(cms(), "a_to_b", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                calls.push("a_to_b", json!([kw.old.as_deref(), kw.new.as_deref()]));
                calls.push("hit", json!(["a_to_b", "default/m"]));
                Ok::<_, Error>(())
            }
        })
        .field("data.mode")
        .old(json!("a"))
        .new_value(json!("b"))
        .on_update(cms(), "extra_appears", hit(&calls, "extra_appears"))
        .field("data.extra")
        .new_value(PRESENT)
        .on_update(cms(), "other", hit(&calls, "other"))
        .field("data.other")
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    create(
        &emulator,
        &configmaps(),
        "default",
        "m",
        json!({"data": {"mode": "a"}}),
    )
    .await;
    handled_as(&emulator, "default", "m", |e| e["data"]["mode"] == "a").await;

    let api = raw_api(&emulator, &configmaps(), "default");
    let steps = [
        (json!({"data": {"mode": "b"}}), &["a_to_b"][..]),
        (json!({"data": {"mode": "on"}}), &["a_to_b", "mode_on"][..]),
        (json!({"data": {"mode": "off"}}), &["a_to_b", "mode_on"][..]),
        (
            json!({"data": {"extra": "x"}}),
            &["a_to_b", "extra_appears", "mode_on"][..],
        ),
    ];
    for (change, expected) in steps {
        api.patch("m", &PatchParams::default(), &Patch::Merge(&change))
            .await
            .expect("patched");
        let data = change["data"].clone();
        handled_as(&emulator, "default", "m", |e| {
            data.as_object()
                .is_some_and(|d| d.iter().all(|(k, v)| &e["data"][k] == v))
        })
        .await;
        let got: BTreeSet<String> = hits(&calls).into_iter().map(|(id, _)| id).collect();
        let expected: BTreeSet<String> = expected.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(got, expected, "after {change}");
    }
    touch(&api, "m").await;
    // `value` matches the old or the new value (Kopf): `mode_on` runs when
    // the mode turns on, and when it turns off again.
    assert_eq!(calls.named("hit").len(), 4, "{:?}", calls.all());
    assert_eq!(
        hits_of(&calls, "mode_on"),
        2,
        "on, then off again: {:?}",
        calls.all()
    );
    assert_eq!(calls.named("a_to_b"), vec![json!(["a", "b"])]);
    operator.stop().await;
}

async fn serve_team_namespaces(selector: NamespaceSelector) {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    for ns in ["team-a", "team-skip", "other"] {
        create_namespace(&emulator, ns).await;
    }
    for ns in ["team-a", "team-skip", "other", "default"] {
        create(&emulator, &configmaps(), ns, "x", json!({})).await;
    }
    let calls = Calls::default();
    let registry = Registry::builder()
        .on_create(cms(), "create_fn", hit(&calls, "create_fn"))
        .build()
        .expect("a valid registry");
    let operator = Running::start_in(&emulator, registry, test_settings(), selector);
    handled_as(&emulator, "team-a", "x", |_| true).await;

    // A matching namespace created while running is served too; an object
    // of an excluded one created before it is not.
    create(&emulator, &configmaps(), "team-skip", "y", json!({})).await;
    create_namespace(&emulator, "team-b").await;
    create(&emulator, &configmaps(), "team-b", "x", json!({})).await;
    handled_as(&emulator, "team-b", "x", |_| true).await;
    for ns in ["team-a", "team-b"] {
        touch(&raw_api(&emulator, &configmaps(), ns), "x").await;
    }
    assert_eq!(
        hits(&calls),
        pairs(&[("create_fn", "team-a/x"), ("create_fn", "team-b/x")])
    );
    for (ns, name) in [
        ("team-skip", "x"),
        ("team-skip", "y"),
        ("other", "x"),
        ("default", "x"),
    ] {
        let body = get(&emulator, &configmaps(), ns, name)
            .await
            .expect("exists");
        assert!(
            body["metadata"].get("annotations").is_none(),
            "{ns}/{name} is not served: {body}"
        );
    }
    operator.stop().await;
}

#[tokio::test]
async fn namespace_globs_with_a_separate_exclusion_serve_exactly_the_matching_namespaces() {
    let selector = NamespaceSelector::new(["team-*", "!team-skip"], false).expect("valid globs");
    serve_team_namespaces(selector).await;
}

#[tokio::test]
async fn namespace_globs_with_an_inline_exclusion_serve_exactly_the_matching_namespaces() {
    let selector = NamespaceSelector::new(["team-*,!team-skip"], false).expect("valid globs");
    serve_team_namespaces(selector).await;
}

#[tokio::test]
async fn event_handlers_see_the_listing_then_added_modified_and_deleted() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    create(&emulator, &configmaps(), "default", "pre", json!({})).await;
    let calls = Calls::default();
    let c = calls.clone();
    let registry = Registry::builder()
        .on_event(cms(), "watch_fn", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                let raw_type = kw.event.as_deref().map(|e| e["type"].clone());
                calls.push(
                    kw.name().unwrap_or("?"),
                    json!([kw.event_type.map(|t| t.as_str()), raw_type]),
                );
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    let listed = calls.wait_for("pre", 1).await;
    assert_eq!(
        listed[0],
        json!([null, null]),
        "the initial listing has no type"
    );

    let api = raw_api(&emulator, &configmaps(), "default");
    create(&emulator, &configmaps(), "default", "e", json!({})).await;
    calls.wait_for("e", 1).await;
    api.patch(
        "e",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await
    .expect("patched");
    calls.wait_for("e", 2).await;
    api.delete("e", &DeleteParams::default())
        .await
        .expect("deleted");
    calls.wait_for("e", 3).await;
    // Later events, of a new object and of `pre`, are seen: none of `e` is
    // still to come.
    create(&emulator, &configmaps(), "default", "later", json!({})).await;
    calls.wait_for("later", 1).await;
    api.patch(
        "pre",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await
    .expect("patched");
    calls.wait_for("pre", 2).await;
    assert_eq!(
        calls.named("e"),
        vec![
            json!(["ADDED", "ADDED"]),
            json!(["MODIFIED", "MODIFIED"]),
            json!(["DELETED", "DELETED"]),
        ]
    );
    assert_eq!(
        calls.named("pre"),
        vec![json!([null, null]), json!(["MODIFIED", "MODIFIED"])],
        "listed once"
    );
    operator.stop().await;
}

#[tokio::test]
async fn startup_handlers_run_before_anything_and_cleanup_handlers_on_stop() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    create(&emulator, &configmaps(), "default", "pre", json!({})).await;
    let calls = Calls::default();
    let (s, e, c) = (calls.clone(), calls.clone(), calls.clone());
    let registry = Registry::builder()
        .on_startup("boot", move |kw: Kwargs| {
            let calls = s.clone();
            async move {
                calls.push("order", json!(format!("startup {}", kw.retry)));
                if kw.retry == 0 {
                    return Err(Error::temporary("not ready", Duration::from_millis(300)));
                }
                Ok(())
            }
        })
        .on_event(cms(), "watch_fn", move |kw: Kwargs| {
            let calls = e.clone();
            async move {
                calls.push(
                    "order",
                    json!(format!("event {}", kw.name().unwrap_or("?"))),
                );
                Ok::<_, Error>(())
            }
        })
        .on_cleanup("bye", move |_kw: Kwargs| {
            let calls = c.clone();
            async move {
                calls.push("order", json!("cleanup"));
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    calls.wait_for("order", 3).await;
    create(&emulator, &configmaps(), "default", "post", json!({})).await;
    calls.wait_for("order", 4).await;
    assert!(
        calls.named("order").iter().all(|o| o != "cleanup"),
        "not yet"
    );
    operator.stop().await;
    assert_eq!(
        calls.named("order"),
        vec![
            json!("startup 0"),
            json!("startup 1"),
            json!("event pre"),
            json!("event post"),
            json!("cleanup"),
        ]
    );
}

#[tokio::test]
async fn a_permanently_failing_startup_handler_stops_the_operator_before_it_serves() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    create(&emulator, &configmaps(), "default", "pre", json!({})).await;
    let calls = Calls::default();
    let e = calls.clone();
    let registry = Registry::builder()
        .on_startup("boot", |_kw: Kwargs| async {
            Err::<(), _>(Error::permanent("no way"))
        })
        .on_event(cms(), "watch_fn", move |_kw: Kwargs| {
            let calls = e.clone();
            async move {
                calls.push("event", Value::Null);
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry");
    let run = Operator::new(registry)
        .client(emulator.client())
        .settings(test_settings())
        .run_until(std::future::pending());
    let result = tokio::time::timeout(PATIENCE, run)
        .await
        .expect("the operator exits by itself");
    match result {
        Err(OperatorError::Startup { handler, message }) => {
            assert_eq!(handler, "boot");
            assert!(message.contains("no way"), "{message}");
        }
        other => panic!("expected a start-up failure, got {other:?}"),
    }
    assert!(calls.all().is_empty(), "nothing was served");
}

#[tokio::test]
async fn regular_errors_of_a_startup_handler_are_retried_before_the_operator_serves() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    create(&emulator, &configmaps(), "default", "pre", json!({})).await;
    let calls = Calls::default();
    let (s, e) = (calls.clone(), calls.clone());
    let registry = Registry::builder()
        .on_startup("boot", move |kw: Kwargs| {
            let calls = s.clone();
            async move {
                calls.push("order", json!(format!("startup {}", kw.retry)));
                if kw.retry < 2 {
                    return Err(Error::regular("the database is not up yet"));
                }
                Ok(())
            }
        })
        .backoff(Duration::from_millis(200))
        .on_event(cms(), "watch_fn", move |kw: Kwargs| {
            let calls = e.clone();
            async move {
                calls.push(
                    "order",
                    json!(format!("event {}", kw.name().unwrap_or("?"))),
                );
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    calls.wait_for("order", 4).await;
    assert_eq!(
        calls.named("order"),
        vec![
            json!("startup 0"),
            json!("startup 1"),
            json!("startup 2"),
            json!("event pre"),
        ]
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_startup_handler_out_of_retries_stops_the_operator_with_its_last_error() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let s = calls.clone();
    let registry = Registry::builder()
        .on_startup("boot", move |_kw: Kwargs| {
            let calls = s.clone();
            async move {
                calls.push("boot", Value::Null);
                Err::<(), _>(Error::regular("the database is down"))
            }
        })
        .retries(2)
        .backoff(Duration::from_millis(100))
        .build()
        .expect("a valid registry");
    let run = Operator::new(registry)
        .client(emulator.client())
        .settings(test_settings())
        .run_until(std::future::pending());
    let result = tokio::time::timeout(PATIENCE, run)
        .await
        .expect("the operator exits by itself");
    match result {
        Err(OperatorError::Startup { handler, message }) => {
            assert_eq!(handler, "boot");
            assert_eq!(
                message,
                "exceeded 2 retries; the last error: the database is down"
            );
        }
        other => panic!("expected a start-up failure, got {other:?}"),
    }
    assert_eq!(calls.named("boot").len(), 2, "retries count attempts");
}

#[tokio::test]
async fn a_panicking_event_handler_does_not_keep_events_from_the_others() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let c = calls.clone();
    let registry = Registry::builder()
        .on_event(cms(), "a_panics", |kw: Kwargs| async move {
            assert!(kw.name().is_none(), "the event handler panics");
            Ok::<_, Error>(())
        })
        .on_event(cms(), "b_records", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                calls.push(
                    "event",
                    json!([kw.name(), kw.event_type.map(|t| t.as_str())]),
                );
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    for name in ["p1", "p2"] {
        create(&emulator, &configmaps(), "default", name, json!({})).await;
    }
    eventually("both objects to reach the second handler", || async {
        let seen = calls.named("event");
        let seen = |name: &str| seen.iter().any(|e| e[0] == name);
        (seen("p1") && seen("p2")).then_some(())
    })
    .await;
    raw_api(&emulator, &configmaps(), "default")
        .delete("p1", &DeleteParams::default())
        .await
        .expect("deleted");
    eventually("the deletion to reach the second handler", || async {
        calls
            .named("event")
            .contains(&json!(["p1", "DELETED"]))
            .then_some(())
    })
    .await;
    assert!(operator.is_running());
    operator.stop().await;
}

#[tokio::test]
async fn exact_namespace_names_serve_exactly_those_even_when_created_later() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    create_namespace(&emulator, "team-a").await;
    for ns in ["team-a", "default"] {
        create(&emulator, &configmaps(), ns, "x", json!({})).await;
    }
    let calls = Calls::default();
    let registry = Registry::builder()
        .on_create(cms(), "create_fn", hit(&calls, "create_fn"))
        .build()
        .expect("a valid registry");
    let selector = NamespaceSelector::new(["team-a", "later"], false).expect("valid names");
    let operator = Running::start_in(&emulator, registry, test_settings(), selector);
    handled_as(&emulator, "team-a", "x", |_| true).await;
    create_namespace(&emulator, "later").await;
    create(&emulator, &configmaps(), "later", "x", json!({})).await;
    handled_as(&emulator, "later", "x", |_| true).await;
    for ns in ["team-a", "later"] {
        touch(&raw_api(&emulator, &configmaps(), ns), "x").await;
    }
    assert_eq!(
        hits(&calls),
        pairs(&[("create_fn", "team-a/x"), ("create_fn", "later/x")])
    );
    operator.stop().await;
}

#[tokio::test]
async fn cluster_scoped_objects_are_served_whatever_the_namespace_selection() {
    logs();
    let emulator = Emulator::builder()
        .crd("example.com", "v1", "gadgets", "Gadget", false)
        .start()
        .await
        .expect("emulator starts");
    let calls = Calls::default();
    let registry = Registry::builder()
        .on_create(
            ResourceRef::dynamic("example.com", "v1", "gadgets"),
            "create_fn",
            hit(&calls, "create_fn"),
        )
        .build()
        .expect("a valid registry");
    let selector = NamespaceSelector::new(["team-*"], false).expect("valid globs");
    let operator = Running::start_in(&emulator, registry, test_settings(), selector);
    let gadgets = kube::api::ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    let object: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"},
    }))
    .expect("a gadget");
    let api = kube::Api::<kube::api::DynamicObject>::all_with(emulator.client(), &gadgets);
    api.create(&kube::api::PostParams::default(), &object)
        .await
        .expect("created");
    calls.wait_for("hit", 1).await;
    touch(&api, "g").await;
    assert_eq!(hits(&calls), pairs(&[("create_fn", "-/g")]));
    operator.stop().await;
}

#[tokio::test]
async fn objects_of_a_deleted_namespace_are_reported_deleted_once() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    create_namespace(&emulator, "team-a").await;
    let calls = Calls::default();
    let c = calls.clone();
    let registry = Registry::builder()
        .on_event(cms(), "watch_fn", move |kw: Kwargs| {
            let calls = c.clone();
            async move {
                let who = format!(
                    "{}/{}",
                    kw.namespace().unwrap_or("-"),
                    kw.name().unwrap_or("-")
                );
                calls.push("event", json!([who, kw.event_type.map(|t| t.as_str())]));
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry");
    let selector = NamespaceSelector::new(["team-*"], false).expect("valid globs");
    let operator = Running::start_in(&emulator, registry, test_settings(), selector);
    create(&emulator, &configmaps(), "team-a", "x", json!({})).await;
    eventually("the object to be seen", || async {
        calls
            .named("event")
            .iter()
            .any(|e| e[0] == "team-a/x")
            .then_some(())
    })
    .await;
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(emulator.client());
    namespaces
        .delete("team-a", &DeleteParams::default())
        .await
        .expect("deletion requested");
    eventually("the object's deletion to be reported", || async {
        calls
            .named("event")
            .contains(&json!(["team-a/x", "DELETED"]))
            .then_some(())
    })
    .await;
    // An object of a namespace created later is seen: the deletion of the
    // first one is not reported again meanwhile.
    create_namespace(&emulator, "team-b").await;
    create(&emulator, &configmaps(), "team-b", "y", json!({})).await;
    eventually("the later object to be seen", || async {
        calls
            .named("event")
            .iter()
            .any(|e| e[0] == "team-b/y")
            .then_some(())
    })
    .await;
    let deleted = calls
        .named("event")
        .into_iter()
        .filter(|e| e[1] == "DELETED")
        .count();
    assert_eq!(deleted, 1, "{:?}", calls.all());
    operator.stop().await;
}

/// How long the start-up handler below asks to wait before its retry.
const NOT_READY: Duration = Duration::from_secs(60);

#[tokio::test]
async fn an_operator_stuck_in_its_startup_handlers_can_still_be_stopped() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let (s, e) = (calls.clone(), calls.clone());
    let registry = Registry::builder()
        .on_startup("never_ready", move |_kw: Kwargs| {
            let calls = s.clone();
            async move {
                calls.push("startup", Value::Null);
                Err::<(), _>(Error::temporary("not ready", NOT_READY))
            }
        })
        .on_event(cms(), "watch_fn", move |_kw: Kwargs| {
            let calls = e.clone();
            async move {
                calls.push("event", Value::Null);
                Ok::<_, Error>(())
            }
        })
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    calls.wait_for("startup", 1).await;
    let t0 = std::time::Instant::now();
    operator.stop().await;
    assert!(
        t0.elapsed() < NOT_READY / 2,
        "stopped without waiting for the retry: {:?}",
        t0.elapsed()
    );
    assert!(calls.named("event").is_empty(), "nothing was served");
}
