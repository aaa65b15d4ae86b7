//! The admission chain: the webhooks of the stored
//! `ValidatingWebhookConfiguration`s and `MutatingWebhookConfiguration`s
//! called on every write, as the API server's dynamic admission control
//! calls them.
//!
//! A write (create, update, patch of any type, delete, each object of a
//! deletecollection, and the `status` subresource) goes: mutating webhooks
//! in turn (configurations in name order, webhooks in their listed order),
//! their JSON patches applied; then the emulator's own validation and
//! defaulting; then the validating webhooks, all at once; then the store.
//! A denial answers the webhook's code and message; a failed call answers
//! `500` under `failurePolicy: Fail` and is passed over under `Ignore`;
//! every webhook's warnings go out as `Warning` headers. All the calls of
//! a request share its one deadline ([`deadline`]). Writes to the
//! configurations themselves are never sent to webhooks.
//!
//! With no configuration stored, a write costs one atomic load: the store
//! counts configurations as they change ([`Tracker`]), and the webhooks
//! are read from them again only after a change.

mod calling;
mod config;
pub(crate) mod deadline;
mod matching;
mod mutation;
mod review;
mod warnings;
mod writes;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use serde_json::Value;

pub use calling::{WebhookCallError, call_webhook};
pub(crate) use matching::Operation;
pub(crate) use warnings::warning_headers;
pub(crate) use writes::{admit_delete, create, options, subresource};

use crate::failures::ApiError;
use crate::recording::RecordedRequest;
use crate::resources::ResourceDef;
use crate::shared::Shared;
use calling::Destination;
use config::{Endpoint, FailurePolicy, SideEffects, Webhook};
use matching::Target;
use review::{Gvk, Gvr, ReviewRequest, Verdict};

/// The API group of the webhook configurations (never sent to webhooks).
pub(crate) const GROUP: &str = "admissionregistration.k8s.io";

/// The resources holding webhook configurations: (plural, mutating).
pub(crate) const CONFIGURATIONS: [(&str, bool); 2] = [
    ("mutatingwebhookconfigurations", true),
    ("validatingwebhookconfigurations", false),
];

/// How many configurations are stored, and a count of their changes: kept
/// by the store, read by the chain without its lock.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    configurations: AtomicUsize,
    epoch: AtomicU64,
}

impl Tracker {
    /// Records that the configurations changed; `stored` are there now.
    pub(crate) fn changed(&self, stored: usize) {
        self.configurations.store(stored, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }
}

/// A Service (namespace, name, port) the emulator cannot resolve.
pub(crate) type ServiceKey = (String, String, u16);

/// The chain's state in [`Shared`].
#[derive(Debug)]
pub(crate) struct Admission {
    tracker: Arc<Tracker>,
    /// The webhooks as read at an epoch of the tracker.
    cache: Mutex<Option<(u64, Arc<[Webhook]>)>>,
    /// Where the Services that configurations name are served.
    services: HashMap<ServiceKey, SocketAddr>,
    /// How long a request may take, its webhook calls together.
    pub(crate) request_timeout: std::time::Duration,
}

impl Admission {
    /// The chain over a store's tracker, no Service mapped yet.
    pub(crate) fn new(tracker: Arc<Tracker>) -> Self {
        Self {
            tracker,
            cache: Mutex::new(None),
            services: HashMap::new(),
            request_timeout: deadline::DEFAULT_REQUEST_TIMEOUT,
        }
    }

