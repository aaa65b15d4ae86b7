//! Parsing one option's value, as written, into its typed form.
//!
//! Every parser has the same shape, `fn(&Ident, Raw, &mut Errors) ->
//! Option<T>`, so that an option is declared by naming its parser (see
//! `options`). A parser reports what is wrong and returns `None`; it never
//! stops the other options from being checked.

use std::collections::BTreeSet;

use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Ident, Lit, LitStr};

use crate::attr::{Errors, Raw};
use crate::kinds::list;

/// A duration as seconds and nanoseconds.
#[derive(Clone, Copy)]
pub(crate) struct Secs {
    pub(crate) secs: u64,
    pub(crate) nanos: u32,
}

/// A string option (`id`, `field`, `subresource`).
pub(crate) struct Str(pub(crate) LitStr);

/// A count (`retries`).
pub(crate) struct Count(pub(crate) u32);

/// A flag (`sharp`, `persistent`, …).
pub(crate) struct Flag(pub(crate) bool);

/// A variant of `kopf::ErrorsMode`.
pub(crate) struct ErrorsMode(pub(crate) Ident);

/// A JSON value: a literal or `json!(…)` (`param`).
pub(crate) struct Json(pub(crate) Expr);

/// The path of a `fn(&kopf::Kwargs) -> bool` (`when`).
pub(crate) struct When(pub(crate) syn::Path);

/// Variants of `kopf::Operation` (`operations`).
pub(crate) struct Operations(pub(crate) Vec<Ident>);

/// Label or annotation conditions, by key (`labels`, `annotations`).
pub(crate) struct MetaFilter(pub(crate) Vec<(LitStr, MetaSpec)>);

/// A `value`/`old`/`new` condition.
pub(crate) enum ValueSpec {
    /// A JSON literal or `json!(…)` expression.
    Json(Expr),
    /// `kopf::PRESENT`
    Present,
    /// `kopf::ABSENT`
    Absent,
    /// A callback fn path.
    Callback(syn::Path),
}

/// A label or annotation condition.
pub(crate) enum MetaSpec {
    Equals(LitStr),
    Present,
    Absent,
    Callback(syn::Path),
}

const OPERATIONS: [&str; 4] = ["CREATE", "UPDATE", "DELETE", "CONNECT"];

fn literal(expr: &Expr) -> Option<&Lit> {
    match expr {
        Expr::Lit(ExprLit { lit, .. }) => Some(lit),
        Expr::Group(group) => literal(&group.expr),
        _ => None,
    }
}

fn last_segment(path: &syn::Path) -> String {
    path.segments
        .last()
        .map(|s| s.ident.to_string())
        .unwrap_or_default()
}

fn expect_value(key: &Ident, raw: Raw, syntax: &str, errors: &mut Errors) -> Option<Expr> {
    match raw {
        Raw::Value(expr) => Some(expr),
        Raw::Flag | Raw::List(_) => {
            errors.push(
                key.span(),
                format!("`{key}` needs a value: `{key} = {syntax}`"),
            );
            None
        }
    }
}

/// `key = "…"`, not empty.
pub(crate) fn string(key: &Ident, raw: Raw, errors: &mut Errors) -> Option<Str> {
    let expr = expect_value(key, raw, "\"…\"", errors)?;
    match literal(&expr) {
        Some(Lit::Str(s)) if !s.value().is_empty() => Some(Str(s.clone())),
        Some(Lit::Str(s)) => {
            errors.push(s.span(), format!("`{key}` must not be empty"));
            None
        }
        _ => {
            errors.push(
                expr.span(),
                format!("`{key}` expects a string literal, e.g. `{key} = \"…\"`"),
            );
            None
        }
    }
}

/// `field = "spec.path"`: a string of dot-separated, non-empty parts.
pub(crate) fn field_path(key: &Ident, raw: Raw, errors: &mut Errors) -> Option<Str> {
    let field = string(key, raw, errors)?;
    if field.0.value().split('.').any(str::is_empty) {
        errors.push(
            field.0.span(),
            "`field` must be a dot-separated path like `spec.size`",
        );
    }
    Some(field)
}

