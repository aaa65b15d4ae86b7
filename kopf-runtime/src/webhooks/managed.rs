//! The managed webhook configurations (`--webhook-managed NAME`): the
//! ValidatingWebhookConfiguration and the MutatingWebhookConfiguration
//! `NAME`, made from the registry as Kopf's `build_webhooks` makes them,
//! and the discovery of the resources their rules name.
//!
//! # Guarantees
//! - Both configurations exist while the operator runs (created if absent)
//!   and hold one webhook per handler of their kind: its rules name every
//!   resource its selector selects (`plural` or `plural/subresource`), its
//!   operations (`*` for all), `scope: *`; its object selector the label
//!   filters that a selector can say (exact values, present, absent; a
//!   callback cannot); `sideEffects` `NoneOnDryRun` with `side_effects`,
//!   else `None`; `failurePolicy` `Ignore` with `ignore_failures`, else
//!   `Fail`; `timeoutSeconds: 30`; `admissionReviewVersions: [v1]`; the
//!   server's URL (or Service) with the handler's id as the last path
//!   segment, and its CA bundle.
//! - They are written again whenever the CA bundle or the discovered
//!   resources change; a failure is retried with backoff, never given up.
//! - On exit, only the webhooks of `persistent` handlers are kept (as in
//!   Kopf, the configurations themselves stay).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::args::ServiceRef;
use super::paths::quote;
use crate::model::filters::MetaValue;
use crate::model::handlers::{Handler, HandlerKind};
use crate::model::resources::Discovered;
use crate::model::retrying::Backoff;
use crate::operator::scanning::{self, Groups};
use crate::webhooks::admission::options_of;

/// How often the resources of the webhooks are discovered again.
const RESCAN_INTERVAL: Duration = Duration::from_secs(60);

/// How long the clean-up on exit may take.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The delays between failed attempts.
const BACKOFF: [Duration; 4] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(5),
    Duration::from_secs(10),
];

/// The configurations to manage: their name, and how they reach the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Managed {
    pub(crate) name: String,
    pub(crate) client: ClientConfig,
}

/// How the API server reaches the webhook server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClientConfig {
    /// By URL (the root; each handler's id is appended).
    Url(String),
    /// Through a Service, at this root path.
    Service { service: ServiceRef, path: String },
}

impl ClientConfig {
    /// The `clientConfig` of handler `id`'s webhook.
    fn of(&self, id: &str, ca: &str) -> Value {
        let mut config = match self {
            ClientConfig::Url(url) => json!({"url": format!("{url}/{}", quote(id))}),
            ClientConfig::Service { service, path } => {
                let mut reference = json!({
                    "namespace": service.namespace,
                    "name": service.name,
                    "path": format!("{path}/{}", quote(id)),
                });
                if let Some(port) = service.port {
                    reference["port"] = json!(port);
                }
                json!({"service": reference})
            }
        };
        config["caBundle"] = json!(base64::engine::general_purpose::STANDARD.encode(ca));
        config
    }
}

/// The API resource of a configuration kind.
fn api_resource(kind: HandlerKind) -> ApiResource {
    let (kind, plural) = match kind {
        HandlerKind::OnMutate => (
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
        ),
        _ => (
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
        ),
    };
    ApiResource {
        group: "admissionregistration.k8s.io".to_owned(),
        version: "v1".to_owned(),
        api_version: "admissionregistration.k8s.io/v1".to_owned(),
        kind: kind.to_owned(),
        plural: plural.to_owned(),
    }
}

/// A webhook's name: the id made a DNS subdomain, then the
/// configuration's name (Kopf's `_normalize_name`).
fn webhook_name(id: &str, suffix: &str) -> String {
    let mut name = String::new();
    for c in id.chars() {
        match c {
            '/' => name.push('.'),
            '_' => name.push('-'),
            c if c.is_ascii_alphanumeric() || c == '.' || c == '-' => name.push(c),
            c => {
                let mut buffer = [0; 4];
                for byte in c.encode_utf8(&mut buffer).bytes() {
                    name.push_str(&format!("{byte:02x}"));
                }
            }
        }
    }
    if suffix.is_empty() {
        name
    } else {
        format!("{name}.{suffix}")
    }
}

/// The object selector of a handler's label filters, if any can be said.
fn object_selector(handler: &Handler) -> Option<Value> {
    let expressions: Vec<Value> = handler
        .filters()
        .labels
        .entries
        .iter()
        .filter_map(|(key, value)| match value {
            MetaValue::Equals(v) => Some(json!({"key": key, "operator": "In", "values": [v]})),
            MetaValue::Present => Some(json!({"key": key, "operator": "Exists"})),
            MetaValue::Absent => Some(json!({"key": key, "operator": "DoesNotExist"})),
            MetaValue::Callback(_) => None,
        })
        .collect();
    (!expressions.is_empty()).then(|| json!({"matchExpressions": expressions}))
}

