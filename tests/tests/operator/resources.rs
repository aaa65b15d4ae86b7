//! Which resources the handlers serve, as Kopf selects them: by kind,
//! plural, singular, short name or category, with or without the group,
//! in the preferred version when none is given; ambiguous selectors; and
//! resources that appear, change versions or disappear while the operator
//! runs.

use std::time::Duration;

use kopf_runtime::{Error, Handler, Kwargs, Operator, OperatorError, Registry, ResourceRef};
use kopf_testing::{Emulator, FailRule};
use kopf_tests::{
    Calls, PATIENCE, Running, capture_logs, captured_warnings, configmaps, create, eventually, get,
    get_json, logs, raw_api, scrape, test_settings, touch,
};
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Custom resource definitions, for raw access.
fn crds() -> ApiResource {
    ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    }
}

/// One version of a CRD: its name, whether it is served, whether it is stored.
type Version = (&'static str, bool, bool);

/// A CRD of a namespaced `Kind` in `group`: `kinds` plural, `kind`
/// lowercased singular, with short names and categories.
struct Definition {
    group: &'static str,
    kind: &'static str,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
}

impl Definition {
    fn plural(&self) -> String {
        format!("{}s", self.kind.to_lowercase())
    }

    fn name(&self) -> String {
        format!("{}.{}", self.plural(), self.group)
    }

    fn versions(versions: &[Version]) -> Value {
        versions
            .iter()
            .map(|(name, served, storage)| {
                json!({
                    "name": name, "served": served, "storage": storage,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                    "subresources": {"status": {}},
                })
            })
            .collect()
    }

    fn body(&self, versions: &[Version]) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": self.name()},
            "spec": {
                "group": self.group,
                "names": {
                    "plural": self.plural(),
                    "singular": self.kind.to_lowercase(),
                    "kind": self.kind,
                    "listKind": format!("{}List", self.kind),
                    "shortNames": self.short_names,
                    "categories": self.categories,
                },
                "scope": "Namespaced",
                "versions": Self::versions(versions),
            },
        }))
        .expect("a CRD")
    }

    async fn install(&self, emulator: &Emulator, versions: &[Version]) {
        Api::<DynamicObject>::all_with(emulator.client(), &crds())
            .create(&PostParams::default(), &self.body(versions))
            .await
            .unwrap_or_else(|e| panic!("creating the CRD {}: {e}", self.name()));
    }

    async fn set_versions(&self, emulator: &Emulator, versions: &[Version]) {
        let patch = json!({"spec": {"versions": Self::versions(versions)}});
        Api::<DynamicObject>::all_with(emulator.client(), &crds())
            .patch(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("changing the versions of {}: {e}", self.name()));
    }

    async fn uninstall(&self, emulator: &Emulator) {
        Api::<DynamicObject>::all_with(emulator.client(), &crds())
            .delete(&self.name(), &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting the CRD {}: {e}", self.name()));
    }

    fn api(&self, version: &str) -> ApiResource {
        ApiResource {
            group: self.group.into(),
            version: version.into(),
            api_version: format!("{}/{version}", self.group),
            kind: self.kind.into(),
            plural: self.plural(),
        }
    }
}

const V1: Version = ("v1", true, true);

/// A handler recording `[id, name, apiVersion]` as a call named `id`.
fn record(
    calls: &Calls,
    id: &'static str,
) -> impl Fn(Kwargs) -> futures::future::BoxFuture<'static, Result<(), Error>> + Send + Sync + 'static
{
    let calls = calls.clone();
    move |kw: Kwargs| {
        let calls = calls.clone();
        Box::pin(async move {
            let api_version = kw.body.get("apiVersion").cloned().unwrap_or(Value::Null);
            calls.push(id, json!([kw.name(), api_version]));
            Ok(())
        })
    }
}

