//! Filters that decide whether a handler applies to an object or a change.
//!
//! As in Kopf: `labels` and `annotations` match metadata by value,
//! [`PRESENT`]/[`ABSENT`], or a callback; `when` is a callback on the kwargs;
//! `field` scopes a handler to one field, whose value may be matched by
//! `value` (or, for change handlers, by `old`/`new`).

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::kwargs::{Kwargs, resolve};

/// `PRESENT` or `ABSENT`: match on existence rather than on a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Marker {
    /// The label, annotation or field exists (any value).
    Present,
    /// The label, annotation or field does not exist.
    Absent,
}

/// Matches when the label, annotation or field exists, whatever its value.
pub const PRESENT: Marker = Marker::Present;
/// Matches when the label, annotation or field does not exist.
pub const ABSENT: Marker = Marker::Absent;

/// A callback deciding on a label or annotation value (`None` when absent).
pub type MetaCallback = Arc<dyn Fn(Option<&str>, &Kwargs) -> bool + Send + Sync>;
/// A callback deciding on a field value (`None` when absent).
pub type ValueCallback = Arc<dyn Fn(Option<&Value>, &Kwargs) -> bool + Send + Sync>;
/// A `when` callback deciding on the whole invocation.
pub type WhenCallback = Arc<dyn Fn(&Kwargs) -> bool + Send + Sync>;

/// The condition on one label or annotation.
#[derive(Clone)]
pub enum MetaValue {
    /// Equal to this string.
    Equals(String),
    /// Exists.
    Present,
    /// Does not exist.
    Absent,
    /// Decided by a callback.
    Callback(MetaCallback),
}

impl MetaValue {
    /// Whether `value` (`None` when absent) satisfies the condition.
    pub fn matches(&self, value: Option<&str>, kwargs: &Kwargs) -> bool {
        match self {
            MetaValue::Equals(expected) => value == Some(expected.as_str()),
            MetaValue::Present => value.is_some(),
            MetaValue::Absent => value.is_none(),
            MetaValue::Callback(callback) => callback(value, kwargs),
        }
    }
}

impl fmt::Debug for MetaValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaValue::Equals(v) => f.debug_tuple("Equals").field(v).finish(),
            MetaValue::Present => f.write_str("Present"),
            MetaValue::Absent => f.write_str("Absent"),
            MetaValue::Callback(_) => f.write_str("Callback(..)"),
        }
    }
}

impl PartialEq for MetaValue {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (MetaValue::Equals(a), MetaValue::Equals(b)) => a == b,
            (MetaValue::Present, MetaValue::Present) | (MetaValue::Absent, MetaValue::Absent) => {
                true
            }
            (MetaValue::Callback(a), MetaValue::Callback(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl From<&str> for MetaValue {
    fn from(value: &str) -> Self {
        MetaValue::Equals(value.to_owned())
    }
}

impl From<String> for MetaValue {
    fn from(value: String) -> Self {
        MetaValue::Equals(value)
    }
}

impl From<Marker> for MetaValue {
    fn from(marker: Marker) -> Self {
        match marker {
            Marker::Present => MetaValue::Present,
            Marker::Absent => MetaValue::Absent,
        }
    }
}

/// Conditions on `metadata.labels` or `metadata.annotations`; all must match.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetaFilter {
    /// Key and condition pairs.
    pub entries: Vec<(String, MetaValue)>,
}

impl MetaFilter {
    /// Whether the metadata map (`labels` or `annotations` as JSON) satisfies every entry.
    pub fn matches(&self, map: &Value, kwargs: &Kwargs) -> bool {
        self.entries.iter().all(|(key, condition)| {
            condition.matches(map.get(key.as_str()).and_then(Value::as_str), kwargs)
        })
    }

    /// Whether there are no conditions.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<K: Into<String>, V: Into<MetaValue>> FromIterator<(K, V)> for MetaFilter {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        MetaFilter {
            entries: iter
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }
}

/// The condition on a field value (`value`, `old`, `new`).
#[derive(Clone)]
pub enum ValueFilter {
    /// Equal to this JSON value.
    Equals(Value),
    /// Exists (and is not `null`).
    Present,
    /// Does not exist (or is `null`).
    Absent,
    /// Decided by a callback.
    Callback(ValueCallback),
}

impl ValueFilter {
    /// Whether `value` (`None` when absent) satisfies the condition.
    pub fn matches(&self, value: Option<&Value>, kwargs: &Kwargs) -> bool {
        let value = value.filter(|v| !v.is_null());
        match self {
            ValueFilter::Equals(expected) => value == Some(expected),
            ValueFilter::Present => value.is_some(),
            ValueFilter::Absent => value.is_none(),
            ValueFilter::Callback(callback) => callback(value, kwargs),
        }
    }
}

impl fmt::Debug for ValueFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueFilter::Equals(v) => f.debug_tuple("Equals").field(v).finish(),
            ValueFilter::Present => f.write_str("Present"),
            ValueFilter::Absent => f.write_str("Absent"),
            ValueFilter::Callback(_) => f.write_str("Callback(..)"),
        }
    }
}

