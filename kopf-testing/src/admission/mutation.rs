//! Applying a mutating webhook's JSON Patch, as the API server's mutating
//! dispatcher does: through the same bounded engine as a client's JSON
//! patch ([`crate::limits`]: operation count, nesting depth, copy budget,
//! object size), a failure answered `500 InternalError` whatever the
//! webhook's `failurePolicy` (the call itself succeeded; its patch did not
//! apply).
//!
//! The patched object is then decoded as the API server decodes it into
//! the request's type: a `kind` or `apiVersion` the patch removed comes
//! back, one it changed is an internal error. And what an update may not
//! change (`rest.BeforeUpdate` and `ValidateObjectMetaUpdate` check it
//! after the webhooks) is refused rather than put back: the namespace
//! (400), the name and a `deletionTimestamp` set on an object not being
//! deleted (422, immutable).

use serde_json::Value;

use crate::failures::ApiError;
use crate::limits;
use crate::objects;
use crate::resources::ResourceDef;
use crate::validation::MAX_JSON_PATCH_OPERATIONS;

/// The failure of a webhook patch that does not apply, as the API server's
/// `apierrors.NewInternalError`.
fn internal(message: impl std::fmt::Display) -> ApiError {
    ApiError::internal(format!("Internal error occurred: {message}"))
}

/// Sets the `apiVersion` and `kind` of `def` on `object` where they are
/// missing, as decoding a body into the request's type does: webhooks see
/// them whether the client sent them or not.
pub(super) fn type_meta(object: &mut Value, def: &ResourceDef) {
    let Some(map) = object.as_object_mut() else {
        return;
    };
    for (field, value) in [
        ("apiVersion", def.api_version()),
        ("kind", def.kind.clone()),
    ] {
        if map
            .get(field)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            map.insert(field.into(), value.into());
        }
    }
}

/// Applies `patch` to `view` (the object in the version `as_def` the
/// webhook saw), leaving `view` unchanged on error.
///
/// # Errors
/// `500 InternalError`: more operations than a client patch may hold, an
/// operation that does not apply or goes over a limit, a result over the
/// object limits, a `kind` or `apiVersion` changed.
pub(super) fn apply(
    view: &mut Value,
    patch: &json_patch::Patch,
    as_def: &ResourceDef,
) -> Result<(), ApiError> {
    if patch.0.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(internal(format!(
            "the JSON patch has {} operations, over the limit of {MAX_JSON_PATCH_OPERATIONS}",
            patch.0.len()
        )));
    }
    let mut patched = view.clone();
    limits::apply_json_patch(&mut patched, &patch.0).map_err(internal)?;
    if !patched.is_object() {
        return Err(internal(format!(
            "the patched object is {}, not an object",
            crate::patching::type_name(&patched)
        )));
    }
    limits::check_object(&patched, "the object as a mutating webhook patched it")
        .map_err(|e| internal(e.message))?;
    for field in ["apiVersion", "kind"] {
        let before = view.get(field).and_then(Value::as_str).unwrap_or("");
        match patched.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::String(after)) if after.is_empty() || after == before => {}
            Some(after) => {
                return Err(internal(format!(
                    "the patched object's {field} {after} is not the {field} {before:?} of {}: a mutating webhook may not change it",
                    as_def.plural
                )));
            }
        }
    }
    type_meta(&mut patched, as_def);
    *view = patched;
    Ok(())
}

