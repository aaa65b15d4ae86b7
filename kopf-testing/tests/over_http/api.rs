//! The emulator's REST surface, driven through `kube::Api` over real HTTP:
//! discovery, namespaces, built-in kinds, CRDs, CRUD, resource versions,
//! selectors, paging, patches, the status subresource, finalizers, errors on
//! bad input, fault injection and request recording.

use std::{collections::BTreeSet, time::Instant};

use crate::common::{api_error, raw_bytes, raw_request, rv_num, within};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::{
    api::{
        coordination::v1::Lease,
        core::v1::{ConfigMap, Namespace, Pod, Secret},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::APIGroup,
};
use kopf_testing::{Emulator, FailRule};
use kube::{
    Api, Client, CustomResource, CustomResourceExt, ResourceExt,
    api::{
        DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, WatchEvent,
        WatchParams,
    },
    core::{DynamicObject, GroupVersionKind},
    discovery::{ApiResource, Discovery, Scope},
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A namespaced custom resource with a status subresource, registered through the API.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "kopf.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
pub(crate) struct WidgetSpec {
    /// Desired size.
    pub size: i64,
}

/// Status of a [`Widget`].
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub(crate) struct WidgetStatus {
    /// Observed phase.
    pub phase: String,
}

async fn emulator() -> Emulator {
    within("the emulator to start", Emulator::start())
        .await
        .expect("the emulator starts")
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}}))
        .expect("configmap")
}

fn cm_labelled(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))
        .expect("configmap")
}

async fn create_cm(api: &Api<ConfigMap>, name: &str) -> ConfigMap {
    within("create", api.create(&PostParams::default(), &cm(name)))
        .await
        .expect("create configmap")
}

