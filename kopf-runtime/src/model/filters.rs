//! Filters that decide whether a handler applies to an object or a change.
//!
//! The rules, as Kopf's, are documented on [`Filters`].

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::fields::resolve_field;
use crate::model::kwargs::Kwargs;

/// `PRESENT` or `ABSENT`: match on existence rather than on a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Marker {
    /// The label, annotation or field exists (any value, `null` too).
    Present,
    /// The label, annotation or field does not exist.
    Absent,
}

/// Matches when the label, annotation or field exists, whatever its value
/// (a field holding `null` exists).
pub const PRESENT: Marker = Marker::Present;
/// Matches when the label, annotation or field does not exist (a field
/// holding `null` exists).
pub const ABSENT: Marker = Marker::Absent;

/// A callback deciding on a label or annotation value (`None` when absent).
pub(crate) type MetaCallback = Arc<dyn Fn(Option<&str>, &Kwargs) -> bool + Send + Sync>;
/// A callback deciding on a field value (`None` when absent, `Some(&Value::Null)`
/// for a present `null`).
pub(crate) type ValueCallback = Arc<dyn Fn(Option<&Value>, &Kwargs) -> bool + Send + Sync>;
/// A `when` callback deciding on the whole invocation.
pub(crate) type WhenCallback = Arc<dyn Fn(&Kwargs) -> bool + Send + Sync>;

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
    /// Present and equal to this JSON value (`json!(null)`: a present `null`).
    Equals(Value),
    /// Exists, whatever its value (`null` too).
    Present,
    /// Does not exist (a `null` exists).
    Absent,
    /// Decided by a callback.
    Callback(ValueCallback),
}

impl ValueFilter {
    /// Whether `value` (`None` when absent, `Some(&Value::Null)` for a
    /// present `null`) satisfies the condition.
    pub fn matches(&self, value: Option<&Value>, kwargs: &Kwargs) -> bool {
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
        resolve_field(body, &self.parts())
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// All filters of a handler.
///
/// As in Kopf: `labels` and `annotations` match metadata by value,
/// [`PRESENT`]/[`ABSENT`], or a callback; `when` is a callback on the kwargs;
/// `field` scopes a handler to one field, whose value may be matched by
/// `value` (or, for `on_update`/`on_field`, by `old`/`new`).
///
/// # Fields and their values
///
/// A field is **absent** when a key on its path is missing or a value on
/// the way is no object; a field holding `null` is **present**: [`PRESENT`]
/// matches it, [`ABSENT`] does not, and `value = json!(null)` matches it
/// alone. Callbacks get `None` for an absent field and `Some(&Value::Null)`
/// for a present `null`.
///
/// What a field is matched against depends on the handler (Kopf's
/// `_matches_field_values` and `_matches_field_changes`):
///
/// - Change handlers (`on_create`, `on_update`, `on_delete`, `on_resume`,
///   `on_field`) see the field in the old and the new essence of the object
///   (the old one is absent on creation). `field` alone requires the field
///   to be present in either; `value` must match either of them (the new
///   one is tried first). `on_update` and `on_field` also need the field to
///   have changed (absent and `null` differ), and `old`/`new` to match the
///   old and the new value.
/// - Other handlers (`on_event`, `daemon`, `timer`, `index`) see the field
///   in the object's body: `field` alone requires it to be present, and
///   `value` must match it.
///
/// So `#[on_update(…, field = "spec.mode", value = "on")]` runs when the
/// mode turns `on` and when it turns from `on` to anything else.
///
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

/// The values of a handler's field in the old and the new essence of a
/// change (`None`: absent there).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FieldValues<'a> {
    /// In the essence last handled (absent on creation).
    pub old: Option<&'a Value>,
    /// In the object's essence now.
    pub new: Option<&'a Value>,
}

impl Filters {
    /// Whether there is nothing to check: every object passes, and no
    /// callback will see the kwargs. A `field` alone is a condition: that
    /// the field is present.
    pub fn is_empty(&self) -> bool {
        self.labels.entries.is_empty()
            && self.annotations.entries.is_empty()
            && self.when.is_none()
            && self.field.is_none()
            && self.value.is_none()
            && self.old.is_none()
            && self.new.is_none()
    }

    /// Whether the object in `kwargs.body` passes `labels`, `annotations`,
    /// `field`/`value` (on the body's field: present, or as `value` says)
    /// and `when`: the filters of handlers that see objects, not changes
    /// (`on_event`, `daemon`, `timer`, `index`).
    pub fn matches_object(&self, kwargs: &Kwargs) -> bool {
        self.matches_meta(kwargs)
            && self
                .field
                .as_ref()
                .is_none_or(|field| self.matches_values(&[field.resolve(&kwargs.body)], kwargs))
            && self.matches_when(kwargs)
    }