    /// Maps Services to the addresses they are served at.
    pub(crate) fn set_services(&mut self, services: HashMap<ServiceKey, SocketAddr>) {
        self.services = services;
    }
}

/// Whether writes to `def` go through the chain now: some configuration is
/// stored and `def` is not one of theirs.
pub(crate) fn applies(shared: &Shared, def: &ResourceDef) -> bool {
    shared
        .admission
        .tracker
        .configurations
        .load(Ordering::Acquire)
        > 0
        && def.group != GROUP
}

/// The webhooks of every stored configuration, mutating ones first.
fn webhooks(shared: &Shared) -> Arc<[Webhook]> {
    let admission = &shared.admission;
    let epoch = admission.tracker.epoch.load(Ordering::Acquire);
    let mut cache = admission
        .cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some((at, hooks)) = cache.as_ref()
        && *at == epoch
    {
        return hooks.clone();
    }
    let (epoch, configurations) = {
        let store = shared.store();
        (
            admission.tracker.epoch.load(Ordering::Acquire),
            store.webhook_configurations(),
        )
    };
    let hooks: Arc<[Webhook]> = configurations
        .iter()
        .flat_map(|(config, mutating)| config::read(config, *mutating))
        .collect();
    *cache = Some((epoch, hooks.clone()));
    hooks
}

/// One write as webhooks see it.
#[derive(Debug)]
pub(crate) struct Request<'a> {
    /// The resource written, in the version of the request.
    pub(crate) def: &'a ResourceDef,
    /// `status`, or empty for the main resource.
    pub(crate) subresource: &'a str,
    /// CREATE, UPDATE or DELETE.
    pub(crate) operation: Operation,
    /// The namespace of the request, if any.
    pub(crate) namespace: Option<&'a str>,
    /// The object's name (empty while a create has only `generateName`).
    pub(crate) name: &'a str,
    /// `?dryRun=All`.
    pub(crate) dry_run: bool,
    /// The request's options (`CreateOptions`, `UpdateOptions`, `DeleteOptions`).
    pub(crate) options: Value,
}

impl Request<'_> {
    fn target<'v>(&'v self, version: &'v str) -> Target<'v> {
        Target {
            operation: self.operation,
            group: &self.def.group,
            version,
            resource: &self.def.plural,
            subresource: self.subresource,
            namespaced: self.def.namespaced,
        }
    }
}

/// Which webhooks apply, with what the selectors need looked up once.
struct Matcher<'a> {
    shared: &'a Shared,
    request: &'a Request<'a>,
    /// The request's namespace object, once looked up.
    namespace: OnceLock<Option<Arc<Value>>>,
    /// Other served versions of the resource, once looked up.
    others: OnceLock<Vec<Arc<ResourceDef>>>,
}

impl<'a> Matcher<'a> {
    fn new(shared: &'a Shared, request: &'a Request<'a>) -> Self {
        Self {
            shared,
            request,
            namespace: OnceLock::new(),
            others: OnceLock::new(),
        }
    }

    fn others(&self) -> &[Arc<ResourceDef>] {
        self.others.get_or_init(|| {
            let def = self.request.def;
            let key = def.store_key();
            let store = self.shared.store();
            store
                .defs()
                .iter()
                .filter(|d| d.plural == def.plural && d.version != def.version)
                .filter(|d| d.store_key() == key)
                .cloned()
                .collect()
        })
    }

