//! [`Diff`]: what changed between two versions of an object (Kopf's `diff`).

use std::fmt;
use std::sync::{Arc, LazyLock, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::fields::resolve_field;

/// The kind of a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiffOp {
    /// The field appeared.
    Add,
    /// The field's value changed.
    Change,
    /// The field disappeared.
    Remove,
}

/// One changed field: operation, path, old and new values (`None` when absent).
///
/// Serializes as Kopf's tuple `[op, [field, …], old, new]`, absent values as `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "DiffTuple", into = "DiffTuple")]
pub struct DiffItem {
    /// What happened to the field.
    pub op: DiffOp,
    /// The path of the field, one element per nesting level.
    pub field: Vec<String>,
    /// The value before, if any.
    pub old: Option<Value>,
    /// The value after, if any.
    pub new: Option<Value>,
}

/// Kopf's wire form of a [`DiffItem`].
#[derive(Clone, Serialize, Deserialize)]
struct DiffTuple(DiffOp, Vec<String>, Option<Value>, Option<Value>);

impl From<DiffTuple> for DiffItem {
    fn from(DiffTuple(op, field, old, new): DiffTuple) -> Self {
        DiffItem {
            op,
            field,
            old,
            new,
        }
    }
}

impl From<DiffItem> for DiffTuple {
    fn from(item: DiffItem) -> Self {
        DiffTuple(item.op, item.field, item.old, item.new)
    }
}

/// A list of changed fields, recursing into objects (lists are compared whole).
///
/// As in Kopf, a `null` value is the same as an absent one, and the changes
/// of an object come as its added keys, then its removed keys, then its
/// changed keys, each in key order.
///
/// ```
/// use serde_json::json;
/// use kopf_runtime::{Diff, DiffOp};
/// let diff = Diff::between(Some(&json!({"spec": {"a": 1, "b": 2}})), Some(&json!({"spec": {"a": 1, "b": 3}})));
/// assert_eq!(diff.len(), 1);
/// assert_eq!(diff.items()[0].op, DiffOp::Change);
/// assert_eq!(diff.items()[0].field, ["spec", "b"]);
/// ```
#[derive(Clone)]
pub struct Diff {
    // Shared: every handler's kwargs get the cause's diff.
    inner: Arc<Items>,
}

/// The items of a diff, found when first asked for if the diff was made
/// from the values it compares.
struct Items {
    found: OnceLock<Box<[DiffItem]>>,
    between: Option<Between>,
}

/// The values a diff compares (`None` meaning absent).
struct Between {
    old: Option<Arc<Value>>,
    new: Option<Arc<Value>>,
}

/// The empty diff; shared by every [`Diff::default`], as kwargs are made per call.
static NO_CHANGES: LazyLock<Diff> = LazyLock::new(|| Diff::new(Vec::new()));

impl Default for Diff {
    fn default() -> Self {
        NO_CHANGES.clone()
    }
}

impl fmt::Debug for Diff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Diff")
            .field("items", &self.items())
            .finish()
    }
}

impl PartialEq for Diff {
    fn eq(&self, other: &Self) -> bool {
        self.items() == other.items()
    }
}

impl Serialize for Diff {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.items().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Diff {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::deserialize(deserializer).map(Diff::new)
    }
}

impl Diff {
    /// A diff from explicit items.
    pub fn new(items: Vec<DiffItem>) -> Self {
        Diff {
            inner: Arc::new(Items {
                found: OnceLock::from(items.into_boxed_slice()),
                between: None,
            }),
        }
    }

    /// The differences between two values (`None` meaning absent).
    pub fn between(old: Option<&Value>, new: Option<&Value>) -> Self {
        Self::new(find(old, new))
    }

    /// The differences between two shared values, found only when first
    /// asked for: most handlers never look at their diff.
    pub(crate) fn between_shared(old: Option<Arc<Value>>, new: Option<Arc<Value>>) -> Self {
        Diff {
            inner: Arc::new(Items {
                found: OnceLock::new(),
                between: Some(Between { old, new }),
            }),
        }
    }

    /// The changed fields.
    pub fn items(&self) -> &[DiffItem] {
        let Items { found, between } = &*self.inner;
        found.get_or_init(|| match between {
            Some(Between { old, new }) => find(old.as_deref(), new.as_deref()).into_boxed_slice(),
            None => Box::default(),
        })
    }

    /// The number of changed fields.
    pub fn len(&self) -> usize {
        self.items().len()
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.items().is_empty()
    }

