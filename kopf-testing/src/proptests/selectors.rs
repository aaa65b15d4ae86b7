//! Selectors: parsing never panics, and matching agrees with a reference model.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::config;
use crate::selectors::{FieldSelector, LabelSelector};

/// Text made mostly of the characters selectors are written with.
fn selector_text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::collection::vec(
            proptest::sample::select(vec![
                "a", "b", "app", "in", "notin", " in ", " notin ", "(", ")", ",", "=", "==",
                "!=", "!", ">", "<", " ", "-", "1", "-5", "99999999999999999999", "example.com/",
                ".", "/", "é", "\t",
            ]),
            0..16,
        )
        .prop_map(|parts| parts.concat()),
        1 => any::<String>(),
    ]
}

/// One label requirement of the reference model.
#[derive(Debug, Clone)]
enum Req {
    Eq(&'static str, &'static str),
    NotEq(&'static str, &'static str),
    In(&'static str, Vec<&'static str>),
    NotIn(&'static str, Vec<&'static str>),
    Exists(&'static str),
    NotExists(&'static str),
    Gt(&'static str, i64),
    Lt(&'static str, i64),
}

const KEYS: &[&str] = &["a", "app", "example.com/tier", "x.y_z-1"];
const VALUES: &[&str] = &["", "web", "db", "1", "10", "9x", "v1.2"];

impl Req {
    /// Written as a client would, with some freedom in spacing and spelling.
    fn render(&self, spaced: bool) -> String {
        let sp = if spaced { " " } else { "" };
        match self {
            Req::Eq(k, v) if spaced => format!("{k} == {v}"),
            Req::Eq(k, v) => format!("{k}={v}"),
            Req::NotEq(k, v) => format!("{k}{sp}!={sp}{v}"),
            Req::In(k, vs) => format!("{k} in {sp}({})", vs.join(&format!(",{sp}"))),
            Req::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
            Req::Exists(k) => format!("{sp}{k}{sp}"),
            Req::NotExists(k) => format!("!{k}"),
            Req::Gt(k, n) => format!("{k}{sp}>{sp}{n}"),
            Req::Lt(k, n) => format!("{k}<{sp}{n}"),
        }
    }

    /// The model: what the requirement means for a set of labels.
    fn holds(&self, labels: &BTreeMap<&str, &str>) -> bool {
        let int = |k: &str| labels.get(k).and_then(|v| v.parse::<i64>().ok());
        match self {
            Req::Eq(k, v) => labels.get(k) == Some(v),
            Req::NotEq(k, v) => labels.get(k) != Some(v),
            Req::In(k, vs) => labels.get(k).is_some_and(|x| vs.contains(x)),
            Req::NotIn(k, vs) => labels.get(k).is_none_or(|x| !vs.contains(x)),
            Req::Exists(k) => labels.contains_key(k),
            Req::NotExists(k) => !labels.contains_key(k),
            Req::Gt(k, n) => int(k).is_some_and(|x| x > *n),
            Req::Lt(k, n) => int(k).is_some_and(|x| x < *n),
        }
    }
}

fn label_key() -> impl Strategy<Value = &'static str> {
    proptest::sample::select(KEYS)
}

fn label_value() -> impl Strategy<Value = &'static str> {
    proptest::sample::select(VALUES)
}

fn req() -> impl Strategy<Value = Req> {
    let values = || proptest::collection::vec(proptest::sample::select(VALUES), 1..4);
    prop_oneof![
        (label_key(), label_value()).prop_map(|(k, v)| Req::Eq(k, v)),
        (label_key(), label_value()).prop_map(|(k, v)| Req::NotEq(k, v)),
        (label_key(), values()).prop_map(|(k, vs)| Req::In(k, vs)),
        (label_key(), values()).prop_map(|(k, vs)| Req::NotIn(k, vs)),
        label_key().prop_map(Req::Exists),
        label_key().prop_map(Req::NotExists),
        (label_key(), -20i64..20).prop_map(|(k, n)| Req::Gt(k, n)),
        (label_key(), -20i64..20).prop_map(|(k, n)| Req::Lt(k, n)),
    ]
}

fn labels() -> impl Strategy<Value = BTreeMap<&'static str, &'static str>> {
    proptest::collection::btree_map(label_key(), label_value(), 0..4)
}

const FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "status.phase",
];
const FIELD_VALUES: &[&str] = &["", "a", "default", "node-1", "Running"];

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn parsing_arbitrary_selectors_never_panics(text in selector_text(), labels in labels()) {
        let obj = json!({"metadata": {"labels": labels, "name": "n"}});
        if let Ok(selector) = LabelSelector::parse(&text) {
            selector.matches(&obj);
            selector.matches(&json!({"metadata": {"labels": "not a map"}}));
        }
        if let Ok(selector) = FieldSelector::parse(&text) {
            selector.matches(&obj);
            let _ = selector.check_fields(&["metadata.name".to_string()]);
        }
    }

    #[test]
    fn label_matching_agrees_with_the_model(
        reqs in proptest::collection::vec((req(), any::<bool>()), 0..5),
        labels in labels(),
    ) {
        let text = reqs
            .iter()
            .map(|(req, spaced)| req.render(*spaced))
            .collect::<Vec<_>>()
            .join(",");
        let selector = LabelSelector::parse(&text)
            .map_err(|e| TestCaseError::fail(format!("{text:?} does not parse: {e}")))?;
        let expected = reqs.iter().all(|(req, _)| req.holds(&labels));
        let obj = json!({"metadata": {"labels": labels}});
        prop_assert_eq!(selector.matches(&obj), expected, "{:?} on {:?}", text, labels);
    }

    #[test]
    fn field_matching_agrees_with_the_model(
        reqs in proptest::collection::vec(
            (proptest::sample::select(FIELDS), any::<bool>(), proptest::sample::select(FIELD_VALUES), 0..3usize),
            0..4,
        ),
        fields in proptest::collection::btree_map(
            proptest::sample::select(FIELDS),
            proptest::sample::select(FIELD_VALUES),
            0..4,
        ),
    ) {
        let ops = ["=", "==", "!="];
        let text = reqs
            .iter()
            .map(|(path, equal, value, spelling)| {
                let op = if *equal { ops[spelling % 2] } else { ops[2] };
                format!("{path}{op}{value}")
            })
            .collect::<Vec<_>>()
            .join(",");
        let selector = FieldSelector::parse(&text)
            .map_err(|e| TestCaseError::fail(format!("{text:?} does not parse: {e}")))?;
        let mut obj = json!({});
        for (path, value) in &fields {
            let (outer, inner) = path.split_once('.').expect("dotted");
            obj[outer][inner] = Value::from(*value);
        }
        // The model: a missing field reads as the empty string.
        let expected = reqs.iter().all(|(path, equal, value, _)| {
            (fields.get(path).copied().unwrap_or("") == *value) == *equal
        });
        prop_assert_eq!(selector.matches(&obj), expected, "{:?} on {}", text, obj);
    }
}