    /// Whether a change may concern a change handler, before its reason is
    /// known (Kopf's `prematch`): `labels` and `annotations` on the body,
    /// `field`/`value` on the field's new or old value (see the
    /// [`Filters`]), and `when`. Decides whether the handler keeps
    /// the object (its finalizer, its diff-base) at all.
    pub fn prematches_change(&self, kwargs: &Kwargs, values: FieldValues<'_>) -> bool {
        self.matches_meta(kwargs)
            && self.matches_change_values(values, kwargs)
            && self.matches_when(kwargs)
    }

    /// Whether a change handler runs for a change (Kopf's `match`): as
    /// [`prematches_change`](Self::prematches_change), and with a `field`,
    /// `old`/`new` on its old and new value, and if `needs_change`
    /// (`on_update`, `on_field`), a change of the field's value.
    pub fn matches_change(
        &self,
        kwargs: &Kwargs,
        values: FieldValues<'_>,
        needs_change: bool,
    ) -> bool {
        self.matches_meta(kwargs)
            && self.matches_change_values(values, kwargs)
            && (self.field.is_none()
                || ((!needs_change || values.old != values.new)
                    && self
                        .old
                        .as_ref()
                        .is_none_or(|filter| filter.matches(values.old, kwargs))
                    && self
                        .new
                        .as_ref()
                        .is_none_or(|filter| filter.matches(values.new, kwargs))))
            && self.matches_when(kwargs)
    }

    fn matches_meta(&self, kwargs: &Kwargs) -> bool {
        (self.labels.is_empty() || self.labels.matches(kwargs.labels(), kwargs))
            && (self.annotations.is_empty()
                || self.annotations.matches(kwargs.annotations(), kwargs))
    }

    fn matches_when(&self, kwargs: &Kwargs) -> bool {
        self.when.as_ref().is_none_or(|when| when(kwargs))
    }

    /// The field's values in a change, the new one first (so that a
    /// callback is not asked about the old one if the new one passes).
    fn matches_change_values(&self, values: FieldValues<'_>, kwargs: &Kwargs) -> bool {
        self.field.is_none() || self.matches_values(&[values.new, values.old], kwargs)
    }

