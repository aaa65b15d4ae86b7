//! Discovery documents: `/version`, `/api`, `/apis`, resource lists and the
//! minimal OpenAPI documents kubectl fetches before validating.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::resources::ResourceDef;

/// The Kubernetes version the emulator claims to be.
pub(crate) const MAJOR: &str = "1";
/// The Kubernetes minor version the emulator claims to be.
pub(crate) const MINOR: &str = "33";

/// `/version`.
pub(crate) fn version() -> Value {
    json!({
        "major": MAJOR,
        "minor": MINOR,
        "gitVersion": format!("v{MAJOR}.{MINOR}.0-kopf-emulator"),
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `/api`.
pub(crate) fn core_versions(port: u16) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": format!("127.0.0.1:{port}")}],
    })
}

/// The served versions of each named group, in Kubernetes' order of
/// preference (the first is the preferred version).
fn group_versions(defs: &[Arc<ResourceDef>]) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for d in defs.iter().filter(|d| !d.group.is_empty()) {
        let versions = groups.entry(d.group.clone()).or_default();
        if !versions.contains(&d.version) {
            versions.push(d.version.clone());
        }
    }
    for versions in groups.values_mut() {
        versions.sort_by_key(|v| version_priority(v));
    }
    groups
}

/// How Kubernetes orders a group's versions, most preferred first (its
/// `CompareKubeAwareVersionStrings`): `vN` before `vNbetaM` before
/// `vNalphaM`, higher numbers first; versions of another shape come last,
/// alphabetically.
fn version_priority(
    version: &str,
) -> (
    u8,
    u8,
    std::cmp::Reverse<u64>,
    std::cmp::Reverse<u64>,
    String,
) {
    use std::cmp::Reverse;
    let parsed = version.strip_prefix('v').and_then(|rest| {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let major: u64 = rest[..digits].parse().ok()?;
        let rest = &rest[digits..];
        if rest.is_empty() {
            return Some((0, major, 0));
        }
        let (stage, minor) = if let Some(minor) = rest.strip_prefix("beta") {
            (1, minor)
        } else {
            (2, rest.strip_prefix("alpha")?)
        };
        if minor.is_empty() || !minor.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some((stage, major, minor.parse().ok()?))
    });
    match parsed {
        Some((stage, major, minor)) => (0, stage, Reverse(major), Reverse(minor), String::new()),
        None => (1, 0, Reverse(0), Reverse(0), version.to_owned()),
    }
}

fn group_doc(name: &str, versions: &[String]) -> Value {
    let gv = |v: &String| json!({"groupVersion": format!("{name}/{v}"), "version": v});
    let preferred = versions.first();
    json!({
        "name": name,
        "versions": versions.iter().map(gv).collect::<Vec<_>>(),
        "preferredVersion": preferred.map(gv),
    })
}