    /// The diff as seen from inside a field (Kopf's `diffs.reduce`): items under
    /// `field` with the prefix stripped, for field-scoped handlers.
    pub fn reduce(&self, field: &[&str]) -> Diff {
        let mut items = Vec::new();
        for item in self.items() {
            let common = item.field.len().min(field.len());
            if item.field[..common]
                .iter()
                .map(String::as_str)
                .ne(field[..common].iter().copied())
            {
                continue;
            }
            if item.field.len() >= field.len() {
                items.push(DiffItem {
                    field: item.field[field.len()..].to_vec(),
                    ..item.clone()
                });
            } else {
                // The change is above the field: re-diff the field's own values.
                let rest = &field[item.field.len()..];
                let old = item.old.as_ref().and_then(|v| resolve_field(v, rest));
                let new = item.new.as_ref().and_then(|v| resolve_field(v, rest));
                walk(&mut Vec::new(), old, new, &mut items);
            }
        }
        Self::new(items)
    }
}

/// The items of [`Diff::between`].
fn find(old: Option<&Value>, new: Option<&Value>) -> Vec<DiffItem> {
    let mut items = Vec::new();
    walk(&mut Vec::new(), old, new, &mut items);
    items
}

fn walk(
    path: &mut Vec<String>,
    old: Option<&Value>,
    new: Option<&Value>,
    items: &mut Vec<DiffItem>,
) {
    let old = old.filter(|v| !v.is_null());
    let new = new.filter(|v| !v.is_null());
    let mut item = |op| {
        items.push(DiffItem {
            op,
            field: path.clone(),
            old: old.cloned(),
            new: new.cloned(),
        })
    };
    match (old, new) {
        (None, None) => {}
        (Some(a), Some(b)) if a == b => {}
        (None, Some(_)) => item(DiffOp::Add),
        (Some(_), None) => item(DiffOp::Remove),
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let mut added: Vec<&String> = b.keys().filter(|k| !a.contains_key(*k)).collect();
            let mut removed: Vec<&String> = a.keys().filter(|k| !b.contains_key(*k)).collect();
            let mut common: Vec<&String> = a.keys().filter(|k| b.contains_key(*k)).collect();
            added.sort();
            removed.sort();
            common.sort();
            for key in added {
                path.push(key.clone());
                walk(path, None, b.get(key), items);
                path.pop();
            }
            for key in removed {
                path.push(key.clone());
                walk(path, a.get(key), None, items);
                path.pop();
            }
            for key in common {
                path.push(key.clone());
                walk(path, a.get(key), b.get(key), items);
                path.pop();
            }
        }
        (Some(_), Some(_)) => item(DiffOp::Change),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn additions_removals_and_changes_are_listed() {
        let diff = Diff::between(
            Some(&json!({"a": 1, "b": {"c": 2}})),
            Some(&json!({"b": {"c": 3}, "d": [1]})),
        );
        let ops: Vec<_> = diff
            .items()
            .iter()
            .map(|i| (i.op, i.field.join(".")))
            .collect();
        assert_eq!(
            ops,
            [
                (DiffOp::Add, "d".into()),
                (DiffOp::Remove, "a".into()),
                (DiffOp::Change, "b.c".into())
            ]
        );
    }

    #[test]
    fn a_diff_of_shared_values_is_found_when_asked_for_and_the_same() {
        let old = Arc::new(json!({"a": 1, "b": {"c": 2}}));
        let new = Arc::new(json!({"b": {"c": 3}, "d": [1]}));
        let eager = Diff::between(Some(&old), Some(&new));
        let lazy = Diff::between_shared(Some(Arc::clone(&old)), Some(Arc::clone(&new)));
        let shared = lazy.clone();
        assert_eq!(shared, eager);
        assert_eq!(lazy.len(), 3);
        assert_eq!(
            serde_json::to_value(&lazy).expect("serializes"),
            serde_json::to_value(&eager).expect("serializes")
        );
        assert_eq!(lazy.reduce(&["b"]), eager.reduce(&["b"]));
        assert!(Diff::between_shared(Some(Arc::clone(&old)), Some(old)).is_empty());
        assert!(Diff::between_shared(None, None).is_empty());
        let created = Diff::between_shared(None, Some(new));
        assert_eq!(created.items()[0].op, DiffOp::Add);
        assert_eq!(created.items()[0].field, Vec::<String>::new());
    }

    #[test]
    fn a_diff_reads_back_as_written() {
        let diff = Diff::between(Some(&json!({"a": 1})), Some(&json!({"a": 2, "b": null})));
        let text = serde_json::to_string(&diff).expect("serializes");
        assert_eq!(text, r#"[["change",["a"],1,2]]"#);
        let back: Diff = serde_json::from_str(&text).expect("deserializes");
        assert_eq!(back, diff);
        assert_eq!(format!("{back:?}"), format!("{diff:?}"));
    }

    #[test]
    fn reduce_strips_the_field_prefix_and_rediffs_changes_above_it() {
        let diff = Diff::between(None, Some(&json!({"spec": {"size": 1}})));
        let reduced = diff.reduce(&["spec", "size"]);
        assert_eq!(
            reduced.items(),
            [DiffItem {
                op: DiffOp::Add,
                field: vec![],
                old: None,
                new: Some(json!(1))
            }]
        );
        assert!(diff.reduce(&["status"]).is_empty());
    }
}
