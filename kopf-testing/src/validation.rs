//! The API server's validation of what clients send, applied by the request
//! handlers before anything reaches the store (and so outside its lock).
//!
//! - Objects: `metadata` of the right types, label keys and values, annotation
//!   keys and their total size, finalizer names and owner references as the
//!   API server checks them (422 `Invalid` with one cause per field); ConfigMap
//!   `data` of strings and `binaryData` in base64, Secret `data` in base64 and
//!   `stringData` of strings (400 `BadRequest`, as a body that cannot be
//!   decoded into the kind).
//! - Bodies against the request: `apiVersion`, `kind` and `metadata.namespace`
//!   must agree with the URL; a patch may not change them.
//! - Preconditions: a numeric `metadata.resourceVersion` counts as the string.
//! - Patches: at most [`MAX_JSON_PATCH_OPERATIONS`] operations, only known
//!   `$patch` directives, and server-side apply with a `fieldManager` and a
//!   body naming the object of the URL.
//! - Query parameters: `limit` and `timeoutSeconds` must be integers and
//!   `dryRun` only `All`.

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::failures::ApiError;
use crate::objects;
use crate::patching::{PatchKind, type_name};
use crate::resources::ResourceDef;
use crate::routing::Query;

/// The most operations one JSON patch may hold (as the API server).
pub(crate) const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// The most bytes all annotations of an object may take, keys and values.
pub(crate) const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// The longest label value and name part of a qualified name.
const MAX_NAME_PART: usize = 63;

const NAME_PART_RULE: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', \
     and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or \
     '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

const QUALIFIED_NAME_RULE: &str = "a qualified name must consist of alphanumeric characters, '-', \
     '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or \
     'my.name',  or '123-abc', regex used for validation is \
     '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' \
     (e.g. 'example.com/MyName')";

const PREFIX_RULE: &str = "prefix part a lowercase RFC 1123 subdomain must consist of lower case \
     alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character \
     (e.g. 'example.com', regex used for validation is \
     '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

const LABEL_VALUE_RULE: &str = "a valid label must be an empty string or consist of alphanumeric \
     characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. \
     'MyValue',  or 'my_value',  or '12345', regex used for validation is \
     '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// One field that failed validation, as the API server reports it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FieldError {
    /// The field's path (`metadata.labels`).
    pub field: String,
    /// The cause's reason (`FieldValueInvalid`, `FieldValueTooLong`, ...).
    pub reason: &'static str,
    /// What is wrong, as the API server words it (`Invalid value: "x": ...`).
    pub detail: String,
}

impl FieldError {
    fn invalid(field: impl Into<String>, value: &str, why: &str) -> Self {
        Self {
            field: field.into(),
            reason: "FieldValueInvalid",
            detail: format!("Invalid value: {value:?}: {why}"),
        }
    }

    /// An invalid number (shown bare, as the API server shows numbers).
    pub(crate) fn invalid_number(field: impl Into<String>, value: i64, why: &str) -> Self {
        Self {
            field: field.into(),
            reason: "FieldValueInvalid",
            detail: format!("Invalid value: {value}: {why}"),
        }
    }

    fn required(field: impl Into<String>, why: &str) -> Self {
        Self {
            field: field.into(),
            reason: "FieldValueRequired",
            detail: format!("Required value: {why}"),
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.detail)
    }
}