/// `/apis`.
pub(crate) fn groups(defs: &[Arc<ResourceDef>]) -> Value {
    let groups: Vec<Value> = group_versions(defs)
        .iter()
        .map(|(name, versions)| group_doc(name, versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/G`, if the group is served.
pub(crate) fn group(defs: &[Arc<ResourceDef>], name: &str) -> Option<Value> {
    let groups = group_versions(defs);
    let versions = groups.get(name)?;
    let mut doc = group_doc(name, versions);
    doc["kind"] = "APIGroup".into();
    doc["apiVersion"] = "v1".into();
    Some(doc)
}

/// `/api/v1` or `/apis/G/V`, if served.
pub(crate) fn resources(defs: &[Arc<ResourceDef>], group: &str, version: &str) -> Option<Value> {
    let served: Vec<&Arc<ResourceDef>> = defs
        .iter()
        .filter(|d| d.group == group && d.version == version)
        .collect();
    if served.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for d in served {
        let mut r = json!({
            "name": d.plural,
            "singularName": d.singular,
            "namespaced": d.namespaced,
            "kind": d.kind,
            "verbs": d.verbs(),
        });
        if !d.short_names.is_empty() {
            r["shortNames"] = json!(d.short_names);
        }
        if !d.categories.is_empty() {
            r["categories"] = json!(d.categories);
        }
        resources.push(r);
        if d.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", d.plural),
                "singularName": "",
                "namespaced": d.namespaced,
                "kind": d.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        for sub in d.extra_subresources() {
            resources.push(json!({
                "name": format!("{}/{}", d.plural, sub.name),
                "singularName": "",
                "namespaced": d.namespaced,
                "group": sub.group,
                "version": sub.version,
                "kind": sub.kind,
                "verbs": sub.verbs,
            }));
        }
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}

/// The Content-Type of aggregated discovery (v2) documents.
pub(crate) const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether an `Accept` header asks for aggregated discovery v2.
pub(crate) fn wants_aggregated(accept: &str) -> bool {
    accept.split(',').any(|media| {
        let params: Vec<&str> = media.split(';').map(str::trim).collect();
        params.contains(&"g=apidiscovery.k8s.io")
            && params.contains(&"v=v2")
            && params.contains(&"as=APIGroupDiscoveryList")
    })
}

/// Aggregated discovery (`apidiscovery.k8s.io/v2`) for `/api` (`core`) or `/apis`.
pub(crate) fn aggregated(defs: &[Arc<ResourceDef>], core: bool) -> Value {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for d in defs.iter().filter(|d| d.group.is_empty() == core) {
        match groups.iter_mut().find(|(g, _)| *g == d.group) {
            Some((_, versions)) if !versions.contains(&d.version) => {
                versions.push(d.version.clone());
            }
            Some(_) => {}
            None => groups.push((d.group.clone(), vec![d.version.clone()])),
        }
    }
    // The preferred version goes first.
    for (_, versions) in &mut groups {
        versions.sort_by_key(|v| version_priority(v));
    }
    let items: Vec<Value> = groups
        .iter()
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|version| {
                    let resources: Vec<Value> = defs
                        .iter()
                        .filter(|d| d.group == *group && d.version == *version)
                        .map(|d| {
                            let gvk = json!({"group": d.group, "version": d.version, "kind": d.kind});
                            let mut r = json!({
                                "resource": d.plural,
                                "responseKind": gvk,
                                "scope": if d.namespaced { "Namespaced" } else { "Cluster" },
                                "singularResource": d.singular,
                                "verbs": d.verbs(),
                            });
                            if !d.short_names.is_empty() {
                                r["shortNames"] = json!(d.short_names);
                            }
                            if !d.categories.is_empty() {
                                r["categories"] = json!(d.categories);
                            }
                            let mut subresources = Vec::new();
                            if d.status_subresource {
                                subresources.push(json!({"subresource": "status", "responseKind": gvk, "verbs": ["get", "patch", "update"]}));
                            }
                            for sub in d.extra_subresources() {
                                let kind = json!({"group": sub.group, "version": sub.version, "kind": sub.kind});
                                subresources.push(json!({"subresource": sub.name, "responseKind": kind, "verbs": sub.verbs}));
                            }
                            if !subresources.is_empty() {
                                r["subresources"] = json!(subresources);
                            }
                            r
                        })
                        .collect();
                    json!({"version": version, "resources": resources, "freshness": "Current"})
                })
                .collect();
            json!({"metadata": {"name": group}, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: the index of per-group-version documents.
pub(crate) fn openapi_v3_index(defs: &[Arc<ResourceDef>]) -> Value {
    let mut paths = serde_json::Map::new();
    for d in defs {
        let path = gv_path(&d.group, &d.version);
        let url = format!("/openapi/v3/{path}?hash=kopf-emulator");
        paths.insert(path, json!({"serverRelativeURL": url}));
    }
    json!({"paths": paths})
}

/// `/openapi/v3/api/v1` or `/openapi/v3/apis/G/V`: a document without schemas
/// whose PATCH operations declare `fieldValidation`, so kubectl leaves
/// validation to the server instead of fetching `/openapi/v2`.
pub(crate) fn openapi_v3_document(defs: &[Arc<ResourceDef>], path: &str) -> Option<Value> {
    let served: Vec<&Arc<ResourceDef>> = defs
        .iter()
        .filter(|d| gv_path(&d.group, &d.version) == path)
        .collect();
    if served.is_empty() {
        return None;
    }
    let mut paths = serde_json::Map::new();
    for d in served {
        let gvk = json!([{"group": d.group, "version": d.version, "kind": d.kind}]);
        let ns = if d.namespaced {
            "/namespaces/{namespace}"
        } else {
            ""
        };
        let patch = json!({
            "patch": {
                "operationId": format!("patch{}", d.kind),
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk[0],
                "parameters": [
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                    {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                ],
                "responses": {"200": {"description": "OK"}},
            }
        });
        paths.insert(format!("/{path}{ns}/{}/{{name}}", d.plural), patch);
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": format!("v{MAJOR}.{MINOR}.0")},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{builtins, crd_object, defs_from_crd};

    fn defs() -> Vec<Arc<ResourceDef>> {
        let mut defs: Vec<Arc<ResourceDef>> = builtins().into_iter().map(Arc::new).collect();
        defs.extend(
            defs_from_crd(&crd_object("example.com", "v1", "widgets", "Widget", true))
                .unwrap()
                .into_iter()
                .map(Arc::new),
        );
        defs
    }

    #[test]
    fn core_resources_list_statuses_and_short_names() {
        let doc = resources(&defs(), "", "v1").unwrap();
        let names: Vec<&str> = doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"configmaps"));
        assert!(names.contains(&"pods/status"));
        assert_eq!(doc["groupVersion"], "v1");
    }

    #[test]
    fn groups_include_crds() {
        let doc = groups(&defs());
        let names: Vec<&str> = doc["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"example.com"));
        assert!(names.contains(&"coordination.k8s.io"));
        assert!(names.contains(&"admissionregistration.k8s.io"));
        assert_eq!(
            group(&defs(), "example.com").unwrap()["preferredVersion"]["version"],
            "v1"
        );
        assert!(group(&defs(), "nope.io").is_none());
        assert!(resources(&defs(), "example.com", "v2").is_none());
    }

    #[test]
    fn aggregated_discovery_lists_groups_and_resources() {
        let core = aggregated(&defs(), true);
        assert_eq!(core["items"].as_array().unwrap().len(), 1);
        assert_eq!(core["items"][0]["metadata"]["name"], "");
        let apis = aggregated(&defs(), false);
        let widgets = apis["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == "example.com")
            .unwrap();
        assert_eq!(
            widgets["versions"][0]["resources"][0]["responseKind"]["kind"],
            "Widget"
        );
        assert_eq!(
            widgets["versions"][0]["resources"][0]["subresources"][0]["subresource"],
            "status"
        );
        assert!(wants_aggregated(
            kube::core::discovery::v2::ACCEPT_AGGREGATED_DISCOVERY_V2
        ));
        assert!(!wants_aggregated("application/json"));
        assert!(!wants_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
        ));
    }

    #[test]
    fn the_preferred_version_is_the_highest_in_kubernetes_order() {
        let mut crd = crd_object("example.com", "v1", "widgets", "Widget", true);
        let version = crd["spec"]["versions"][0].clone();
        let mut versions = Vec::new();
        for (name, storage) in [
            ("v1", true),
            ("v2alpha1", false),
            ("v2beta1", false),
            ("v1beta2", false),
            ("foo", false),
            ("v2", false),
        ] {
            let mut v = version.clone();
            v["name"] = name.into();
            v["storage"] = storage.into();
            versions.push(v);
        }
        crd["spec"]["versions"] = versions.into();
        let mut defs = defs();
        defs.extend(defs_from_crd(&crd).unwrap().into_iter().map(Arc::new));
        let doc = group(&defs, "example.com").unwrap();
        let order: Vec<&str> = doc["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["version"].as_str().unwrap())
            .collect();
        assert_eq!(order, ["v2", "v1", "v2beta1", "v1beta2", "v2alpha1", "foo"]);
        assert_eq!(
            doc["preferredVersion"]["version"], "v2",
            "not the storage version"
        );
        let apis = aggregated(&defs, false);
        let widgets = apis["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == "example.com")
            .unwrap();
        assert_eq!(widgets["versions"][0]["version"], "v2");
    }

    #[test]
    fn openapi_v3_declares_field_validation() {
        let index = openapi_v3_index(&defs());
        assert!(index["paths"]["apis/example.com/v1"]["serverRelativeURL"].is_string());
        let doc = openapi_v3_document(&defs(), "apis/example.com/v1").unwrap();
        let op =
            &doc["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"];
        assert_eq!(op["x-kubernetes-group-version-kind"]["kind"], "Widget");
        assert!(openapi_v3_document(&defs(), "apis/nope/v1").is_none());
    }
}