/// Registers the `Widget` CRD through the API and waits until it is Established.
async fn install_widget_crd(client: &Client) -> CustomResourceDefinition {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    within(
        "create crd",
        crds.create(&PostParams::default(), &Widget::crd()),
    )
    .await
    .expect("create CRD");
    within("the CRD to be Established", async {
        loop {
            let crd = crds.get("widgets.kopf.dev").await.expect("get CRD");
            let established = crd
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                return crd;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    })
    .await
}

fn widget(name: &str, size: i64) -> Widget {
    Widget::new(name, WidgetSpec { size })
}

fn names<K: ResourceExt>(items: impl IntoIterator<Item = K>) -> BTreeSet<String> {
    items.into_iter().map(|o| o.name_any()).collect()
}

fn set(xs: &[&str]) -> BTreeSet<String> {
    xs.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------- discovery

#[tokio::test]
async fn discovery_endpoints_list_core_and_group_resources() {
    let emu = emulator().await;
    let client = emu.client();

    let version = within("/version", client.apiserver_version())
        .await
        .expect("/version");
    assert!(
        !version.major.is_empty() && !version.git_version.is_empty(),
        "{version:?}"
    );

    let core = within("/api", client.list_core_api_versions())
        .await
        .expect("/api");
    assert!(
        core.versions.iter().any(|v| v == "v1"),
        "/api lists v1: {core:?}"
    );

    let v1 = within("/api/v1", client.list_core_api_resources("v1"))
        .await
        .expect("/api/v1");
    let find = |name: &str| v1.resources.iter().find(|r| r.name == name).cloned();
    for plural in ["configmaps", "secrets", "pods", "namespaces", "events"] {
        let r = find(plural).unwrap_or_else(|| panic!("/api/v1 lists {plural}"));
        assert!(
            r.verbs.iter().any(|v| v == "watch"),
            "{plural} supports watch: {r:?}"
        );
    }
    assert!(find("configmaps").is_some_and(|r| r.namespaced && r.kind == "ConfigMap"));
    assert!(find("namespaces").is_some_and(|r| !r.namespaced && r.kind == "Namespace"));

    let groups = within("/apis", client.list_api_groups())
        .await
        .expect("/apis");
    let group_names: BTreeSet<_> = groups.groups.iter().map(|g| g.name.as_str()).collect();
    for g in [
        "apiextensions.k8s.io",
        "coordination.k8s.io",
        "events.k8s.io",
    ] {
        assert!(group_names.contains(g), "/apis lists {g}: {group_names:?}");
    }

    let req = http::Request::get("/apis/coordination.k8s.io")
        .body(Vec::new())
        .expect("request");
    let group: APIGroup = within("/apis/G", client.request(req))
        .await
        .expect("/apis/coordination.k8s.io");
    assert_eq!(group.name, "coordination.k8s.io");
    assert_eq!(
        group.preferred_version.as_ref().map(|v| v.version.as_str()),
        Some("v1")
    );

    let leases = within(
        "/apis/G/V",
        client.list_api_group_resources("coordination.k8s.io/v1"),
    )
    .await
    .expect("/apis/coordination.k8s.io/v1");
    assert!(
        leases
            .resources
            .iter()
            .any(|r| r.name == "leases" && r.kind == "Lease" && r.namespaced)
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn kube_discovery_resolves_builtin_kinds_into_usable_api_resources() {
    let emu = emulator().await;
    let client = emu.client();
    let discovery = within("discovery", Discovery::new(client.clone()).run())
        .await
        .expect("Discovery::run");

    for (g, v, k, plural) in [
        ("", "v1", "ConfigMap", "configmaps"),
        ("", "v1", "Namespace", "namespaces"),
        ("", "v1", "Event", "events"),
        ("events.k8s.io", "v1", "Event", "events"),
        ("coordination.k8s.io", "v1", "Lease", "leases"),
        (
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        ),
    ] {
        let (ar, caps) = discovery
            .resolve_gvk(&GroupVersionKind::gvk(g, v, k))
            .unwrap_or_else(|| panic!("discovery resolves {g}/{v} {k}"));
        assert_eq!(ar.plural, plural);
        let cluster = matches!(caps.scope, Scope::Cluster);
        assert_eq!(
            cluster,
            matches!(k, "Namespace" | "CustomResourceDefinition"),
            "scope of {k}"
        );
    }

    let (ar, _) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap"))
        .expect("ConfigMap");
    let api: Api<DynamicObject> = Api::namespaced_with(client, "default", &ar);
    let obj = DynamicObject::new("via-discovery", &ar).data(json!({"data": {"a": "b"}}));
    within("create", api.create(&PostParams::default(), &obj))
        .await
        .expect("create through discovered resource");
    let got = within("get", api.get("via-discovery"))
        .await
        .expect("get through discovered resource");
    assert_eq!(got.data["data"]["a"], "b");
    emu.shutdown().await;
}

#[tokio::test]
async fn kube_aggregated_discovery_resolves_builtin_kinds() {
    let emu = emulator().await;
    let discovery = within(
        "aggregated discovery",
        Discovery::new(emu.client()).run_aggregated(),
    )
    .await
    .expect("Discovery::run_aggregated (Kubernetes 1.30+ serves aggregated discovery)");
    for (g, k) in [
        ("", "ConfigMap"),
        ("coordination.k8s.io", "Lease"),
        ("events.k8s.io", "Event"),
    ] {
        let (ar, _) = discovery
            .resolve_gvk(&GroupVersionKind::gvk(g, "v1", k))
            .unwrap_or_else(|| panic!("aggregated discovery resolves {g}/v1 {k}"));
        assert_eq!(ar.kind, k);
    }
    emu.shutdown().await;
}

#[tokio::test]
async fn kubeconfig_url_and_fixed_port_reach_the_emulator() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let emu = within(
        "the emulator to start",
        Emulator::builder().port(port).start(),
    )
    .await
    .expect("start");
    assert_eq!(emu.addr().port(), port);
    assert!(emu.addr().ip().is_loopback(), "listens on 127.0.0.1 only");
    assert_eq!(emu.url(), format!("http://127.0.0.1:{port}"));

    let config = within(
        "config",
        kube::Config::from_custom_kubeconfig(
            emu.kubeconfig(),
            &kube::config::KubeConfigOptions::default(),
        ),
    )
    .await
    .expect("the kubeconfig converts into a client config");
    let client = Client::try_from(config).expect("client");
    assert_eq!(client.default_namespace(), "default");
    let nss: Api<Namespace> = Api::all(client);
    within("get", nss.get("default"))
        .await
        .expect("a client from kubeconfig() works");

    let path = std::env::temp_dir().join(format!("kopf-kc-{}-{port}", std::process::id()));
    emu.write_kubeconfig(&path).expect("write_kubeconfig");
    let read = kube::config::Kubeconfig::read_from(&path).expect("the written kubeconfig parses");
    let _ = std::fs::remove_file(&path);
    let config = within(
        "config",
        kube::Config::from_custom_kubeconfig(read, &Default::default()),
    )
    .await
    .expect("config");
    let nss: Api<Namespace> = Api::all(Client::try_from(config).expect("client"));
    within("get", nss.get("kube-system"))
        .await
        .expect("a client from the written kubeconfig works");
    emu.shutdown().await;
}

#[tokio::test]
async fn preload_file_creates_the_objects_it_lists() {
    let path = std::env::temp_dir().join(format!("kopf-preload-{}.yaml", std::process::id()));
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: apps\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-file\n  namespace: apps\n",
    )
    .expect("write preload file");
    let emu = within(
        "the emulator to start",
        Emulator::builder().preload_file(&path).start(),
    )
    .await
    .expect("start");
    let _ = std::fs::remove_file(&path);
    let cms: Api<ConfigMap> = Api::namespaced(emu.client(), "apps");
    within("get", cms.get("from-file"))
        .await
        .expect("preloaded from a file");
    emu.shutdown().await;
}

// ---------------------------------------------------------------- namespaces

#[tokio::test]
async fn default_namespaces_exist_and_namespaces_are_created_and_deleted() {
    let emu = emulator().await;
    let nss: Api<Namespace> = Api::all(emu.client());
    let listed = names(
        within("list", nss.list(&ListParams::default()))
            .await
            .expect("list namespaces"),
    );
    for ns in ["default", "kube-system", "kube-public"] {
        assert!(listed.contains(ns), "namespace {ns} exists: {listed:?}");
    }

    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "team-a"}})).expect("ns");
    within("create", nss.create(&PostParams::default(), &ns))
        .await
        .expect("create namespace");
    let cms: Api<ConfigMap> = Api::namespaced(emu.client(), "team-a");
    create_cm(&cms, "inside").await;

    within("delete", nss.delete("team-a", &DeleteParams::default()))
        .await
        .expect("delete namespace");
    within("the namespace to go away", async {
        while nss
            .get_opt("team-a")
            .await
            .expect("get namespace")
            .is_some()
        {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_eq!(
        within("get_opt", cms.get_opt("inside"))
            .await
            .expect("get_opt"),
        None,
        "contents go with the namespace"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn create_in_a_missing_namespace_is_404() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client(), "no-such-ns");
    let status = api_error(within("create", api.create(&PostParams::default(), &cm("x"))).await);
    assert_eq!(status.code, 404, "{status:?}");
    assert_eq!(status.reason, "NotFound", "{status:?}");
    emu.shutdown().await;
}

// ---------------------------------------------------------------- built-in kinds

#[tokio::test]
async fn builtin_kinds_round_trip_through_typed_apis() {
    let emu = emulator().await;
    let c = emu.client();
    let pp = PostParams::default();

    let secrets: Api<Secret> = Api::default_namespaced(c.clone());
    let s: Secret = serde_json::from_value(json!({
        "metadata": {"name": "s1"}, "type": "Opaque", "data": {"password": "aHVudGVyMg=="}
    }))
    .expect("secret");
    within("create", secrets.create(&pp, &s))
        .await
        .expect("create secret");
    let s = within("get", secrets.get("s1")).await.expect("get secret");
    assert_eq!(s.data.expect("data")["password"].0, b"hunter2".to_vec());

    let pods: Api<Pod> = Api::default_namespaced(c.clone());
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p1"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]}
    }))
    .expect("pod");
    within("create", pods.create(&pp, &p))
        .await
        .expect("create pod");
    let p = within("get", pods.get("p1")).await.expect("get pod");
    assert_eq!(
        p.spec.expect("spec").containers[0].image.as_deref(),
        Some("busybox")
    );

    let core_events: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(c.clone());
    let e: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": "e1"},
        "involvedObject": {"kind": "Pod", "name": "p1", "namespace": "default"},
        "reason": "Testing", "message": "hello", "type": "Normal"
    }))
    .expect("core event");
    within("create", core_events.create(&pp, &e))
        .await
        .expect("create core/v1 Event");
    let e = within("get", core_events.get("e1"))
        .await
        .expect("get core/v1 Event");
    assert_eq!(e.message.as_deref(), Some("hello"));

    let new_events: Api<k8s_openapi::api::events::v1::Event> = Api::default_namespaced(c.clone());
    let e2: k8s_openapi::api::events::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": "e2"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "kopf.dev/test", "reportingInstance": "t1",
        "action": "Test", "reason": "Testing", "note": "hi", "type": "Normal",
        "regarding": {"kind": "Pod", "name": "p1", "namespace": "default"}
    }))
    .expect("events.k8s.io event");
    within("create", new_events.create(&pp, &e2))
        .await
        .expect("create events.k8s.io/v1 Event");
    let listed = within("list", new_events.list(&ListParams::default()))
        .await
        .expect("list events.k8s.io");
    // Both APIs are views of one store (pinned by `events_k8s_io_and_core_v1_events_are_views_of_one_store`).
    let listed = names(listed);
    assert!(listed.contains("e2"), "{listed:?}");
    let e2 = within("get", new_events.get("e2"))
        .await
        .expect("get events.k8s.io/v1 Event");
    assert_eq!(e2.note.as_deref(), Some("hi"));

    let leases: Api<Lease> = Api::default_namespaced(c.clone());
    let l: Lease = serde_json::from_value(json!({
        "metadata": {"name": "leader"},
        "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15}
    }))
    .expect("lease");
    within("create", leases.create(&pp, &l))
        .await
        .expect("create lease");
    let l = within("get", leases.get("leader"))
        .await
        .expect("get lease");
    assert_eq!(l.spec.expect("spec").holder_identity.as_deref(), Some("me"));
    emu.shutdown().await;
}

