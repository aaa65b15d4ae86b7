//! Request bodies and YAML preloads: arbitrary bytes never panic, and YAML
//! aliases never expand a body beyond the object limit.

use proptest::prelude::*;
use serde_json::Value;

use super::{config, json};
use crate::{handlers, limits, objects, preload};

/// Text that looks like YAML: keys, anchors, aliases, flow collections, tags.
fn yaml_text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        proptest::sample::select(vec![
            "a: ",
            "b: ",
            "- ",
            "&x ",
            "*x",
            "&y ",
            "*y",
            "[",
            "]",
            "{",
            "}",
            ", ",
            "\n",
            "\n  ",
            "---\n",
            "...\n",
            "!!str ",
            "!!binary ",
            "<<: ",
            "? ",
            "'q'",
            "\"d\\u0041\"",
            "|\n  text\n",
            "1",
            "-.inf",
            "0x1F",
            "~",
            "null",
            "true",
            "kind: List\n",
            "items: ",
            "apiVersion: v1\n",
            "# c\n",
            "%YAML 1.2\n",
            "\t",
            ":",
        ]),
        0..48,
    )
    .prop_map(|parts| parts.concat())
}

/// A "billion laughs": each level an alias list of the previous one.
fn laughs(levels: usize, width: usize) -> String {
    let mut yaml = String::from("l0: &l0 \"lol lol lol lol lol lol lol lol\"\n");
    for level in 1..=levels {
        let items = vec![format!("*l{}", level - 1); width].join(", ");
        yaml.push_str(&format!("l{level}: &l{level} [{items}]\n"));
    }
    yaml
}

const YAML: Option<&str> = Some("application/yaml");

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn arbitrary_bytes_as_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        for content_type in [None, YAML, Some("application/vnd.kubernetes.protobuf"), Some("text/plain")] {
            let _ = handlers::parse_object(content_type, &body);
        }
        let _ = limits::decode_json(&body);
        if let Ok(text) = std::str::from_utf8(&body) {
            let _ = preload::parse(text);
        }
    }

    #[test]
    fn arbitrary_yaml_never_panics(text in yaml_text()) {
        let _ = handlers::parse_object(YAML, text.as_bytes());
        let _ = preload::parse(&text);
    }

    #[test]
    fn json_bodies_decode_as_serde_json_does(value in json()) {
        let text = serde_json::to_vec(&value).expect("serializes");
        let decoded = limits::decode_json(&text).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        prop_assert_eq!(&decoded, &value);
        prop_assert_eq!(limits::text_depth(&text), limits::value_depth(&value));
        if value.is_object() {
            prop_assert_eq!(handlers::parse_object(None, &text).ok(), Some(value));
        }
    }

    #[test]
    fn string_data_folds_without_panicking(value in json(), data in json()) {
        let mut obj = value;
        if let Value::Object(map) = &mut obj {
            map.insert("stringData".into(), data);
        }
        objects::fold_string_data(&mut obj);
    }
}

proptest! {
    #![proptest_config(config(16))]

    #[test]
    fn yaml_aliases_never_expand_a_body_beyond_the_object_limit(
        levels in 1usize..12,
        width in 2usize..12,
    ) {
        let yaml = laughs(levels, width);
        match handlers::parse_object(YAML, yaml.as_bytes()) {
            Ok(value) => {
                let size = limits::value_size(&value, limits::OBJECT_LIMIT);
                prop_assert!(size.is_some(), "{} levels of {}", levels, width);
            }
            Err(e) => prop_assert!(matches!(e.code, 400 | 413), "{:?}", e),
        }
    }

}

proptest! {
    // Preloads may expand to 64 MiB (the file is the test author's own), and
    // parsing up to that budget takes a second in a debug build.
    #![proptest_config(config(6))]

    #[test]
    fn yaml_aliases_never_expand_a_preload_without_bound(
        levels in 1usize..12,
        width in 2usize..12,
    ) {
        let yaml = laughs(levels, width);
        if let Ok(objects) = preload::parse(&yaml) {
            let total: usize = objects
                .iter()
                .map(|o| limits::value_size(o, usize::MAX).unwrap_or(usize::MAX))
                .sum();
            // The budget grows with the file: a small file stays small.
            prop_assert!(total <= 2 * yaml.len() + 64 * 1024 * 1024, "{} bytes", total);
        }
    }
}