/// The webhooks of one configuration kind (Kopf's `build_webhooks`).
pub(crate) fn build_webhooks(
    handlers: &[Handler],
    kind: HandlerKind,
    resources: &[Discovered],
    managed: &Managed,
    ca: &str,
    persistent_only: bool,
) -> Vec<Value> {
    handlers
        .iter()
        .filter(|h| h.kind() == kind)
        .filter_map(|handler| {
            let options = options_of(handler);
            if persistent_only && !options.persistent {
                return None;
            }
            let selected = handler
                .resource()
                .as_ref()
                .map(|selector| selector.select(resources))
                .unwrap_or_default();
            let operations: Vec<&str> = if options.operations.is_empty() {
                vec!["*"]
            } else {
                options.operations.iter().map(|o| o.as_str()).collect()
            };
            let rules: Vec<Value> = selected
                .iter()
                .map(|resource| {
                    let plural = match &options.subresource {
                        Some(sub) => format!("{}/{sub}", resource.plural),
                        None => resource.plural.clone(),
                    };
                    json!({
                        "apiGroups": [resource.group],
                        "apiVersions": [resource.version],
                        "resources": [plural],
                        "operations": operations,
                        "scope": "*",
                    })
                })
                .collect();
            let mut webhook = json!({
                "name": webhook_name(handler.id(), &managed.name),
                "sideEffects": if options.side_effects { "NoneOnDryRun" } else { "None" },
                "failurePolicy": if options.ignore_failures { "Ignore" } else { "Fail" },
                "matchPolicy": "Equivalent",
                "rules": rules,
                "clientConfig": managed.client.of(handler.id(), ca),
                "timeoutSeconds": 30,
                "admissionReviewVersions": ["v1"],
            });
            if let Some(selector) = object_selector(handler) {
                webhook["objectSelector"] = selector;
            }
            Some(webhook)
        })
        .collect()
}

/// Writes both configurations: created if absent, their webhooks replaced.
async fn apply(
    client: &Client,
    managed: &Managed,
    handlers: &[Handler],
    resources: &[Discovered],
    ca: &str,
    persistent_only: bool,
) -> Result<(), kube::Error> {
    for kind in [HandlerKind::OnValidate, HandlerKind::OnMutate] {
        let resource = api_resource(kind);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let webhooks = build_webhooks(handlers, kind, resources, managed, ca, persistent_only);
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": {"name": managed.name},
            "webhooks": webhooks,
        }))
        .map_err(kube::Error::SerdeError)?;
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => continue,
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => return Err(error),
        }
        let patch = json!({"webhooks": webhooks});
        api.patch(
            &managed.name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    Ok(())
}

