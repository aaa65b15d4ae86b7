//! Merge patch (RFC 7386) and JSON patch (RFC 6902): arbitrary documents and
//! patches never panic, and the RFCs' round trips hold.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::{config, json, key, object};
use crate::limits;
use crate::patching::{self, PatchKind};

/// The merge patch that turns `from` into `to` (RFC 7386 section 3, in
/// reverse): changed keys are set, removed ones nulled, objects recursed.
/// Only defined where `to` has no nulls inside objects, which a merge patch
/// cannot produce.
fn merge_diff(from: &Value, to: &Value) -> Value {
    match (from, to) {
        (Value::Object(from), Value::Object(to)) => {
            let mut patch = Map::new();
            for (k, old) in from {
                match to.get(k) {
                    None => {
                        patch.insert(k.clone(), Value::Null);
                    }
                    Some(new) if new != old => {
                        patch.insert(k.clone(), merge_diff(old, new));
                    }
                    Some(_) => {}
                }
            }
            for (k, new) in to {
                if !from.contains_key(k) {
                    patch.insert(k.clone(), merge_diff(&Value::Null, new));
                }
            }
            Value::Object(patch)
        }
        // A new object is set field by field, so that it merges into nothing.
        (_, Value::Object(_)) => merge_diff(&json!({}), to),
        (_, to) => to.clone(),
    }
}

/// `value` without the nulls inside objects (which a merge patch removes).
fn without_null_members(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_null_members(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_null_members).collect()),
        other => other.clone(),
    }
}

/// A JSON pointer to an existing member or item of `doc`, chosen by `picks`.
fn pointer_into(doc: &Value, picks: &[usize]) -> String {
    let mut pointer = String::new();
    let mut current = doc;
    for pick in picks {
        let (token, next) = match current {
            Value::Object(map) if !map.is_empty() => {
                let (k, v) = map.iter().nth(pick % map.len()).expect("in range");
                (k.replace('~', "~0").replace('/', "~1"), v)
            }
            Value::Array(items) if !items.is_empty() => {
                let i = pick % items.len();
                (i.to_string(), &items[i])
            }
            _ => break,
        };
        pointer.push('/');
        pointer.push_str(&token);
        current = next;
    }
    pointer
}