#[tokio::test]
async fn every_name_of_a_resource_selects_it_with_or_without_its_group() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let examples = Definition {
        group: "names.kopf.dev",
        kind: "KopfExample",
        short_names: &["kex"],
        categories: &["kopf"],
    };
    examples.install(&emulator, &[V1]).await;
    let calls = Calls::default();
    let selectors = [
        ("positional_plural", ResourceRef::named("kopfexamples")),
        ("positional_kind", ResourceRef::named("KopfExample")),
        ("positional_short", ResourceRef::named("kex")),
        (
            "dotted_group",
            ResourceRef::named("kopfexample.names.kopf.dev"),
        ),
        (
            "dotted_version",
            ResourceRef::named("kopfexamples.v1.names.kopf.dev"),
        ),
        (
            "in_group",
            ResourceRef::named_in("names.kopf.dev", "kopfexample"),
        ),
        (
            "group_version",
            ResourceRef::named_in("names.kopf.dev/v1", "kex"),
        ),
        (
            "exact",
            ResourceRef::dynamic("names.kopf.dev", "v1", "kopfexamples"),
        ),
        ("kind", ResourceRef::by_kind("KopfExample")),
        ("plural", ResourceRef::by_plural("kopfexamples")),
        ("singular", ResourceRef::by_singular("kopfexample")),
        (
            "shortcut",
            ResourceRef::by_shortcut("kex").with_group("names.kopf.dev"),
        ),
        ("category", ResourceRef::by_category("kopf")),
    ];
    let mut builder = Registry::builder();
    for (id, selector) in selectors.clone() {
        builder = builder.on_create(selector, id, record(&calls, id));
    }
    let registry = builder
        // One handler reached through two names of the resource.
        .on_create(ResourceRef::named("kex"), "once", record(&calls, "once"))
        .on_create(
            ResourceRef::by_kind("KopfExample"),
            "once",
            record(&calls, "once"),
        )
        // The core group, by a short name and by `v1`.
        .on_create(
            ResourceRef::named("cm"),
            "core_short",
            record(&calls, "core_short"),
        )
        .on_create(
            ResourceRef::named_in("v1", "configmap"),
            "core_v1",
            record(&calls, "core_v1"),
        )
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    create(&emulator, &examples.api("v1"), "default", "x", json!({})).await;
    create(&emulator, &configmaps(), "default", "c", json!({})).await;
    for (id, _) in &selectors {
        assert_eq!(
            calls.wait_for(id, 1).await,
            [json!(["x", "names.kopf.dev/v1"])],
            "{id}"
        );
    }
    for id in ["core_short", "core_v1"] {
        assert_eq!(calls.wait_for(id, 1).await, [json!(["c", "v1"])], "{id}");
    }
    // Once the object's later change is handled, so was its creation.
    touch(&raw_api(&emulator, &examples.api("v1"), "default"), "x").await;
    assert_eq!(calls.named("once"), [json!(["x", "names.kopf.dev/v1"])]);
    operator.stop().await;
}

#[tokio::test]
async fn without_a_version_the_preferred_one_is_served_and_followed_when_it_changes() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let examples = Definition {
        group: "preferred.kopf.dev",
        kind: "KopfExample",
        short_names: &[],
        categories: &[],
    };
    // The preferred version is the highest (v2), not the stored one (v1).
    examples
        .install(&emulator, &[V1, ("v2", true, false)])
        .await;
    let calls = Calls::default();
    let registry = Registry::builder()
        .on_create(
            ResourceRef::named_in("preferred.kopf.dev", "kopfexamples"),
            "created",
            record(&calls, "created"),
        )
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    create(&emulator, &examples.api("v1"), "default", "a", json!({})).await;
    assert_eq!(
        calls.wait_for("created", 1).await,
        [json!(["a", "preferred.kopf.dev/v2"])]
    );

    // v2 is no longer served: v1 is preferred now, and served instead.
    examples
        .set_versions(&emulator, &[V1, ("v2", false, false)])
        .await;
    eventually("v2 to stop being served", || async {
        let warnings = captured_warnings();
        warnings
            .lines()
            .any(|l| {
                l.contains("stopped serving") && l.contains("kopfexamples.v2.preferred.kopf.dev")
            })
            .then_some(())
    })
    .await;
    create(&emulator, &examples.api("v1"), "default", "b", json!({})).await;
    let created = calls.wait_for("created", 2).await;
    assert_eq!(created[1], json!(["b", "preferred.kopf.dev/v1"]));
    assert_eq!(created.len(), 2, "`a` is not created again: {created:?}");
    operator.stop().await;
}

