//! Scanning the cluster's resources, as Kopf's observation does: which
//! resources exist ([`scan`]), which of them the handlers' selectors select
//! ([`resolve`]), and when to look again ([`watch_definitions`]).
//!
//! Discovery is read per API group: `/api` and `/apis` for the groups and
//! their preferred versions, then one resource list per group version. Only
//! the groups the selectors name are read, unless a selector names no group.
//! Custom resource definitions are watched: each change re-scans its group,
//! so that resources appearing, disappearing or changing versions at run
//! time are noticed. Where CRDs may not be listed (`403`), the groups are
//! re-scanned every [`RESCAN_INTERVAL`] instead.
//!
//! # Caveats
//! - As in Kopf, a selector without a group has every group scanned, and a
//!   group that fails to answer (an aggregated API that is down, `503`)
//!   fails the whole scan, which is retried: name the groups to avoid it.
//!
//! # Guarantees
//! - A failed scan changes nothing: what was known stays known until a scan
//!   succeeds (a discovery outage never stops serving).
//! - A selector that names one resource and matches several (in different
//!   groups) is reported as ambiguous with every candidate, never served by
//!   guess; a category may match several resources and serves them all.
//! - A resource that cannot be listed and watched, or patched when its
//!   handlers keep state on objects, is reported and not served (as in Kopf).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::fields::meta_str;
use crate::model::resources::{Discovered, ResourceRef};
use crate::model::retrying::{ErrorClass, classify};
use crate::operations::health::Health;
use crate::operator::namespaces::NamespaceSelector;
use crate::settings::WatchingSettings;
use crate::watching::{ObjectEvent, ResourceWatcher, Seen};

/// How often the groups are re-scanned when CRDs cannot be watched.
pub(crate) const RESCAN_INTERVAL: Duration = Duration::from_secs(10);

/// How many resource lists are requested at once.
const CONCURRENT_REQUESTS: usize = 8;

/// The API groups to scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Groups {
    /// Every group (a selector names none).
    All,
    /// These groups only (`""` is the core group).
    Only(BTreeSet<String>),
}

impl Groups {
    /// The groups `selectors` can match.
    pub(crate) fn of<'a>(selectors: impl IntoIterator<Item = &'a ResourceRef>) -> Self {
        let mut groups = BTreeSet::new();
        for selector in selectors {
            match selector.group() {
                Some(group) => groups.insert(group.to_owned()),
                None => return Self::All,
            };
        }
        Self::Only(groups)
    }

    /// Whether `group` is among them.
    pub(crate) fn includes(&self, group: &str) -> bool {
        match self {
            Self::All => true,
            Self::Only(groups) => groups.contains(group),
        }
    }

    /// Whether no group is among them.
    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, Self::Only(groups) if groups.is_empty())
    }

    /// Adds `other`'s groups.
    pub(crate) fn add(&mut self, other: &Self) {
        match (&mut *self, other) {
            (Self::All, _) => {}
            (_, Self::All) => *self = Self::All,
            (Self::Only(mine), Self::Only(theirs)) => mine.extend(theirs.iter().cloned()),
        }
    }

    /// Whether a scan of these groups replaces what was known of `group`.
    fn covers(&self, group: &str) -> bool {
        self.includes(group)
    }

    fn any_named(&self) -> bool {
        match self {
            Self::All => true,
            Self::Only(groups) => groups.iter().any(|g| !g.is_empty()),
        }
    }
}