impl PartialEq for ValueFilter {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (ValueFilter::Equals(a), ValueFilter::Equals(b)) => a == b,
            (ValueFilter::Present, ValueFilter::Present)
            | (ValueFilter::Absent, ValueFilter::Absent) => true,
            (ValueFilter::Callback(a), ValueFilter::Callback(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl From<Marker> for ValueFilter {
    fn from(marker: Marker) -> Self {
        match marker {
            Marker::Present => ValueFilter::Present,
            Marker::Absent => ValueFilter::Absent,
        }
    }
}

impl From<Value> for ValueFilter {
    fn from(value: Value) -> Self {
        ValueFilter::Equals(value)
    }
}

/// A dot-separated field path, e.g. `spec.size`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldPath(String);

impl FieldPath {
    /// Parses a dot-separated path; `None` if empty or with empty segments.
    pub fn parse(path: &str) -> Option<Self> {
        if path.is_empty() || path.split('.').any(str::is_empty) {
            None
        } else {
            Some(FieldPath(path.to_owned()))
        }
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path's segments.
    pub fn parts(&self) -> Vec<&str> {
        self.0.split('.').collect()
    }

    /// The value at this path in `body`.
    pub fn resolve<'v>(&self, body: &'v Value) -> Option<&'v Value> {
        resolve(body, &self.parts())
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// All filters of a handler.
#[derive(Clone, Default)]
pub struct Filters {
    /// Conditions on labels.
    pub labels: MetaFilter,
    /// Conditions on annotations.
    pub annotations: MetaFilter,
    /// An arbitrary callback.
    pub when: Option<WhenCallback>,
    /// The field the handler is scoped to.
    pub field: Option<FieldPath>,
    /// The condition on the field's current value.
    pub value: Option<ValueFilter>,
    /// The condition on the field's old value (change handlers).
    pub old: Option<ValueFilter>,
    /// The condition on the field's new value (change handlers).
    pub new: Option<ValueFilter>,
}

impl fmt::Debug for Filters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Filters")
            .field("labels", &self.labels)
            .field("annotations", &self.annotations)
            .field("when", &self.when.as_ref().map(|_| ".."))
            .field("field", &self.field)
            .field("value", &self.value)
            .field("old", &self.old)
            .field("new", &self.new)
            .finish()
    }
}

impl Filters {
    /// Whether there is nothing to check: every object passes, and no
    /// callback will see the kwargs.
    pub fn is_empty(&self) -> bool {
        self.labels.entries.is_empty()
            && self.annotations.entries.is_empty()
            && self.when.is_none()
            && self.value.is_none()
            && self.old.is_none()
            && self.new.is_none()
    }

    /// Whether the object in `kwargs.body` passes `labels`, `annotations`, `value` and `when`.
    ///
    /// `old`/`new` are checked separately by [`matches_change`](Filters::matches_change).
    pub fn matches_object(&self, kwargs: &Kwargs) -> bool {
        self.labels.matches(kwargs.labels(), kwargs)
            && self.annotations.matches(kwargs.annotations(), kwargs)
            && match (&self.field, &self.value) {
                (Some(field), Some(value)) => value.matches(field.resolve(&kwargs.body), kwargs),
                _ => true,
            }
            && self.when.as_ref().is_none_or(|when| when(kwargs))
    }

    /// Whether a change of the field's value passes `old`/`new` (values as in `kwargs.old/new`).
    pub fn matches_change(
        &self,
        old: Option<&Value>,
        new: Option<&Value>,
        kwargs: &Kwargs,
    ) -> bool {
        self.old
            .as_ref()
            .is_none_or(|filter| filter.matches(old, kwargs))
            && self
                .new
                .as_ref()
                .is_none_or(|filter| filter.matches(new, kwargs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kwargs() -> Kwargs {
        Kwargs::new(
            json!({"metadata": {"labels": {"app": "x"}, "annotations": {"t": "1"}}, "spec": {"size": 3}}),
        )
    }

    #[test]
    fn meta_filters_match_values_presence_absence_and_callbacks() {
        let kw = kwargs();
        let filter: MetaFilter = [("app", MetaValue::from("x")), ("gone", ABSENT.into())]
            .into_iter()
            .collect();
        assert!(filter.matches(kw.labels(), &kw));
        let filter: MetaFilter = [
            ("app", MetaValue::from(PRESENT)),
            ("app", MetaValue::from("y")),
        ]
        .into_iter()
        .collect();
        assert!(!filter.matches(kw.labels(), &kw));
        let callback = MetaValue::Callback(Arc::new(|v, _| v == Some("1")));
        assert!(
            MetaFilter {
                entries: vec![("t".into(), callback)]
            }
            .matches(kw.annotations(), &kw)
        );
    }

    #[test]
    fn field_value_and_when_filters_apply_to_the_object() {
        let kw = kwargs();
        let filters = Filters {
            field: FieldPath::parse("spec.size"),
            value: Some(json!(3).into()),
            when: Some(Arc::new(|kw| kw.label("app") == Some("x"))),
            ..Filters::default()
        };
        assert!(filters.matches_object(&kw));
        let filters = Filters {
            value: Some(ABSENT.into()),
            ..filters
        };
        assert!(!filters.matches_object(&kw));
    }

    #[test]
    fn filters_are_empty_only_without_any_condition() {
        assert!(Filters::default().is_empty());
        let scoped = Filters {
            field: FieldPath::parse("spec.size"),
            ..Filters::default()
        };
        assert!(
            scoped.is_empty(),
            "a field alone is a scope, not a condition"
        );
        let labelled = Filters {
            labels: MetaFilter {
                entries: vec![("app".into(), PRESENT.into())],
            },
            ..Filters::default()
        };
        assert!(!labelled.is_empty());
        let when = Filters {
            when: Some(Arc::new(|_| true)),
            ..Filters::default()
        };
        assert!(!when.is_empty());
    }

    #[test]
    fn old_and_new_filters_apply_to_changes() {
        let kw = kwargs();
        let filters = Filters {
            old: Some(ABSENT.into()),
            new: Some(PRESENT.into()),
            ..Filters::default()
        };
        assert!(filters.matches_change(None, Some(&json!(1)), &kw));
        assert!(!filters.matches_change(Some(&json!(1)), Some(&json!(2)), &kw));
    }

    #[test]
    fn field_paths_reject_empty_segments() {
        assert!(FieldPath::parse("spec..x").is_none());
        assert!(FieldPath::parse("").is_none());
        assert_eq!(FieldPath::parse("spec.x").map(|p| p.parts().len()), Some(2));
    }
}
