//! Label and field selectors: parsing and matching.
//!
//! Label selectors accept `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`,
//! `k` (exists), `!k` (does not exist), `k>N`, `k<N`; a comma means AND.
//! Field selectors accept `path=v`, `path==v`, `path!=v` on dotted paths such as
//! `metadata.name` and `metadata.namespace`.

use std::collections::BTreeSet;

use serde_json::Value;

/// Why a selector could not be parsed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum SelectorError {
    /// A requirement has an empty key.
    #[error("empty key in selector requirement {0:?}")]
    EmptyKey(String),
    /// `in`/`notin` values are not in parentheses.
    #[error("values of {0:?} must be in parentheses, e.g. `env in (a,b)`")]
    MissingParens(String),
    /// Unbalanced parentheses.
    #[error("unbalanced parentheses in selector {0:?}")]
    Unbalanced(String),
    /// The requirement has no recognised operator.
    #[error(
        "cannot parse selector requirement {0:?}; use k=v, k!=v, k in (a,b), k notin (a,b), k or !k"
    )]
    Unparsable(String),
    /// A field selector uses an operator other than =, ==, !=.
    #[error("field selector {0:?} must use =, == or !=")]
    BadField(String),
    /// A label key is not a valid qualified name.
    #[error(
        "invalid label key {0:?}: use [prefix/]name, name being up to 63 of [A-Za-z0-9_.-] starting and ending alphanumeric"
    )]
    InvalidKey(String),
    /// A label value is not valid.
    #[error(
        "invalid label value {0:?}: use up to 63 of [A-Za-z0-9_.-], starting and ending alphanumeric"
    )]
    InvalidValue(String),
    /// The field is not selectable for this resource.
    #[error("field label not supported: {0}; selectable fields are {1}")]
    UnsupportedField(String, String),
    /// `>`/`<` need an integer.
    #[error("value in {0:?} must be an integer for > and <")]
    NotInteger(String),
}

#[derive(Debug, Clone, PartialEq)]
enum LabelOp {
    Eq(String),
    NotEq(String),
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
    Exists,
    NotExists,
    Gt(i64),
    Lt(i64),
}

/// A parsed label selector (all requirements must hold).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct LabelSelector {
    reqs: Vec<(String, LabelOp)>,
}

fn split_top_level(s: &str) -> Result<Vec<&str>, SelectorError> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(SelectorError::Unbalanced(s.into()));
                }
            }
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(SelectorError::Unbalanced(s.into()));
    }
    parts.push(&s[start..]);
    Ok(parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect())
}

fn parse_set(req: &str, rest: &str) -> Result<BTreeSet<String>, SelectorError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| SelectorError::MissingParens(req.into()))?;
    // As the API server reads them, an empty entry is the empty value:
    // `()`, `(,a)`, `(a,)` and `(a,,b)` all hold "".
    Ok(inner.split(',').map(|v| v.trim().to_string()).collect())
}

fn is_label_name(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
        && s.chars().next().is_some_and(alnum)
        && s.chars().last().is_some_and(alnum)
}

fn valid_key(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => crate::objects::is_dns_subdomain(prefix) && is_label_name(name),
        None => is_label_name(key),
    }
}

fn valid_value(value: &str) -> bool {
    value.is_empty() || is_label_name(value)
}

/// Checks the key and values of a parsed requirement.
fn validated(req: (String, LabelOp)) -> Result<(String, LabelOp), SelectorError> {
    if !valid_key(&req.0) {
        return Err(SelectorError::InvalidKey(req.0));
    }
    let values: Vec<&String> = match &req.1 {
        LabelOp::Eq(v) | LabelOp::NotEq(v) => vec![v],
        LabelOp::In(vs) | LabelOp::NotIn(vs) => vs.iter().collect(),
        _ => Vec::new(),
    };
    if let Some(bad) = values.into_iter().find(|v| !valid_value(v)) {
        return Err(SelectorError::InvalidValue(bad.clone()));
    }
    Ok(req)
}

fn parse_requirement(req: &str) -> Result<(String, LabelOp), SelectorError> {
    parse_requirement_raw(req).and_then(validated)
}