/// `key = 3`: a non-negative integer.
pub(crate) fn count(key: &Ident, raw: Raw, errors: &mut Errors) -> Option<Count> {
    let expr = expect_value(key, raw, "<count>", errors)?;
    let parsed = match literal(&expr) {
        Some(Lit::Int(int)) => int.base10_parse::<u32>().ok(),
        _ => None,
    };
    if parsed.is_none() {
        errors.push(
            expr.span(),
            format!("`{key}` expects a non-negative integer, e.g. `{key} = 3`"),
        );
    }
    parsed.map(Count)
}

/// `key = 10` or `key = 0.5`: non-negative seconds.
pub(crate) fn seconds(key: &Ident, raw: Raw, errors: &mut Errors) -> Option<Secs> {
    let expr = expect_value(key, raw, "<seconds>", errors)?;
    let parsed = match literal(&expr) {
        Some(Lit::Int(int)) => int
            .base10_parse::<u64>()
            .ok()
            .map(|secs| Secs { secs, nanos: 0 }),
        Some(Lit::Float(float)) => float
            .base10_parse::<f64>()
            .ok()
            .filter(|f| f.is_finite() && *f >= 0.0)
            .map(|f| {
                let secs = f.trunc();
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let secs_int = secs as u64;
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let nanos = ((f - secs) * 1e9).round() as u32;
                Secs {
                    secs: secs_int,
                    nanos: nanos.min(999_999_999),
                }
            }),
        _ => None,
    };
    if parsed.is_none() {
        errors.push(expr.span(), format!("`{key}` expects a non-negative number of seconds, e.g. `{key} = 10` or `{key} = 0.5`"));
    }
    parsed
}

/// `key` or `key = true` or `key = false`.
pub(crate) fn flag(key: &Ident, raw: Raw, errors: &mut Errors) -> Option<Flag> {
    match raw {
        Raw::Flag => Some(Flag(true)),
        Raw::Value(expr) => match literal(&expr) {
            Some(Lit::Bool(b)) => Some(Flag(b.value)),
            _ => {
                errors.push(
                    expr.span(),
                    format!("`{key}` expects `true` or `false` (or write just `{key}`)"),
                );
                None
            }
        },
        Raw::List(_) => {
            errors.push(
                key.span(),
                format!("`{key}` is a flag: write `{key}` or `{key} = true`"),
            );
            None
        }
    }
}

/// `errors = kopf::ErrorsMode::Permanent` or `errors = "permanent"`.
pub(crate) fn errors_mode(key: &Ident, raw: Raw, errors: &mut Errors) -> Option<ErrorsMode> {
    let expr = expect_value(key, raw, "kopf::ErrorsMode::Permanent", errors)?;
    let mode = match &expr {
        Expr::Path(p) => Some(last_segment(&p.path)),
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Some(s.value()),
        _ => None,
    };
    let variant = match mode.map(|m| m.to_lowercase()).as_deref() {
        Some("temporary") => "Temporary",
        Some("permanent") => "Permanent",
        Some("ignored") => "Ignored",
        _ => {
            errors.push(
                expr.span(),
                "`errors` expects `kopf::ErrorsMode::Temporary`, `kopf::ErrorsMode::Permanent` or `kopf::ErrorsMode::Ignored`",
            );
            return None;
        }
    };
    Some(ErrorsMode(Ident::new(variant, expr.span())))
}

/// `param = <literal or json!(…)>`.
pub(crate) fn json(key: &Ident, raw: Raw, errors: &mut Errors) -> Option<Json> {
    let expr = expect_value(key, raw, "<literal>", errors)?;
    match value_spec(key, expr, errors)? {
        ValueSpec::Json(expr) => Some(Json(expr)),
        ValueSpec::Present | ValueSpec::Absent | ValueSpec::Callback(_) => {
            errors.push(
                key.span(),
                format!("`{key}` expects a literal or `json!(…)`"),
            );
            None
        }
    }
}

/// `when = path::to::callback`.
pub(crate) fn when(key: &Ident, raw: Raw, errors: &mut Errors) -> Option<When> {
    match expect_value(key, raw, "my_filter_fn", errors)? {
        Expr::Path(p) if p.qself.is_none() => Some(When(p.path)),
        other => {
            errors.push(
                other.span(),
                format!("`{key}` expects the path of a `fn(&kopf::Kwargs) -> bool`"),
            );
            None
        }
    }
}

