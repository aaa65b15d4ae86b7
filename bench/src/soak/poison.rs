//! Poisoned objects among the churn: objects the operator must skip or
//! must not trust, which must never hold back the others.
//!
//! - [`Poison::Deep`]: created nested past the soak operator's
//!   `settings.watching.max_depth` ([`MAX_DEPTH`]), under a top-level
//!   field the emulator keeps as it is ([`FIELD`]). The operator never
//!   decodes it: no handler runs and no task starts for it, and it never
//!   gets the finalizer, so that its deletion goes through at once.
//! - [`Poison::Garbled`]: created with malformed Kopf annotations (its
//!   diff-base and progress records): they are ignored, and the object is
//!   handled as a fresh one.
//! - Deepened: an object served as usual, made too deep by a change and
//!   later made decodable again ([`deep`], then `null` for [`FIELD`]).
//!   Meanwhile no handler sees that state; its timers and daemons go on
//!   with the last state that decoded, and its deletion stops them.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::invariants::{DIFF_BASE, diff_base};

/// The soak operator's `settings.watching.max_depth`: low enough that an
/// object nested past it stays within what the emulator stores (512
/// levels) and what the runner's own client decodes (serde_json's 128).
pub const MAX_DEPTH: usize = 64;

/// The top-level field that holds a poisoned object's nesting (a
/// ConfigMap's `data` is flat; the emulator keeps unknown fields).
pub const FIELD: &str = "poison";

/// Levels of objects in [`FIELD`]: the object nests one more.
pub const LEVELS: usize = 96;

// Past the operator's limit; in a list of the runner's client (the list,
// its items, the object) within serde_json's.
const _: () = assert!(LEVELS + 1 > MAX_DEPTH && LEVELS + 3 < 128);

/// How an object is poisoned at its creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poison {
    /// Nested past [`MAX_DEPTH`]: never decoded.
    Deep,
    /// With malformed Kopf annotations: handled as a fresh object.
    Garbled,
}

/// A value nesting [`LEVELS`] objects.
pub fn deep() -> Value {
    (0..LEVELS).fold(json!("x"), |inner, _| json!({ "a": inner }))
}

/// Malformed diff-base and progress annotations (the handlers' ids are
/// `create`, `update` and `field`), chosen by `rng`.
pub fn garbage(rng: &mut fastrand::Rng) -> BTreeMap<String, String> {
    const DIFF_BASES: [&str; 4] = ["{not json", "garbage", "[]", "42"];
    const PROGRESS: [&str; 3] = [
        "{not json",
        "[1, 2]",
        r#"{"retries":"many","success":"yes"}"#,
    ];
    let mut annotations = BTreeMap::new();
    annotations.insert(
        DIFF_BASE.to_string(),
        DIFF_BASES[rng.usize(..DIFF_BASES.len())].to_string(),
    );
    for id in ["create", "update", "field"] {
        if rng.bool() {
            annotations.insert(
                format!("kopf.zalando.org/{id}"),
                PROGRESS[rng.usize(..PROGRESS.len())].to_string(),
            );
        }
    }
    annotations
}

/// Whether a body holds the poisoned nesting: a handler that gets one
/// was given an object it should not have decoded.
pub fn in_body(body: &Value) -> bool {
    body.get(FIELD).is_some_and(|v| !v.is_null())
}

/// Whether a body's diff-base annotation is there but malformed.
pub fn garbled(body: &Value) -> bool {
    body["metadata"]["annotations"][DIFF_BASE]
        .as_str()
        .is_some_and(|text| diff_base(text).is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_object_nests_one_level_more_than_its_field() {
        let object = json!({"metadata": {"name": "a"}, FIELD: deep()});
        let (mut depth, mut deepest) = (0, 0);
        for b in object.to_string().bytes() {
            match b {
                b'{' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                b'}' => depth -= 1,
                _ => {}
            }
        }
        assert_eq!(deepest, LEVELS + 1);
        assert!(in_body(&object));
        assert!(!in_body(&json!({FIELD: null})));
    }

    #[test]
    fn garbage_is_never_a_diff_base_nor_a_success() {
        let mut rng = fastrand::Rng::with_seed(1);
        for _ in 0..50 {
            let annotations = garbage(&mut rng);
            let body = json!({"metadata": {"annotations": annotations}});
            assert!(garbled(&body), "{body}");
            for (key, text) in &annotations {
                let parsed = serde_json::from_str::<Value>(text).ok();
                assert!(
                    !parsed.as_ref().is_some_and(|v| v["success"] == true),
                    "{key}: {text}"
                );
            }
        }
        assert!(!garbled(
            &json!({"metadata": {"annotations": {DIFF_BASE: "{\"data\":{}}"}}})
        ));
        assert!(!garbled(&json!({"metadata": {}})));
    }
}
