//! Applying a mutating webhook's JSON Patch, as the API server's mutating
//! dispatcher does: through the same bounded engine as a client's JSON
//! patch ([`crate::limits`]: operation count, nesting depth, copy budget,
//! object size), a failure answered `500 InternalError` whatever the
//! webhook's `failurePolicy` (the call itself succeeded; its patch did not
//! apply).

use serde_json::Value;

use crate::failures::ApiError;
use crate::limits;
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

/// Applies `patch` to `view` (the object in the version the webhook saw),
/// leaving `view` unchanged on error.
///
/// # Errors
/// `500 InternalError`: more operations than a client patch may hold, an
/// operation that does not apply or goes over a limit, a result over the
/// object limits.
pub(super) fn apply(view: &mut Value, patch: &json_patch::Patch) -> Result<(), ApiError> {
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
    *view = patched;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let err = apply(&mut doc, &patch(Value::Array(ops))).unwrap_err();
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
        let err = apply(&mut doc, &patch(Value::Array(ops))).unwrap_err();
        assert_eq!(err.code, 500);
        assert!(err.message.contains("flatter"), "{}", err.message);
    }
}