fn patch_op() -> impl Strategy<Value = Value> {
    let path = proptest::collection::vec(
        prop_oneof![key(), Just("-".to_string()), "[0-9]{1,3}"],
        0..4,
    )
    .prop_map(|tokens| tokens.iter().map(|t| format!("/{t}")).collect::<String>());
    (
        proptest::sample::select(vec![
            "add", "remove", "replace", "move", "copy", "test", "bogus",
        ]),
        path.clone(),
        path,
        json(),
    )
        .prop_map(
            |(op, path, from, value)| json!({"op": op, "path": path, "from": from, "value": value}),
        )
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn arbitrary_patches_never_panic(
        doc in json(),
        merge in json(),
        ops in proptest::collection::vec(patch_op(), 0..6),
        garbage in json(),
    ) {
        for kind in [PatchKind::Merge, PatchKind::Apply, PatchKind::Strategic, PatchKind::Json] {
            let _ = patching::apply(kind, &doc, &merge);
            let _ = patching::apply(kind, &doc, &Value::Array(ops.clone()));
            let _ = patching::apply(kind, &doc, &garbage);
        }
    }

    #[test]
    fn arbitrary_patch_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..256)) {
        for kind in [PatchKind::Merge, PatchKind::Apply, PatchKind::Strategic, PatchKind::Json] {
            let _ = patching::parse_body(kind, &body);
        }
    }

    #[test]
    fn a_merge_patch_computed_as_a_diff_reproduces_the_target(from in object(), to in object()) {
        let to = without_null_members(&to);
        let patch = merge_diff(&from, &to);
        let merged = patching::apply(PatchKind::Merge, &from, &patch)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(merged, to, "patch {}", patch);
    }

    #[test]
    fn merge_patches_are_idempotent(doc in object(), patch in object()) {
        let once = patching::apply(PatchKind::Merge, &doc, &patch)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let twice = patching::apply(PatchKind::Merge, &once, &patch)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(once, twice);
    }

    #[test]
    fn json_patch_add_then_test_then_remove_round_trips(
        doc in object(),
        picks in proptest::collection::vec(any::<usize>(), 0..4),
        name in key(),
        value in json(),
    ) {
        // Add a new member under an existing object, found by `picks`.
        let mut parent = pointer_into(&doc, &picks);
        while !doc.pointer(&parent).is_some_and(Value::is_object) {
            parent.truncate(parent.rfind('/').unwrap_or(0));
        }
        let target = doc.pointer(&parent).and_then(Value::as_object).expect("an object");
        prop_assume!(!target.contains_key(&name));
        let path = format!("{parent}/{}", name.replace('~', "~0").replace('/', "~1"));
        let ops = json!([
            {"op": "add", "path": path, "value": value},
            {"op": "test", "path": path, "value": value},
        ]);
        let added = patching::apply(PatchKind::Json, &doc, &ops)
            .map_err(|e| TestCaseError::fail(format!("{ops}: {e}")))?;
        prop_assert_eq!(added.pointer(&path), Some(&value));
        let remove = json!([{"op": "remove", "path": path}]);
        let removed = patching::apply(PatchKind::Json, &added, &remove)
            .map_err(|e| TestCaseError::fail(format!("{remove}: {e}")))?;
        prop_assert_eq!(removed, doc);
    }

    #[test]
    fn json_patch_test_of_an_existing_value_passes_and_others_fail(
        doc in object(),
        picks in proptest::collection::vec(any::<usize>(), 0..4),
        other in json(),
    ) {
        let path = pointer_into(&doc, &picks);
        let present = doc.pointer(&path).expect("points into doc").clone();
        let same = json!([{"op": "test", "path": path, "value": present}]);
        prop_assert_eq!(patching::apply(PatchKind::Json, &doc, &same).ok(), Some(doc.clone()));
        prop_assume!(other != present);
        let differs = json!([{"op": "test", "path": path, "value": other}]);
        let result = patching::apply(PatchKind::Json, &doc, &differs);
        prop_assert!(matches!(result, Err(patching::PatchError::TestFailed(_))), "{:?}", result);
    }

    #[test]
    fn json_patch_remove_then_add_back_round_trips(
        doc in object(),
        picks in proptest::collection::vec(any::<usize>(), 1..4),
    ) {
        let path = pointer_into(&doc, &picks);
        prop_assume!(!path.is_empty());
        let value = doc.pointer(&path).expect("points into doc").clone();
        let ops = json!([
            {"op": "remove", "path": path},
            {"op": "add", "path": path, "value": value},
        ]);
        let patched = patching::apply(PatchKind::Json, &doc, &ops)
            .map_err(|e| TestCaseError::fail(format!("{ops}: {e}")))?;
        prop_assert_eq!(patched, doc);
    }

    #[test]
    fn json_patches_never_nest_deeper_than_the_limit(
        depth in 1usize..300,
        ops in proptest::collection::vec(
            (proptest::sample::select(vec!["copy", "move"]), 0usize..300, 0usize..300),
            0..12,
        ),
    ) {
        // A chain of objects, copied and moved into itself.
        let mut doc = json!({});
        for _ in 0..depth {
            doc = json!({"a": doc});
        }
        let prefix = |n: usize| "/a".repeat(n.min(depth));
        let ops: Vec<Value> = ops
            .into_iter()
            .map(|(op, from, to)| json!({"op": op, "from": prefix(from), "path": format!("{}/b", prefix(to))}))
            .collect();
        match patching::apply(PatchKind::Json, &doc, &Value::Array(ops)) {
            Ok(patched) => prop_assert!(limits::value_depth(&patched) <= limits::MAX_DEPTH),
            Err(e) => prop_assert!(e.is_invalid(), "{:?}", e),
        }
    }
}
