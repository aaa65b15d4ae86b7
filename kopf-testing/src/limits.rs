//! Limits on what one request may make the emulator do, as the API server
//! sets them: body size, nesting depth, JSON patch operations and the bytes
//! their copies produce, object size after YAML alias expansion, and which API
//! groups a CRD may claim.
//!
//! Every check here runs on the request's own data before the store is
//! locked, or (for a patch, which needs the stored object) bounds the work done
//! under the lock: a hostile client gets a `Status` answer, never a crash.
//!
//! Nesting depth is the one limit lower than the API server's (10,000 levels):
//! the emulator clones, compares, serializes and drops objects recursively on
//! the caller's stack, and a debug build spends about 1.5 KiB of stack per
//! level on the deepest of those. [`MAX_DEPTH`] keeps that well inside the
//! 2 MiB stacks of Tokio workers and test threads: measured in a debug build,
//! creating, reading, listing with a selector, watching, merge-patching and
//! deleting a 512-level object over HTTP passes on a 1 MiB stack and
//! overflows a 768 KiB one.

use serde::Deserialize;
use serde_json::Value;

use crate::failures::ApiError;
use crate::patching::PatchError;

/// The largest request body accepted (the API server's 3 MiB limit).
pub(crate) const BODY_LIMIT: usize = 3 * 1024 * 1024;

/// The largest object kept, after a patch or YAML alias expansion (as a body).
pub(crate) const OBJECT_LIMIT: usize = BODY_LIMIT;

/// The deepest nesting of objects and arrays accepted in a body or a patched
/// object (the API server accepts 10,000; see the module docs for why not here).
pub(crate) const MAX_DEPTH: usize = 512;

/// The most bytes the `copy` operations of one JSON patch may add together
/// (the API server's `JSONPatchMaxCopyBytes`, its body limit).
pub(crate) const MAX_PATCH_COPY_BYTES: usize = BODY_LIMIT;

/// How long a client may take to send a request body.
pub(crate) const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// 408 for a body not sent within [`BODY_READ_TIMEOUT`].
pub(crate) fn body_timeout() -> ApiError {
    ApiError::new(
        408,
        "Timeout",
        format!(
            "the request body did not arrive within {} seconds; send it at once",
            BODY_READ_TIMEOUT.as_secs()
        ),
    )
}

/// 413 for an object that would grow over [`OBJECT_LIMIT`].
pub(crate) fn object_too_large(size: Option<usize>) -> ApiError {
    let size = size.map_or_else(|| "more".to_string(), |s| s.to_string());
    ApiError::new(
        413,
        "RequestEntityTooLarge",
        format!(
            "Request entity too large: the object would be {size} bytes, over the limit of {OBJECT_LIMIT} bytes; keep objects smaller"
        ),
    )
}

/// 400 for a body nested deeper than [`MAX_DEPTH`].
pub(crate) fn too_deep(what: &str) -> ApiError {
    ApiError::bad_request(format!(
        "{what} is nested too deeply: more than {MAX_DEPTH} levels of objects and arrays \
         (the emulator's limit; the API server allows 10000); flatten it"
    ))
}