fn parse_requirement_raw(req: &str) -> Result<(String, LabelOp), SelectorError> {
    if let Some(key) = req.strip_prefix('!') {
        let key = key.trim();
        if key.is_empty() {
            return Err(SelectorError::EmptyKey(req.into()));
        }
        return Ok((key.into(), LabelOp::NotExists));
    }
    // `key notin (..)` / `key in (..)`: a key followed by whitespace and the word.
    let mut words = req.splitn(2, char::is_whitespace);
    let key = words.next().unwrap_or("");
    if let Some(rest) = words.next() {
        let rest = rest.trim_start();
        if let Some(set) = rest.strip_prefix("notin") {
            return Ok((key.into(), LabelOp::NotIn(parse_set(req, set)?)));
        }
        if let Some(set) = rest.strip_prefix("in") {
            return Ok((key.into(), LabelOp::In(parse_set(req, set)?)));
        }
    }
    for (op, len) in [("!=", 2), ("==", 2), ("=", 1), (">", 1), ("<", 1)] {
        if let Some(idx) = req.find(op) {
            let key = req[..idx].trim();
            let value = req[idx + len..].trim().to_string();
            if key.is_empty() {
                return Err(SelectorError::EmptyKey(req.into()));
            }
            let op = match op {
                "!=" => LabelOp::NotEq(value),
                ">" => LabelOp::Gt(
                    value
                        .parse()
                        .map_err(|_| SelectorError::NotInteger(req.into()))?,
                ),
                "<" => LabelOp::Lt(
                    value
                        .parse()
                        .map_err(|_| SelectorError::NotInteger(req.into()))?,
                ),
                _ => LabelOp::Eq(value),
            };
            return Ok((key.into(), op));
        }
    }
    let key = req.trim();
    if key.is_empty() || key.contains(char::is_whitespace) || key.contains('(') {
        return Err(SelectorError::Unparsable(req.into()));
    }
    Ok((key.into(), LabelOp::Exists))
}

impl LabelSelector {
    /// Parses a label selector string (empty selects everything).
    pub(crate) fn parse(s: &str) -> Result<Self, SelectorError> {
        let reqs = split_top_level(s)?
            .into_iter()
            .map(parse_requirement)
            .collect::<Result<_, _>>()?;
        Ok(Self { reqs })
    }

    /// Reads a structured `metav1.LabelSelector` (`matchLabels` and
    /// `matchExpressions` with `In`, `NotIn`, `Exists`, `DoesNotExist`), as
    /// webhook configurations carry them; absent or `{}` selects everything.
    pub(crate) fn from_spec(spec: Option<&Value>) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        let Some(spec) = spec.filter(|s| !s.is_null()) else {
            return Ok(Self { reqs });
        };
        let unparsable = || SelectorError::Unparsable(spec.to_string());
        if let Some(labels) = spec.get("matchLabels").filter(|l| !l.is_null()) {
            for (key, value) in labels.as_object().ok_or_else(unparsable)? {
                let value = value.as_str().ok_or_else(unparsable)?;
                reqs.push(validated((key.clone(), LabelOp::Eq(value.into())))?);
            }
        }
        if let Some(exprs) = spec.get("matchExpressions").filter(|e| !e.is_null()) {
            for expr in exprs.as_array().ok_or_else(unparsable)? {
                let key = expr.get("key").and_then(Value::as_str).unwrap_or("");
                if key.is_empty() {
                    return Err(SelectorError::EmptyKey(expr.to_string()));
                }
                let values = || -> Result<BTreeSet<String>, SelectorError> {
                    let values = expr.get("values").and_then(Value::as_array);
                    values
                        .into_iter()
                        .flatten()
                        .map(|v| v.as_str().map(str::to_string).ok_or_else(unparsable))
                        .collect()
                };
                let op = match expr.get("operator").and_then(Value::as_str) {
                    Some("In") => LabelOp::In(values()?),
                    Some("NotIn") => LabelOp::NotIn(values()?),
                    Some("Exists") => LabelOp::Exists,
                    Some("DoesNotExist") => LabelOp::NotExists,
                    _ => return Err(SelectorError::Unparsable(expr.to_string())),
                };
                reqs.push(validated((key.into(), op))?);
            }
        }
        Ok(Self { reqs })
    }

    /// Whether the selector selects everything.
    pub(crate) fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether an object (its `metadata.labels`) matches.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        self.reqs.iter().all(|(key, op)| {
            let value = labels.and_then(|l| l.get(key)).and_then(Value::as_str);
            match op {
                LabelOp::Eq(v) => value == Some(v.as_str()),
                LabelOp::NotEq(v) => value != Some(v.as_str()),
                LabelOp::In(vs) => value.is_some_and(|x| vs.contains(x)),
                LabelOp::NotIn(vs) => value.is_none_or(|x| !vs.contains(x)),
                LabelOp::Exists => value.is_some(),
                LabelOp::NotExists => value.is_none(),
                LabelOp::Gt(n) => value
                    .and_then(|x| x.parse::<i64>().ok())
                    .is_some_and(|x| x > *n),
                LabelOp::Lt(n) => value
                    .and_then(|x| x.parse::<i64>().ok())
                    .is_some_and(|x| x < *n),
            }
        })
    }
}