/// Reads the resources of `groups` from discovery (Kopf's `scan_resources`).
///
/// # Errors
/// The first failed request: nothing is known from a partial scan. A group
/// version that is gone by the time it is read (`404`) has no resources.
pub(crate) async fn scan(client: &Client, groups: &Groups) -> Result<Vec<Discovered>, kube::Error> {
    // (group, version, preferred)
    let mut versions: Vec<(String, String, bool)> = Vec::new();
    if groups.includes("") {
        let core = client.list_core_api_versions().await?;
        // The core group has one version, preferred by definition (as in Kopf).
        versions.extend(core.versions.into_iter().map(|v| (String::new(), v, true)));
    }
    if groups.any_named() {
        let list = client.list_api_groups().await?;
        for group in list.groups.into_iter().filter(|g| groups.includes(&g.name)) {
            let preferred = group
                .preferred_version
                .map(|p| p.version)
                .or_else(|| group.versions.first().map(|v| v.version.clone()));
            for version in group.versions {
                let is_preferred = preferred.as_deref() == Some(version.version.as_str());
                versions.push((group.name.clone(), version.version, is_preferred));
            }
        }
    }
    let lists: Vec<Option<(String, bool, APIResourceList)>> = futures::stream::iter(
        versions
            .into_iter()
            .map(|(group, version, preferred)| async move {
                let listed = if group.is_empty() {
                    client.list_core_api_resources(&version).await
                } else {
                    client
                        .list_api_group_resources(&format!("{group}/{version}"))
                        .await
                };
                match listed {
                    Ok(list) => Ok(Some((group, preferred, list))),
                    Err(error) if classify(&error) == ErrorClass::NotFound => Ok(None),
                    Err(error) => Err(error),
                }
            }),
    )
    .buffer_unordered(CONCURRENT_REQUESTS)
    .try_collect()
    .await?;
    let mut resources: Vec<Discovered> = lists
        .into_iter()
        .flatten()
        .flat_map(|(group, preferred, list)| resources_of(&group, preferred, &list))
        .collect();
    resources
        .sort_by(|a, b| (&a.group, &a.version, &a.plural).cmp(&(&b.group, &b.version, &b.plural)));
    Ok(resources)
}

/// The resources of one group version's list (subresources are properties
/// of their resource, not resources).
fn resources_of(group: &str, preferred: bool, list: &APIResourceList) -> Vec<Discovered> {
    let version = list
        .group_version
        .rsplit_once('/')
        .map_or(list.group_version.as_str(), |(_, v)| v);
    list.resources
        .iter()
        .filter(|r| !r.name.contains('/'))
        .map(|r| Discovered {
            group: group.to_owned(),
            version: version.to_owned(),
            plural: r.name.clone(),
            kind: r.kind.clone(),
            // Some distributions leave the singular of built-ins empty; the
            // lowercase kind is what it would be (as Kopf falls back).
            singular: if r.singular_name.is_empty() {
                r.kind.to_lowercase()
            } else {
                r.singular_name.clone()
            },
            shortcuts: r.short_names.clone().unwrap_or_default(),
            categories: r.categories.clone().unwrap_or_default(),
            namespaced: r.namespaced,
            preferred,
            verbs: r.verbs.clone(),
            status_subresource: list
                .resources
                .iter()
                .any(|s| s.name.strip_prefix(r.name.as_str()) == Some("/status")),
        })
        .collect()
}

/// Replaces what `known` holds of the groups `scanned` covers with `found`.
pub(crate) fn merge(known: &mut Vec<Discovered>, scanned: &Groups, found: Vec<Discovered>) {
    known.retain(|r| !scanned.covers(&r.group));
    known.extend(found);
    known.sort_by(|a, b| (&a.group, &a.version, &a.plural).cmp(&(&b.group, &b.version, &b.plural)));
}

/// One selector to resolve, and whether its handlers keep state on the
/// objects (change handlers, daemons, timers), so that its resources must
/// be patchable.
#[derive(Debug, Clone)]
pub(crate) struct Wanted {
    pub selector: ResourceRef,
    pub patches: bool,
}

/// What the selectors select among the discovered resources.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Resolution {
    /// The resources to serve, each with the indexes of the selectors that
    /// select it, in the order of the resources.
    pub served: Vec<(Discovered, Vec<usize>)>,
    /// The selectors that name one resource but match several: the index
    /// and the candidates.
    pub ambiguous: Vec<(usize, Vec<Discovered>)>,
    /// The selectors that match nothing: the index and the resources of the
    /// same name in other groups or versions, if any.
    pub unmatched: Vec<(usize, Vec<String>)>,
    /// Selected resources that cannot be served, and why.
    pub unsuitable: Vec<(String, &'static str)>,
}