#[tokio::test]
async fn a_name_in_two_groups_is_a_startup_error_naming_both() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    for group in ["one.ambiguous.example", "two.ambiguous.example"] {
        Definition {
            group,
            kind: "Widget",
            short_names: &[],
            categories: &[],
        }
        .install(&emulator, &[V1])
        .await;
    }
    let calls = Calls::default();
    let registry = Registry::builder()
        .on_create(
            ResourceRef::named("widgets"),
            "created",
            record(&calls, "created"),
        )
        .build()
        .expect("a valid registry");
    let run = Operator::new(registry)
        .client(emulator.client())
        .settings(test_settings())
        .run_until(std::future::pending());
    let result = tokio::time::timeout(PATIENCE, run)
        .await
        .expect("the operator exits by itself");
    let error = result.expect_err("an ambiguous resource is a start-up error");
    let message = error.to_string();
    match error {
        OperatorError::AmbiguousResource {
            selector,
            candidates,
            ..
        } => {
            assert_eq!(selector, "widgets");
            assert_eq!(
                candidates,
                [
                    "widgets.v1.one.ambiguous.example",
                    "widgets.v1.two.ambiguous.example"
                ]
            );
        }
        other => panic!("expected an ambiguous resource, got {other:?}"),
    }
    assert!(
        message.contains("widgets.one.ambiguous.example"),
        "the message shows how to name the group: {message}"
    );
    assert!(calls.all().is_empty(), "nothing was served");
}

#[tokio::test]
async fn two_handlers_of_one_id_reaching_one_resource_are_a_startup_error() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let registry = Registry::builder()
        .handler(
            Handler::on_create(
                ResourceRef::named("configmaps"),
                "same",
                record(&calls, "a"),
            )
            .fn_path("a::first"),
        )
        .handler(
            Handler::on_create(ResourceRef::named("cm"), "same", record(&calls, "b"))
                .fn_path("b::second"),
        )
        .build()
        .expect("different selectors: a valid registry");
    let run = Operator::new(registry)
        .client(emulator.client())
        .settings(test_settings())
        .run_until(std::future::pending());
    let result = tokio::time::timeout(PATIENCE, run)
        .await
        .expect("the operator exits by itself");
    match result {
        Err(OperatorError::DuplicateHandler {
            id,
            resource,
            handlers,
            ..
        }) => {
            assert_eq!((id.as_str(), resource.as_str()), ("same", "configmaps.v1"));
            assert_eq!(
                handlers,
                ["`b::second` (as `cm`)", "`a::first` (as `configmaps`)"],
                "in the registry's order"
            );
        }
        other => panic!("expected a duplicate handler, got {other:?}"),
    }
    assert!(calls.all().is_empty(), "nothing was served");
}

#[tokio::test]
async fn a_category_serves_every_resource_in_it() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let definitions = [
        Definition {
            group: "one.category.example",
            kind: "Widget",
            short_names: &[],
            categories: &["gizmos"],
        },
        Definition {
            group: "two.category.example",
            kind: "Widget",
            short_names: &[],
            categories: &["gizmos"],
        },
        Definition {
            group: "two.category.example",
            kind: "Other",
            short_names: &[],
            categories: &[],
        },
    ];
    for definition in &definitions {
        definition.install(&emulator, &[V1]).await;
    }
    let calls = Calls::default();
    let registry = Registry::builder()
        .on_create(
            ResourceRef::by_category("gizmos"),
            "created",
            record(&calls, "created"),
        )
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    for (definition, name) in definitions.iter().zip(["w1", "w2", "other"]) {
        create(&emulator, &definition.api("v1"), "default", name, json!({})).await;
    }
    let mut created = calls.wait_for("created", 2).await;
    created.sort_by_key(ToString::to_string);
    assert_eq!(
        created,
        [
            json!(["w1", "one.category.example/v1"]),
            json!(["w2", "two.category.example/v1"])
        ]
    );
    // A later object of a served resource shows the uncategorised one was
    // not served meanwhile.
    create(
        &emulator,
        &definitions[0].api("v1"),
        "default",
        "w3",
        json!({}),
    )
    .await;
    let created = calls.wait_for("created", 3).await;
    assert_eq!(created.len(), 3, "{created:?}");
    assert!(created.iter().all(|c| c[0] != "other"), "{created:?}");
    operator.stop().await;
}