/// A parsed field selector (all requirements must hold).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct FieldSelector {
    reqs: Vec<(Vec<String>, bool, String)>,
}

impl FieldSelector {
    /// Parses a field selector string (empty selects everything).
    pub(crate) fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for part in split_top_level(s)? {
            let (path, equal, value) = if let Some((p, v)) = part.split_once("!=") {
                (p, false, v)
            } else if let Some((p, v)) = part.split_once("==") {
                (p, true, v)
            } else if let Some((p, v)) = part.split_once('=') {
                (p, true, v)
            } else {
                return Err(SelectorError::BadField(part.into()));
            };
            let path = path.trim();
            if path.is_empty() {
                return Err(SelectorError::EmptyKey(part.into()));
            }
            reqs.push((
                path.split('.').map(str::to_string).collect(),
                equal,
                value.trim().to_string(),
            ));
        }
        Ok(Self { reqs })
    }

    /// Whether the selector selects everything.
    pub(crate) fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Rejects fields that `selectable` does not accept (as the API server does).
    pub(crate) fn check_fields(&self, selectable: &[String]) -> Result<(), SelectorError> {
        for (path, _, _) in &self.reqs {
            let field = path.join(".");
            if !selectable.contains(&field) {
                return Err(SelectorError::UnsupportedField(
                    field,
                    selectable.join(", "),
                ));
            }
        }
        Ok(())
    }

    /// Whether an object matches (missing fields compare as the empty string).
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.reqs.iter().all(|(path, equal, expected)| {
            let mut cur = Some(obj);
            for seg in path {
                cur = cur.and_then(|c| c.get(seg));
            }
            let same = match cur {
                Some(Value::String(s)) => s == expected,
                Some(Value::Null) | None => expected.is_empty(),
                Some(other) => {
                    // Numbers and booleans compare as their JSON text.
                    let text = other.to_string();
                    text == *expected
                }
            };
            same == *equal
        })
    }
}

/// Label and field selectors together.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Selectors {
    /// The label selector.
    pub labels: LabelSelector,
    /// The field selector.
    pub fields: FieldSelector,
}

