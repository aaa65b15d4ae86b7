//! The options a request carries besides its object, checked as the API
//! server checks them before it touches storage:
//!
//! - the `DeleteOptions` body of a delete or deletecollection, decoded as
//!   the API server's Go decoder decodes it (a field of the wrong JSON type
//!   fails the request with that decoder's message, as a `500` without a
//!   reason, since the API server does not turn it into a `Status`), then
//!   validated (`propagationPolicy`, `orphanDependents`, `dryRun`: 422);
//! - the `ListOptions` of a list (`resourceVersionMatch`: 422);
//! - the `fieldManager` of a create, update or patch (at most 128 bytes of
//!   printable characters: 422).
//!
//! Options are refused as `Invalid` with the options kind in the group
//! `meta.k8s.io` and an empty name (`DeleteOptions.meta.k8s.io "" is
//! invalid: ...`).

use serde_json::{Map, Value, json};

use crate::failures::ApiError;
use crate::routing::Query;
use crate::validation::FieldError;

/// The longest `fieldManager` the API server accepts, in bytes.
pub(crate) const FIELD_MANAGER_MAX_LENGTH: usize = 128;

/// The deletion propagation policies, as the API server lists them.
const PROPAGATION_POLICIES: [&str; 3] = ["Foreground", "Background", "Orphan"];

/// 422 `Invalid` for the options of a request: `kind` is the options kind
/// (`DeleteOptions`, `ListOptions`, ...).
pub(crate) fn invalid(kind: &str, errors: &[FieldError]) -> ApiError {
    let mut err = crate::validation::invalid("meta.k8s.io", kind, "", errors);
    err.message = format!("{kind}.meta.k8s.io \"\" is invalid: {}", listed(errors));
    if let Some(details) = err.details.as_mut() {
        details["kind"] = kind.into();
    }
    err
}