/// 422 `Invalid` with one cause per field, as the API server aggregates them.
pub(crate) fn invalid(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> ApiError {
    let listed = match errors {
        [one] => one.to_string(),
        many => format!(
            "[{}]",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut err = ApiError::new(
        422,
        "Invalid",
        format!("{kind} {name:?} is invalid: {listed}"),
    );
    let causes: Vec<Value> = errors
        .iter()
        .map(|e| json!({"reason": e.reason, "message": e.detail, "field": e.field}))
        .collect();
    err.details = Some(json!({"name": name, "group": group, "kind": kind, "causes": causes}));
    err
}

/// 422 for an object, its kind qualified by its group as the API server
/// names built-in kinds outside the core group
/// (`Role.rbac.authorization.k8s.io "r" is invalid: ...`).
pub(crate) fn invalid_object(def: &ResourceDef, name: &str, errors: &[FieldError]) -> ApiError {
    let mut err = invalid(&def.group, &def.kind, name, errors);
    if def.group == crate::resources::RBAC_GROUP {
        let unqualified = format!("{} {name:?} is invalid", def.kind);
        let qualified = format!("{}.{} {name:?} is invalid", def.kind, def.group);
        err.message = err.message.replacen(&unqualified, &qualified, 1);
    }
    err
}

/// 400 for a body that cannot be read as the resource's kind.
fn undecodable(def: &ResourceDef, why: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!(
        "{kind} in version {version:?} cannot be handled as a {kind}: {why}",
        kind = def.kind,
        version = def.version,
    ))
}

fn wrong_type(def: &ResourceDef, field: &str, expected: &str, got: &Value) -> ApiError {
    undecodable(
        def,
        format!("{field} must be {expected}, not {}", type_name(got)),
    )
}

/// Whether `s` is a label value's or name part's characters: alphanumerics,
/// `-`, `_` and `.`, starting and ending with an alphanumeric.
fn is_name_part(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    s.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
        && s.chars().next().is_some_and(alnum)
        && s.chars().last().is_some_and(alnum)
}

/// What is wrong with a qualified name (`[prefix/]name`), as the API server says it.
pub(crate) fn qualified_name_errors(value: &str) -> Vec<String> {
    let parts: Vec<&str> = value.split('/').collect();
    let (prefix, name) = match parts.as_slice() {
        [name] => (None, *name),
        [prefix, name] => (Some(*prefix), *name),
        _ => return vec![QUALIFIED_NAME_RULE.to_string()],
    };
    let mut errors = Vec::new();
    match prefix {
        Some("") => errors.push("prefix part must be non-empty".to_string()),
        Some(p) if p.len() > 253 => {
            errors.push("prefix part must be no more than 253 characters".to_string());
        }
        Some(p) if !objects::is_dns_subdomain(p) => errors.push(PREFIX_RULE.to_string()),
        _ => {}
    }
    if name.is_empty() {
        errors.push("name part must be non-empty".to_string());
    } else if name.len() > MAX_NAME_PART {
        errors.push(format!(
            "name part must be no more than {MAX_NAME_PART} characters"
        ));
    }
    if !name.is_empty() && !is_name_part(name) {
        errors.push(NAME_PART_RULE.to_string());
    }
    errors
}

/// What is wrong with a label value, as the API server says it.
pub(crate) fn label_value_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > MAX_NAME_PART {
        errors.push(format!("must be no more than {MAX_NAME_PART} characters"));
    }
    if !value.is_empty() && !is_name_part(value) {
        errors.push(LABEL_VALUE_RULE.to_string());
    }
    errors
}

/// A map of strings at `meta[field]`, or 400 when it is of another type.
fn string_map<'a>(
    def: &ResourceDef,
    parent: &'a Map<String, Value>,
    field: &str,
    path: &str,
) -> Result<Option<&'a Map<String, Value>>, ApiError> {
    match parent.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => {
            if let Some((k, v)) = map.iter().find(|(_, v)| !v.is_string()) {
                return Err(wrong_type(def, &format!("{path}.{k}"), "a string", v));
            }
            Ok(Some(map))
        }
        Some(other) => Err(wrong_type(def, path, "an object of strings", other)),
    }
}

/// Checks an object about to be written (created, replaced or patched):
/// the types and syntax of its metadata and, for ConfigMaps and Secrets,
/// their data.
pub(crate) fn object(def: &ResourceDef, obj: &Value) -> Result<(), ApiError> {
    let name = objects::name(obj);
    let meta = match obj.get("metadata") {
        None | Some(Value::Null) => None,
        Some(Value::Object(meta)) => Some(meta),
        Some(other) => return Err(wrong_type(def, "metadata", "an object", other)),
    };
    let mut errors = Vec::new();
    if let Some(meta) = meta {
        for field in ["name", "generateName", "namespace", "uid"] {
            match meta.get(field) {
                None | Some(Value::Null | Value::String(_)) => {}
                Some(other) => {
                    return Err(wrong_type(
                        def,
                        &format!("metadata.{field}"),
                        "a string",
                        other,
                    ));
                }
            }
        }
        match meta.get("generation") {
            None | Some(Value::Null) => {}
            Some(Value::Number(n)) if n.is_i64() => {}
            Some(other) => {
                return Err(wrong_type(def, "metadata.generation", "an integer", other));
            }
        }
        errors.extend(labels(def, meta)?);
        errors.extend(annotations(def, meta)?);
        errors.extend(finalizers(def, meta)?);
        errors.extend(owner_references(def, meta)?);
    }
    if def.group.is_empty() && def.plural == "configmaps" {
        errors.extend(config_map_data(def, obj)?);
    }
    if def.group.is_empty() && def.plural == "secrets" {
        errors.extend(secret_data(def, obj)?);
    }
    errors.extend(crate::rbac::validation::errors(def, obj));
    if errors.is_empty() {
        Ok(())
    } else {
        Err(invalid_object(def, name, &errors))
    }
}