impl Selectors {
    /// Whether both selectors select everything.
    pub(crate) fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    /// Whether an object matches both.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn structured_selectors_match_as_their_string_forms() {
        let spec = serde_json::json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "skip", "operator": "DoesNotExist"},
            ],
        });
        let sel = LabelSelector::from_spec(Some(&spec)).unwrap();
        assert_eq!(
            sel,
            LabelSelector::parse("app=web,tier in (a,b),!skip").unwrap()
        );
        assert!(LabelSelector::from_spec(None).unwrap().is_empty());
        assert!(
            LabelSelector::from_spec(Some(&serde_json::json!({})))
                .unwrap()
                .is_empty()
        );
        let bad = serde_json::json!({"matchExpressions": [{"key": "k", "operator": "Near"}]});
        assert!(LabelSelector::from_spec(Some(&bad)).is_err());
    }

    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns1", "labels": labels}, "status": {"phase": "Running"}})
    }

    #[test]
    fn equality_and_inequality() {
        let o = obj(json!({"app": "web", "tier": "fe"}));
        assert!(LabelSelector::parse("app=web").unwrap().matches(&o));
        assert!(
            LabelSelector::parse("app==web,tier=fe")
                .unwrap()
                .matches(&o)
        );
        assert!(!LabelSelector::parse("app!=web").unwrap().matches(&o));
        assert!(LabelSelector::parse("missing!=x").unwrap().matches(&o));
    }

    #[test]
    fn set_based_requirements() {
        let o = obj(json!({"env": "prod"}));
        assert!(
            LabelSelector::parse("env in (prod, staging)")
                .unwrap()
                .matches(&o)
        );
        assert!(
            !LabelSelector::parse("env notin (prod,staging)")
                .unwrap()
                .matches(&o)
        );
        assert!(LabelSelector::parse("other notin (a)").unwrap().matches(&o));
        assert!(LabelSelector::parse("env,!other").unwrap().matches(&o));
        assert!(!LabelSelector::parse("!env").unwrap().matches(&o));
        assert!(
            LabelSelector::parse("env in (prod),env")
                .unwrap()
                .matches(&o)
        );
    }

    #[test]
    fn empty_entries_of_a_set_are_the_empty_value() {
        let empty = obj(json!({"env": ""}));
        let prod = obj(json!({"env": "prod"}));
        for selector in [
            "env in ()",
            "env in (,prod)",
            "env in (prod,)",
            "env in (a, ,b)",
        ] {
            let selector = LabelSelector::parse(selector).unwrap();
            assert!(selector.matches(&empty), "{selector:?}");
        }
        assert!(!LabelSelector::parse("env in ()").unwrap().matches(&prod));
        assert!(
            !LabelSelector::parse("env notin ()")
                .unwrap()
                .matches(&empty)
        );
        assert!(LabelSelector::parse("env notin ()").unwrap().matches(&prod));
        assert!(
            !LabelSelector::parse("env notin (a,,b)")
                .unwrap()
                .matches(&empty)
        );
    }

    #[test]
    fn numeric_comparisons() {
        let o = obj(json!({"n": "5"}));
        assert!(LabelSelector::parse("n>3").unwrap().matches(&o));
        assert!(!LabelSelector::parse("n<3").unwrap().matches(&o));
    }

    #[test]
    fn bad_label_selectors_are_errors() {
        assert!(LabelSelector::parse("env in prod").is_err());
        assert!(LabelSelector::parse("env in (a").is_err());
        assert!(LabelSelector::parse("=x").is_err());
        assert!(LabelSelector::parse("a b c").is_err());
        assert_eq!(
            LabelSelector::parse("a=b=c"),
            Err(SelectorError::InvalidValue("b=c".into()))
        );
        assert!(matches!(
            LabelSelector::parse("!"),
            Err(SelectorError::EmptyKey(_))
        ));
        assert!(
            LabelSelector::parse("example.com/app=x,app.kubernetes.io/name in (a_b, c.d)").is_ok()
        );
        assert!(matches!(
            LabelSelector::parse("-a=b"),
            Err(SelectorError::InvalidKey(_))
        ));
    }

    #[test]
    fn empty_selector_matches_everything() {
        let s = LabelSelector::parse("").unwrap();
        assert!(s.is_empty());
        assert!(s.matches(&json!({})));
    }

    #[test]
    fn field_selectors() {
        let o = obj(json!({}));
        assert!(FieldSelector::parse("metadata.name=a").unwrap().matches(&o));
        assert!(
            FieldSelector::parse("metadata.name==a,metadata.namespace=ns1")
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=a")
                .unwrap()
                .matches(&o)
        );
        assert!(
            FieldSelector::parse("status.phase=Running")
                .unwrap()
                .matches(&o)
        );
        assert!(FieldSelector::parse("spec.nodeName=").unwrap().matches(&o));
        assert!(FieldSelector::parse("metadata.name").is_err());
        let selectable = vec![
            "metadata.name".to_string(),
            "metadata.namespace".to_string(),
        ];
        assert!(
            FieldSelector::parse("metadata.name=a")
                .unwrap()
                .check_fields(&selectable)
                .is_ok()
        );
        assert!(
            FieldSelector::parse("spec.nope=1")
                .unwrap()
                .check_fields(&selectable)
                .is_err()
        );
    }
}