#[tokio::test]
async fn a_selector_matching_nothing_is_a_warning_and_served_once_its_crd_appears() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let calls = Calls::default();
    let registry = Registry::builder()
        .on_create(
            ResourceRef::named("latecomers"),
            "created",
            record(&calls, "created"),
        )
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    eventually("a warning about the unmatched resource", || async {
        captured_warnings()
            .lines()
            .any(|l| l.contains("no resource in the cluster matches") && l.contains("latecomers"))
            .then_some(())
    })
    .await;
    let latecomers = Definition {
        group: "late.example",
        kind: "Latecomer",
        short_names: &[],
        categories: &[],
    };
    latecomers.install(&emulator, &[V1]).await;
    create(&emulator, &latecomers.api("v1"), "default", "l", json!({})).await;
    assert_eq!(
        calls.wait_for("created", 1).await,
        [json!(["l", "late.example/v1"])]
    );
    assert!(operator.is_running());
    operator.stop().await;
}

#[tokio::test]
async fn a_version_no_longer_served_stops_its_daemons_as_on_exit_until_it_is_back() {
    let (logs, _guard) = capture_logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let gizmos = Definition {
        group: "pausing.example",
        kind: "Gizmo",
        short_names: &[],
        categories: &[],
    };
    let versions = |v1_served| [("v1", v1_served, false), ("v2", true, true)];
    gizmos.install(&emulator, &versions(true)).await;
    let calls = Calls::default();
    let (daemon_calls, deleted_calls) = (calls.clone(), calls.clone());
    let registry = Registry::builder()
        .daemon(
            ResourceRef::dynamic("pausing.example", "v1", "gizmos"),
            "watcher",
            move |kw: Kwargs| {
                let calls = daemon_calls.clone();
                async move {
                    calls.push("started", json!(kw.name()));
                    let stopped = kw.stopped.clone().expect("daemons get a stop flag");
                    while !stopped.wait(Duration::from_millis(50)).await {}
                    calls.push("exited", json!(kw.name()));
                    Ok::<_, Error>(())
                }
            },
        )
        .on_delete(
            ResourceRef::dynamic("pausing.example", "v1", "gizmos"),
            "deleted",
            record(&deleted_calls, "deleted"),
        )
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    create(&emulator, &gizmos.api("v1"), "default", "g", json!({})).await;
    calls.wait_for("started", 1).await;

    gizmos.set_versions(&emulator, &versions(false)).await;
    assert_eq!(calls.wait_for("exited", 1).await, [json!("g")]);
    let text = logs.text();
    assert!(
        text.lines().any(|l| l.contains("WARN")
            && l.contains("stopped serving")
            && l.contains("gizmos.v1.pausing.example")),
        "a warning says why: {text}"
    );
    assert!(
        text.contains("reason=operator-pausing"),
        "stopped as on the operator's exit, to be spawned again: {text}"
    );
    assert!(
        get(&emulator, &gizmos.api("v2"), "default", "g")
            .await
            .is_some(),
        "the object lives on"
    );

    gizmos.set_versions(&emulator, &versions(true)).await;
    assert_eq!(calls.wait_for("started", 2).await.len(), 2);
    assert!(calls.named("deleted").is_empty(), "not a deletion");
    assert_eq!(calls.named("exited").len(), 1);
    operator.stop().await;
}

#[tokio::test]
async fn a_deleted_crd_stops_its_serving_until_it_is_created_again() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let widgets = Definition {
        group: "deleting.example",
        kind: "Widget",
        short_names: &[],
        categories: &[],
    };
    widgets.install(&emulator, &[V1]).await;
    let calls = Calls::default();
    let registry = Registry::builder()
        .on_create(
            ResourceRef::named_in("deleting.example", "widgets"),
            "created",
            record(&calls, "created"),
        )
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    create(
        &emulator,
        &widgets.api("v1"),
        "default",
        "before",
        json!({}),
    )
    .await;
    calls.wait_for("created", 1).await;

    widgets.uninstall(&emulator).await;
    eventually("the resource to stop being served", || async {
        captured_warnings()
            .lines()
            .any(|l| l.contains("stopped serving") && l.contains("widgets.v1.deleting.example"))
            .then_some(())
    })
    .await;

    widgets.install(&emulator, &[V1]).await;
    create(&emulator, &widgets.api("v1"), "default", "after", json!({})).await;
    let created = calls.wait_for("created", 2).await;
    assert_eq!(created[1], json!(["after", "deleting.example/v1"]));
    assert!(operator.is_running());
    operator.stop().await;
}