#[tokio::test]
async fn kube_event_recorder_creates_then_patches_an_event_series() {
    use kube::{
        Resource,
        runtime::events::{Event, EventType, Recorder},
    };
    let emu = emulator().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let target = create_cm(&cms, "regarding").await;
    let recorder = Recorder::new(emu.client(), "kopf-test".into());
    let event = Event {
        type_: EventType::Normal,
        reason: "Reconciled".into(),
        note: Some("all good".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    let reference = target.object_ref(&());
    within("publish", recorder.publish(&event, &reference))
        .await
        .expect("first publish creates");
    within("publish", recorder.publish(&event, &reference))
        .await
        .expect("second publish patches the series");

    let events: Api<k8s_openapi::api::events::v1::Event> = Api::default_namespaced(emu.client());
    let listed = within("list", events.list(&ListParams::default()))
        .await
        .expect("list events");
    assert_eq!(
        listed.items.len(),
        1,
        "one event with a series: {:?}",
        listed.items
    );
    let e = &listed.items[0];
    assert_eq!(e.note.as_deref(), Some("all good"));
    assert_eq!(e.series.as_ref().map(|s| s.count), Some(2));
    assert_eq!(
        e.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("regarding")
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn events_k8s_io_and_core_v1_events_are_views_of_one_store() {
    let emu = emulator().await;
    let new_events: Api<k8s_openapi::api::events::v1::Event> =
        Api::default_namespaced(emu.client());
    let e: k8s_openapi::api::events::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": "shared"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "kopf.dev/test", "reportingInstance": "t1",
        "action": "Test", "reason": "Testing", "note": "seen by kubectl get events", "type": "Normal",
        "regarding": {"kind": "Pod", "name": "p1", "namespace": "default"}
    }))
    .expect("event");
    within("create", new_events.create(&PostParams::default(), &e))
        .await
        .expect("create");
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(emu.client());
    let got = within("get", core.get("shared"))
        .await
        .expect("the core/v1 view shows the events.k8s.io event");
    assert_eq!(got.message.as_deref(), Some("seen by kubectl get events"));
    assert_eq!(got.involved_object.name.as_deref(), Some("p1"));
    emu.shutdown().await;
}

// ---------------------------------------------------------------- CRDs

#[tokio::test]
async fn crd_created_through_the_api_is_established_and_served() {
    let emu = emulator().await;
    let client = emu.client();
    install_widget_crd(&client).await;

    let discovery = within("discovery", Discovery::new(client.clone()).run())
        .await
        .expect("discovery");
    let (ar, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("kopf.dev", "v1", "Widget"))
        .expect("discovery lists the new CRD's kind");
    assert_eq!(ar.plural, "widgets");
    assert!(matches!(caps.scope, Scope::Namespaced));

    let widgets: Api<Widget> = Api::default_namespaced(client.clone());
    let created = within(
        "create",
        widgets.create(&PostParams::default(), &widget("w1", 3)),
    )
    .await
    .expect("create");
    assert_eq!(created.spec.size, 3);
    assert_eq!(
        created.metadata.generation,
        Some(1),
        "custom resources start at generation 1"
    );

    let dynamic: Api<DynamicObject> = Api::default_namespaced_with(client, &ar);
    let listed = within("list", dynamic.list(&ListParams::default()))
        .await
        .expect("dynamic list");
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].data["spec"]["size"], 3);
    emu.shutdown().await;
}

#[tokio::test]
async fn cluster_scoped_crd_without_status_subresource_keeps_status_in_the_main_resource() {
    let emu = emulator().await;
    let client = emu.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.kopf.dev"},
        "spec": {
            "group": "kopf.dev", "scope": "Cluster",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .expect("crd");
    within("create crd", crds.create(&PostParams::default(), &crd))
        .await
        .expect("create CRD");
    let ar = within("the CRD to be served", async {
        loop {
            let discovery = Discovery::new(client.clone())
                .run()
                .await
                .expect("discovery");
            if let Some((ar, caps)) =
                discovery.resolve_gvk(&GroupVersionKind::gvk("kopf.dev", "v1", "Gadget"))
            {
                assert!(matches!(caps.scope, Scope::Cluster), "scope from discovery");
                return ar;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    })
    .await;
    let gadgets: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let g =
        DynamicObject::new("g1", &ar).data(json!({"spec": {"n": 1}, "status": {"phase": "Born"}}));
    let created = within("create", gadgets.create(&PostParams::default(), &g))
        .await
        .expect("create");
    assert_eq!(
        created.data["status"]["phase"], "Born",
        "without the subresource, status is part of the object"
    );
    assert_eq!(created.namespace(), None);
    let p = Patch::Merge(json!({"status": {"phase": "Grown"}}));
    let patched = within("patch", gadgets.patch("g1", &PatchParams::default(), &p))
        .await
        .expect("patch");
    assert_eq!(patched.data["status"]["phase"], "Grown");
    let status = api_error(
        within(
            "patch_status",
            gadgets.patch_status("g1", &PatchParams::default(), &p),
        )
        .await,
    );
    assert_eq!(
        status.code, 404,
        "no /status subresource without subresources.status: {status:?}"
    );
    let r = raw_request(
        emu.addr(),
        "GET",
        "/apis/kopf.dev/v1/namespaces/default/gadgets/g1",
        &[],
        b"",
    )
    .await;
    assert_eq!(
        r.status, 404,
        "a cluster-scoped kind has no namespaced path"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn builder_crds_and_preloaded_objects_are_served() {
    let emu = within(
        "the emulator to start",
        Emulator::builder()
            .crd("example.com", "v1", "things", "Thing", false)
            .preload_yaml(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: preloaded\n  namespace: default\ndata:\n  a: b\n\
                 ---\napiVersion: example.com/v1\nkind: Thing\nmetadata:\n  name: t1\nspec:\n  x: 1\n",
            )
            .start(),
    )
    .await
    .expect("the emulator starts");
    let cms: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let got = within("get", cms.get("preloaded"))
        .await
        .expect("preloaded configmap");
    assert_eq!(got.data.expect("data")["a"], "b");

    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Thing"),
        "things",
    );
    let things: Api<DynamicObject> = Api::all_with(emu.client(), &ar);
    let t = within("get", things.get("t1"))
        .await
        .expect("preloaded cluster-scoped Thing");
    assert_eq!(t.data["spec"]["x"], 1);
    assert_eq!(
        t.namespace(),
        None,
        "a cluster-scoped object has no namespace"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn builder_crd_manifests_serve_their_short_names_and_columns() {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gizmos.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {
                "plural": "gizmos", "singular": "gizmo", "kind": "Gizmo",
                "shortNames": ["gz", "giz"], "categories": ["gadgets"],
            },
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "additionalPrinterColumns": [{"name": "Size", "type": "string", "jsonPath": ".spec.size"}],
            }],
        },
    });
    let emu = within(
        "the emulator to start",
        Emulator::builder().crd_manifest(crd).start(),
    )
    .await
    .expect("the emulator starts");
    let served = within(
        "discovery of example.com/v1",
        emu.client().list_api_group_resources("example.com/v1"),
    )
    .await
    .expect("example.com/v1 is served");
    let gizmos = served
        .resources
        .iter()
        .find(|r| r.name == "gizmos")
        .expect("gizmos are served");
    assert_eq!(
        gizmos.short_names.as_deref(),
        Some(&["gz".to_owned(), "giz".to_owned()][..])
    );
    assert_eq!(
        gizmos.categories.as_deref(),
        Some(&["gadgets".to_owned()][..])
    );

    let crds: Api<CustomResourceDefinition> = Api::all(emu.client());
    let stored = within("get the CRD", crds.get("gizmos.example.com"))
        .await
        .expect("the CRD is stored");
    let columns = stored.spec.versions[0]
        .additional_printer_columns
        .clone()
        .unwrap_or_default();
    assert_eq!(columns.len(), 1, "the printer columns are kept");
    assert_eq!(columns[0].json_path, ".spec.size");
    emu.shutdown().await;
}

// ---------------------------------------------------------------- CRUD & metadata

#[tokio::test]
async fn create_answers_201_and_fills_uid_timestamp_and_resource_version() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    emu.clear_requests();
    let created = create_cm(&api, "c1").await;
    assert!(!created.uid().unwrap_or_default().is_empty(), "uid is set");
    assert!(
        created.metadata.creation_timestamp.is_some(),
        "creationTimestamp is set"
    );
    rv_num(created.metadata.resource_version.as_ref());
    let creates: Vec<_> = emu
        .requests()
        .into_iter()
        .filter(|r| r.verb == "create")
        .collect();
    assert_eq!(creates.len(), 1, "{creates:?}");
    assert_eq!(creates[0].status, 201);
    assert_eq!(creates[0].method, "POST");

    let other = create_cm(&api, "c2").await;
    assert_ne!(created.uid(), other.uid(), "uids are unique");
    emu.shutdown().await;
}