fn labels(def: &ResourceDef, meta: &Map<String, Value>) -> Result<Vec<FieldError>, ApiError> {
    let mut errors = Vec::new();
    let Some(labels) = string_map(def, meta, "labels", "metadata.labels")? else {
        return Ok(errors);
    };
    for (key, value) in labels {
        for why in qualified_name_errors(key) {
            errors.push(FieldError::invalid("metadata.labels", key, &why));
        }
        for why in label_value_errors(value.as_str().unwrap_or_default()) {
            errors.push(FieldError::invalid(
                "metadata.labels",
                value.as_str().unwrap_or_default(),
                &why,
            ));
        }
    }
    Ok(errors)
}

fn annotations(def: &ResourceDef, meta: &Map<String, Value>) -> Result<Vec<FieldError>, ApiError> {
    let mut errors = Vec::new();
    let Some(annotations) = string_map(def, meta, "annotations", "metadata.annotations")? else {
        return Ok(errors);
    };
    let mut total = 0usize;
    for (key, value) in annotations {
        // The API server checks annotation keys in lower case.
        for why in qualified_name_errors(&key.to_ascii_lowercase()) {
            errors.push(FieldError::invalid("metadata.annotations", key, &why));
        }
        total = total.saturating_add(key.len() + value.as_str().map_or(0, str::len));
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errors.push(FieldError {
            field: "metadata.annotations".into(),
            reason: "FieldValueTooLong",
            detail: format!("Too long: must have at most {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"),
        });
    }
    Ok(errors)
}

fn finalizers(def: &ResourceDef, meta: &Map<String, Value>) -> Result<Vec<FieldError>, ApiError> {
    let mut errors = Vec::new();
    let list = match meta.get("finalizers") {
        None | Some(Value::Null) => return Ok(errors),
        Some(Value::Array(list)) => list,
        Some(other) => {
            return Err(wrong_type(
                def,
                "metadata.finalizers",
                "an array of strings",
                other,
            ));
        }
    };
    for (i, item) in list.iter().enumerate() {
        let field = format!("metadata.finalizers[{i}]");
        let Some(name) = item.as_str() else {
            return Err(wrong_type(def, &field, "a string", item));
        };
        for why in qualified_name_errors(name) {
            errors.push(FieldError::invalid(field.clone(), name, &why));
        }
    }
    Ok(errors)
}

fn owner_references(
    def: &ResourceDef,
    meta: &Map<String, Value>,
) -> Result<Vec<FieldError>, ApiError> {
    let mut errors = Vec::new();
    let refs = match meta.get("ownerReferences") {
        None | Some(Value::Null) => return Ok(errors),
        Some(Value::Array(refs)) => refs,
        Some(other) => {
            return Err(wrong_type(
                def,
                "metadata.ownerReferences",
                "an array of objects",
                other,
            ));
        }
    };
    let mut controllers = Vec::new();
    for (i, item) in refs.iter().enumerate() {
        let path = format!("metadata.ownerReferences[{i}]");
        let Some(r) = item.as_object() else {
            return Err(wrong_type(def, &path, "an object", item));
        };
        let text = |field: &str| -> Result<&str, ApiError> {
            match r.get(field) {
                None | Some(Value::Null) => Ok(""),
                Some(Value::String(s)) => Ok(s),
                Some(other) => Err(wrong_type(
                    def,
                    &format!("{path}.{field}"),
                    "a string",
                    other,
                )),
            }
        };
        let api_version = text("apiVersion")?;
        let kind = text("kind")?;
        let name = text("name")?;
        let uid = text("uid")?;
        for field in ["controller", "blockOwnerDeletion"] {
            match r.get(field) {
                None | Some(Value::Null | Value::Bool(_)) => {}
                Some(other) => {
                    return Err(wrong_type(
                        def,
                        &format!("{path}.{field}"),
                        "a boolean",
                        other,
                    ));
                }
            }
        }
        // As the API server: the version is what follows the last '/'.
        let version = api_version.rsplit('/').next().unwrap_or("");
        let base = "metadata.ownerReferences";
        if version.is_empty() {
            errors.push(FieldError::invalid(
                format!("{base}.apiVersion"),
                api_version,
                "version must not be empty",
            ));
        }
        if kind.is_empty() {
            errors.push(FieldError::invalid(
                format!("{base}.kind"),
                kind,
                "kind must not be empty",
            ));
        }
        if name.is_empty() {
            errors.push(FieldError::invalid(
                format!("{base}.name"),
                name,
                "name must not be empty",
            ));
        }
        if uid.is_empty() {
            errors.push(FieldError::invalid(
                format!("{base}.uid"),
                uid,
                "uid must not be empty",
            ));
        }
        if r.get("controller").and_then(Value::as_bool) == Some(true) {
            controllers.push(format!("{kind}/{name}"));
        }
    }
    if controllers.len() > 1 {
        errors.push(FieldError {
            field: "metadata.ownerReferences".into(),
            reason: "FieldValueInvalid",
            detail: format!(
                "Invalid value: {refs}: Only one reference can have Controller set to true. Found \"true\" in references for {}",
                controllers.join(" and "),
                refs = Value::Array(refs.clone()),
            ),
        });
    }
    Ok(errors)
}

