//! What an update (a PUT, or a patch once applied) may change, checked
//! against the stored object as the API server's update path checks it:
//!
//! - a `metadata.resourceVersion` is required where the resource does not
//!   allow unconditional updates (custom resources, CRDs, Leases, webhook
//!   configurations), else 422 `must be specified for an update` (named by
//!   the resource, as the API server's store names it);
//! - `metadata.deletionTimestamp` and `metadata.deletionGracePeriodSeconds`
//!   are set by deletion only: an update may keep or omit them, not set or
//!   change them (`ValidateObjectMetaUpdate`);
//! - an `immutable: true` ConfigMap or Secret keeps its data and stays
//!   immutable; a Secret keeps its `type` (`ValidateConfigMapUpdate`,
//!   `ValidateSecretUpdate`);
//! - a CRD keeps its `scope`, `group`, `names.kind` and `names.plural`
//!   (`ValidateCustomResourceDefinitionSpecUpdate`).
//!
//! Each refusal is a 422 `Invalid` with a cause per field.

use serde_json::{Map, Value};

use crate::failures::ApiError;
use crate::resources::ResourceDef;
use crate::validation::{FieldError, invalid};

const IMMUTABLE: &str = "field is immutable";
const IMMUTABLE_WHEN_SET: &str = "field is immutable when `immutable` is set";

/// Whether an update without a `resourceVersion` overwrites whatever is
/// stored (`AllowUnconditionalUpdate`): so for the core group's resources,
/// RBAC objects, Deployments and PodDisruptionBudgets, not for the others
/// the emulator serves nor for custom resources.
pub(crate) fn allows_unconditional_update(def: &ResourceDef) -> bool {
    matches!(
        def.group.as_str(),
        "" | "events.k8s.io" | "rbac.authorization.k8s.io" | "apps" | "policy"
    )
}

/// 422 for an update without a `resourceVersion` where one is required.
pub(crate) fn resource_version_required(def: &ResourceDef, name: &str) -> ApiError {
    let resource = if def.group.is_empty() {
        def.plural.clone()
    } else {
        format!("{}.{}", def.plural, def.group)
    };
    let mut err = invalid(
        &def.group,
        &resource,
        name,
        &[FieldError {
            field: "metadata.resourceVersion".into(),
            reason: "FieldValueInvalid",
            // As Go prints the unsigned zero it parsed.
            detail: "Invalid value: 0x0: must be specified for an update".into(),
        }],
    );
    if let Some(details) = err.details.as_mut() {
        details["kind"] = def.plural.clone().into();
    }
    err
}

/// Checks an update of `old` to `new` on the main resource (after the
/// server-owned metadata the update may not touch has been restored).
pub(crate) fn check(def: &ResourceDef, old: &Value, new: &Value) -> Result<(), ApiError> {
    let mut errors = deletion_metadata(old, new);
    let core = def.group.is_empty();
    if core && (def.plural == "configmaps" || def.plural == "secrets") {
        errors.extend(immutable_data(def, old, new));
    }
    if def.group == "apiextensions.k8s.io" && def.plural == "customresourcedefinitions" {
        errors.extend(crd_spec(old, new));
    }
    errors.extend(crate::rbac::validation::update_errors(def, old, new));
    if errors.is_empty() {
        Ok(())
    } else {
        let name = crate::objects::name(old);
        Err(crate::validation::invalid_object(def, name, &errors))
    }
}

fn meta<'a>(obj: &'a Value, field: &str) -> Option<&'a Value> {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .filter(|v| !v.is_null())
}

/// `deletionTimestamp` and `deletionGracePeriodSeconds`: an update keeps
/// the stored ones when it omits them, and may not set or change them.
fn deletion_metadata(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let timestamp = "deletionTimestamp";
    if meta(old, timestamp).is_none()
        && let Some(given) = meta(new, timestamp)
    {
        errors.push(FieldError {
            field: format!("metadata.{timestamp}"),
            reason: "FieldValueInvalid",
            detail: format!("Invalid value: {}: {IMMUTABLE}", go_time(given)),
        });
    }
    let grace = "deletionGracePeriodSeconds";
    if let Some(given) = meta(new, grace)
        && meta(old, grace) != Some(given)
    {
        errors.push(FieldError {
            field: format!("metadata.{grace}"),
            reason: "FieldValueInvalid",
            detail: format!("Invalid value: {given}: {IMMUTABLE}"),
        });
    }
    errors
}

/// A timestamp as Go prints a `metav1.Time` (`2024-05-01 10:00:00 +0000 UTC`).
fn go_time(value: &Value) -> String {
    let Some(text) = value.as_str() else {
        return value.to_string();
    };
    match text.parse::<jiff::Timestamp>() {
        Ok(ts) => ts.strftime("%Y-%m-%d %H:%M:%S +0000 UTC").to_string(),
        Err(_) => format!("{text:?}"),
    }
}

/// A map field with `null` and `{}` as absent (as the API server stores them).
fn map_field<'a>(obj: &'a Value, field: &str) -> Option<&'a Map<String, Value>> {
    obj.get(field)
        .and_then(Value::as_object)
        .filter(|m| !m.is_empty())
}