/// The errors as the API server aggregates them in a message.
fn listed(errors: &[FieldError]) -> String {
    match errors {
        [one] => one.to_string(),
        many => format!(
            "[{}]",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// An unsupported value of an enumeration, as the API server words it.
fn not_supported(field: &str, shown: &str, supported: &[&str]) -> FieldError {
    let supported: Vec<String> = supported.iter().map(|v| format!("{v:?}")).collect();
    FieldError {
        field: field.into(),
        reason: "FieldValueNotSupported",
        detail: format!(
            "Unsupported value: {shown}: supported values: {}",
            supported.join(", ")
        ),
    }
}

fn forbidden(field: &str, why: &str) -> FieldError {
    FieldError {
        field: field.into(),
        reason: "FieldValueForbidden",
        detail: format!("Forbidden: {why}"),
    }
}

/// The Go types of the `DeleteOptions` fields a client may send, as the
/// decoder names them in its errors.
enum GoType {
    Int64,
    Bool,
    Str(&'static str),
    Strings,
    Preconditions,
}

/// Reads a `DeleteOptions` body (empty: no options), refusing what the API
/// server's decoder refuses and what `ValidateDeleteOptions` refuses.
pub(crate) fn delete_options(body: &[u8]) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    let options = crate::limits::decode_json(body).map_err(|e| match e {
        crate::limits::DecodeError::TooDeep => crate::limits::too_deep("the DeleteOptions body"),
        crate::limits::DecodeError::Syntax(e) => {
            ApiError::bad_request(format!("the DeleteOptions body is not valid JSON: {e}"))
        }
    })?;
    let Some(map) = options.as_object() else {
        return Err(undecodable(&format!(
            "json: cannot unmarshal {} into Go value of type v1.DeleteOptions",
            json_kind(&options)
        )));
    };
    decode_fields(map)?;
    let errors = delete_option_errors(map);
    if errors.is_empty() {
        Ok(options)
    } else {
        Err(invalid("DeleteOptions", &errors))
    }
}

/// The type errors of the fields the Go decoder reads into typed fields.
fn decode_fields(map: &Map<String, Value>) -> Result<(), ApiError> {
    let fields = [
        ("gracePeriodSeconds", GoType::Int64),
        ("orphanDependents", GoType::Bool),
        ("propagationPolicy", GoType::Str("v1.DeletionPropagation")),
        ("dryRun", GoType::Strings),
        ("preconditions", GoType::Preconditions),
        ("kind", GoType::Str("string")),
        ("apiVersion", GoType::Str("string")),
    ];
    for (field, ty) in fields {
        let Some(value) = map.get(field).filter(|v| !v.is_null()) else {
            continue;
        };
        let at = |go: &str, got: &Value| {
            undecodable(&format!(
                "json: cannot unmarshal {} into Go struct field DeleteOptions.{field} of type {go}",
                json_kind(got)
            ))
        };
        match (ty, value) {
            (GoType::Int64, Value::Number(n)) if n.is_i64() => {}
            (GoType::Int64, other) => return Err(at("int64", other)),
            (GoType::Bool, Value::Bool(_)) => {}
            (GoType::Bool, other) => return Err(at("bool", other)),
            (GoType::Str(_), Value::String(_)) => {}
            (GoType::Str(go), other) => return Err(at(go, other)),
            (GoType::Strings, Value::Array(items)) => {
                if let Some(item) = items.iter().find(|i| !i.is_string() && !i.is_null()) {
                    return Err(at("string", item));
                }
            }
            (GoType::Strings, other) => return Err(at("[]string", other)),
            (GoType::Preconditions, Value::Object(pre)) => preconditions(pre)?,
            (GoType::Preconditions, other) => return Err(at("v1.Preconditions", other)),
        }
    }
    Ok(())
}

fn preconditions(pre: &Map<String, Value>) -> Result<(), ApiError> {
    for (field, go) in [("uid", "types.UID"), ("resourceVersion", "string")] {
        match pre.get(field) {
            None | Some(Value::Null | Value::String(_)) => {}
            Some(other) => {
                return Err(undecodable(&format!(
                    "json: cannot unmarshal {} into Go struct field Preconditions.preconditions.{field} of type {go}",
                    json_kind(other)
                )));
            }
        }
    }
    Ok(())
}

/// `ValidateDeleteOptions`.
fn delete_option_errors(map: &Map<String, Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let policy = map.get("propagationPolicy").and_then(Value::as_str);
    let orphan = map.get("orphanDependents").is_some_and(|v| !v.is_null());
    if let Some(policy) = policy {
        if orphan {
            errors.push(FieldError {
                field: "propagationPolicy".into(),
                reason: "FieldValueInvalid",
                detail: format!(
                    "Invalid value: {policy:?}: orphanDependents and deletionPropagation cannot be both set"
                ),
            });
        }
        if !PROPAGATION_POLICIES.contains(&policy) {
            let mut supported = PROPAGATION_POLICIES.to_vec();
            supported.push("nil");
            errors.push(not_supported(
                "propagationPolicy",
                &format!("{policy:?}"),
                &supported,
            ));
        }
    }
    let dry_run: Vec<&str> = map
        .get("dryRun")
        .and_then(Value::as_array)
        .map(|items| items.iter().map(|i| i.as_str().unwrap_or("")).collect())
        .unwrap_or_default();
    errors.extend(dry_run_errors(&dry_run));
    errors
}

/// `ValidateDryRun`: only `All`, the values shown as Go prints a slice.
pub(crate) fn dry_run_errors(values: &[&str]) -> Vec<FieldError> {
    match values.iter().find(|v| **v != "All") {
        Some(_) => {
            let shown: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
            vec![not_supported(
                "dryRun",
                &format!("[]string{{{}}}", shown.join(", ")),
                &["All"],
            )]
        }
        None => Vec::new(),
    }
}

/// `ValidateFieldManager`: at most [`FIELD_MANAGER_MAX_LENGTH`] bytes of
/// printable characters.
pub(crate) fn field_manager_errors(manager: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if manager.len() > FIELD_MANAGER_MAX_LENGTH {
        errors.push(FieldError {
            field: "fieldManager".into(),
            reason: "FieldValueTooLong",
            detail: format!("Too long: may not be more than {FIELD_MANAGER_MAX_LENGTH} bytes"),
        });
    }
    for (i, c) in manager.char_indices() {
        if c.is_control() || (c.is_whitespace() && c != ' ') {
            errors.push(FieldError {
                field: "fieldManager".into(),
                reason: "FieldValueInvalid",
                detail: format!(
                    "Invalid value: {manager:?}: invalid character U+{:04X} (at position {i})",
                    u32::from(c)
                ),
            });
        }
    }
    errors
}

/// `ValidateListOptions` for a list (not a watch): `resourceVersionMatch`
/// needs a `resourceVersion`, no continue token, one of the two values, and
/// is not `Exact` for version `0`.
pub(crate) fn list_options(query: &Query) -> Result<(), ApiError> {
    let Some(value) = query.resource_version_match.as_deref() else {
        return Ok(());
    };
    let mut errors = Vec::new();
    let field = "resourceVersionMatch";
    if query.resource_version.is_none() {
        errors.push(forbidden(
            field,
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        ));
    }
    if query.continue_token.is_some() {
        errors.push(forbidden(
            field,
            "resourceVersionMatch is forbidden when continue is provided",
        ));
    }
    if !matches!(value, "Exact" | "NotOlderThan") {
        errors.push(not_supported(
            field,
            &format!("{value:?}"),
            &["Exact", "NotOlderThan", ""],
        ));
    }
    if value == "Exact" && query.resource_version.as_deref() == Some("0") {
        errors.push(forbidden(
            field,
            "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
        ));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(invalid("ListOptions", &errors))
    }
}

/// `ValidateListOptions` for a watch: only `NotOlderThan`, never with a
/// continue token.
pub(crate) fn watch_options(query: &Query) -> Result<(), ApiError> {
    let Some(value) = query.resource_version_match.as_deref() else {
        return Ok(());
    };
    let mut errors = Vec::new();
    if value != "NotOlderThan" {
        errors.push(not_supported(
            "resourceVersionMatch",
            &format!("{value:?}"),
            &["NotOlderThan"],
        ));
    }
    if query.continue_token.is_some() {
        errors.push(forbidden(
            "resourceVersionMatch",
            "resourceVersionMatch is forbidden when continue is provided",
        ));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(invalid("ListOptions", &errors))
    }
}

/// What the API server answers for a body its decoder fails on: the error
/// reaches the client as it is, a `500` with no reason.
fn undecodable(message: &str) -> ApiError {
    ApiError::new(500, "", message)
}

/// How Go's JSON decoder names a JSON value's kind in its errors.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failures::tests::causes;

    #[test]
    fn delete_options_decode_as_go_does() {
        assert_eq!(delete_options(b"").unwrap(), json!({}));
        let err = delete_options(br#"{"preconditions":{"resourceVersion":12}}"#).unwrap_err();
        assert_eq!((err.code, err.reason), (500, ""));
        assert_eq!(
            err.message,
            "json: cannot unmarshal number into Go struct field Preconditions.preconditions.resourceVersion of type string"
        );
        let err = delete_options(br#"{"gracePeriodSeconds":"5"}"#).unwrap_err();
        assert_eq!(
            err.message,
            "json: cannot unmarshal string into Go struct field DeleteOptions.gracePeriodSeconds of type int64"
        );
        assert!(delete_options(br#"{"preconditions":{"uid":"u","resourceVersion":"3"},"propagationPolicy":"Background"}"#).is_ok());
    }

    #[test]
    fn delete_options_are_validated() {
        let err = delete_options(br#"{"propagationPolicy":"Sideways"}"#).unwrap_err();
        assert_eq!((err.code, err.reason), (422, "Invalid"));
        assert_eq!(
            err.message,
            "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Sideways\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
        );
        let both = delete_options(br#"{"propagationPolicy":"Orphan","orphanDependents":true}"#)
            .unwrap_err();
        assert_eq!(
            causes(&both),
            [
                "propagationPolicy: Invalid value: \"Orphan\": orphanDependents and deletionPropagation cannot be both set"
            ]
        );
        assert_eq!(both.details.unwrap()["kind"], "DeleteOptions");
        let dry = delete_options(br#"{"dryRun":["All","Some"]}"#).unwrap_err();
        assert_eq!(
            causes(&dry),
            ["dryRun: Unsupported value: []string{\"All\", \"Some\"}: supported values: \"All\""]
        );
    }

    #[test]
    fn field_managers() {
        assert!(field_manager_errors("kopf").is_empty());
        assert!(field_manager_errors(&"m".repeat(128)).is_empty());
        assert_eq!(
            field_manager_errors(&"m".repeat(129))[0].to_string(),
            "fieldManager: Too long: may not be more than 128 bytes"
        );
        assert!(
            field_manager_errors("a\u{7}")[0]
                .detail
                .ends_with(": invalid character U+0007 (at position 1)")
        );
    }

    #[test]
    fn list_options_match() {
        let query = |q: &str| crate::routing::parse_query(q);
        assert!(list_options(&query("resourceVersion=1&resourceVersionMatch=Exact")).is_ok());
        let err =
            list_options(&query("resourceVersion=1&resourceVersionMatch=Newest")).unwrap_err();
        assert_eq!(
            err.message,
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Unsupported value: \"Newest\": supported values: \"Exact\", \"NotOlderThan\", \"\""
        );
        let err = list_options(&query("resourceVersionMatch=NotOlderThan")).unwrap_err();
        assert_eq!(
            causes(&err),
            [
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
            ]
        );
        assert_eq!(
            causes(
                &list_options(&query("resourceVersion=0&resourceVersionMatch=Exact")).unwrap_err()
            )
            .len(),
            1
        );
        assert!(watch_options(&query("resourceVersionMatch=Exact")).is_err());
        assert!(watch_options(&query("resourceVersionMatch=NotOlderThan")).is_ok());
    }
}
