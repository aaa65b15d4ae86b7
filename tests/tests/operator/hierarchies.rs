//! The hierarchy helpers in a handler: a child created with `kopf::adopt`
//! is owned by the handler's object, named after it, in its namespace and
//! with its labels.

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime::{Error, Kwargs, PRESENT, Registry, ResourceRef};
use kopf_testing::Emulator;
use kopf_tests::{Running, configmaps, create, eventually, logs, raw_api};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

#[tokio::test]
async fn a_handler_creates_an_adopted_child() {
    logs();
    let emulator = Emulator::start().await.expect("emulator");
    let registry = Registry::builder()
        .on_create(
            ResourceRef::dynamic("", "v1", "configmaps"),
            "create_child",
            |kw: Kwargs| async move {
                let mut child = ConfigMap {
                    data: Some([("from".to_owned(), "parent".to_owned())].into()),
                    ..ConfigMap::default()
                };
                kopf_runtime::adopt(&mut child, &*kw.body)?;
                let client = kw.client.clone().expect("a client");
                let namespace = child.metadata.namespace.clone().unwrap_or_default();
                let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
                let created = api.create(&PostParams::default(), &child).await?;
                Ok::<_, Error>(json!(created.metadata.name))
            },
        )
        .annotation("example.com/parent", PRESENT)
        .build()
        .expect("a valid registry");
    let operator = Running::start(&emulator, registry);
    let parent = create(
        &emulator,
        &configmaps(),
        "default",
        "parent",
        json!({"metadata": {
            "labels": {"app": "demo"},
            "annotations": {"example.com/parent": "yes"},
        }}),
    )
    .await;

    let api = raw_api(&emulator, &configmaps(), "default");
    let child: Value = eventually("the child to be created", || async {
        let children = api
            .list(&ListParams::default().labels("app=demo"))
            .await
            .ok()?;
        let child = children
            .items
            .into_iter()
            .find(|cm| cm.metadata.name.as_deref() != Some("parent"))?;
        serde_json::to_value(child).ok()
    })
    .await;
    let meta = &child["metadata"];
    let name = meta["name"].as_str().unwrap_or_default();
    assert!(name.starts_with("parent-") && name.len() > 7, "{name}");
    assert_eq!(meta["namespace"], "default");
    assert_eq!(meta["labels"], json!({"app": "demo"}));
    assert_eq!(
        meta["ownerReferences"],
        json!([{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "parent",
            "uid": parent["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true,
        }])
    );
    assert_eq!(child["data"], json!({"from": "parent"}));
    operator.stop().await;
}
