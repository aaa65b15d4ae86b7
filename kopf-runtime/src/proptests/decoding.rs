//! Body decoding: the same values as serde_json, at any depth up to the limit.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::{config, json};
use crate::watching::decoding;

/// `value` wrapped in `levels` arrays or objects, chosen by `shape`.
fn wrapped(value: Value, levels: usize, shape: u64) -> Value {
    (0..levels).fold(value, |inner, level| {
        if shape >> (level % 64) & 1 == 0 {
            json!([inner])
        } else {
            json!({"k": inner})
        }
    })
}

/// The true nesting depth, without recursion.
fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0)];
    while let Some((value, level)) = stack.pop() {
        let children: Vec<&Value> = match value {
            Value::Array(items) => items.iter().collect(),
            Value::Object(map) => map.values().collect(),
            _ => continue,
        };
        deepest = deepest.max(level + 1);
        stack.extend(children.into_iter().map(|child| (child, level + 1)));
    }
    deepest
}

/// Decodes as serde_json does with no recursion limit (on a growing stack).
fn reference(text: &str) -> Result<Value, serde_json::Error> {
    let mut json = serde_json::Deserializer::from_str(text);
    json.disable_recursion_limit();
    let value = serde::Deserialize::deserialize(serde_stacker::Deserializer::new(&mut json))?;
    json.end()?;
    Ok(value)
}

/// Drops a deep value without recursing on the test thread's stack.
fn drop_flat(value: Value) {
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,64}", junk in "[\\[\\]{}\",:0-9a-z\\\\ ]{0,64}") {
        for text in [&text, &junk] {
            let _ = decoding::body(text, 1000);
            let _ = decoding::from_str::<Value>(text, 3);
            let _ = decoding::identity(text);
            let _ = decoding::nesting(text);
        }
    }

    #[test]
    fn shallow_values_decode_as_serde_json_does(value in json(), pretty in any::<bool>()) {
        let text = if pretty {
            serde_json::to_string_pretty(&value)
        } else {
            serde_json::to_string(&value)
        }
        .expect("serializes");
        let decoded = decoding::from_str::<Value>(&text, 1000);
        prop_assert_eq!(decoded.ok(), serde_json::from_str::<Value>(&text).ok());
        prop_assert_eq!(decoding::nesting(&text), depth(&value));
        let body = json!({"metadata": {"name": "n"}, "data": value});
        let text = serde_json::to_string(&body).expect("serializes");
        prop_assert_eq!(decoding::body(&text, 1000).ok(), Some(body));
    }

}

proptest! {
    // Each case decodes up to 400 levels on a stack grown on the heap.
    #![proptest_config(config(64))]

    #[test]
    fn deep_values_decode_up_to_the_limit_and_no_further(
        value in json(),
        levels in 0usize..400,
        shape in any::<u64>(),
        max_depth in 1usize..400,
    ) {
        let value = wrapped(value, levels, shape);
        let text = format!(r#"{{"deep":{}}}"#, serde_json::to_string(&value).expect("serializes"));
        let true_depth = depth(&value) + 1;
        prop_assert_eq!(decoding::nesting(&text), true_depth);
        let decoded = decoding::body(&text, max_depth);
        if true_depth <= max_depth {
            let decoded = decoded.map_err(|e| TestCaseError::fail(e.as_str().to_owned()))?;
            let expected = reference(&text).expect("decodes");
            // Compared as text: comparing the values would recurse.
            let same = serde_json::to_string(&decoded).ok() == serde_json::to_string(&expected).ok();
            drop_flat(decoded);
            drop_flat(expected);
            prop_assert!(same);
        } else {
            prop_assert!(decoded.is_err(), "{} levels decoded under a limit of {}", true_depth, max_depth);
        }
        drop_flat(value);
    }
}