/// Whether `key` may be a key of ConfigMap or Secret data.
fn config_key_errors(key: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if key.len() > 253 {
        errors.push("must be no more than 253 characters".to_string());
    }
    if key.is_empty()
        || !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        errors.push(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' \
             (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is \
             '[-._a-zA-Z0-9]+')"
                .to_string(),
        );
    }
    if key == "." || key == ".." {
        errors.push(format!("must not be '{key}'"));
    }
    errors
}

fn config_map_data(def: &ResourceDef, obj: &Value) -> Result<Vec<FieldError>, ApiError> {
    let mut errors = Vec::new();
    let Some(top) = obj.as_object() else {
        return Ok(errors);
    };
    let data = string_map(def, top, "data", "data")?;
    let binary = string_map(def, top, "binaryData", "binaryData")?;
    for (k, v) in binary.into_iter().flatten() {
        decode_base64(
            def,
            &format!("binaryData.{k}"),
            v.as_str().unwrap_or_default(),
        )?;
    }
    for (field, map) in [("data", data), ("binaryData", binary)] {
        for key in map.into_iter().flat_map(Map::keys) {
            for why in config_key_errors(key) {
                errors.push(FieldError::invalid(format!("{field}[{key}]"), key, &why));
            }
        }
    }
    if let (Some(data), Some(binary)) = (data, binary) {
        for key in data.keys().filter(|k| binary.contains_key(*k)) {
            errors.push(FieldError::invalid(
                format!("data[{key}]"),
                key,
                "duplicate of key present in binaryData",
            ));
        }
    }
    Ok(errors)
}

fn secret_data(def: &ResourceDef, obj: &Value) -> Result<Vec<FieldError>, ApiError> {
    let mut errors = Vec::new();
    let Some(top) = obj.as_object() else {
        return Ok(errors);
    };
    let data = string_map(def, top, "data", "data")?;
    let string_data = string_map(def, top, "stringData", "stringData")?;
    for (k, v) in data.into_iter().flatten() {
        decode_base64(def, &format!("data.{k}"), v.as_str().unwrap_or_default())?;
    }
    for (field, map) in [("data", data), ("stringData", string_data)] {
        for key in map.into_iter().flat_map(Map::keys) {
            for why in config_key_errors(key) {
                errors.push(FieldError::invalid(format!("{field}[{key}]"), key, &why));
            }
        }
    }
    Ok(errors)
}

fn decode_base64(def: &ResourceDef, field: &str, text: &str) -> Result<(), ApiError> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map(drop)
        .map_err(|e| {
            undecodable(
                def,
                format!("{field}: illegal base64 data ({e}); encode the bytes in standard base64 with padding"),
            )
        })
}

/// Checks that a create or update body agrees with the request: its
/// `apiVersion` and `kind` (when given) are the resource's, and its namespace
/// (when given) is the one on the URL.
pub(crate) fn body_matches_request(
    def: &ResourceDef,
    ns: Option<&str>,
    body: &Value,
) -> Result<(), ApiError> {
    match body.get("apiVersion") {
        None | Some(Value::Null) => {}
        Some(Value::String(v)) if v.is_empty() || *v == def.api_version() => {}
        Some(Value::String(v)) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({})",
                def.api_version()
            )));
        }
        Some(other) => return Err(wrong_type(def, "apiVersion", "a string", other)),
    }
    match body.get("kind") {
        None | Some(Value::Null) => {}
        Some(Value::String(k)) if k.is_empty() || *k == def.kind => {}
        Some(Value::String(k)) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({}) of {}; send it to the {k} resource instead",
                def.kind, def.plural
            )));
        }
        Some(other) => return Err(wrong_type(def, "kind", "a string", other)),
    }
    if def.namespaced
        && let Some(ns) = ns
        && let Some(body_ns) = objects::meta_str(body, "namespace").filter(|s| !s.is_empty())
        && body_ns != ns
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