fn is_immutable(obj: &Value) -> bool {
    obj.get("immutable").and_then(Value::as_bool) == Some(true)
}

fn forbidden(field: &str) -> FieldError {
    FieldError {
        field: field.into(),
        reason: "FieldValueForbidden",
        detail: format!("Forbidden: {IMMUTABLE_WHEN_SET}"),
    }
}

/// An `immutable` ConfigMap or Secret (and a Secret's `type`).
fn immutable_data(def: &ResourceDef, old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let secret = def.plural == "secrets";
    if secret {
        // As the API server defaults it on every write.
        let kind = |obj: &Value| {
            obj.get("type")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
                .unwrap_or("Opaque")
                .to_string()
        };
        let (before, after) = (kind(old), kind(new));
        if before != after {
            errors.push(FieldError {
                field: "type".into(),
                reason: "FieldValueInvalid",
                detail: format!("Invalid value: {after:?}: {IMMUTABLE}"),
            });
        }
    }
    if !is_immutable(old) {
        return errors;
    }
    if !is_immutable(new) {
        errors.push(forbidden("immutable"));
    }
    if map_field(old, "data") != map_field(new, "data") {
        errors.push(forbidden("data"));
    }
    if !secret && map_field(old, "binaryData") != map_field(new, "binaryData") {
        errors.push(forbidden("binaryData"));
    }
    errors
}

/// The parts of a CRD's spec that decide where its objects are stored.
fn crd_spec(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (pointer, field) in [
        ("/spec/scope", "spec.scope"),
        ("/spec/names/kind", "spec.names.kind"),
        ("/spec/group", "spec.group"),
        ("/spec/names/plural", "spec.names.plural"),
    ] {
        let text = |obj: &Value| {
            obj.pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let (before, after) = (text(old), text(new));
        if before != after {
            errors.push(FieldError {
                field: field.into(),
                reason: "FieldValueInvalid",
                detail: format!("Invalid value: {after:?}: {IMMUTABLE}"),
            });
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failures::tests::causes;
    use serde_json::json;

    fn def(group: &str, plural: &str) -> ResourceDef {
        crate::resources::builtins()
            .into_iter()
            .find(|d| d.group == group && d.plural == plural)
            .expect("a built-in resource")
    }

    #[test]
    fn deletion_metadata_is_set_by_deletion_only() {
        let cm = def("", "configmaps");
        let old = json!({"metadata": {"name": "a"}});
        let new = json!({"metadata": {"name": "a", "deletionTimestamp": "2024-05-01T10:00:00Z", "deletionGracePeriodSeconds": 30}});
        assert_eq!(
            causes(&check(&cm, &old, &new).unwrap_err()),
            [
                "metadata.deletionTimestamp: Invalid value: 2024-05-01 10:00:00 +0000 UTC: field is immutable",
                "metadata.deletionGracePeriodSeconds: Invalid value: 30: field is immutable",
            ]
        );
        let deleting = json!({"metadata": {"name": "a", "deletionTimestamp": "2024-05-01T10:00:00Z", "deletionGracePeriodSeconds": 0}});
        assert_eq!(check(&cm, &deleting, &deleting), Ok(()));
    }

    #[test]
    fn immutable_config_maps_and_secrets_keep_their_data() {
        let cm = def("", "configmaps");
        let old = json!({"immutable": true, "data": {"k": "v"}});
        assert_eq!(check(&cm, &old, &old), Ok(()));
        let changed = json!({"immutable": false, "data": {"k": "w"}});
        assert_eq!(
            causes(&check(&cm, &old, &changed).unwrap_err()),
            [
                "immutable: Forbidden: field is immutable when `immutable` is set",
                "data: Forbidden: field is immutable when `immutable` is set",
            ]
        );
        let secret = def("", "secrets");
        let tls = json!({"type": "kubernetes.io/tls"});
        assert_eq!(
            causes(&check(&secret, &tls, &json!({})).unwrap_err()),
            ["type: Invalid value: \"Opaque\": field is immutable"]
        );
        assert_eq!(
            check(&secret, &json!({}), &json!({"type": "Opaque"})),
            Ok(())
        );
    }

    #[test]
    fn a_crd_keeps_its_scope() {
        let crd = def("apiextensions.k8s.io", "customresourcedefinitions");
        let old = json!({"spec": {"scope": "Namespaced"}});
        let new = json!({"spec": {"scope": "Cluster"}});
        assert_eq!(
            causes(&check(&crd, &old, &new).unwrap_err()),
            ["spec.scope: Invalid value: \"Cluster\": field is immutable"]
        );
    }

    #[test]
    fn resource_versions_are_required_outside_the_core_group() {
        assert!(allows_unconditional_update(&def("", "configmaps")));
        let lease = def("coordination.k8s.io", "leases");
        assert!(!allows_unconditional_update(&lease));
        let err = resource_version_required(&lease, "l");
        assert_eq!(
            err.message,
            "leases.coordination.k8s.io \"l\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
        );
        assert_eq!(err.details.unwrap()["kind"], "leases");
    }
}
