//! The start-up check of the operator's permissions: one
//! `SelfSubjectAccessReview` per verb, object name and namespace of every
//! [`Permission`] it needs, asked before anything is served, and every
//! missing one reported at once ([`Missing`]).
//!
//! # Guarantees
//! - A permission is reported missing only when the API server answers
//!   that it is not allowed; a review that cannot be asked (an API server
//!   without the authorization API, a network error) is logged as a
//!   warning and the operator starts, as it would without the check.
//! - The reviews are asked at most [`CONCURRENT_REVIEWS`] at a time, once
//!   per start.

use std::fmt;

use futures::{StreamExt, stream};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

use crate::deploying::permissions::{Permission, PermissionScope};

/// How many reviews are asked at once.
const CONCURRENT_REVIEWS: usize = 8;

/// What the operator does when it lacks permissions at start-up
/// (`--missing-permissions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum MissingPermissions {
    /// Report them all and do not start (the default).
    #[default]
    Fail,
    /// Report them all as a warning and start anyway.
    Warn,
}

/// One permission the operator needs and does not have: a verb on a
/// resource (of a group, maybe an object name) in a scope.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Missing {
    /// The verb.
    pub verb: String,
    /// The API group (`""` for the core group).
    pub group: String,
    /// `resource` or `resource/subresource`.
    pub resource: String,
    /// The object's name, when the permission is on named objects.
    pub name: Option<String>,
    /// The namespace; `None` at the cluster scope.
    pub namespace: Option<String>,
    /// Why the operator needs it.
    pub why: String,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot {} resource \"{}\" in API group \"{}\"",
            self.verb, self.resource, self.group
        )?;
        if let Some(name) = &self.name {
            write!(f, " named \"{name}\"")?;
        }
        match &self.namespace {
            Some(namespace) => write!(f, " in the namespace \"{namespace}\"")?,
            None => write!(f, " at the cluster scope")?,
        }
        if !self.why.is_empty() {
            write!(f, " (needed: {})", self.why)?;
        }
        Ok(())
    }
}

/// One question to the API server.
fn reviews(permission: &Permission) -> Vec<Missing> {
    let namespace = match permission.scope() {
        PermissionScope::Namespace(namespace) => Some(namespace.clone()),
        PermissionScope::Cluster | PermissionScope::Served => None,
    };
    let names = permission.name_list();
    let names: Vec<Option<String>> = if names.is_empty() {
        vec![None]
    } else {
        names.into_iter().map(|n| Some(n.to_owned())).collect()
    };
    let mut asked = Vec::new();
    for verb in permission.verb_list() {
        // RBAC never narrows `create` by name: ask it without one.
        let names: &[Option<String>] = if verb == "create" { &[None] } else { &names };
        for name in names {
            asked.push(Missing {
                verb: verb.to_owned(),
                group: permission.group().to_owned(),
                resource: permission.rbac_resource(),
                name: name.clone(),
                namespace: namespace.clone(),
                why: permission.reason().to_owned(),
            });
        }
    }
    asked
}

/// Why a review could not be asked.
#[derive(Debug, thiserror::Error)]
#[error("cannot ask the API server whether the operator may {verb} {resource}: {source}")]
pub(crate) struct ReviewError {
    verb: String,
    resource: String,
    #[source]
    source: kube::Error,
}

/// Whether the API server allows `asked`.
async fn allowed(api: &Api<SelfSubjectAccessReview>, asked: &Missing) -> Result<bool, ReviewError> {
    let (resource, subresource) = match asked.resource.split_once('/') {
        Some((resource, sub)) => (resource.to_owned(), Some(sub.to_owned())),
        None => (asked.resource.clone(), None),
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(asked.group.clone()),
                resource: Some(resource),
                subresource,
                verb: Some(asked.verb.clone()),
                name: asked.name.clone(),
                namespace: asked.namespace.clone(),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let answer = api
        .create(&PostParams::default(), &review)
        .await
        .map_err(|source| ReviewError {
            verb: asked.verb.clone(),
            resource: asked.resource.clone(),
            source,
        })?;
    Ok(answer.status.is_some_and(|status| status.allowed))
}

/// Asks the API server for every permission in `needed`; returns the
/// missing ones, sorted, or the first review that could not be asked.
pub(crate) async fn missing(
    client: &Client,
    needed: &[Permission],
) -> Result<Vec<Missing>, ReviewError> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut asked: Vec<Missing> = needed.iter().flat_map(reviews).collect();
    asked.sort();
    asked.dedup_by(|a, b| {
        (&a.verb, &a.group, &a.resource, &a.name, &a.namespace)
            == (&b.verb, &b.group, &b.resource, &b.name, &b.namespace)
    });
    let answers: Vec<Result<Option<Missing>, ReviewError>> = stream::iter(asked)
        .map(|asked| {
            let api = &api;
            async move { Ok((!allowed(api, &asked).await?).then_some(asked)) }
        })
        .buffered(CONCURRENT_REVIEWS)
        .collect()
        .await;
    let mut missing = Vec::new();
    for answer in answers {
        missing.extend(answer?);
    }
    Ok(missing)
}

