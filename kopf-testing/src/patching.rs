//! Patch bodies: merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge
//! (an approximation: lists of objects are merged by their well-known keys such
//! as `name` or `type`, `finalizers` are unioned, directives are honoured where
//! simple) and server-side apply (applied as a merge patch).

use serde_json::Value;

use crate::limits;

/// The kind of a PATCH request, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchKind {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/json-patch+json`.
    Json,
    /// `application/strategic-merge-patch+json` (approximated, see the module docs).
    Strategic,
    /// `application/apply-patch+yaml` (YAML or JSON, treated as a merge patch).
    Apply,
}

impl PatchKind {
    /// The patch kind for a `Content-Type` value, if supported.
    pub(crate) fn from_content_type(content_type: &str) -> Option<Self> {
        let media = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match media.as_str() {
            "application/merge-patch+json" => Some(Self::Merge),
            "application/json-patch+json" => Some(Self::Json),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// Why a patch could not be applied.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum PatchError {
    /// The body is not valid JSON (or YAML for apply).
    #[error("the patch body is not valid {format}: {reason}")]
    Malformed {
        /// JSON or YAML.
        format: &'static str,
        /// The parser's message.
        reason: String,
    },
    /// A merge patch body must be a JSON object.
    #[error("a merge patch must be a JSON object, not {0}")]
    NotAnObject(&'static str),
    /// A JSON patch `test` operation failed.
    #[error("the JSON patch `test` operation failed: {0}")]
    TestFailed(String),
    /// A JSON patch path does not exist or is invalid.
    #[error("the JSON patch could not be applied: {0}; check the `path` of each operation exists")]
    BadPath(String),
    /// The copies of a JSON patch add too many bytes (see [`crate::limits`]).
    #[error("the JSON patch could not be applied: {0}; copy less")]
    CopyLimit(String),
    /// A JSON patch would nest the object too deeply (see [`crate::limits`]).
    #[error("the JSON patch could not be applied: {0}; keep objects flatter")]
    TooDeep(String),
    /// The body is nested too deeply to decode (see [`crate::limits`]).
    #[error(
        "the patch body is nested too deeply: more than {} levels of objects and arrays; flatten it",
        crate::limits::MAX_DEPTH
    )]
    BodyTooDeep,
}

impl PatchError {
    /// Whether the server answers 422 (rather than 400).
    pub(crate) fn is_invalid(&self) -> bool {
        matches!(
            self,
            Self::TestFailed(_) | Self::BadPath(_) | Self::CopyLimit(_) | Self::TooDeep(_)
        )
    }
}

/// What kind of JSON value `v` is, for messages ("a string", "an array").
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Parses the body of a patch of the given kind into JSON, within the limits
/// of [`crate::limits`] (nesting depth, YAML alias expansion).
pub(crate) fn parse_body(kind: PatchKind, body: &[u8]) -> Result<Value, PatchError> {
    let json = match limits::decode_json(body) {
        Ok(v) => return Ok(v),
        Err(limits::DecodeError::TooDeep) => return Err(PatchError::BodyTooDeep),
        Err(limits::DecodeError::Syntax(e)) => e,
    };
    match kind {
        PatchKind::Apply => {
            let text = std::str::from_utf8(body).map_err(|e| PatchError::Malformed {
                format: "YAML",
                reason: e.to_string(),
            })?;
            serde_saphyr::from_str_with_options::<Value>(text, limits::yaml_options(body.len()))
                .map_err(|e| PatchError::Malformed {
                    format: "YAML",
                    reason: e.to_string(),
                })
        }
        _ => Err(PatchError::Malformed {
            format: "JSON",
            reason: json.to_string(),
        }),
    }
}

/// Applies a parsed patch to a document, returning the patched document.
pub(crate) fn apply(kind: PatchKind, current: &Value, patch: &Value) -> Result<Value, PatchError> {
    let mut doc = current.clone();
    match kind {
        PatchKind::Json => {
            let ops: json_patch::Patch =
                serde_json::from_value(patch.clone()).map_err(|e| PatchError::Malformed {
                    format: "JSON patch",
                    reason: e.to_string(),
                })?;
            limits::apply_json_patch(&mut doc, &ops)?;
        }
        // A merge patch has no directives: `$` keys are data (RFC 7386).
        PatchKind::Merge => {
            if !patch.is_object() {
                return Err(PatchError::NotAnObject(type_name(patch)));
            }
            json_patch::merge(&mut doc, patch);
        }
        PatchKind::Apply => {
            if !patch.is_object() {
                return Err(PatchError::NotAnObject(type_name(patch)));
            }
            json_patch::merge(&mut doc, &strip_directives(patch));
        }
        PatchKind::Strategic => {
            if !patch.is_object() {
                return Err(PatchError::NotAnObject(type_name(patch)));
            }
            strategic(&mut doc, patch);
        }
    }
    Ok(doc)
}

/// Applies a strategic merge patch object to `target`.
fn strategic(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        *target = strip_directives(patch);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    let Some(t) = target.as_object_mut() else {
        return;
    };
    for (k, v) in p {
        if let Some(list) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(existing)), Some(gone)) = (t.get_mut(list), v.as_array()) {
                existing.retain(|x| !gone.contains(x));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match (t.get_mut(k), v) {
            (Some(existing @ Value::Object(_)), Value::Object(_)) => strategic(existing, v),
            (Some(Value::Array(existing)), Value::Array(items)) => merge_list(existing, items, k),
            _ => {
                t.insert(k.clone(), strip_directives(v));
            }
        }
    }
}