/// Resolves `wanted` against `discovered` (Kopf's `revise_resources` for
/// the watched resources).
pub(crate) fn resolve(wanted: &[Wanted], discovered: &[Discovered]) -> Resolution {
    let mut resolution = Resolution::default();
    let mut served: Vec<(&Discovered, Vec<usize>)> = Vec::new();
    for (index, want) in wanted.iter().enumerate() {
        let selected = want.selector.select(discovered);
        if selected.is_empty() {
            let near = discovered
                .iter()
                .filter(|r| want.selector.matches_name(r))
                .map(ToString::to_string)
                .collect();
            resolution.unmatched.push((index, near));
            continue;
        }
        if want.selector.is_specific() && selected.len() > 1 {
            let candidates = selected.into_iter().cloned().collect();
            resolution.ambiguous.push((index, candidates));
            continue;
        }
        for resource in selected {
            let why = if !resource.supports("list") || !resource.supports("watch") {
                Some("it cannot be listed and watched")
            } else if want.patches && !resource.supports("patch") {
                Some("it cannot be patched, and its handlers keep their state on the objects")
            } else {
                None
            };
            if let Some(why) = why {
                let name = resource.to_string();
                if !resolution.unsuitable.iter().any(|(n, _)| *n == name) {
                    resolution.unsuitable.push((name, why));
                }
                continue;
            }
            match served.iter_mut().find(|(r, _)| *r == resource) {
                Some((_, indexes)) => indexes.push(index),
                None => served.push((resource, vec![index])),
            }
        }
    }
    // A resource unsuitable for one selector is unsuitable for all of them.
    served.retain(|(r, _)| {
        let name = r.to_string();
        !resolution.unsuitable.iter().any(|(n, _)| *n == name)
    });
    resolution.served = served
        .into_iter()
        .map(|(resource, indexes)| (resource.clone(), indexes))
        .collect();
    resolution
}

/// A change of the custom resource definitions: the groups to re-scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rescan {
    /// Every group: the first listing of the definitions is complete (what
    /// was defined between the first scan and it is noticed here).
    All,
    /// The group of a definition that was added, changed or deleted.
    Group(String),
}

/// The API resource of custom resource definitions.
fn definitions() -> ApiResource {
    ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    }
}

/// Watches the custom resource definitions until `stop`, sending what to
/// re-scan into `tx`; with `health`, the watch is registered there as a
/// served resource's, so that its first listing counts for readiness and
/// its silence fails liveness.
///
/// # Errors
/// At once, when the definitions may not be listed (`403`) or the cluster
/// has none (`404`), for the caller to fall back to periodic scans; other
/// failures are retried as every watch retries them.
pub(crate) async fn watch_definitions(
    client: Client,
    settings: WatchingSettings,
    health: Option<Arc<Health>>,
    tx: mpsc::Sender<Rescan>,
    stop: CancellationToken,
) -> Result<(), kube::Error> {
    let resource = definitions();
    let probe = Api::<DynamicObject>::all_with(client.clone(), &resource)
        .list_metadata(&ListParams::default().limit(1))
        .await;
    if let Err(error) = probe
        && matches!(error, kube::Error::Api(ref status) if matches!(status.code, 403 | 404))
    {
        return Err(error);
    }
    let silence_limit = settings.effective_silence_limit();
    let watcher = ResourceWatcher::new(client, resource, false, NamespaceSelector::all(), settings);
    let registered = health.map(|health| {
        health.register(
            "apiextensions.k8s.io/v1/customresourcedefinitions".to_owned(),
            silence_limit,
            None,
            None,
        )
    });
    let watcher = match &registered {
        Some(registered) => watcher.with_health(Arc::clone(registered.resource())),
        None => watcher,
    };
    let (events_tx, mut events) = mpsc::channel(64);
    let watching = stop.child_token();
    let watch = tokio::spawn(watcher.run(events_tx, watching.clone()));
    let mut synced = false;
    while let Some(event) = events.recv().await {
        let rescan = match &event {
            ObjectEvent::Synced { .. } if !synced => {
                synced = true;
                Some(Rescan::All)
            }
            // The first listing is what the first scan already saw.
            _ if !synced => None,
            ObjectEvent::Synced { .. }
            | ObjectEvent::Upserted {
                seen: Seen::Unchanged,
                ..
            } => None,
            _ => event
                .object()
                .and_then(|crd| group_of(crd))
                .map(Rescan::Group)
                .or(Some(Rescan::All)),
        };
        if let Some(rescan) = rescan
            && tx.send(rescan).await.is_err()
        {
            break;
        }
    }
    watching.cancel();
    if let Err(error) = watch.await {
        tracing::error!(%error, "the watch of the custom resource definitions failed");
    }
    Ok(())
}