#[tokio::test]
async fn generate_name_yields_unique_prefixed_names() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let template: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "gen-"}})).expect("cm");
    let a = within("create", api.create(&PostParams::default(), &template))
        .await
        .expect("create a");
    let b = within("create", api.create(&PostParams::default(), &template))
        .await
        .expect("create b");
    for n in [a.name_any(), b.name_any()] {
        assert!(
            n.starts_with("gen-") && n.len() > "gen-".len(),
            "generated name {n:?}"
        );
    }
    assert_ne!(a.name_any(), b.name_any());
    within("get", api.get(&a.name_any()))
        .await
        .expect("generated object can be fetched");
    emu.shutdown().await;
}

#[tokio::test]
async fn duplicate_create_is_409_already_exists() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    create_cm(&api, "dup").await;
    let status = api_error(within("create", api.create(&PostParams::default(), &cm("dup"))).await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (409, "AlreadyExists"),
        "{status:?}"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn get_of_a_missing_object_is_404_not_found() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let status = api_error(within("get", api.get("ghost")).await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (404, "NotFound"),
        "{status:?}"
    );
    assert_eq!(
        within("get_opt", api.get_opt("ghost"))
            .await
            .expect("get_opt"),
        None
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn replace_with_a_stale_resource_version_is_409_conflict() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let original = create_cm(&api, "occ").await;

    let mut first = original.clone();
    first.data = Some([("k".to_string(), "first".to_string())].into());
    let replaced = within(
        "replace",
        api.replace("occ", &PostParams::default(), &first),
    )
    .await
    .expect("replace");
    assert!(
        rv_num(replaced.metadata.resource_version.as_ref())
            > rv_num(original.metadata.resource_version.as_ref())
    );

    let mut stale = original.clone();
    stale.data = Some([("k".to_string(), "second".to_string())].into());
    let status = api_error(
        within(
            "replace",
            api.replace("occ", &PostParams::default(), &stale),
        )
        .await,
    );
    assert_eq!(
        (status.code, status.reason.as_str()),
        (409, "Conflict"),
        "{status:?}"
    );
    let now = within("get", api.get("occ")).await.expect("get");
    assert_eq!(
        now.data.expect("data")["k"],
        "first",
        "the stale write was not applied"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn resource_versions_grow_monotonically_across_kinds_and_namespaces() {
    let emu = emulator().await;
    let c = emu.client();
    let nss: Api<Namespace> = Api::all(c.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "other"}})).expect("ns");
    let mut rvs = vec![rv_num(
        within("create", nss.create(&PostParams::default(), &ns))
            .await
            .expect("ns")
            .metadata
            .resource_version
            .as_ref(),
    )];
    let here: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let there: Api<ConfigMap> = Api::namespaced(c.clone(), "other");
    let secrets: Api<Secret> = Api::default_namespaced(c.clone());
    for i in 0..3 {
        rvs.push(rv_num(
            create_cm(&here, &format!("h{i}"))
                .await
                .metadata
                .resource_version
                .as_ref(),
        ));
        rvs.push(rv_num(
            create_cm(&there, &format!("t{i}"))
                .await
                .metadata
                .resource_version
                .as_ref(),
        ));
        let s: Secret =
            serde_json::from_value(json!({"metadata": {"name": format!("s{i}")}})).expect("secret");
        rvs.push(rv_num(
            within("create", secrets.create(&PostParams::default(), &s))
                .await
                .expect("secret")
                .metadata
                .resource_version
                .as_ref(),
        ));
        let patched = within(
            "patch",
            here.patch(
                &format!("h{i}"),
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"i": "x"}})),
            ),
        )
        .await
        .expect("patch");
        rvs.push(rv_num(patched.metadata.resource_version.as_ref()));
    }
    assert!(
        rvs.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing: {rvs:?}"
    );
    let list = within("list", here.list(&ListParams::default()))
        .await
        .expect("list");
    let list_rv = rv_num(list.metadata.resource_version.as_ref());
    assert!(
        list_rv >= *rvs.last().expect("rvs"),
        "list rv {list_rv} is at least the newest write {rvs:?}"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn generation_bumps_on_spec_changes_only() {
    let emu = emulator().await;
    let client = emu.client();
    install_widget_crd(&client).await;
    let widgets: Api<Widget> = Api::default_namespaced(client);
    let pp = PatchParams::default();
    let w = within(
        "create",
        widgets.create(&PostParams::default(), &widget("g", 1)),
    )
    .await
    .expect("create");
    assert_eq!(w.metadata.generation, Some(1));

    let w = within(
        "patch",
        widgets.patch("g", &pp, &Patch::Merge(json!({"spec": {"size": 2}}))),
    )
    .await
    .expect("spec");
    assert_eq!(
        w.metadata.generation,
        Some(2),
        "a spec change bumps generation"
    );

    let w = within(
        "patch",
        widgets.patch("g", &pp, &Patch::Merge(json!({"spec": {"size": 2}}))),
    )
    .await
    .expect("no-op");
    assert_eq!(
        w.metadata.generation,
        Some(2),
        "an identical spec does not bump generation"
    );

    let w = within(
        "patch",
        widgets.patch(
            "g",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        ),
    )
    .await
    .expect("labels");
    assert_eq!(
        w.metadata.generation,
        Some(2),
        "a metadata change does not bump generation"
    );

    let w = within(
        "patch",
        widgets.patch_status("g", &pp, &Patch::Merge(json!({"status": {"phase": "Up"}}))),
    )
    .await
    .expect("status");
    assert_eq!(
        w.metadata.generation,
        Some(2),
        "a status change does not bump generation"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn delete_removes_the_object_and_a_second_delete_is_404() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    create_cm(&api, "gone").await;
    let deleted = within("delete", api.delete("gone", &DeleteParams::default()))
        .await
        .expect("delete");
    assert!(deleted.is_left() || deleted.is_right());
    assert_eq!(
        within("get_opt", api.get_opt("gone"))
            .await
            .expect("get_opt"),
        None
    );
    let status = api_error(within("delete", api.delete("gone", &DeleteParams::default())).await);
    assert_eq!(status.code, 404, "{status:?}");
    emu.shutdown().await;
}

#[tokio::test]
async fn deletecollection_removes_only_the_selected_objects() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    for (n, app) in [("x1", "x"), ("x2", "x"), ("y1", "y")] {
        within(
            "create",
            api.create(&PostParams::default(), &cm_labelled(n, json!({"app": app}))),
        )
        .await
        .expect("create");
    }
    emu.clear_requests();
    within(
        "deletecollection",
        api.delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("app=x"),
        ),
    )
    .await
    .expect("deletecollection");
    let left = within("list", api.list(&ListParams::default()))
        .await
        .expect("list");
    assert_eq!(names(left), set(&["y1"]));
    assert!(
        emu.requests()
            .iter()
            .any(|r| r.verb == "deletecollection" && r.method == "DELETE" && r.status == 200),
        "recorded as deletecollection: {:?}",
        emu.requests()
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn replace_of_a_missing_object_is_404() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let status = api_error(
        within(
            "replace",
            api.replace("ghost", &PostParams::default(), &cm("ghost")),
        )
        .await,
    );
    assert_eq!(status.code, 404, "{status:?}");
    emu.shutdown().await;
}

#[tokio::test]
async fn body_and_url_disagreeing_on_name_or_namespace_is_400() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let mut elsewhere = cm("ns-mismatch");
    elsewhere.metadata.namespace = Some("kube-system".into());
    let status = api_error(within("create", api.create(&PostParams::default(), &elsewhere)).await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (400, "BadRequest"),
        "namespace mismatch: {status:?}"
    );

    create_cm(&api, "right").await;
    let mut renamed = within("get", api.get("right")).await.expect("get");
    renamed.metadata.name = Some("wrong".into());
    let status = api_error(
        within(
            "replace",
            api.replace("right", &PostParams::default(), &renamed),
        )
        .await,
    );
    assert_eq!(
        (status.code, status.reason.as_str()),
        (400, "BadRequest"),
        "name mismatch: {status:?}"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn invalid_object_names_are_422_invalid() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let mut wrong = Vec::new();
    let nameless: ConfigMap = serde_json::from_value(json!({"metadata": {}})).expect("cm");
    for (what, obj) in [
        ("Upper_Case", cm("Upper_Case")),
        ("-leading-dash", cm("-leading-dash")),
        ("has space", cm("has space")),
        ("neither name nor generateName", nameless),
    ] {
        match within("create", api.create(&PostParams::default(), &obj)).await {
            Err(kube::Error::Api(s)) if s.code == 422 && s.reason == "Invalid" => {}
            other => wrong.push(format!("{what}: {:?}", other.map(|o| o.name_any()))),
        }
    }
    assert!(wrong.is_empty(), "expected 422 Invalid for: {wrong:#?}");
    emu.shutdown().await;
}

#[tokio::test]
async fn secret_string_data_is_folded_into_data() {
    let emu = emulator().await;
    let secrets: Api<Secret> = Api::default_namespaced(emu.client());
    let s: Secret = serde_json::from_value(json!({
        "metadata": {"name": "sd"}, "stringData": {"user": "admin"}, "data": {"pw": "aHVudGVyMg=="}
    }))
    .expect("secret");
    within("create", secrets.create(&PostParams::default(), &s))
        .await
        .expect("create");
    let got = within("get", secrets.get("sd")).await.expect("get");
    let data = got.data.expect("data");
    assert_eq!(
        data["user"].0,
        b"admin".to_vec(),
        "stringData lands in data"
    );
    assert_eq!(data["pw"].0, b"hunter2".to_vec());
    assert!(got.string_data.is_none(), "stringData is write-only");
    emu.shutdown().await;
}

#[tokio::test]
async fn apply_patch_creates_a_missing_object() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "1"}});
    let got = within(
        "apply",
        api.patch(
            "ssa",
            &PatchParams::apply("kopf-test"),
            &Patch::Apply(applied),
        ),
    )
    .await
    .expect("server-side apply creates the object");
    assert_eq!(got.data.expect("data")["a"], "1");
    assert!(
        within("get_opt", api.get_opt("ssa"))
            .await
            .expect("get_opt")
            .is_some()
    );
    emu.shutdown().await;
}