    /// Whether `hook` is called, and in which version of the resource: the
    /// request's (`Some(None)`), or another under `matchPolicy: Equivalent`.
    fn select(
        &self,
        hook: &Webhook,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<Option<Option<Arc<ResourceDef>>>, ApiError> {
        let request = self.request;
        let target = request.target(&request.def.version);
        let version = matching::matched_version(hook, &target, || {
            self.others().iter().map(|d| d.version.as_str()).collect()
        });
        let Some(version) = version else {
            return Ok(None);
        };
        if !self.namespace_selected(hook, object, old)? {
            return Ok(None);
        }
        if !matching::object_selected(&hook.object_selector, object, old) {
            return Ok(None);
        }
        Ok(Some(version.and_then(|v| {
            self.others().iter().find(|d| d.version == v).cloned()
        })))
    }

    /// `namespaceSelector`: the labels of the request's namespace (of the
    /// object itself for namespaces); cluster-scoped objects always match.
    fn namespace_selected(
        &self,
        hook: &Webhook,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<bool, ApiError> {
        let def = self.request.def;
        if hook.namespace_selector.is_empty() {
            return Ok(true);
        }
        if def.group.is_empty() && def.plural == "namespaces" {
            return Ok(object
                .or(old)
                .is_some_and(|ns| hook.namespace_selector.matches(ns)));
        }
        let Some(ns) = self.request.namespace.filter(|_| def.namespaced) else {
            return Ok(true);
        };
        let namespace = self.namespace.get_or_init(|| {
            let store = self.shared.store();
            let namespaces = store.find_def("", "v1", "namespaces");
            namespaces.and_then(|d| store.get(&d, None, ns).ok())
        });
        match namespace {
            Some(namespace) => Ok(hook.namespace_selector.matches(namespace)),
            None => Err(ApiError::not_found("", "namespaces", ns)),
        }
    }
}

/// How a call went wrong.
enum Failure {
    /// The call failed: `failurePolicy` decides (the reason, worded as the
    /// API server's).
    Call(String),
    /// The request is refused whatever the policy.
    Refused(ApiError),
    /// The request's deadline passed: it is answered `504`, whatever the
    /// policy, without the warnings gathered.
    Deadline,
}

/// Calls one webhook with the objects seen through `as_def`'s version.
async fn call(
    shared: &Shared,
    hook: &Webhook,
    request: &Request<'_>,
    as_def: &ResourceDef,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<Verdict, Failure> {
    if request.dry_run {
        match hook.side_effects {
            SideEffects::None | SideEffects::NoneOnDryRun => {}
            SideEffects::Some => {
                return Err(Failure::Refused(ApiError::bad_request(format!(
                    "admission webhook {:?} does not support dry run",
                    hook.name
                ))));
            }
            SideEffects::Missing => {
                return Err(Failure::Call("Webhook SideEffects is nil".into()));
            }
        }
    }
    let api_version = as_def.api_version();
    let object = object.map(|o| crate::conversion::present(o, &api_version));
    let old = old.map(|o| crate::conversion::present(o, &api_version));
    let uid = crate::objects::new_uid();
    let review = ReviewRequest {
        uid: &uid,
        kind: Gvk {
            group: &as_def.group,
            version: &as_def.version,
            kind: &as_def.kind,
        },
        resource: Gvr {
            group: &as_def.group,
            version: &as_def.version,
            resource: &as_def.plural,
        },
        sub_resource: request.subresource,
        request_kind: Gvk {
            group: &request.def.group,
            version: &request.def.version,
            kind: &request.def.kind,
        },
        request_resource: Gvr {
            group: &request.def.group,
            version: &request.def.version,
            resource: &request.def.plural,
        },
        request_sub_resource: request.subresource,
        name: request.name,
        namespace: request.namespace.unwrap_or(""),
        operation: request.operation.as_str(),
        user_info: (),
        object: object.as_deref(),
        old_object: old.as_deref(),
        dry_run: request.dry_run,
        options: &request.options,
    };
    let body = review.to_bytes();
    let (timeout, capped) = deadline::cap(hook.timeout);
    if timeout.is_zero() {
        return Err(Failure::Deadline);
    }
    let timeout_query = format!("timeout={}s", deadline::query_seconds(timeout));
    let destination = match &hook.endpoint {
        Endpoint::Url(url) => {
            let sep = if url.contains('?') { '&' } else { '?' };
            Destination::from_url(&format!("{url}{sep}{timeout_query}"))
        }
        Endpoint::Service {
            namespace,
            name,
            path,
            port,
        } => {
            let key = (namespace.clone(), name.clone(), *port);
            let Some(addr) = shared.admission.services.get(&key) else {
                return Err(Failure::Call(format!(
                    "failed to call webhook: service {namespace}/{name} port {port} has no address in the emulator; map it with EmulatorBuilder::webhook_service or kube-emulator --webhook-service {namespace}/{name}:{port}=HOST:PORT"
                )));
            };
            let host = format!("{name}.{namespace}.svc");
            let sep = if path.contains('?') { '&' } else { '?' };
            Destination::from_url(&format!("https://{host}:{port}{path}{sep}{timeout_query}")).map(
                |mut to| {
                    to.connect = addr.to_string();
                    to
                },
            )
        }
    };
    let destination =
        destination.map_err(|e| Failure::Call(format!("failed to call webhook: {e}")))?;
    let result = calling::post(&destination, &hook.ca_bundle, body, timeout).await;
    shared.recorder.record(RecordedRequest {
        method: "POST".into(),
        path: destination.url.clone(),
        query: format!(
            "configuration={}&webhook={}&operation={}&resource={}",
            hook.configuration,
            hook.name,
            request.operation.as_str(),
            request.def.plural
        ),
        verb: "admission".into(),
        status: match &result {
            Ok((status, _)) => *status,
            Err(calling::WebhookCallError::Status { status, .. }) => *status,
            Err(_) => 0,
        },
    });
    let (_, answer) = result.map_err(|e| match e {
        calling::WebhookCallError::Timeout { .. } if capped => Failure::Deadline,
        e => Failure::Call(format!("failed to call webhook: {e}")),
    })?;
    review::verify(&uid, hook.mutating, &answer).map_err(Failure::Call)
}

/// What a failed call means under the webhook's `failurePolicy`: `None`
/// to go on (`Ignore`), or the failure to answer.
fn on_failure(hook: &Webhook, failure: Failure) -> Option<ApiError> {
    match failure {
        Failure::Refused(err) => Some(err),
        Failure::Deadline => Some(deadline::exceeded()),
        Failure::Call(reason) if hook.failure_policy == FailurePolicy::Ignore => {
            tracing::warn!(
                webhook = hook.name,
                "emulator: failed calling webhook, failing open: {reason}"
            );
            None
        }
        Failure::Call(reason) => Some(review::call_failed(&hook.name, &reason)),
    }
}

/// Runs the mutating webhooks over `object` (none for a delete) and
/// returns it patched.
///
/// # Errors
/// A denial, a failed call under `Fail`, a patch that does not apply
/// (whatever the failure policy).
pub(crate) async fn mutate(
    shared: &Shared,
    request: &Request<'_>,
    mut object: Option<Value>,
    old: Option<&Value>,
    warnings: &mut Vec<String>,
) -> Result<Option<Value>, ApiError> {
    if let Some(object) = object.as_mut() {
        mutation::type_meta(object, request.def);
    }
    // An update's object as the client sent it, once a webhook patches it.
    let mut sent = None;
    let hooks = webhooks(shared);
    let matcher = Matcher::new(shared, request);
    for hook in hooks.iter().filter(|h| h.mutating) {
        let Some(other) = matcher.select(hook, object.as_ref(), old)? else {
            continue;
        };
        let as_def = other.as_deref().unwrap_or(request.def);
        let verdict = match call(shared, hook, request, as_def, object.as_ref(), old).await {
            Ok(verdict) => verdict,
            Err(Failure::Deadline) => {
                warnings.clear();
                return Err(deadline::exceeded());
            }
            Err(failure) => match on_failure(hook, failure) {
                Some(err) => return Err(err),
                None => continue,
            },
        };
        warnings.extend(verdict.warnings);
        if !verdict.allowed {
            return Err(review::denial(&hook.name, verdict.status.as_ref()));
        }
        let Some(patch) = verdict.patch else {
            continue;
        };
        let Some(current) = object.as_mut() else {
            return Err(ApiError::internal(format!(
                "Internal error occurred: admission webhook {:?} attempted to modify the object, which is not supported for this operation",
                hook.name
            )));
        };
        if request.operation == Operation::Update && sent.is_none() {
            sent = Some(current.clone());
        }
        if as_def.version == request.def.version {
            mutation::apply(current, &patch, as_def)?;
        } else {
            let mut view = crate::conversion::present(current, &as_def.api_version()).into_owned();
            mutation::apply(&mut view, &patch, as_def)?;
            *current = crate::conversion::present(&view, &request.def.api_version()).into_owned();
        }
    }
    if let (Some(sent), Some(after), Some(old)) = (&sent, &object, old)
        && sent != after
    {
        let request_id = (request.name, request.namespace);
        mutation::check_update(request.def, request_id, sent, after, old)?;
    }
    Ok(object)
}

/// Runs the validating webhooks (concurrently) over the object as it would
/// be stored (none for a delete).
///
/// # Errors
/// The first denial or failed call under `Fail`, in webhook order.
pub(crate) async fn validate(
    shared: &Shared,
    request: &Request<'_>,
    object: Option<&Value>,
    old: Option<&Value>,
    warnings: &mut Vec<String>,
) -> Result<(), ApiError> {
    let hooks = webhooks(shared);
    let matcher = Matcher::new(shared, request);
    let mut selected = Vec::new();
    for hook in hooks.iter().filter(|h| !h.mutating) {
        if let Some(other) = matcher.select(hook, object, old)? {
            selected.push((hook, other));
        }
    }
    if selected.is_empty() {
        return Ok(());
    }
    let calls = selected.iter().map(|(hook, other)| {
        let as_def = other.as_deref().unwrap_or(request.def);
        call(shared, hook, request, as_def, object, old)
    });
    let results = futures::future::join_all(calls).await;
    if results.iter().any(|r| matches!(r, Err(Failure::Deadline))) {
        warnings.clear();
        return Err(deadline::exceeded());
    }
    let mut refusal = None;
    for ((hook, _), result) in selected.iter().zip(results) {
        let err = match result {
            Ok(verdict) => {
                warnings.extend(verdict.warnings);
                (!verdict.allowed).then(|| review::denial(&hook.name, verdict.status.as_ref()))
            }
            Err(failure) => on_failure(hook, failure),
        };
        if refusal.is_none() {
            refusal = err;
        }
    }
    refusal.map_or(Ok(()), Err)
}