/// The API group of a CRD: its name is `plural.group`, which even an
/// identity-only body (a vanished or undecodable one) carries.
fn group_of(crd: &serde_json::Value) -> Option<String> {
    let group = crd
        .pointer("/spec/group")
        .and_then(serde_json::Value::as_str);
    let group = group.or_else(|| meta_str(crd, "name")?.split_once('.').map(|(_, g)| g))?;
    Some(group.to_owned())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;
    use serde_json::json;

    use super::*;

    fn resource(group: &str, version: &str, plural: &str, kind: &str) -> Discovered {
        Discovered {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            kind: kind.into(),
            singular: kind.to_lowercase(),
            namespaced: true,
            preferred: true,
            verbs: ["list", "watch", "patch"].map(String::from).to_vec(),
            ..Discovered::default()
        }
    }

    fn want(selector: ResourceRef) -> Wanted {
        Wanted {
            selector,
            patches: true,
        }
    }

    fn served(resolution: &Resolution) -> Vec<(String, Vec<usize>)> {
        resolution
            .served
            .iter()
            .map(|(r, i)| (r.to_string(), i.clone()))
            .collect()
    }

    #[test]
    fn selectors_of_one_resource_serve_it_once_with_all_their_handlers() {
        let discovered = [resource("kopf.dev", "v1", "kopfexamples", "KopfExample")];
        let resolution = resolve(
            &[
                want(ResourceRef::named("kopfexamples")),
                want(ResourceRef::dynamic("kopf.dev", "v1", "KopfExample")),
                want(ResourceRef::by_kind("KopfExample").with_group("kopf.dev")),
            ],
            &discovered,
        );
        assert_eq!(
            served(&resolution),
            [("kopfexamples.v1.kopf.dev".to_owned(), vec![0, 1, 2])]
        );
        assert!(resolution.ambiguous.is_empty() && resolution.unmatched.is_empty());
    }

    #[test]
    fn an_ambiguous_name_is_reported_with_its_candidates_and_not_served() {
        let discovered = [
            resource("a.example", "v1", "widgets", "Widget"),
            resource("b.example", "v1", "widgets", "Widget"),
        ];
        let resolution = resolve(
            &[
                want(ResourceRef::named("widgets")),
                want(ResourceRef::named("widgets.b.example")),
            ],
            &discovered,
        );
        assert_eq!(resolution.ambiguous, [(0, discovered.to_vec())]);
        assert_eq!(
            served(&resolution),
            [("widgets.v1.b.example".to_owned(), vec![1])]
        );
    }

    #[test]
    fn a_category_serves_every_member() {
        let discovered = [
            Discovered {
                categories: vec!["mine".into()],
                ..resource("a.example", "v1", "widgets", "Widget")
            },
            Discovered {
                categories: vec!["mine".into()],
                ..resource("b.example", "v1", "gadgets", "Gadget")
            },
            resource("b.example", "v1", "others", "Other"),
        ];
        let resolution = resolve(&[want(ResourceRef::by_category("mine"))], &discovered);
        assert_eq!(
            served(&resolution),
            [
                ("widgets.v1.a.example".to_owned(), vec![0]),
                ("gadgets.v1.b.example".to_owned(), vec![0])
            ]
        );
        assert!(resolution.ambiguous.is_empty());
    }

    #[test]
    fn an_unmatched_selector_names_the_resources_of_that_name_elsewhere() {
        let discovered = [
            Discovered {
                preferred: false,
                ..resource("kopf.dev", "v1", "kopfexamples", "KopfExample")
            },
            resource("kopf.dev", "v2", "kopfexamples", "KopfExample"),
        ];
        let resolution = resolve(
            &[
                want(ResourceRef::dynamic("kopf.dev", "v3", "kopfexamples")),
                want(ResourceRef::named("nothing")),
            ],
            &discovered,
        );
        assert_eq!(
            resolution.unmatched,
            [
                (
                    0,
                    vec![
                        "kopfexamples.v1.kopf.dev".to_owned(),
                        "kopfexamples.v2.kopf.dev".to_owned()
                    ]
                ),
                (1, vec![])
            ]
        );
        assert!(resolution.served.is_empty());
    }

    #[test]
    fn resources_that_cannot_be_watched_or_patched_are_not_served() {
        let discovered = [
            Discovered {
                verbs: vec!["create".into()],
                ..resource("", "v1", "bindings", "Binding")
            },
            Discovered {
                verbs: vec!["list".into(), "watch".into()],
                ..resource("", "v1", "componentstatuses", "ComponentStatus")
            },
        ];
        let resolution = resolve(
            &[
                want(ResourceRef::named("bindings")),
                want(ResourceRef::named("componentstatuses")),
                Wanted {
                    selector: ResourceRef::named("componentstatus"),
                    patches: false,
                },
            ],
            &discovered,
        );
        assert_eq!(
            resolution
                .unsuitable
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>(),
            ["bindings.v1", "componentstatuses.v1"]
        );
        assert!(
            resolution.served.is_empty(),
            "unsuitable for one selector, unsuitable for all"
        );
    }

    #[test]
    fn groups_are_those_named_unless_one_selector_names_none() {
        let only = Groups::of(&[
            ResourceRef::dynamic("", "v1", "pods"),
            ResourceRef::named_in("apps", "deployments"),
        ]);
        assert!(only.includes("") && only.includes("apps") && !only.includes("batch"));
        let all = Groups::of(&[
            ResourceRef::dynamic("", "v1", "pods"),
            ResourceRef::named("kopfexamples"),
        ]);
        assert_eq!(all, Groups::All);
        let mut merged = Groups::Only(BTreeSet::new());
        assert!(merged.is_empty());
        merged.add(&only);
        assert!(merged.includes("apps"));
        merged.add(&Groups::All);
        assert_eq!(merged, Groups::All);
    }

    #[test]
    fn a_scan_of_some_groups_replaces_only_theirs() {
        let mut known = vec![
            resource("", "v1", "pods", "Pod"),
            resource("kopf.dev", "v1", "kopfexamples", "KopfExample"),
        ];
        let scanned = Groups::Only(BTreeSet::from(["kopf.dev".to_owned()]));
        merge(&mut known, &scanned, vec![]);
        assert_eq!(known, [resource("", "v1", "pods", "Pod")]);
        merge(
            &mut known,
            &scanned,
            vec![resource("kopf.dev", "v2", "kopfexamples", "KopfExample")],
        );
        assert_eq!(known.len(), 2);
    }

    #[test]
    fn resource_lists_give_resources_with_their_status_subresource() {
        let api = |name: &str, kind: &str, singular: &str| APIResource {
            name: name.into(),
            kind: kind.into(),
            singular_name: singular.into(),
            namespaced: true,
            verbs: vec!["list".into()],
            short_names: Some(vec!["kex".into()]),
            categories: Some(vec!["all".into()]),
            ..APIResource::default()
        };
        let list = APIResourceList {
            group_version: "kopf.dev/v1".into(),
            resources: vec![
                api("kopfexamples", "KopfExample", ""),
                api("kopfexamples/status", "KopfExample", ""),
                api("others", "Other", "other"),
            ],
        };
        let found = resources_of("kopf.dev", true, &list);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].version, "v1");
        assert_eq!(found[0].singular, "kopfexample", "the lowercase kind");
        assert!(found[0].status_subresource);
        assert!(!found[1].status_subresource);
        assert_eq!(found[0].shortcuts, ["kex"]);
        assert_eq!(found[0].categories, ["all"]);
    }

    #[test]
    fn a_definition_names_its_group_even_as_an_identity() {
        assert_eq!(
            group_of(&json!({"spec": {"group": "kopf.dev"}})).as_deref(),
            Some("kopf.dev")
        );
        assert_eq!(
            group_of(&json!({"metadata": {"name": "kopfexamples.kopf.dev"}})).as_deref(),
            Some("kopf.dev")
        );
        assert_eq!(group_of(&json!({"metadata": {"name": "x"}})), None);
    }
}