// ---------------------------------------------------------------- selectors & paging

#[tokio::test]
async fn label_selectors_support_every_operator() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    for (n, labels) in [
        ("a", json!({"env": "prod", "tier": "web"})),
        ("b", json!({"env": "dev", "tier": "web"})),
        ("c", json!({"env": "staging"})),
        ("d", json!({})),
    ] {
        within(
            "create",
            api.create(&PostParams::default(), &cm_labelled(n, labels)),
        )
        .await
        .expect("create");
    }
    for (selector, expected) in [
        ("env=prod", &["a"][..]),
        ("env==prod", &["a"]),
        ("env!=prod", &["b", "c", "d"]),
        ("env in (prod,dev)", &["a", "b"]),
        ("env notin (prod,dev)", &["c", "d"]),
        ("tier", &["a", "b"]),
        ("!tier", &["c", "d"]),
        ("env=prod,tier=web", &["a"]),
        ("tier=web,env!=prod", &["b"]),
    ] {
        let got = within("list", api.list(&ListParams::default().labels(selector)))
            .await
            .expect("list");
        assert_eq!(names(got), set(expected), "labelSelector {selector:?}");
    }
    emu.shutdown().await;
}

#[tokio::test]
async fn field_selectors_match_name_and_namespace() {
    let emu = emulator().await;
    let c = emu.client();
    let nss: Api<Namespace> = Api::all(c.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "ns2"}})).expect("ns");
    within("create", nss.create(&PostParams::default(), &ns))
        .await
        .expect("ns2");
    let here: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let there: Api<ConfigMap> = Api::namespaced(c.clone(), "ns2");
    create_cm(&here, "one").await;
    create_cm(&here, "two").await;
    create_cm(&there, "one").await;

    let all: Api<ConfigMap> = Api::all(c);
    let by_name = within(
        "list",
        all.list(&ListParams::default().fields("metadata.name=one")),
    )
    .await
    .expect("list");
    let mut where_ = by_name
        .items
        .iter()
        .map(|o| o.namespace().unwrap_or_default())
        .collect::<Vec<_>>();
    where_.sort();
    assert_eq!(where_, ["default", "ns2"]);
    let by_ns = within(
        "list",
        all.list(&ListParams::default().fields("metadata.namespace=ns2")),
    )
    .await
    .expect("list");
    assert_eq!(by_ns.items.len(), 1);
    assert_eq!(by_ns.items[0].namespace().as_deref(), Some("ns2"));
    let not_one = within(
        "list",
        here.list(&ListParams::default().fields("metadata.name!=one")),
    )
    .await
    .expect("list");
    assert_eq!(names(not_one), set(&["two"]));
    emu.shutdown().await;
}

#[tokio::test]
async fn malformed_or_unsupported_selectors_are_400() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    create_cm(&api, "sel").await;
    let mut wrong = Vec::new();
    for (what, lp) in [
        (
            "labelSelector `env in (prod`",
            ListParams::default().labels("env in (prod"),
        ),
        (
            "labelSelector `a=b=c`",
            ListParams::default().labels("a=b=c"),
        ),
        ("labelSelector `!`", ListParams::default().labels("!")),
        (
            "fieldSelector `spec.nope=1`",
            ListParams::default().fields("spec.nope=1"),
        ),
    ] {
        match within("list", api.list(&lp)).await {
            Err(kube::Error::Api(s)) if s.code == 400 => {}
            other => wrong.push(format!("{what}: {:?}", other.map(|l| l.items.len()))),
        }
    }
    assert!(wrong.is_empty(), "expected 400 BadRequest for: {wrong:#?}");
    emu.shutdown().await;
}

#[tokio::test]
async fn list_pages_with_limit_and_continue() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    for i in 0..7 {
        create_cm(&api, &format!("p{i}")).await;
    }
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut lp = ListParams::default().limit(3);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = within("list page", api.list(&lp)).await.expect("list page");
        pages += 1;
        assert!(page.items.len() <= 3, "a page holds at most `limit` items");
        seen.extend(page.items.iter().map(|o| o.name_any()));
        token = page.metadata.continue_.clone().filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
        assert!(pages < 10, "paging terminates");
    }
    assert_eq!(pages, 3, "7 objects in pages of 3");
    let unique: BTreeSet<_> = seen.iter().cloned().collect();
    assert_eq!(seen.len(), 7, "no object repeated: {seen:?}");
    assert_eq!(unique, (0..7).map(|i| format!("p{i}")).collect());
    emu.shutdown().await;
}

// ---------------------------------------------------------------- patches

#[tokio::test]
async fn merge_patch_merges_maps_and_null_removes_keys() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    create_cm(&api, "m").await;
    let p =
        Patch::Merge(json!({"data": {"k": null, "new": "1"}, "metadata": {"labels": {"l": "v"}}}));
    let got = within("patch", api.patch("m", &PatchParams::default(), &p))
        .await
        .expect("merge patch");
    let data = got.data.clone().expect("data");
    assert_eq!(data.get("k"), None);
    assert_eq!(data["new"], "1");
    assert_eq!(got.labels()["l"], "v");
    emu.shutdown().await;
}