/// Checks that a patch left the object's `apiVersion`, `kind`, name and
/// namespace as they were (the API server refuses to move, rename or
/// retype an object; the name and namespace as `checkName` does).
pub(crate) fn patched(def: &ResourceDef, old: &Value, new: &Value) -> Result<(), ApiError> {
    let url_name = objects::name(old);
    match new.pointer("/metadata/name") {
        None | Some(Value::Null) => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({url_name} based on URL) was undeterminable: name must be provided"
            )));
        }
        Some(Value::String(name)) if name.is_empty() => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({url_name} based on URL) was undeterminable: name must be provided"
            )));
        }
        Some(Value::String(name)) if name != url_name => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({name}) does not match the name on the URL ({url_name})"
            )));
        }
        Some(Value::String(_)) => {}
        Some(other) => return Err(wrong_type(def, "metadata.name", "a string", other)),
    }
    let field = |v: &Value, f: &str| v.get(f).cloned().unwrap_or(Value::Null);
    for f in ["apiVersion", "kind"] {
        let (before, after) = (field(old, f), field(new, f));
        if before != after {
            let after = after
                .as_str()
                .map_or_else(|| after.to_string(), str::to_string);
            return Err(ApiError::bad_request(format!(
                "the {f} of the patched object ({after}) does not match the {f} of {} ({}); a patch cannot change it",
                def.plural,
                before.as_str().unwrap_or_default(),
            )));
        }
    }
    if def.namespaced {
        let before = objects::namespace(old);
        match new.pointer("/metadata/namespace") {
            Some(Value::String(after)) if after != before => {
                return Err(ApiError::bad_request(format!(
                    "the namespace of the object ({after}) does not match the namespace on the URL ({before})"
                )));
            }
            Some(Value::String(_)) | None | Some(Value::Null) => {}
            Some(other) => return Err(wrong_type(def, "metadata.namespace", "a string", other)),
        }
    }
    Ok(())
}

/// Makes a numeric `metadata.resourceVersion` precondition a string (so it is
/// compared, not skipped); refuses one of another type.
pub(crate) fn resource_version_precondition(
    def: &ResourceDef,
    obj: &mut Value,
) -> Result<(), ApiError> {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    match meta.get("resourceVersion") {
        None | Some(Value::Null | Value::String(_)) => Ok(()),
        Some(Value::Number(n)) => {
            let text = n.to_string();
            meta.insert("resourceVersion".into(), Value::String(text));
            Ok(())
        }
        Some(other) => Err(wrong_type(
            def,
            "metadata.resourceVersion",
            "a string",
            other,
        )),
    }
}

/// Checks a patch body before it is applied: the JSON patch operation count,
/// strategic merge `$patch` directives, and for server-side apply the field
/// manager and the object's name.
pub(crate) fn patch_body(
    kind: PatchKind,
    patch: &Value,
    field_manager: Option<&str>,
    name: &str,
) -> Result<(), ApiError> {
    match kind {
        PatchKind::Json => json_patch_operations(patch),
        PatchKind::Strategic => strategic_directives(patch, ""),
        PatchKind::Apply => {
            if field_manager.is_none_or(str::is_empty) {
                return Err(invalid(
                    "meta.k8s.io",
                    "PatchOptions.meta.k8s.io",
                    "",
                    &[FieldError::required(
                        "fieldManager",
                        "is required for apply patch; pass ?fieldManager=NAME",
                    )],
                ));
            }
            match patch.pointer("/metadata/name") {
                Some(Value::String(body_name)) if !body_name.is_empty() && body_name != name => {
                    Err(ApiError::bad_request(format!(
                        "the name of the object ({body_name}) does not match the name on the URL ({name})"
                    )))
                }
                _ => Ok(()),
            }
        }
        PatchKind::Merge => Ok(()),
    }
}

/// Refuses a JSON patch of more than [`MAX_JSON_PATCH_OPERATIONS`] operations.
pub(crate) fn json_patch_operations(patch: &Value) -> Result<(), ApiError> {
    let count = patch.as_array().map_or(0, Vec::len);
    if count > MAX_JSON_PATCH_OPERATIONS {
        return Err(ApiError::new(
            413,
            "RequestEntityTooLarge",
            format!(
                "Request entity too large: The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {count}; split the patch into several requests"
            ),
        ));
    }
    Ok(())
}