/// `key = <literal>`, `json!(…)`, `kopf::PRESENT`, `kopf::ABSENT` or a callback.
pub(crate) fn value(key: &Ident, raw: Raw, errors: &mut Errors) -> Option<ValueSpec> {
    let expr = expect_value(key, raw, "<literal>", errors)?;
    value_spec(key, expr, errors)
}

fn value_spec(key: &Ident, expr: Expr, errors: &mut Errors) -> Option<ValueSpec> {
    match expr {
        Expr::Lit(_) | Expr::Macro(_) => Some(ValueSpec::Json(expr)),
        Expr::Unary(ref u)
            if matches!(u.op, syn::UnOp::Neg(_)) && matches!(*u.expr, Expr::Lit(_)) =>
        {
            Some(ValueSpec::Json(expr))
        }
        Expr::Path(p) if p.qself.is_none() => match last_segment(&p.path).as_str() {
            "PRESENT" => Some(ValueSpec::Present),
            "ABSENT" => Some(ValueSpec::Absent),
            _ => Some(ValueSpec::Callback(p.path)),
        },
        other => {
            errors.push(
                other.span(),
                format!("`{key}` expects a literal, `json!(…)`, `kopf::PRESENT`, `kopf::ABSENT` or a fn path"),
            );
            None
        }
    }
}

/// `key("name" = "value", "other" = kopf::PRESENT, "third" = callback, …)`.
pub(crate) fn meta_filter(key: &Ident, raw: Raw, errors: &mut Errors) -> Option<MetaFilter> {
    let Raw::List(entries) = raw else {
        errors.push(
            key.span(),
            format!(
                "`{key}` expects a list: `{key}(\"key\" = \"value\", \"other\" = kopf::PRESENT)`"
            ),
        );
        return None;
    };
    let mut out = Vec::new();
    let mut keys = BTreeSet::new();
    for (entry_key, value) in entries {
        let Some(entry_key) = entry_key else {
            errors.push(
                value.span(),
                format!("`{key}` entries are `\"key\" = value`"),
            );
            continue;
        };
        if !keys.insert(entry_key.value()) {
            errors.push(
                entry_key.span(),
                format!("duplicate key `{}` in `{key}`", entry_key.value()),
            );
            continue;
        }
        let spec = match &value {
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) => MetaSpec::Equals(s.clone()),
            Expr::Path(p) if p.qself.is_none() => match last_segment(&p.path).as_str() {
                "PRESENT" => MetaSpec::Present,
                "ABSENT" => MetaSpec::Absent,
                _ => MetaSpec::Callback(p.path.clone()),
            },
            other => {
                errors.push(
                    other.span(),
                    format!(
                        "`{key}` values are a string, `kopf::PRESENT`, `kopf::ABSENT` or a fn path"
                    ),
                );
                continue;
            }
        };
        out.push((entry_key, spec));
    }
    Some(MetaFilter(out))
}

/// `operations("CREATE", "UPDATE", …)`.
pub(crate) fn operations(key: &Ident, raw: Raw, errors: &mut Errors) -> Option<Operations> {
    let Raw::List(entries) = raw else {
        errors.push(
            key.span(),
            format!("`{key}` expects a list: `{key}(\"CREATE\", \"UPDATE\")`"),
        );
        return None;
    };
    let mut out = Vec::new();
    for (entry_key, value) in entries {
        let lit = match (entry_key, literal(&value)) {
            (None, Some(Lit::Str(s))) => s.clone(),
            _ => {
                errors.push(
                    value.span(),
                    format!("`{key}` entries are strings: {}", list(&OPERATIONS)),
                );
                continue;
            }
        };
        let variant = match lit.value().as_str() {
            "CREATE" => "Create",
            "UPDATE" => "Update",
            "DELETE" => "Delete",
            "CONNECT" => "Connect",
            other => {
                errors.push(
                    lit.span(),
                    format!(
                        "unknown operation `{other}`; valid operations are: {}",
                        list(&OPERATIONS)
                    ),
                );
                continue;
            }
        };
        out.push(Ident::new(variant, lit.span()));
    }
    Some(Operations(out))
}