    /// Kopf's `_matches_field_values`: without `value`, any of `values` is
    /// present; with it, any of them matches it.
    fn matches_values(&self, values: &[Option<&Value>], kwargs: &Kwargs) -> bool {
        match &self.value {
            None => values.iter().any(Option::is_some),
            Some(filter) => values.iter().any(|value| filter.matches(*value, kwargs)),
        }
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
            !scoped.is_empty(),
            "a field alone is a condition: that it is present"
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

    fn on(field: &str) -> Filters {
        Filters {
            field: FieldPath::parse(field),
            ..Filters::default()
        }
    }

    fn values<'a>(old: Option<&'a Value>, new: Option<&'a Value>) -> FieldValues<'a> {
        FieldValues { old, new }
    }

    #[test]
    fn a_field_alone_must_be_present_and_a_null_is_present() {
        let kw = Kwargs::new(json!({"spec": {"null": null, "size": 3, "list": [1]}}));
        assert!(on("spec.size").matches_object(&kw));
        assert!(on("spec.null").matches_object(&kw));
        assert!(!on("spec.missing").matches_object(&kw));
        assert!(
            !on("spec.size.deeper").matches_object(&kw),
            "through a number"
        );
        assert!(
            !on("spec.list.0").matches_object(&kw),
            "lists are not walked"
        );

        // In a change: in the new or the old essence.
        let (one, null) = (json!(1), Value::Null);
        let size = on("spec.size");
        assert!(
            size.prematches_change(&kw, values(None, Some(&one))),
            "created"
        );
        assert!(
            size.prematches_change(&kw, values(Some(&one), None)),
            "removed"
        );
        assert!(size.prematches_change(&kw, values(None, Some(&null))));
        assert!(!size.prematches_change(&kw, values(None, None)));
        assert!(!size.matches_change(&kw, values(None, None), false));
        assert!(size.matches_change(&kw, values(Some(&one), Some(&one)), false));
    }

    #[test]
    fn present_absent_and_null_values_are_three_things() {
        let kw = kwargs();
        let null = Value::Null;
        let equals_null = ValueFilter::Equals(Value::Null);
        assert!(equals_null.matches(Some(&null), &kw));
        assert!(!equals_null.matches(None, &kw));
        assert!(PRESENT_FILTER.matches(Some(&null), &kw));
        assert!(!PRESENT_FILTER.matches(None, &kw));
        assert!(!ABSENT_FILTER.matches(Some(&null), &kw));
        assert!(ABSENT_FILTER.matches(None, &kw));
        assert!(!ValueFilter::Equals(json!(1)).matches(Some(&null), &kw));
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let callback = ValueFilter::Callback(Arc::new(move |v, _| {
            log.lock().expect("not poisoned").push(v.cloned());
            false
        }));
        callback.matches(None, &kw);
        callback.matches(Some(&null), &kw);
        assert_eq!(
            *seen.lock().expect("not poisoned"),
            [None, Some(Value::Null)]
        );
    }

    const PRESENT_FILTER: ValueFilter = ValueFilter::Present;
    const ABSENT_FILTER: ValueFilter = ValueFilter::Absent;

    #[test]
    fn a_value_matches_the_old_or_the_new_value_of_a_change() {
        let kw = kwargs();
        let mode_on = Filters {
            value: Some(json!("on").into()),
            ..on("spec.mode")
        };
        let (turned_on, turned_off, other) = (json!("on"), json!("off"), json!("x"));
        assert!(mode_on.matches_change(&kw, values(Some(&turned_off), Some(&turned_on)), true));
        assert!(mode_on.matches_change(&kw, values(Some(&turned_on), Some(&turned_off)), true));
        assert!(!mode_on.matches_change(&kw, values(Some(&other), Some(&turned_off)), true));
        assert!(mode_on.matches_change(&kw, values(None, Some(&turned_on)), true));
        let absent = Filters {
            value: Some(ABSENT.into()),
            ..on("spec.mode")
        };
        assert!(
            absent.matches_change(&kw, values(None, Some(&turned_on)), true),
            "added"
        );
        assert!(
            absent.matches_change(&kw, values(Some(&turned_on), None), true),
            "removed"
        );
        assert!(!absent.matches_change(&kw, values(Some(&other), Some(&turned_on)), true));
    }

    #[test]
    fn old_and_new_filters_and_the_need_of_a_change_apply_to_changes() {
        let kw = kwargs();
        let (one, two, null) = (json!(1), json!(2), Value::Null);
        let filters = Filters {
            old: Some(ABSENT.into()),
            new: Some(PRESENT.into()),
            ..on("spec.size")
        };
        assert!(filters.matches_change(&kw, values(None, Some(&one)), true));
        assert!(!filters.matches_change(&kw, values(Some(&one), Some(&two)), true));
        assert!(
            filters.matches_change(&kw, values(None, Some(&null)), true),
            "a null appearing is a change, and present"
        );
        let any = on("spec.size");
        assert!(!any.matches_change(&kw, values(Some(&one), Some(&one)), true));
        assert!(any.matches_change(&kw, values(Some(&one), Some(&one)), false));
        assert!(any.matches_change(&kw, values(Some(&null), None), true));
        let nulled = Filters {
            new: Some(ValueFilter::Equals(Value::Null)),
            ..on("spec.size")
        };
        assert!(nulled.matches_change(&kw, values(Some(&one), Some(&null)), true));
        assert!(!nulled.matches_change(&kw, values(Some(&one), None), true));
    }

    #[test]
    fn field_paths_reject_empty_segments() {
        assert!(FieldPath::parse("spec..x").is_none());
        assert!(FieldPath::parse("").is_none());
        assert_eq!(FieldPath::parse("spec.x").map(|p| p.parts().len()), Some(2));
    }

    #[test]
    fn fields_and_values_match_as_the_module_says() {
        use crate::Kwargs;
        use crate::model::filters::{ABSENT, FieldPath, FieldValues, Filters};
        use serde_json::json;

        let kwargs = Kwargs::new(json!({"spec": {"mode": null}}));
        let field = FieldPath::parse("spec.mode");
        let present = Filters {
            field: field.clone(),
            ..Filters::default()
        };
        assert!(present.matches_object(&kwargs), "a null is present");
        let absent = Filters {
            field: field.clone(),
            value: Some(ABSENT.into()),
            ..Filters::default()
        };
        assert!(!absent.matches_object(&kwargs));

        // A change from "on" to "off" matches `value = "on"` by its old value.
        let on = Filters {
            field,
            value: Some(json!("on").into()),
            ..Filters::default()
        };
        let (old, new) = (json!("on"), json!("off"));
        let change = FieldValues {
            old: Some(&old),
            new: Some(&new),
        };
        assert!(on.matches_change(&kwargs, change, true));
        let same = FieldValues {
            old: Some(&new),
            new: Some(&new),
        };
        assert!(!on.matches_change(&kwargs, same, true), "neither is on");
    }
}