#[tokio::test]
async fn json_patch_applies_ops_and_a_failed_test_op_is_422() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    create_cm(&api, "j").await;
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/k", "value": "v"},
        {"op": "replace", "path": "/data/k", "value": "w"},
        {"op": "add", "path": "/data/added", "value": "yes"}
    ]))
    .expect("json patch");
    let got = within(
        "patch",
        api.patch("j", &PatchParams::default(), &Patch::Json::<()>(ops)),
    )
    .await
    .expect("json patch");
    let data = got.data.expect("data");
    assert_eq!((data["k"].as_str(), data["added"].as_str()), ("w", "yes"));

    let failing: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/k", "value": "not-it"},
        {"op": "replace", "path": "/data/k", "value": "never"}
    ]))
    .expect("json patch");
    let status = api_error(
        within(
            "patch",
            api.patch("j", &PatchParams::default(), &Patch::Json::<()>(failing)),
        )
        .await,
    );
    assert_eq!(status.code, 422, "{status:?}");
    let now = within("get", api.get("j")).await.expect("get");
    assert_eq!(
        now.data.expect("data")["k"],
        "w",
        "a failed patch changes nothing"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn strategic_merge_and_apply_patches_merge_into_the_object() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    create_cm(&api, "s").await;
    let got = within(
        "patch",
        api.patch(
            "s",
            &PatchParams::default(),
            &Patch::Strategic(json!({"data": {"smp": "1"}})),
        ),
    )
    .await
    .expect("strategic merge patch");
    let data = got.data.expect("data");
    assert_eq!((data["k"].as_str(), data["smp"].as_str()), ("v", "1"));

    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": {"ssa": "2"}});
    let got = within(
        "patch",
        api.patch(
            "s",
            &PatchParams::apply("kopf-test").force(),
            &Patch::Apply(applied),
        ),
    )
    .await
    .expect("apply patch");
    assert_eq!(got.data.expect("data")["ssa"], "2");
    emu.shutdown().await;
}

#[tokio::test]
async fn patch_with_a_stale_resource_version_is_409_conflict() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let created = create_cm(&api, "prv").await;
    let rv = created.resource_version().expect("rv");
    within(
        "patch",
        api.patch(
            "prv",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": "1"}})),
        ),
    )
    .await
    .expect("bump");
    let stale = Patch::Merge(json!({"metadata": {"resourceVersion": rv}, "data": {"a": "2"}}));
    let status =
        api_error(within("patch", api.patch("prv", &PatchParams::default(), &stale)).await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (409, "Conflict"),
        "{status:?}"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn patch_of_a_missing_object_is_404() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let status = api_error(
        within(
            "patch",
            api.patch(
                "ghost",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"a": "1"}})),
            ),
        )
        .await,
    );
    assert_eq!(status.code, 404, "{status:?}");
    emu.shutdown().await;
}

// ---------------------------------------------------------------- status subresource

#[tokio::test]
async fn status_subresource_is_kept_separate_from_the_main_resource() {
    let emu = emulator().await;
    let client = emu.client();
    install_widget_crd(&client).await;
    let widgets: Api<Widget> = Api::default_namespaced(client);
    let pp = PatchParams::default();

    let mut w = widget("st", 1);
    w.status = Some(WidgetStatus {
        phase: "FromCreate".into(),
    });
    let created = within("create", widgets.create(&PostParams::default(), &w))
        .await
        .expect("create");
    assert_eq!(
        created.status, None,
        "status is dropped on create when the status subresource is enabled"
    );

    let s = within(
        "patch",
        widgets.patch_status(
            "st",
            &pp,
            &Patch::Merge(json!({"status": {"phase": "Ready"}, "spec": {"size": 99}})),
        ),
    )
    .await
    .expect("patch status");
    assert_eq!(s.status.as_ref().map(|s| s.phase.as_str()), Some("Ready"));
    assert_eq!(s.spec.size, 1, "a status write does not change spec");

    let m = within(
        "patch",
        widgets.patch(
            "st",
            &pp,
            &Patch::Merge(json!({"status": {"phase": "Hacked"}, "spec": {"size": 2}})),
        ),
    )
    .await
    .expect("patch main");
    assert_eq!(m.spec.size, 2);
    assert_eq!(
        m.status.as_ref().map(|s| s.phase.as_str()),
        Some("Ready"),
        "a main-resource write does not change status"
    );

    let mut whole = within("get_status", widgets.get_status("st"))
        .await
        .expect("get status");
    assert_eq!(
        whole.status.as_ref().map(|s| s.phase.as_str()),
        Some("Ready")
    );
    whole.status = Some(WidgetStatus {
        phase: "Replaced".into(),
    });
    whole.spec.size = 50;
    let r = within(
        "replace_status",
        widgets.replace_status("st", &PostParams::default(), &whole),
    )
    .await
    .expect("replace status");
    assert_eq!(
        (r.spec.size, r.status.map(|s| s.phase)),
        (2, Some("Replaced".to_string()))
    );
    emu.shutdown().await;
}

// ---------------------------------------------------------------- finalizers

#[tokio::test]
async fn delete_with_finalizers_marks_the_object_until_the_last_finalizer_is_removed() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let obj: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "fin", "finalizers": ["kopf.dev/a", "kopf.dev/b"]}
    }))
    .expect("cm");
    let created = within("create", api.create(&PostParams::default(), &obj))
        .await
        .expect("create");
    let rv = created.resource_version().expect("rv");
    let mut events = within(
        "watch",
        api.watch(&WatchParams::default().fields("metadata.name=fin"), &rv),
    )
    .await
    .expect("watch")
    .boxed();

    let answer = within("delete", api.delete("fin", &DeleteParams::default()))
        .await
        .expect("delete");
    let marked = answer
        .left()
        .expect("a DELETE blocked by finalizers returns the object");
    assert!(
        marked.metadata.deletion_timestamp.is_some(),
        "deletionTimestamp is set"
    );
    let ev = within("MODIFIED", events.try_next())
        .await
        .expect("watch")
        .expect("event");
    match ev {
        WatchEvent::Modified(o) => assert!(o.metadata.deletion_timestamp.is_some()),
        other => panic!("expected MODIFIED with deletionTimestamp, got {other:?}"),
    }
    assert!(
        within("get", api.get("fin"))
            .await
            .expect("still there")
            .metadata
            .deletion_timestamp
            .is_some()
    );

    let p = Patch::Merge(json!({"metadata": {"finalizers": ["kopf.dev/b"]}}));
    within("patch", api.patch("fin", &PatchParams::default(), &p))
        .await
        .expect("remove one finalizer");
    let ev = within("MODIFIED", events.try_next())
        .await
        .expect("watch")
        .expect("event");
    assert!(matches!(ev, WatchEvent::Modified(_)), "{ev:?}");
    assert!(
        within("get_opt", api.get_opt("fin"))
            .await
            .expect("get_opt")
            .is_some(),
        "one finalizer remains"
    );

    let p = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    within("patch", api.patch("fin", &PatchParams::default(), &p))
        .await
        .expect("remove last finalizer");
    let ev = within("DELETED", events.try_next())
        .await
        .expect("watch")
        .expect("event");
    assert!(
        matches!(ev, WatchEvent::Deleted(ref o) if o.name_any() == "fin"),
        "{ev:?}"
    );
    assert_eq!(
        within("get_opt", api.get_opt("fin"))
            .await
            .expect("get_opt"),
        None
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn no_new_finalizers_can_be_added_while_deleting() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let obj: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "fin2", "finalizers": ["kopf.dev/a"]}}))
            .expect("cm");
    within("create", api.create(&PostParams::default(), &obj))
        .await
        .expect("create");
    within("delete", api.delete("fin2", &DeleteParams::default()))
        .await
        .expect("delete");
    let p = Patch::Merge(json!({"metadata": {"finalizers": ["kopf.dev/a", "kopf.dev/new"]}}));
    let status = api_error(within("patch", api.patch("fin2", &PatchParams::default(), &p)).await);
    assert_eq!(status.code, 422, "{status:?}");
    let now = within("get", api.get("fin2")).await.expect("get");
    assert_eq!(now.finalizers(), ["kopf.dev/a".to_string()]);
    emu.shutdown().await;
}