/// Refuses `$patch` directives other than `replace`, `merge` and `delete`.
fn strategic_directives(patch: &Value, path: &str) -> Result<(), ApiError> {
    match patch {
        Value::Object(map) => {
            if let Some(directive) = map.get("$patch") {
                match directive.as_str() {
                    Some("replace" | "merge" | "delete") => {}
                    _ => {
                        let shown = directive
                            .as_str()
                            .map_or_else(|| directive.to_string(), str::to_string);
                        let at = if path.is_empty() { "/" } else { path };
                        return Err(ApiError::bad_request(format!(
                            "invalid patch type {shown:?} at {at}: the $patch directive takes replace, merge or delete"
                        )));
                    }
                }
            }
            for (k, v) in map {
                strategic_directives(v, &format!("{path}/{k}"))?;
            }
            Ok(())
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                strategic_directives(v, &format!("{path}/{i}"))?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Checks the query parameters a client sent: numbers that are not numbers
/// get 400; for a write, a `fieldManager` over 128 bytes or with
/// unprintable characters and a `dryRun` other than `All` get 422 (as the
/// API server validates its options). `options` names the options kind of
/// the verb (`CreateOptions`, `PatchOptions`, ...), if it has one.
pub(crate) fn query(query: &Query, options: Option<&str>) -> Result<(), ApiError> {
    if let Some((param, value)) = query.malformed.first() {
        return Err(ApiError::bad_request(format!(
            "invalid value {value:?} for the query parameter {param}: must be a non-negative integer"
        )));
    }
    let Some(options) = options else {
        return Ok(());
    };
    let mut errors = Vec::new();
    if options != "DeleteOptions" {
        errors.extend(crate::options::field_manager_errors(
            query.field_manager.as_deref().unwrap_or(""),
        ));
    }
    let dry_run: Vec<&str> = query.dry_run_values.iter().map(String::as_str).collect();
    errors.extend(crate::options::dry_run_errors(&dry_run));
    if errors.is_empty() {
        Ok(())
    } else {
        Err(crate::options::invalid(options, &errors))
    }
}

/// 504 for a resourceVersion newer than the store's (as the API server's
/// watch cache answers after waiting for it in vain).
pub(crate) fn too_large_resource_version(requested: u64, current: u64) -> ApiError {
    let mut err = ApiError::new(
        504,
        "Timeout",
        format!(
            "Timeout: Too large resource version: {requested}, current: {current}; pass a resourceVersion from an earlier response"
        ),
    );
    err.details = Some(json!({
        "retryAfterSeconds": 1,
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
    }));
    err.retry_after = Some(1);
    err
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failures::tests::causes;
    use crate::resources;

    fn def(plural: &str) -> ResourceDef {
        resources::builtins()
            .into_iter()
            .find(|d| d.group.is_empty() && d.plural == plural)
            .expect("a built-in resource")
    }

    #[test]
    fn qualified_names() {
        for ok in [
            "app",
            "kopf.zalando.org/last-handled-configuration",
            "kopf.zalando.org/KopfFinalizerMarker",
            "a.b-c/D_e.f",
            "x",
        ] {
            assert_eq!(qualified_name_errors(ok), Vec::<String>::new(), "{ok}");
        }
        assert!(qualified_name_errors("bad key")[0].starts_with("name part must consist"));
        assert_eq!(
            qualified_name_errors("/x"),
            ["prefix part must be non-empty"]
        );
        assert!(qualified_name_errors("Example.com/x")[0].starts_with("prefix part a lowercase"));
        assert!(qualified_name_errors("a/b/c")[0].starts_with("a qualified name"));
        assert_eq!(
            qualified_name_errors(&"x".repeat(64)),
            ["name part must be no more than 63 characters"]
        );
        assert_eq!(qualified_name_errors("a/"), ["name part must be non-empty"]);
        assert!(qualified_name_errors("-a").len() == 1);
    }

    #[test]
    fn label_values() {
        assert!(label_value_errors("").is_empty());
        assert!(label_value_errors("My_value-1.2").is_empty());
        assert_eq!(
            label_value_errors(&"v".repeat(64)),
            ["must be no more than 63 characters"]
        );
        assert!(label_value_errors("a b")[0].starts_with("a valid label"));
    }

    #[test]
    fn metadata_of_the_wrong_type_is_a_bad_request() {
        let cm = def("configmaps");
        for bad in [
            json!({"metadata": {"name": "a", "labels": {"x": 1}}}),
            json!({"metadata": {"name": "a", "labels": ["x"]}}),
            json!({"metadata": {"name": "a", "annotations": {"x": true}}}),
            json!({"metadata": {"name": "a", "finalizers": "x"}}),
            json!({"metadata": {"name": "a", "finalizers": [1]}}),
            json!({"metadata": {"name": "a", "ownerReferences": {}}}),
            json!({"metadata": {"name": "a", "ownerReferences": [{"uid": 5}]}}),
            json!({"metadata": "a"}),
            json!({"metadata": {"name": 5}}),
        ] {
            let err = object(&cm, &bad).unwrap_err();
            assert_eq!((err.code, err.reason), (400, "BadRequest"), "{bad}");
            assert!(
                err.message
                    .starts_with("ConfigMap in version \"v1\" cannot be handled"),
                "{}",
                err.message
            );
        }
    }

    #[test]
    fn metadata_syntax_is_invalid_with_a_cause_per_field() {
        let cm = def("configmaps");
        let obj = json!({"metadata": {
            "name": "a",
            "labels": {"bad key": "ok", "ok": "bad value"},
            "annotations": {"kopf.zalando.org/last-handled-configuration": "{}", "no/no/no": ""},
            "finalizers": ["kopf.zalando.org/KopfFinalizerMarker", "bad finalizer"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u"}, {}],
        }});
        let err = object(&cm, &obj).unwrap_err();
        assert_eq!((err.code, err.reason), (422, "Invalid"));
        let causes = causes(&err);
        assert_eq!(causes.len(), 8, "{causes:#?}");
        assert!(causes[0].starts_with("metadata.labels: Invalid value: \"bad key\": name part"));
        assert!(
            causes[1].starts_with("metadata.labels: Invalid value: \"bad value\": a valid label")
        );
        assert!(causes[2].starts_with("metadata.annotations: Invalid value: \"no/no/no\""));
        assert!(causes[3].starts_with("metadata.finalizers[1]: Invalid value: \"bad finalizer\""));
        assert_eq!(
            causes[4],
            "metadata.ownerReferences.apiVersion: Invalid value: \"\": version must not be empty"
        );
        assert_eq!(
            causes[7],
            "metadata.ownerReferences.uid: Invalid value: \"\": uid must not be empty"
        );
        assert!(
            err.message
                .starts_with("ConfigMap \"a\" is invalid: [metadata.labels")
        );
    }

    #[test]
    fn annotation_keys_are_checked_in_lower_case_and_sizes_add_up() {
        let cm = def("configmaps");
        let upper = json!({"metadata": {"annotations": {"Example.COM/Key": "v"}}});
        assert_eq!(object(&cm, &upper), Ok(()));
        let at_limit = json!({"metadata": {"annotations": {"k": "v".repeat(TOTAL_ANNOTATION_SIZE_LIMIT - 1)}}});
        assert_eq!(object(&cm, &at_limit), Ok(()));
        let over = json!({"metadata": {"annotations": {"k": "v".repeat(TOTAL_ANNOTATION_SIZE_LIMIT / 2), "l": "v".repeat(TOTAL_ANNOTATION_SIZE_LIMIT / 2)}}});
        let err = object(&cm, &over).unwrap_err();
        assert_eq!(
            causes(&err),
            ["metadata.annotations: Too long: must have at most 262144 bytes"]
        );
    }

    #[test]
    fn two_controllers_are_invalid() {
        let cm = def("configmaps");
        let r = |n: &str| json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": n, "uid": n, "controller": true});
        let obj = json!({"metadata": {"ownerReferences": [r("a"), r("b")]}});
        let err = object(&cm, &obj).unwrap_err();
        assert!(causes(&err)[0].contains("Only one reference can have Controller set to true"));
    }

    #[test]
    fn config_map_and_secret_data() {
        let cm = def("configmaps");
        assert_eq!(
            object(
                &cm,
                &json!({"data": {"a": "b"}, "binaryData": {"c": "aGk="}})
            ),
            Ok(())
        );
        assert_eq!(
            object(&cm, &json!({"data": {"a": 1}})).unwrap_err().code,
            400
        );
        assert_eq!(object(&cm, &json!({"data": ["a"]})).unwrap_err().code, 400);
        assert_eq!(
            object(&cm, &json!({"binaryData": {"c": "not base64!"}}))
                .unwrap_err()
                .code,
            400
        );
        let err = object(
            &cm,
            &json!({"data": {"bad key": "x", "d": ""}, "binaryData": {"d": ""}}),
        )
        .unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(causes(&err).len(), 2);
        let secret = def("secrets");
        assert_eq!(
            object(
                &secret,
                &json!({"data": {"a": "aGk="}, "stringData": {"b": "x"}})
            ),
            Ok(())
        );
        assert_eq!(
            object(&secret, &json!({"data": {"a": "hi there"}}))
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(
            object(&secret, &json!({"stringData": {"a": 1}}))
                .unwrap_err()
                .code,
            400
        );
    }

    #[test]
    fn bodies_must_agree_with_the_request() {
        let cm = def("configmaps");
        let ok = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "a"}});
        assert_eq!(body_matches_request(&cm, Some("a"), &ok), Ok(()));
        assert_eq!(body_matches_request(&cm, Some("a"), &json!({})), Ok(()));
        let wrong_ns = json!({"metadata": {"namespace": "b"}});
        let err = body_matches_request(&cm, Some("a"), &wrong_ns).unwrap_err();
        assert_eq!(
            err.message,
            "the namespace of the provided object does not match the namespace sent on the request"
        );
        let wrong_version = json!({"apiVersion": "apps/v1"});
        assert!(body_matches_request(&cm, Some("a"), &wrong_version).unwrap_err().message.starts_with(
            "the API version in the data (apps/v1) does not match the expected API version (v1)"
        ));
        assert_eq!(
            body_matches_request(&cm, Some("a"), &json!({"kind": "Secret"}))
                .unwrap_err()
                .code,
            400
        );
    }

    #[test]
    fn patches_may_not_move_or_retype_objects() {
        let cm = def("configmaps");
        let old = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "a"}});
        assert_eq!(patched(&cm, &old, &old), Ok(()));
        let mut renamed = old.clone();
        renamed["metadata"]["name"] = "y".into();
        let err = patched(&cm, &old, &renamed).unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                400,
                "the name of the object (y) does not match the name on the URL (x)"
            )
        );
        let mut moved = old.clone();
        moved["metadata"]["namespace"] = "b".into();
        assert_eq!(
            patched(&cm, &old, &moved).unwrap_err().message,
            "the namespace of the object (b) does not match the namespace on the URL (a)"
        );
        let mut retyped = old.clone();
        retyped["kind"] = "Secret".into();
        assert_eq!(patched(&cm, &old, &retyped).unwrap_err().code, 400);
        let mut dropped = old.clone();
        dropped["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        assert_eq!(patched(&cm, &old, &dropped), Ok(()));
    }

    #[test]
    fn numeric_resource_versions_become_strings() {
        let cm = def("configmaps");
        let mut obj = json!({"metadata": {"resourceVersion": 12}});
        resource_version_precondition(&cm, &mut obj).unwrap();
        assert_eq!(obj["metadata"]["resourceVersion"], "12");
        let mut bad = json!({"metadata": {"resourceVersion": [1]}});
        assert_eq!(
            resource_version_precondition(&cm, &mut bad)
                .unwrap_err()
                .code,
            400
        );
    }

    #[test]
    fn patch_bodies() {
        let ops = Value::Array(vec![
            json!({"op": "test", "path": "/a", "value": 1});
            MAX_JSON_PATCH_OPERATIONS + 1
        ]);
        let err = patch_body(PatchKind::Json, &ops, None, "a").unwrap_err();
        assert_eq!((err.code, err.reason), (413, "RequestEntityTooLarge"));
        assert!(err.message.contains("is 10000, got 10001"));
        let fine = Value::Array(vec![
            json!({"op": "test", "path": "/a", "value": 1});
            MAX_JSON_PATCH_OPERATIONS
        ]);
        assert_eq!(patch_body(PatchKind::Json, &fine, None, "a"), Ok(()));
        let bogus = json!({"spec": {"containers": [{"name": "c", "$patch": "bogus"}]}});
        let err = patch_body(PatchKind::Strategic, &bogus, None, "a").unwrap_err();
        assert_eq!(err.code, 400);
        assert!(
            err.message.contains("/spec/containers/0"),
            "{}",
            err.message
        );
        let known = json!({"$patch": "replace", "l": [{"$patch": "delete", "name": "x"}]});
        assert_eq!(patch_body(PatchKind::Strategic, &known, None, "a"), Ok(()));
        let apply = json!({"metadata": {"name": "a"}});
        let err = patch_body(PatchKind::Apply, &apply, None, "a").unwrap_err();
        assert_eq!((err.code, err.reason), (422, "Invalid"));
        assert_eq!(
            patch_body(PatchKind::Apply, &apply, Some("me"), "a"),
            Ok(())
        );
        assert_eq!(
            patch_body(PatchKind::Apply, &apply, Some("me"), "b")
                .unwrap_err()
                .code,
            400
        );
    }

    #[test]
    fn too_large_resource_versions_time_out() {
        let status = too_large_resource_version(99, 7).to_status();
        assert_eq!(status["code"], 504);
        assert_eq!(status["reason"], "Timeout");
        assert_eq!(status["details"]["retryAfterSeconds"], 1);
        assert_eq!(
            status["details"]["causes"][0]["reason"],
            "ResourceVersionTooLarge"
        );
        assert!(
            status["message"]
                .as_str()
                .unwrap()
                .starts_with("Timeout: Too large resource version: 99, current: 7")
        );
    }
}
