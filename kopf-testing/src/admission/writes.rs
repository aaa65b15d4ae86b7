//! The chain around the store's writes that have no loop of their own:
//! creates and deletes. (Updates and patches run it inside their
//! optimistic loop in `handlers.rs`.)

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Operation, Request, mutate, validate};
use crate::failures::ApiError;
use crate::objects::{self, meta_mut};
use crate::resources::ResourceDef;
use crate::routing::Query;
use crate::shared::Shared;
use crate::store::Target;
use crate::validation;

/// The subresource a write targets, as reviews name it.
pub(crate) fn subresource(target: Target) -> &'static str {
    match target {
        Target::Main => "",
        Target::Status => "status",
    }
}

/// The options a review carries: `kind` (`CreateOptions`, ...) with the
/// request's `dryRun` and `fieldManager`, over `base` (a DeleteOptions body).
pub(crate) fn options(kind: &str, query: &Query, base: Option<&Value>) -> Value {
    let mut options = base.and_then(Value::as_object).cloned().unwrap_or_default();
    options.insert("kind".into(), kind.into());
    options.insert("apiVersion".into(), "meta.k8s.io/v1".into());
    if query.dry_run {
        options.insert("dryRun".into(), json!(["All"]));
    }
    if let Some(manager) = &query.field_manager {
        options.insert("fieldManager".into(), manager.clone().into());
    }
    Value::Object(options)
}

/// Creates an object through the chain: mutating webhooks, the emulator's
/// validation, validating webhooks (on the object as it would be stored),
/// then the store.
pub(crate) async fn create(
    shared: &Shared,
    def: &ResourceDef,
    ns: Option<&str>,
    mut object: Value,
    options: Value,
    dry_run: bool,
    warnings: &mut Vec<String>,
) -> Result<Arc<Value>, ApiError> {
    // As the API server: webhooks see the request's namespace on the
    // object, and validating ones the name generated from `generateName`.
    if def.namespaced
        && let Some(ns) = ns
        && objects::meta_str(&object, "namespace").is_none_or(str::is_empty)
    {
        meta_mut(&mut object).insert("namespace".into(), ns.into());
    }
    let name = objects::name(&object).to_string();
    let request = Request {
        def,
        subresource: "",
        operation: Operation::Create,
        namespace: ns,
        name: &name,
        dry_run,
        options,
    };
    let object = mutate(shared, &request, Some(object), None, warnings)
        .await?
        .ok_or_else(|| ApiError::internal("invariant: a create has an object"))?;
    validation::object(def, &object)?;
    crate::rbac::escalation::check(shared, def, ns, &object)?;
    let mut object = object;
    if objects::name(&object).is_empty()
        && let Some(prefix) = objects::meta_str(&object, "generateName").filter(|p| !p.is_empty())
    {
        let generated = format!("{prefix}{}", objects::random_suffix());
        meta_mut(&mut object).insert("name".into(), generated.into());
    }
    let prepared = shared.store().create(def, ns, object, true)?;
    let name = objects::name(&prepared).to_string();
    let request = Request {
        name: &name,
        ..request
    };
    validate(shared, &request, Some(&prepared), None, warnings).await?;
    // Stored as validated: the name, UID and creation time webhooks saw.
    shared
        .store()
        .create_prepared(def, ns, (*prepared).clone(), dry_run)
}

/// Runs the chain for deleting `old` (one object, or each object of a
/// deletecollection): both kinds of webhooks, with no new object.
pub(crate) async fn admit_delete(
    shared: &Shared,
    def: &ResourceDef,
    old: &Value,
    options: Value,
    dry_run: bool,
    warnings: &mut Vec<String>,
) -> Result<(), ApiError> {
    let ns = Some(objects::namespace(old)).filter(|ns| def.namespaced && !ns.is_empty());
    let request = Request {
        def,
        subresource: "",
        operation: Operation::Delete,
        namespace: ns,
        name: objects::name(old),
        dry_run,
        options,
    };
    mutate(shared, &request, None, Some(old), warnings).await?;
    validate(shared, &request, None, Some(old), warnings).await
}