#[tokio::test]
async fn delete_preconditions_on_uid_and_resource_version_are_enforced() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let created = create_cm(&api, "pre").await;
    let with = |uid: Option<String>, rv: Option<String>| DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: rv,
        }),
        ..DeleteParams::default()
    };
    let status = api_error(
        within(
            "delete",
            api.delete("pre", &with(Some("not-the-uid".into()), None)),
        )
        .await,
    );
    assert_eq!(
        (status.code, status.reason.as_str()),
        (409, "Conflict"),
        "uid precondition: {status:?}"
    );
    let status =
        api_error(within("delete", api.delete("pre", &with(None, Some("1".into())))).await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (409, "Conflict"),
        "rv precondition: {status:?}"
    );
    assert!(
        within("get_opt", api.get_opt("pre"))
            .await
            .expect("get_opt")
            .is_some()
    );
    within(
        "delete",
        api.delete("pre", &with(created.uid(), created.resource_version())),
    )
    .await
    .expect("matching preconditions delete");
    assert_eq!(
        within("get_opt", api.get_opt("pre"))
            .await
            .expect("get_opt"),
        None
    );
    emu.shutdown().await;
}

// ---------------------------------------------------------------- bad input (raw HTTP)

/// Asserts the emulator still serves a normal request.
async fn still_answers(emu: &Emulator) {
    let r = raw_request(emu.addr(), "GET", "/api/v1/namespaces/default", &[], b"").await;
    assert_eq!(r.status, 200, "the emulator still answers afterwards");
    let api: Api<Namespace> = Api::all(emu.client());
    within("get", api.get("default"))
        .await
        .expect("the kube client still works afterwards");
}

#[tokio::test]
async fn malformed_json_is_400_status() {
    let emu = emulator().await;
    let r = raw_request(
        emu.addr(),
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("Content-Type", "application/json")],
        b"{\"metadata\": {\"name\": ",
    )
    .await;
    r.assert_status_object(400);
    let r = raw_request(
        emu.addr(),
        "PATCH",
        "/api/v1/namespaces/default/configmaps/x",
        &[("Content-Type", "application/merge-patch+json")],
        b"not json",
    )
    .await;
    assert!(
        matches!(r.status, 400 | 404),
        "garbage merge patch is rejected: {}",
        r.status
    );
    still_answers(&emu).await;
    emu.shutdown().await;
}

#[tokio::test]
async fn unknown_resources_and_groups_are_404_status() {
    let emu = emulator().await;
    for path in [
        "/api/v1/namespaces/default/flurbs",
        "/api/v1/flurbs",
        "/apis/nope.example.com/v1/things",
        "/apis/nope.example.com/v1/namespaces/default/things/x",
        "/apis/nope.example.com",
    ] {
        let r = raw_request(emu.addr(), "GET", path, &[], b"").await;
        r.assert_status_object(404);
    }
    still_answers(&emu).await;
    emu.shutdown().await;
}

#[tokio::test]
async fn wrong_content_type_is_415() {
    let emu = emulator().await;
    let body = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#;
    let r = raw_request(
        emu.addr(),
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("Content-Type", "text/plain")],
        body,
    )
    .await;
    r.assert_status_object(415);

    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    create_cm(&api, "x").await;
    let r = raw_request(
        emu.addr(),
        "PATCH",
        "/api/v1/namespaces/default/configmaps/x",
        &[("Content-Type", "application/json")],
        br#"{"data":{"a":"b"}}"#,
    )
    .await;
    r.assert_status_object(415);
    still_answers(&emu).await;
    emu.shutdown().await;
}

#[tokio::test]
async fn oversized_body_is_413() {
    let emu = emulator().await;
    let big = "x".repeat(4 * 1024 * 1024);
    let body = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"blob": big}}))
        .expect("json");
    let r = raw_request(
        emu.addr(),
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("Content-Type", "application/json")],
        &body,
    )
    .await;
    assert_eq!(
        r.status, 413,
        "a 4 MiB body is refused like the API server's 3 MiB limit"
    );
    still_answers(&emu).await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    assert_eq!(
        within("get_opt", api.get_opt("big"))
            .await
            .expect("get_opt"),
        None
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn raw_patch_of_a_missing_object_is_404_status() {
    let emu = emulator().await;
    let r = raw_request(
        emu.addr(),
        "PATCH",
        "/api/v1/namespaces/default/configmaps/ghost",
        &[("Content-Type", "application/merge-patch+json")],
        br#"{"data":{"a":"b"}}"#,
    )
    .await;
    r.assert_status_object(404);
    still_answers(&emu).await;
    emu.shutdown().await;
}

#[tokio::test]
async fn garbage_on_the_socket_does_not_take_the_server_down() {
    let emu = emulator().await;
    let _ = raw_bytes(emu.addr(), b"\x00\x01\x02 NOT HTTP AT ALL\r\n\r\n").await;
    let _ = raw_bytes(
        emu.addr(),
        b"GET /api/v1/namespaces HTTP/1.1\r\nContent-Length: 99999\r\n\r\n{",
    )
    .await;
    still_answers(&emu).await;
    emu.shutdown().await;
}

// ---------------------------------------------------------------- faults

#[tokio::test]
async fn fail_next_fails_only_matching_requests_and_only_n_times() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    create_cm(&api, "f").await;
    emu.faults().fail_next(
        2,
        FailRule {
            verb: Some("get".into()),
            path_contains: Some("configmaps".into()),
            body_contains: None,
            status: 500,
            retry_after: None,
        },
    );
    within("list", api.list(&ListParams::default()))
        .await
        .expect("a list is not a get");
    let nss: Api<Namespace> = Api::all(emu.client());
    within("get", nss.get("default"))
        .await
        .expect("a namespace path does not match");
    for _ in 0..2 {
        let status = api_error(within("get", api.get("f")).await);
        assert_eq!(status.code, 500, "{status:?}");
    }
    within("get", api.get("f"))
        .await
        .expect("the third get succeeds");
    emu.shutdown().await;
}

#[tokio::test]
async fn body_rules_fail_only_the_writes_whose_body_matches_and_serve_the_others() {
    let emu = emulator().await;
    let api: Api<Lease> = Api::default_namespaced(emu.client());
    let lease = |holder: &str| Lease {
        metadata: kube::api::ObjectMeta {
            name: Some("op".into()),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
            holder_identity: Some(holder.into()),
            ..Default::default()
        }),
    };
    let created = within("create", api.create(&PostParams::default(), &lease("a")))
        .await
        .expect("no rule yet");
    emu.faults().fail_next(
        usize::MAX,
        FailRule::status(500)
            .verb("update")
            .path_contains("/leases/")
            .body_contains(r#""holderIdentity":"a""#),
    );
    let mut renewal = lease("a");
    renewal.metadata.resource_version = created.metadata.resource_version.clone();
    let status =
        api_error(within("renew", api.replace("op", &PostParams::default(), &renewal)).await);
    assert_eq!(status.code, 500, "{status:?}");
    // Read in full for the rule, the other bodies are served as ever.
    let mut taken = lease("b");
    taken.metadata.resource_version = created.metadata.resource_version;
    let taken = within("take", api.replace("op", &PostParams::default(), &taken))
        .await
        .expect("another holder's write is served");
    assert_eq!(
        taken.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("b")
    );
    within("get", api.get("op"))
        .await
        .expect("a read is served");
    emu.shutdown().await;
}