/// The merge key of a well-known list field, if its items are merged by key.
fn merge_key(field: &str, items: &[Value]) -> Option<&'static str> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "secrets" => Some("name"),
        "ports" if items.iter().all(|i| i.get("containerPort").is_some()) => Some("containerPort"),
        "ports" => Some("port"),
        "volumeMounts" => Some("mountPath"),
        "conditions" => Some("type"),
        "ownerReferences" => Some("uid"),
        _ => None,
    }
}

fn merge_list(existing: &mut Vec<Value>, items: &[Value], field: &str) {
    if field == "finalizers" {
        for item in items {
            if !existing.contains(item) {
                existing.push(item.clone());
            }
        }
        return;
    }
    let key = merge_key(field, items).filter(|key| {
        items
            .iter()
            .chain(existing.iter())
            .all(|i| i.get(*key).is_some())
    });
    let Some(key) = key else {
        *existing = items
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .map(strip_directives)
            .collect();
        return;
    };
    for item in items {
        let pos = existing.iter().position(|e| e.get(key) == item.get(key));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(p), true) => {
                existing.remove(p);
            }
            (Some(p), false) => strategic(&mut existing[p], item),
            (None, true) => {}
            (None, false) => existing.push(strip_directives(item)),
        }
    }
}

/// Drops strategic-merge directives (`$patch`, `$retainKeys`, `$setElementOrder/...`,
/// `$deleteFromPrimitiveList/...`) so they are not stored as data.
fn strip_directives(patch: &Value) -> Value {
    match patch {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_types_are_recognised() {
        assert_eq!(
            PatchKind::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchKind::Merge)
        );
        assert_eq!(
            PatchKind::from_content_type("application/json-patch+json"),
            Some(PatchKind::Json)
        );
        assert_eq!(
            PatchKind::from_content_type("application/apply-patch+yaml"),
            Some(PatchKind::Apply)
        );
        assert_eq!(PatchKind::from_content_type("text/plain"), None);
    }

    #[test]
    fn merge_patch_follows_rfc7386() {
        let doc = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        let patch = json!({"a": "z", "c": {"f": null}});
        assert_eq!(
            apply(PatchKind::Merge, &doc, &patch).unwrap(),
            json!({"a": "z", "c": {"d": "e"}})
        );
        let arrays = apply(PatchKind::Merge, &json!({"l": [1, 2]}), &json!({"l": [3]})).unwrap();
        assert_eq!(arrays, json!({"l": [3]}));
    }

    #[test]
    fn merge_patch_keys_starting_with_a_dollar_are_data() {
        let doc = json!({"data": {"$gone": "x", "$kept": "y"}});
        let patch = json!({"data": {"$gone": null, "$new": "z", "$patch": "delete"}});
        assert_eq!(
            apply(PatchKind::Merge, &doc, &patch).unwrap(),
            json!({"data": {"$kept": "y", "$new": "z", "$patch": "delete"}})
        );
    }

    #[test]
    fn merge_patch_must_be_an_object() {
        assert_eq!(
            apply(PatchKind::Merge, &json!({}), &json!([1])),
            Err(PatchError::NotAnObject("an array"))
        );
    }

    #[test]
    fn json_patch_test_failure_is_invalid() {
        let doc = json!({"metadata": {"finalizers": ["a"]}});
        let patch = json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "b"}]);
        let err = apply(PatchKind::Json, &doc, &patch).unwrap_err();
        assert!(matches!(err, PatchError::TestFailed(_)));
        assert!(err.is_invalid());
    }

    /// As the API server's JSON patch: a missing member of an object
    /// tests equal to `null` (kube-runtime's finalizer helper adds the
    /// first finalizer so), a missing parent or another value does not.
    #[test]
    fn json_patch_tests_a_missing_member_as_null() {
        let doc = json!({"metadata": {"name": "a"}});
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["f"]},
        ]);
        assert_eq!(
            apply(PatchKind::Json, &doc, &patch).unwrap(),
            json!({"metadata": {"name": "a", "finalizers": ["f"]}})
        );
        let patch = json!([{"op": "test", "path": "/nope/finalizers", "value": null}]);
        assert!(apply(PatchKind::Json, &doc, &patch).is_err());
        let patch = json!([{"op": "test", "path": "/metadata/finalizers", "value": []}]);
        assert!(apply(PatchKind::Json, &doc, &patch).is_err());
    }

    #[test]
    fn json_patch_bad_path_is_invalid() {
        let patch = json!([{"op": "remove", "path": "/nope/0"}]);
        assert!(
            apply(PatchKind::Json, &json!({}), &patch)
                .unwrap_err()
                .is_invalid()
        );
    }

    #[test]
    fn json_patch_applies_operations() {
        let patch = json!([{"op": "add", "path": "/spec", "value": {"x": 1}}, {"op": "replace", "path": "/spec/x", "value": 2}]);
        assert_eq!(
            apply(PatchKind::Json, &json!({}), &patch).unwrap(),
            json!({"spec": {"x": 2}})
        );
    }

    #[test]
    fn apply_body_may_be_yaml() {
        let v = parse_body(PatchKind::Apply, b"metadata:\n  labels:\n    a: b\n").unwrap();
        assert_eq!(v, json!({"metadata": {"labels": {"a": "b"}}}));
        assert!(parse_body(PatchKind::Merge, b"{nope").is_err());
    }

    #[test]
    fn strategic_lists_merge_by_key() {
        let doc = json!({"metadata": {"finalizers": ["a"]}, "spec": {"containers": [{"name": "c", "image": "x", "ports": [{"containerPort": 80}]}]}});
        let patch = json!({
            "metadata": {"finalizers": ["b"]},
            "spec": {"$setElementOrder/containers": [{"name": "c"}, {"name": "d"}], "containers": [{"name": "c", "image": "y"}, {"name": "d", "image": "z"}]},
        });
        let out = apply(PatchKind::Strategic, &doc, &patch).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(
            out["spec"]["containers"][0],
            json!({"name": "c", "image": "y", "ports": [{"containerPort": 80}]})
        );
        assert_eq!(out["spec"]["containers"][1]["image"], "z");
        let delete = json!({"spec": {"containers": [{"name": "d", "$patch": "delete"}]}, "$deleteFromPrimitiveList/x": []});
        let out = apply(PatchKind::Strategic, &out, &delete).unwrap();
        assert_eq!(out["spec"]["containers"].as_array().unwrap().len(), 1);
        let unfinalize = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}});
        let out = apply(PatchKind::Strategic, &out, &unfinalize).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
        let scalars = apply(
            PatchKind::Strategic,
            &json!({"args": ["a"]}),
            &json!({"args": ["b"]}),
        )
        .unwrap();
        assert_eq!(scalars, json!({"args": ["b"]}));
    }

    #[test]
    fn strategic_directives_are_dropped() {
        let patch = json!({"$setElementOrder/x": [], "spec": {"$retainKeys": ["a"], "a": 1}});
        assert_eq!(
            apply(PatchKind::Strategic, &json!({}), &patch).unwrap(),
            json!({"spec": {"a": 1}})
        );
    }
}