/// The deepest nesting of `{`/`[` in JSON text, counting no further than
/// `MAX_DEPTH + 1`. Brackets inside strings do not count; for text that is not
/// valid JSON the answer still bounds how deep a decoder would recurse.
pub(crate) fn text_depth(bytes: &[u8]) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in bytes {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                max = max.max(depth);
                if max > MAX_DEPTH {
                    return max;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Why JSON text could not be decoded.
#[derive(Debug)]
pub(crate) enum DecodeError {
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// Not valid JSON.
    Syntax(serde_json::Error),
}

/// Decodes JSON nested up to [`MAX_DEPTH`] levels (serde_json alone stops at 128).
pub(crate) fn decode_json(bytes: &[u8]) -> Result<Value, DecodeError> {
    if text_depth(bytes) > MAX_DEPTH {
        return Err(DecodeError::TooDeep);
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    // Safe: the text was checked not to nest deeper than MAX_DEPTH.
    de.disable_recursion_limit();
    let value = Value::deserialize(&mut de).map_err(DecodeError::Syntax)?;
    de.end().map_err(DecodeError::Syntax)?;
    Ok(value)
}

/// The nesting depth of a value (`{}` and `[]` count one level), counted
/// without recursion so that any value can be measured.
pub(crate) fn value_depth(value: &Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        match v {
            Value::Object(map) => {
                max = max.max(depth + 1);
                stack.extend(map.values().map(|c| (c, depth + 1)));
            }
            Value::Array(items) => {
                max = max.max(depth + 1);
                stack.extend(items.iter().map(|c| (c, depth + 1)));
            }
            _ => {}
        }
    }
    max
}

/// About how many bytes a value takes as JSON (escapes not counted), or `None`
/// once that exceeds `budget`; counted without recursion and stopping early,
/// so measuring a huge value costs no more than the budget.
pub(crate) fn value_size(value: &Value, budget: usize) -> Option<usize> {
    let mut size = 0usize;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        size += match v {
            Value::Null => 4,
            Value::Bool(_) => 5,
            Value::Number(n) => number_len(n),
            Value::String(s) => s.len() + 3,
            Value::Array(items) => {
                stack.extend(items.iter());
                2 + items.len()
            }
            Value::Object(map) => {
                stack.extend(map.values());
                2 + map.keys().map(|k| k.len() + 4).sum::<usize>()
            }
        };
        if size > budget {
            return None;
        }
    }
    Some(size)
}

fn number_len(n: &serde_json::Number) -> usize {
    // Integers: count digits; floats: at most the longest shortest form.
    if let Some(i) = n.as_i64() {
        i.unsigned_abs()
            .checked_ilog10()
            .map_or(1, |d| d as usize + 1)
            + usize::from(i < 0)
    } else if let Some(u) = n.as_u64() {
        u.checked_ilog10().map_or(1, |d| d as usize + 1)
    } else {
        24
    }
}

/// Checks a decoded object against [`MAX_DEPTH`] and [`OBJECT_LIMIT`].
pub(crate) fn check_object(value: &Value, what: &str) -> Result<(), ApiError> {
    if value_depth(value) > MAX_DEPTH {
        return Err(too_deep(what));
    }
    match value_size(value, OBJECT_LIMIT) {
        Some(_) => Ok(()),
        None => Err(object_too_large(None)),
    }
}

/// Applies JSON patch operations one at a time, refusing (before applying it)
/// any operation that would make the document nest deeper than [`MAX_DEPTH`]
/// or make the copies add up to more than [`MAX_PATCH_COPY_BYTES`]; so neither
/// memory nor the recursion depth of later steps can run away.
///
/// The document is left part-patched on error: apply it to a copy.
pub(crate) fn apply_json_patch(
    doc: &mut Value,
    ops: &[json_patch::PatchOperation],
) -> Result<(), PatchError> {
    use json_patch::PatchOperation as Op;
    let mut depth = value_depth(doc);
    let mut copied = 0usize;
    for (i, op) in ops.iter().enumerate() {
        // An upper bound of the depth after this operation.
        let after = match op {
            Op::Add(o) => o.path.count() + value_depth(&o.value),
            Op::Replace(o) => o.path.count() + value_depth(&o.value),
            Op::Move(o) => (o.path.count() + depth).saturating_sub(o.from.count()),
            Op::Copy(o) => {
                // A missing source fails in the patch below.
                if let Some(source) = doc.pointer(o.from.as_str()) {
                    let left = MAX_PATCH_COPY_BYTES.saturating_sub(copied);
                    match value_size(source, left) {
                        Some(size) => copied += size,
                        None => {
                            return Err(PatchError::CopyLimit(format!(
                                "operation {i} (copy from {:?}): the copies of the patch add more than {MAX_PATCH_COPY_BYTES} bytes",
                                o.from.as_str()
                            )));
                        }
                    }
                    o.path.count() + value_depth(source)
                } else {
                    0
                }
            }
            Op::Remove(_) | Op::Test(_) => 0,
        };
        if after > MAX_DEPTH {
            return Err(PatchError::TooDeep(format!(
                "operation {i} would nest the object deeper than {MAX_DEPTH} levels"
            )));
        }
        depth = depth.max(after);
        if let Op::Test(test) = op
            && tests_a_missing_member_as_null(doc, test)
        {
            continue;
        }
        json_patch::patch_unsafe(doc, std::slice::from_ref(op)).map_err(|e| {
            let message = format!("operation {i} at path {:?}: {}", e.path.as_str(), e.kind);
            match e.kind {
                json_patch::PatchErrorKind::TestFailed => PatchError::TestFailed(message),
                _ => PatchError::BadPath(message),
            }
        })?;
    }
    Ok(())
}

/// Whether `test` compares a member missing from an object with `null`,
/// which the API server's JSON patch passes (a missing member reads as
/// `null`; kube-runtime's finalizer helper relies on it to add the first
/// finalizer), where RFC 6902 would fail it.
fn tests_a_missing_member_as_null(doc: &Value, test: &json_patch::TestOperation) -> bool {
    let path = test.path.as_str();
    let Some((parent, _)) = path.rsplit_once('/') else {
        return false;
    };
    test.value.is_null()
        && doc.pointer(path).is_none()
        && doc.pointer(parent).is_some_and(Value::is_object)
}

/// The budget of the YAML parser for a request body of `len` bytes: a
/// document without aliases never needs more, and aliases ("billion laughs")
/// cannot expand it beyond the size of an object.
pub(crate) fn yaml_options(len: usize) -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_nodes: len.saturating_add(64),
            max_events: len.saturating_mul(2).saturating_add(128),
            max_total_scalar_bytes: OBJECT_LIMIT,
        },
    }
}