#[tokio::test]
async fn without_access_to_crds_the_resources_are_scanned_periodically() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    emulator.faults().fail_next(
        usize::MAX,
        FailRule::status(403).path_contains("customresourcedefinitions"),
    );
    let calls = Calls::default();
    let registry = Registry::builder()
        .on_create(
            ResourceRef::named_in("forbidden.example", "widgets"),
            "created",
            record(&calls, "created"),
        )
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    eventually("a warning about the CRDs", || async {
        captured_warnings()
            .lines()
            .any(|l| l.contains("cannot watch the custom resource definitions"))
            .then_some(())
    })
    .await;
    emulator.faults().clear();
    let widgets = Definition {
        group: "forbidden.example",
        kind: "Widget",
        short_names: &[],
        categories: &[],
    };
    widgets.install(&emulator, &[V1]).await;
    create(&emulator, &widgets.api("v1"), "default", "w", json!({})).await;
    assert_eq!(
        calls.wait_for("created", 1).await,
        [json!(["w", "forbidden.example/v1"])]
    );
    operator.stop().await;
}

#[tokio::test]
async fn the_probes_and_the_metrics_follow_the_resources_served() {
    logs();
    let emulator = Emulator::start().await.expect("emulator starts");
    let gauges = Definition {
        group: "probing.example",
        kind: "Gauge",
        short_names: &[],
        categories: &[],
    };
    const GAUGES: &str = "probing.example/v1/gauges";
    let calls = Calls::default();
    let registry = Registry::builder()
        .on_event(
            ResourceRef::dynamic("", "v1", "configmaps"),
            "seen",
            record(&calls, "seen"),
        )
        .on_event(
            ResourceRef::named_in("probing.example", "gauges"),
            "gauged",
            record(&calls, "gauged"),
        )
        .build()
        .expect("a valid registry");
    let operator = Running::serving(&emulator, registry, test_settings()).await;
    let urls = operator.urls().clone();
    // A resource not in the cluster is not waited for.
    eventually("the operator to be ready", || async {
        (get_json(&urls.readiness).await.0 == 200).then_some(())
    })
    .await;
    // How many series of the objects tracked name the gauges.
    let tracked = || async {
        let metrics = scrape(&urls.metrics).await;
        let series = format!("kopf_objects_tracked{{resource=\"{GAUGES}\"}}");
        metrics
            .text
            .lines()
            .filter(|line| line.starts_with(&series))
            .count()
    };
    assert_eq!(tracked().await, 0);

    // Found later, it is waited for until its first listing is answered.
    let listing = emulator.faults().hold(Some("list"), Some("/gauges"));
    gauges.install(&emulator, &[V1]).await;
    eventually("the listing of the new resource to be held", || async {
        (listing.waiting() >= 1).then_some(())
    })
    .await;
    let (status, body) = get_json(&urls.readiness).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["waiting"], json!({GAUGES: "listing"}), "{body}");
    listing.release();
    eventually("the new resource to be listed", || async {
        (get_json(&urls.readiness).await.0 == 200).then_some(())
    })
    .await;
    assert_eq!(tracked().await, 1);

    // No longer served, it leaves the probes and the metrics read at
    // scrape time.
    gauges.uninstall(&emulator).await;
    eventually("the resource to leave the metrics", || async {
        (tracked().await == 0).then_some(())
    })
    .await;
    assert_eq!(get_json(&urls.readiness).await.0, 200);
    assert_eq!(get_json(&urls.liveness).await.0, 200);

    // Back, it is there once, its listing waited for as before.
    gauges.install(&emulator, &[V1]).await;
    create(&emulator, &gauges.api("v1"), "default", "g", json!({})).await;
    calls.wait_for("gauged", 1).await;
    eventually("the resource to be ready again", || async {
        (get_json(&urls.readiness).await.0 == 200).then_some(())
    })
    .await;
    assert_eq!(tracked().await, 1, "one series, not one per serving");
    operator.stop().await;
}