/// Keeps the configurations up to date until `stop`, then removes the
/// webhooks of handlers that are not `persistent`.
pub(crate) async fn manage(
    client: Client,
    managed: Managed,
    handlers: Vec<Handler>,
    mut resources: watch::Receiver<Arc<[Discovered]>>,
    mut ca: watch::Receiver<Arc<str>>,
    stop: CancellationToken,
) {
    let mut backoff = Backoff::endless(&BACKOFF);
    let mut applied = false;
    loop {
        let listed = Arc::clone(&*resources.borrow_and_update());
        let pem = Arc::clone(&*ca.borrow_and_update());
        match apply(&client, &managed, &handlers, &listed, &pem, false).await {
            Ok(()) => {
                backoff.reset();
                if !applied {
                    tracing::info!(name = %managed.name, "the webhook configurations are managed");
                }
                applied = true;
                tokio::select! {
                    () = stop.cancelled() => break,
                    changed = resources.changed() => if changed.is_err() { stop.cancelled().await; break },
                    changed = ca.changed() => if changed.is_err() { stop.cancelled().await; break },
                }
                tracing::info!(name = %managed.name, "reconfiguring the webhooks");
            }
            Err(error) => {
                let delay = backoff.next_delay(None).unwrap_or(Duration::from_secs(10));
                tracing::warn!(%error, name = %managed.name, "the webhook configurations could not be written; retrying in {delay:?}");
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
    if !applied {
        return;
    }
    let listed = Arc::clone(&*resources.borrow());
    let pem = Arc::clone(&*ca.borrow());
    let cleanup = apply(&client, &managed, &handlers, &listed, &pem, true);
    match tokio::time::timeout(CLEANUP_TIMEOUT, cleanup).await {
        Ok(Ok(())) => {
            tracing::info!(name = %managed.name, "removed the webhooks that are not persistent");
        }
        Ok(Err(error)) => {
            tracing::warn!(%error, name = %managed.name, "the webhooks could not be removed on exit");
        }
        Err(_) => {
            tracing::warn!(name = %managed.name, "the webhooks were not removed in time on exit");
        }
    }
}

/// Discovers the resources of the webhook handlers until `stop`: at once,
/// retried until it succeeds, then every [`RESCAN_INTERVAL`]; `resources`
/// changes only when they do.
pub(crate) async fn discover(
    client: Client,
    handlers: Vec<Handler>,
    resources: watch::Sender<Arc<[Discovered]>>,
    stop: CancellationToken,
) {
    let groups = Groups::of(handlers.iter().filter_map(|h| h.resource()));
    let mut backoff = Backoff::endless(&BACKOFF);
    loop {
        let delay = match scanning::scan(&client, &groups).await {
            Ok(found) => {
                backoff.reset();
                resources.send_if_modified(|current| {
                    let changed = **current != *found;
                    if changed {
                        *current = Arc::from(found);
                    }
                    changed
                });
                RESCAN_INTERVAL
            }
            Err(error) => {
                let delay = backoff.next_delay(None).unwrap_or(RESCAN_INTERVAL);
                tracing::warn!(%error, "the resources of the webhooks could not be discovered; retrying in {delay:?}");
                delay
            }
        };
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::filters::MetaFilter;
    use crate::model::kwargs::{Kwargs, Operation};
    use crate::model::resources::ResourceRef;

    fn kopfexamples() -> Discovered {
        Discovered {
            group: "kopf.dev".into(),
            version: "v1".into(),
            plural: "kopfexamples".into(),
            kind: "KopfExample".into(),
            singular: "kopfexample".into(),
            namespaced: true,
            preferred: true,
            ..Discovered::default()
        }
    }

    #[test]
    fn each_handler_is_one_webhook_with_kopf_conventions() {
        let validate = Handler::on_validate(
            ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples"),
            "check_size",
            |_: Kwargs| async {},
        )
        .operations([Operation::Create, Operation::Update])
        .subresource("status")
        .persistent(true)
        .side_effects(true)
        .ignore_failures(true)
        .labels(MetaFilter {
            entries: vec![
                ("app".into(), MetaValue::Equals("demo".into())),
                ("tier".into(), MetaValue::Present),
                ("skip".into(), MetaValue::Absent),
                ("cb".into(), MetaValue::Callback(Arc::new(|_, _| true))),
            ],
        });
        let mutate = Handler::on_mutate(
            ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples"),
            "defaults",
            |_: Kwargs| async {},
        );
        let handlers = vec![validate, mutate];
        let managed = Managed {
            name: "auto.kopf.dev".into(),
            client: ClientConfig::Url("https://127.0.0.1:9443/hooks".into()),
        };
        let resources = [kopfexamples()];
        let validating = build_webhooks(
            &handlers,
            HandlerKind::OnValidate,
            &resources,
            &managed,
            "CA",
            false,
        );
        assert_eq!(
            validating,
            [json!({
                "name": "check-size.auto.kopf.dev",
                "sideEffects": "NoneOnDryRun",
                "failurePolicy": "Ignore",
                "matchPolicy": "Equivalent",
                "rules": [{
                    "apiGroups": ["kopf.dev"],
                    "apiVersions": ["v1"],
                    "resources": ["kopfexamples/status"],
                    "operations": ["CREATE", "UPDATE"],
                    "scope": "*",
                }],
                "objectSelector": {"matchExpressions": [
                    {"key": "app", "operator": "In", "values": ["demo"]},
                    {"key": "tier", "operator": "Exists"},
                    {"key": "skip", "operator": "DoesNotExist"},
                ]},
                "clientConfig": {
                    "url": "https://127.0.0.1:9443/hooks/check_size",
                    "caBundle": "Q0E=",
                },
                "timeoutSeconds": 30,
                "admissionReviewVersions": ["v1"],
            })]
        );
        let mutating = build_webhooks(
            &handlers,
            HandlerKind::OnMutate,
            &resources,
            &managed,
            "CA",
            false,
        );
        assert_eq!(mutating.len(), 1);
        assert_eq!(mutating[0]["failurePolicy"], "Fail");
        assert_eq!(mutating[0]["sideEffects"], "None");
        assert_eq!(mutating[0]["rules"][0]["operations"], json!(["*"]));
        assert!(mutating[0].get("objectSelector").is_none());
        // On exit, only the persistent ones stay.
        assert!(
            build_webhooks(
                &handlers,
                HandlerKind::OnMutate,
                &resources,
                &managed,
                "CA",
                true
            )
            .is_empty()
        );
        assert_eq!(
            build_webhooks(
                &handlers,
                HandlerKind::OnValidate,
                &resources,
                &managed,
                "CA",
                true
            )
            .len(),
            1
        );
    }

    #[test]
    fn services_get_the_id_in_their_path_and_names_are_made_dns_safe() {
        let config = ClientConfig::Service {
            service: ServiceRef {
                namespace: "ops".into(),
                name: "hooks".into(),
                port: Some(8443),
            },
            path: "/root".into(),
        };
        assert_eq!(
            config.of("check/spec.size", "x"),
            json!({"service": {"namespace": "ops", "name": "hooks", "port": 8443,
                               "path": "/root/check/spec.size"}, "caBundle": "eA=="})
        );
        assert_eq!(webhook_name("check/spec_x", "n"), "check.spec-x.n");
        assert_eq!(webhook_name("a b", ""), "a20b");
    }
}
