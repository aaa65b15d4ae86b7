//! Property tests of what the runtime makes of the API server's JSON and of
//! its own bookkeeping: body decoding, essences and diffs, and the progress
//! and diff-base annotations read back as they were stored. Each runs a
//! bounded number of cases, so they belong to plain `cargo test`.

use proptest::prelude::*;
use serde_json::{Map, Number, Value};

mod decoding;
mod diffbase;
mod progress;

/// A bounded run that writes no regression files into the source tree.
pub(crate) fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Object keys from a small pool, so that generated values share keys.
pub(crate) fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(vec!["a", "b", "c", "spec", "x.y", "x/y", "", "0"])
            .prop_map(String::from),
        1 => ".{0,6}",
    ]
}

pub(crate) fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter_map("finite", Number::from_f64)
            .prop_map(Value::Number),
        ".{0,8}".prop_map(Value::String),
    ]
}

/// Arbitrary JSON values, a few levels deep.
pub(crate) fn json() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((key(), inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Arbitrary JSON objects.
pub(crate) fn object() -> impl Strategy<Value = Value> {
    proptest::collection::vec((key(), json()), 0..6)
        .prop_map(|entries| Value::Object(entries.into_iter().collect()))
}

/// A JSON merge patch applied to a body (RFC 7386), as the API server does.
pub(crate) fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let map = target.as_object_mut().expect("made an object");
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            merge(map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}