/// The annotation approving a CRD in a `*.k8s.io` or `*.kubernetes.io` group.
const API_APPROVED: &str = "api-approved.kubernetes.io";

/// Why a CRD may not claim its group: a group served built-in (its resources
/// would replace the built-in API), a group that is not a domain with a dot
/// (`validateCustomResourceDefinitionSpec`), or a protected `*.k8s.io` /
/// `*.kubernetes.io` group without the approval annotation (as the API server).
/// The message names the field, for [`ApiError::invalid`].
pub(crate) fn check_crd_group(crd: &Value, builtin_groups: &[&str]) -> Result<(), String> {
    let group = crd
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("");
    if group.is_empty() {
        return Err("spec.group: Required value: the core group \"\" is served built-in; pick a group of your own such as example.com".into());
    }
    if !crate::objects::is_dns_subdomain(group) {
        return Err(format!(
            "spec.group: Invalid value: {group:?}: {}",
            crate::names::DNS1123_SUBDOMAIN_RULE
        ));
    }
    if !group.contains('.') {
        return Err(format!(
            "spec.group: Invalid value: {group:?}: should be a domain with at least one dot"
        ));
    }
    if builtin_groups.contains(&group) {
        return Err(format!(
            "spec.group: Invalid value: {group:?}: the group is served built-in and cannot be defined by a CustomResourceDefinition; pick a group of your own such as example.com"
        ));
    }
    let protected = ["k8s.io", "kubernetes.io"]
        .iter()
        .any(|p| group == *p || group.ends_with(&format!(".{p}")));
    let approved = crd
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .and_then(|a| a.get(API_APPROVED))
        .and_then(Value::as_str)
        .is_some_and(|v| !v.is_empty());
    if protected && !approved {
        return Err(format!(
            "metadata.annotations[{API_APPROVED}]: Required value: protected groups must have approval annotation {API_APPROVED:?}, see https://github.com/kubernetes/enhancements/pull/1111"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> String {
        format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn text_depth_ignores_brackets_in_strings() {
        assert_eq!(text_depth(br#"{"a":"{{{[[[","b":[{}]}"#), 3);
        assert_eq!(text_depth(br#"{"a":"\"{"}"#), 1);
        assert_eq!(text_depth(b"1"), 0);
    }

    #[test]
    fn floats_decode_to_the_nearest_double_as_the_api_server_does() {
        for float in [-5.375090840357642e-192, 0.1 + 0.2, f64::MAX, 5e-324] {
            let text = serde_json::to_string(&float).unwrap();
            assert_eq!(
                decode_json(text.as_bytes()).unwrap(),
                json!(float),
                "{text}"
            );
        }
    }

    #[test]
    fn decodes_up_to_the_depth_limit_and_refuses_deeper() {
        let value = decode_json(nested(MAX_DEPTH).as_bytes()).unwrap();
        assert_eq!(value_depth(&value), MAX_DEPTH);
        assert!(matches!(
            decode_json(nested(MAX_DEPTH + 1).as_bytes()),
            Err(DecodeError::TooDeep)
        ));
        // Far deeper than any stack: refused before decoding.
        assert!(matches!(
            decode_json(nested(1_000_000).as_bytes()),
            Err(DecodeError::TooDeep)
        ));
        assert!(matches!(decode_json(b"{} x"), Err(DecodeError::Syntax(_))));
    }

    #[test]
    fn value_size_is_close_to_the_serialized_size_and_stops_at_the_budget() {
        let v = json!({"metadata": {"name": "a", "labels": {"x": "y"}}, "data": [1, -20, 3.5, null, true]});
        let real = serde_json::to_vec(&v).unwrap().len();
        let counted = value_size(&v, usize::MAX).unwrap();
        assert!(
            counted >= real && counted <= real + real / 2,
            "{counted} vs {real}"
        );
        assert_eq!(value_size(&v, 10), None);
    }

    fn ops(v: Value) -> Vec<json_patch::PatchOperation> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn doubling_copies_stop_at_the_copy_limit() {
        let mut doc = json!({"a": "x".repeat(1024)});
        let patch: Vec<Value> = (0..40)
            .map(|i| json!({"op": "copy", "from": "", "path": format!("/c{i}")}))
            .collect();
        let err = apply_json_patch(&mut doc, &ops(Value::Array(patch))).unwrap_err();
        assert!(matches!(err, PatchError::CopyLimit(_)), "{err}");
        assert!(value_size(&doc, usize::MAX).unwrap() <= 2 * MAX_PATCH_COPY_BYTES);
    }

    #[test]
    fn nesting_copies_stop_at_the_depth_limit() {
        let mut doc = json!({"a": {}});
        let patch: Vec<Value> = (0..2000)
            .map(|_| json!({"op": "copy", "from": "", "path": "/a/b"}))
            .collect();
        let err = apply_json_patch(&mut doc, &ops(Value::Array(patch))).unwrap_err();
        assert!(matches!(err, PatchError::TooDeep(_)), "{err}");
        assert!(value_depth(&doc) <= MAX_DEPTH);
    }

    #[test]
    fn ordinary_patches_apply_and_errors_name_the_operation() {
        let mut doc = json!({"a": 1});
        let patch = ops(json!([
            {"op": "add", "path": "/b", "value": {"c": [1]}},
            {"op": "copy", "from": "/b", "path": "/d"},
            {"op": "move", "from": "/a", "path": "/d/e"},
            {"op": "test", "path": "/d/e", "value": 1},
        ]));
        apply_json_patch(&mut doc, &patch).unwrap();
        assert_eq!(doc, json!({"b": {"c": [1]}, "d": {"c": [1], "e": 1}}));
        let err = apply_json_patch(
            &mut doc,
            &ops(json!([{"op": "remove", "path": "/b"}, {"op": "remove", "path": "/zz"}])),
        )
        .unwrap_err();
        assert!(err.to_string().contains("operation 1"), "{err}");
    }

    #[test]
    fn yaml_aliases_cannot_expand_past_the_object_limit() {
        let mut yaml = format!("a0: &a0 \"{}\"\n", "x".repeat(100_000));
        for i in 1..4 {
            let refs = vec![format!("*a{}", i - 1); 100].join(",");
            yaml.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        let parsed: Result<Value, _> =
            serde_saphyr::from_str_with_options(&yaml, yaml_options(yaml.len()));
        assert!(parsed.is_err());
        let ok: Value =
            serde_saphyr::from_str_with_options("a: &x [1, 2]\nb: *x\n", yaml_options(20)).unwrap();
        assert_eq!(ok["b"], json!([1, 2]));
    }

    #[test]
    fn crds_cannot_claim_built_in_or_protected_groups() {
        let builtin = ["", "apps", "apiextensions.k8s.io"];
        let crd = |group: &str, approved: bool| {
            let mut c = json!({"metadata": {}, "spec": {"group": group}});
            if approved {
                c["metadata"]["annotations"] = json!({API_APPROVED: "https://example.com/pr/1"});
            }
            c
        };
        assert!(check_crd_group(&crd("apps", true), &builtin).is_err());
        assert!(check_crd_group(&crd("", true), &builtin).is_err());
        assert!(check_crd_group(&crd("apiextensions.k8s.io", true), &builtin).is_err());
        let err = check_crd_group(&crd("example.k8s.io", false), &builtin).unwrap_err();
        assert!(err.contains(API_APPROVED), "{err}");
        assert!(check_crd_group(&crd("example.k8s.io", true), &builtin).is_ok());
        assert!(check_crd_group(&crd("example.com", false), &builtin).is_ok());
        assert!(check_crd_group(&crd("k8s.io.example.com", false), &builtin).is_ok());
    }
}