/// Refuses what the mutating webhooks of an update changed and an update
/// may not change: `before` is the object as the client sent it, `after`
/// as the webhooks left it, `old` the stored one, `name` and `namespace`
/// those of the request.
///
/// # Errors
/// `400 BadRequest` for another namespace; `422 Invalid` for another name
/// or a `deletionTimestamp` set on an object not being deleted.
pub(super) fn check_update(
    def: &ResourceDef,
    (name, namespace): (&str, Option<&str>),
    before: &Value,
    after: &Value,
    old: &Value,
) -> Result<(), ApiError> {
    let changed = |field: &str| {
        let value = objects::meta_str(after, field).filter(|v| !v.is_empty());
        value.filter(|v| Some(*v) != objects::meta_str(before, field))
    };
    if def.namespaced
        && let Some(after) = changed("namespace")
        && Some(after) != namespace
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    if let Some(after) = changed("name")
        && after != name
    {
        return Err(ApiError::invalid(
            &def.group,
            &def.kind,
            after,
            format!("metadata.name: Invalid value: {after:?}: field is immutable"),
        ));
    }
    if objects::meta_str(old, "deletionTimestamp").is_none()
        && let Some(after) = changed("deletionTimestamp")
    {
        // Printed as Go prints the `metav1.Time` of the refused value.
        let shown = after.parse::<jiff::Timestamp>().map_or_else(
            |_| format!("{after:?}"),
            |t| t.strftime("%Y-%m-%d %H:%M:%S +0000 UTC").to_string(),
        );
        return Err(ApiError::invalid(
            &def.group,
            &def.kind,
            name,
            format!("metadata.deletionTimestamp: Invalid value: {shown}: field is immutable"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def() -> ResourceDef {
        crate::resources::builtins()
            .into_iter()
            .find(|d| d.group.is_empty() && d.plural == "configmaps")
            .expect("configmaps are built in")
    }

    fn patch(ops: Value) -> json_patch::Patch {
        serde_json::from_value(ops).unwrap()
    }

    #[test]
    fn doubling_copies_are_refused_before_they_grow() {
        let mut doc =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "x".repeat(1700)}});
        let ops: Vec<Value> = (0..20)
            .map(|i| json!({"op": "copy", "from": "/data", "path": format!("/data/c{i}")}))
            .collect();
        let err = apply(&mut doc, &patch(Value::Array(ops)), &def()).unwrap_err();
        assert_eq!((err.code, err.reason), (500, "InternalError"));
        assert!(err.message.contains("copy less"), "{}", err.message);
        assert_eq!(doc["data"].as_object().unwrap().len(), 1, "left unchanged");
    }

    #[test]
    fn copies_doubling_the_depth_are_refused() {
        let mut doc = json!({"apiVersion": "v1", "kind": "ConfigMap", "a": {"b": {}}});
        // Each copy puts `/a` into its own innermost object.
        let ops: Vec<Value> = (1..=15)
            .map(|i| json!({"op": "copy", "from": "/a", "path": format!("/a{}", "/b".repeat(1 << i))}))
            .collect();
        let err = apply(&mut doc, &patch(Value::Array(ops)), &def()).unwrap_err();
        assert_eq!(err.code, 500);
        assert!(err.message.contains("flatter"), "{}", err.message);
    }

    #[test]
    fn type_meta_comes_back_when_removed_and_may_not_change() {
        let mut doc = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        let remove = patch(json!([{"op": "remove", "path": "/kind"}]));
        apply(&mut doc, &remove, &def()).unwrap();
        assert_eq!(doc["kind"], "ConfigMap");
        let retype = patch(json!([{"op": "replace", "path": "/kind", "value": "Secret"}]));
        let err = apply(&mut doc, &retype, &def()).unwrap_err();
        assert_eq!((err.code, err.reason), (500, "InternalError"));
        assert_eq!(doc["kind"], "ConfigMap");
    }

    #[test]
    fn an_update_may_not_move_rename_or_delete_the_object() {
        let old = json!({"metadata": {"name": "a", "namespace": "default"}});
        let check = |after: Value| check_update(&def(), ("a", Some("default")), &old, &after, &old);
        assert!(check(old.clone()).is_ok());
        let moved = check(json!({"metadata": {"name": "a", "namespace": "other"}})).unwrap_err();
        assert_eq!(moved.code, 400);
        let renamed =
            check(json!({"metadata": {"name": "b", "namespace": "default"}})).unwrap_err();
        assert_eq!(
            (renamed.code, renamed.message.as_str()),
            (
                422,
                "ConfigMap \"b\" is invalid: metadata.name: Invalid value: \"b\": field is immutable"
            )
        );
        let deleted =
            check(json!({"metadata": {"name": "a", "deletionTimestamp": "2026-12-03T08:00:00Z"}}))
                .unwrap_err();
        assert_eq!(
            deleted.message,
            "ConfigMap \"a\" is invalid: metadata.deletionTimestamp: Invalid value: 2026-12-03 08:00:00 +0000 UTC: field is immutable"
        );
    }
}