#[tokio::test]
async fn fail_next_429_carries_retry_after_and_kube_retries_after_it() {
    let emu = emulator().await;
    let rule = || FailRule {
        verb: None,
        path_contains: Some("/configmaps".into()),
        body_contains: None,
        status: 429,
        retry_after: Some(1),
    };
    emu.faults().fail_next(1, rule());
    let r = raw_request(
        emu.addr(),
        "GET",
        "/api/v1/namespaces/default/configmaps",
        &[],
        b"",
    )
    .await;
    r.assert_status_object(429);
    assert_eq!(
        r.header("retry-after"),
        Some("1"),
        "headers: {:?}",
        r.headers
    );
    assert_eq!(
        r.json()["details"]["retryAfterSeconds"],
        1,
        "Status.details.retryAfterSeconds"
    );

    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    emu.clear_requests();
    emu.faults().fail_next(1, rule());
    let started = Instant::now();
    within("list", api.list(&ListParams::default()))
        .await
        .expect("kube retries the 429 and succeeds");
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(900),
        "kube waited for Retry-After"
    );
    let statuses: Vec<u16> = emu
        .requests()
        .iter()
        .filter(|r| r.verb == "list")
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [429, 200]);
    emu.shutdown().await;
}

#[tokio::test]
async fn latency_delays_every_answer_until_cleared() {
    let emu = emulator().await;
    let api: Api<Namespace> = Api::all(emu.client());
    within("warm-up", api.get("default")).await.expect("get");
    let delay = std::time::Duration::from_millis(400);
    emu.faults().set_latency(delay);
    let started = Instant::now();
    within("get", api.get("default")).await.expect("get");
    assert!(
        started.elapsed() >= delay,
        "answer took {:?}, latency {delay:?}",
        started.elapsed()
    );
    emu.faults().clear();
    let started = Instant::now();
    for _ in 0..5 {
        within("get", api.get("default")).await.expect("get");
    }
    assert!(
        started.elapsed() < delay * 5,
        "latency cleared: 5 gets took {:?}",
        started.elapsed()
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn restart_keeping_state_serves_the_same_objects_on_the_same_port() {
    let emu = emulator().await;
    let addr = emu.addr();
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let created = create_cm(&api, "kept").await;
    within("restart", emu.restart(true)).await;
    assert_eq!(emu.addr(), addr);
    let got = within("get", api.get("kept"))
        .await
        .expect("the same client reconnects and finds the object");
    assert_eq!(got.uid(), created.uid());
    let again = create_cm(&api, "after").await;
    assert!(
        rv_num(again.metadata.resource_version.as_ref())
            > rv_num(created.metadata.resource_version.as_ref())
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn restart_wiping_state_forgets_objects_and_crds_but_keeps_default_namespaces() {
    let emu = emulator().await;
    let client = emu.client();
    install_widget_crd(&client).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    create_cm(&api, "wiped").await;
    within("restart", emu.restart(false)).await;
    assert_eq!(
        within("get_opt", api.get_opt("wiped"))
            .await
            .expect("get_opt"),
        None
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    assert_eq!(
        within("get_opt", crds.get_opt("widgets.kopf.dev"))
            .await
            .expect("get_opt"),
        None
    );
    let widgets: Api<Widget> = Api::default_namespaced(client.clone());
    let status = api_error(within("list", widgets.list(&ListParams::default())).await);
    assert_eq!(
        status.code, 404,
        "the CRD's resource is no longer served: {status:?}"
    );
    let nss: Api<Namespace> = Api::all(client);
    within("get", nss.get("kube-system"))
        .await
        .expect("default namespaces exist after a wipe");
    emu.shutdown().await;
}

// ---------------------------------------------------------------- recording

#[tokio::test]
async fn requests_are_recorded_with_method_path_query_verb_and_status() {
    let emu = emulator().await;
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    emu.clear_requests();
    create_cm(&api, "r").await;
    within("list", api.list(&ListParams::default().labels("a=b")))
        .await
        .expect("list");
    let _ = within("get", api.get("missing")).await;
    let patched = within(
        "patch",
        api.patch(
            "r",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"x": "y"}})),
        ),
    )
    .await
    .expect("patch");
    within(
        "replace",
        api.replace("r", &PostParams::default(), &patched),
    )
    .await
    .expect("replace");
    within("delete", api.delete("r", &DeleteParams::default()))
        .await
        .expect("delete");

    let got: Vec<(String, String, String, u16)> = emu
        .requests()
        .into_iter()
        .map(|r| (r.method, r.path, r.verb, r.status))
        .collect();
    let base = "/api/v1/namespaces/default/configmaps";
    let expected = vec![
        (
            "POST".to_string(),
            base.to_string(),
            "create".to_string(),
            201,
        ),
        ("GET".into(), base.into(), "list".into(), 200),
        ("GET".into(), format!("{base}/missing"), "get".into(), 404),
        ("PATCH".into(), format!("{base}/r"), "patch".into(), 200),
        ("PUT".into(), format!("{base}/r"), "update".into(), 200),
        ("DELETE".into(), format!("{base}/r"), "delete".into(), 200),
    ];
    assert_eq!(got, expected);
    let list = emu
        .requests()
        .into_iter()
        .find(|r| r.verb == "list")
        .expect("list recorded");
    assert!(
        list.query.contains("labelSelector=a%3Db") || list.query.contains("labelSelector=a=b"),
        "{list:?}"
    );
    emu.clear_requests();
    assert!(emu.requests().is_empty());
    emu.shutdown().await;
}

#[tokio::test]
async fn a_uri_too_long_is_answered_with_a_status() {
    let emulator = emulator().await;
    let path = format!(
        "/api/v1/namespaces/default/configmaps?labelSelector=a%20in%20({})",
        "x,".repeat(40_000)
    );
    let resp = raw_request(emulator.addr(), "GET", &path, &[], b"").await;
    resp.assert_status_object(414);
    assert_eq!(resp.header("content-type"), Some("application/json"));
    // The emulator goes on serving.
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    create_cm(&api, "after").await;
}

#[tokio::test]
async fn deployments_and_disruption_budgets_are_stored_built_ins() {
    use k8s_openapi::api::{apps::v1::Deployment, policy::v1::PodDisruptionBudget};

    let emulator = Emulator::start().await.unwrap();
    let client = emulator.client();
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "op"},
        "spec": {
            "selector": {"matchLabels": {"app": "op"}},
            "template": {"metadata": {"labels": {"app": "op"}}, "spec": {"containers": [{"name": "op", "image": "op"}]}},
        },
    }))
    .expect("a Deployment");
    within(
        "a create",
        deployments.create(&PostParams::default(), &deployment),
    )
    .await
    .expect("stored");
    let status = json!({"status": {"replicas": 1}});
    let patched = within(
        "a status patch",
        deployments.patch_status("op", &PatchParams::default(), &Patch::Merge(&status)),
    )
    .await
    .expect("the status subresource");
    assert_eq!(patched.status.and_then(|s| s.replicas), Some(1));
    let budgets: Api<PodDisruptionBudget> = Api::default_namespaced(client.clone());
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "op"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "op"}}},
    }))
    .expect("a PodDisruptionBudget");
    within("a create", budgets.create(&PostParams::default(), &budget))
        .await
        .expect("stored");
    let resources = within("/apis/apps/v1", client.list_api_group_resources("apps/v1"))
        .await
        .expect("served");
    let served = resources
        .resources
        .iter()
        .find(|r| r.name == "deployments")
        .expect("deployments");
    assert_eq!(served.categories.as_deref(), Some(&["all".to_string()][..]));
    assert_eq!(
        served.short_names.as_deref(),
        Some(&["deploy".to_string()][..])
    );
}