/// What the start-up check needs to know of the operator.
pub(crate) struct StartUp<'a> {
    pub(crate) registry: &'a crate::model::registry::Registry,
    pub(crate) plan: crate::deploying::Plan,
    pub(crate) on_missing: MissingPermissions,
}

/// Checks the operator's permissions before it serves anything: `Err`
/// with the report when some are missing and `on_missing` is
/// [`MissingPermissions::Fail`]; a warning otherwise.
pub(crate) async fn at_start_up(
    client: &Client,
    start_up: StartUp<'_>,
) -> Result<(), (Vec<Missing>, String)> {
    let needed = match crate::deploying::required(
        start_up.registry,
        &start_up.plan,
        &crate::deploying::Named::offline,
    ) {
        Ok(needed) => needed,
        Err(error) => {
            tracing::warn!(%error, "cannot check the operator's permissions at start-up");
            return Ok(());
        }
    };
    match missing(client, &needed).await {
        Ok(missing) if missing.is_empty() => {
            tracing::debug!(
                permissions = needed.len(),
                "the operator has every permission it needs"
            );
            Ok(())
        }
        Ok(missing) => {
            let report = report(&missing);
            match start_up.on_missing {
                MissingPermissions::Fail => Err((missing, report)),
                MissingPermissions::Warn => {
                    tracing::warn!("{report}");
                    Ok(())
                }
            }
        }
        Err(error) => {
            tracing::warn!(error = %error, source = ?std::error::Error::source(&error), "cannot check the operator's permissions at start-up; starting without the check");
            Ok(())
        }
    }
}

/// The report of missing permissions: each on its line, and how to fix it.
pub(crate) fn report(missing: &[Missing]) -> String {
    let program = std::env::args()
        .next()
        .and_then(|path| {
            std::path::Path::new(&path)
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "my-operator".to_owned());
    let mut text = format!(
        "the operator lacks {} permission(s) it needs:",
        missing.len()
    );
    for one in missing {
        text.push_str("\n  - ");
        text.push_str(&one.to_string());
    }
    text.push_str(&format!(
        "\ngrant them with the rules that `{program} manifests` prints for the same flags \
         (`{program} manifests [flags] | kubectl apply -f -`), or add them to the operator's \
         Role or ClusterRole; with --missing-permissions=warn the operator starts anyway"
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permission_is_asked_per_verb_and_name_but_create_without_one() {
        let permission = Permission::new("coordination.k8s.io", "leases")
            .verbs(["create", "get", "update"])
            .names(["op"])
            .namespace("ops");
        let asked: Vec<(String, Option<String>)> = reviews(&permission)
            .into_iter()
            .map(|m| (m.verb, m.name))
            .collect();
        assert_eq!(
            asked,
            [
                ("create".to_owned(), None),
                ("get".to_owned(), Some("op".to_owned())),
                ("update".to_owned(), Some("op".to_owned())),
            ]
        );
    }

    #[test]
    fn a_missing_permission_reads_as_the_api_servers_refusal() {
        let missing = Missing {
            verb: "list".into(),
            group: String::new(),
            resource: "secrets".into(),
            name: None,
            namespace: None,
            why: "the handlers' objects are listed and watched".into(),
        };
        assert_eq!(
            missing.to_string(),
            "cannot list resource \"secrets\" in API group \"\" at the cluster scope \
             (needed: the handlers' objects are listed and watched)"
        );
        let report = report(std::slice::from_ref(&missing));
        assert!(report.contains("lacks 1 permission(s)"), "{report}");
        assert!(report.contains("manifests"), "{report}");
    }
}
