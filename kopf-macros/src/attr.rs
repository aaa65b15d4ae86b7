//! Parsing and validating the attribute's arguments into a [`Spec`].
//!
//! Syntax: `#[kind(RESOURCE, option, option, …)]` where `RESOURCE` is a Rust
//! type (`Secret`, `k8s_openapi::api::core::v1::Pod`) or strings
//! (`"group", "version", "plural"` or `"group/version", "plural"`), absent for
//! activities; each option is `key = value`, `key(…)` or a bare `flag`.
//! Every problem is collected and reported at once.

use std::collections::BTreeMap;

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Token};

use crate::kinds::{Kind, list};

/// The resource a handler serves.
pub(crate) enum Resource {
    /// A Rust type implementing `kube::Resource`.
    Typed(syn::Type),
    /// Group, version and plural.
    Dynamic {
        group: String,
        version: String,
        plural: String,
    },
}

/// A raw option value, before validation.
pub(crate) enum Raw {
    /// `key`
    Flag,
    /// `key = expr`
    Value(Expr),
    /// `key("k" = expr, …)` or `key(expr, …)`
    List(Vec<(Option<LitStr>, Expr)>),
}

/// One positional argument or option, as written.
enum Item {
    Positional(Positional),
    Option(Ident, Raw),
}

// Short-lived, a handful per attribute: boxing the type buys nothing.
#[allow(clippy::large_enum_variant)]
enum Positional {
    Str(LitStr),
    Type(Box<syn::Type>),
}

/// The attribute's arguments, as written.
pub(crate) struct RawArgs {
    items: Vec<Item>,
}

impl Parse for RawArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut items = Vec::new();
        while !input.is_empty() {
            items.push(parse_item(input)?);
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(RawArgs { items })
    }
}

fn is_option_name(ident: &Ident) -> bool {
    let name = ident.to_string();
    Kind::all()
        .iter()
        .any(|k| k.options().contains(&name.as_str()))
}

fn parse_item(input: ParseStream<'_>) -> syn::Result<Item> {
    // "string" — a positional part of a dynamic resource.
    if input.peek(LitStr) {
        return Ok(Item::Positional(Positional::Str(input.parse()?)));
    }
    if input.peek(Ident) && !input.peek2(Token![::]) {
        let fork = input.fork();
        let ident: Ident = fork.parse()?;
        // key = value
        if fork.peek(Token![=]) {
            input.parse::<Ident>()?;
            input.parse::<Token![=]>()?;
            return Ok(Item::Option(ident, Raw::Value(input.parse()?)));
        }
        // key(…)
        if fork.peek(syn::token::Paren) {
            input.parse::<Ident>()?;
            let content;
            syn::parenthesized!(content in input);
            let entries = Punctuated::<ListEntry, Token![,]>::parse_terminated(&content)?;
            return Ok(Item::Option(
                ident,
                Raw::List(entries.into_iter().map(|e| (e.key, e.value)).collect()),
            ));
        }
        // flag (a lowercase option name; anything else is a type)
        if (fork.is_empty() || fork.peek(Token![,])) && is_option_name(&ident) {
            input.parse::<Ident>()?;
            return Ok(Item::Option(ident, Raw::Flag));
        }
    }
    // Type — the resource.
    Ok(Item::Positional(Positional::Type(Box::new(input.parse()?))))
}

struct ListEntry {
    key: Option<LitStr>,
    value: Expr,
}

impl Parse for ListEntry {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        // "key" = value
        if input.peek(LitStr) && input.peek2(Token![=]) {
            let key = input.parse()?;
            input.parse::<Token![=]>()?;
            return Ok(ListEntry {
                key: Some(key),
                value: input.parse()?,
            });
        }
        // value
        Ok(ListEntry {
            key: None,
            value: input.parse()?,
        })
    }
}

/// A duration option as seconds and nanoseconds.
#[derive(Clone, Copy)]
pub(crate) struct Secs {
    pub(crate) secs: u64,
    pub(crate) nanos: u32,
}

/// A `value`/`old`/`new` or `param` condition or value.
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

/// The validated attribute.
#[derive(Default)]
pub(crate) struct Spec {
    pub(crate) resource: Option<Resource>,
    pub(crate) id: Option<LitStr>,
    pub(crate) retries: Option<u32>,
    pub(crate) backoff: Option<Secs>,
    pub(crate) timeout: Option<Secs>,
    pub(crate) errors: Option<Ident>,
    pub(crate) param: Option<Expr>,
    pub(crate) labels: Vec<(LitStr, MetaSpec)>,
    pub(crate) annotations: Vec<(LitStr, MetaSpec)>,
    pub(crate) when: Option<syn::Path>,
    pub(crate) field: Option<LitStr>,
    pub(crate) value: Option<ValueSpec>,
    pub(crate) old: Option<ValueSpec>,
    pub(crate) new: Option<ValueSpec>,
    pub(crate) deleted: bool,
    pub(crate) optional: bool,
    pub(crate) no_finalizers: bool,
    pub(crate) interval: Option<Secs>,
    pub(crate) initial_delay: Option<Secs>,
    pub(crate) sharp: bool,
    pub(crate) idle: Option<Secs>,
    pub(crate) cancellation_backoff: Option<Secs>,
    pub(crate) cancellation_timeout: Option<Secs>,
    pub(crate) cancellation_polling: Option<Secs>,
    pub(crate) operations: Vec<Ident>,
    pub(crate) subresource: Option<LitStr>,
    pub(crate) persistent: bool,
    pub(crate) side_effects: bool,
    pub(crate) ignore_failures: bool,
}

/// Collects errors so that all are reported at once.
#[derive(Default)]
pub(crate) struct Errors {
    error: Option<syn::Error>,
}

impl Errors {
    pub(crate) fn push(&mut self, span: Span, message: impl std::fmt::Display) {
        self.push_error(syn::Error::new(span, message));
    }

    pub(crate) fn push_error(&mut self, error: syn::Error) {
        match &mut self.error {
            Some(existing) => existing.combine(error),
            None => self.error = Some(error),
        }
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        self.error.map_or(Ok(()), Err)
    }
}

fn resource_help(kind: Kind) -> String {
    format!(
        "write the resource first: `#[{k}(MyResource, …)]` with a type implementing `kube::Resource`, or `#[{k}(\"group\", \"version\", \"plural\", …)]`",
        k = kind.name()
    )
}

/// Validates the raw arguments for a kind.
pub(crate) fn validate(kind: Kind, raw: RawArgs, attr_span: Span, errors: &mut Errors) -> Spec {
    let mut spec = Spec::default();
    let mut positional = Vec::new();
    let mut seen: BTreeMap<String, Span> = BTreeMap::new();
    let mut saw_option = false;
    let mut misplaced = false;
    for item in raw.items {
        match item {
            Item::Positional(p) => {
                if saw_option {
                    let span = match &p {
                        Positional::Str(s) => s.span(),
                        Positional::Type(t) => t.span(),
                    };
                    errors.push(span, "the resource must come before the options");
                    misplaced = true;
                } else {
                    positional.push(p);
                }
            }
            Item::Option(key, value) => {
                saw_option = true;
                let name = key.to_string();
                if seen.contains_key(&name) {
                    errors.push(
                        key.span(),
                        format!("duplicate option `{name}`; set it once"),
                    );
                    continue;
                }
                seen.insert(name.clone(), key.span());
                let valid = kind.options();
                if !valid.contains(&name.as_str()) {
                    let kinds = Kind::kinds_with_option(&name);
                    let message = if kinds.is_empty() {
                        format!(
                            "unknown option `{name}`; valid options for `{}` are: {}",
                            kind.name(),
                            list(&valid)
                        )
                    } else {
                        let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
                        let only = if names.len() <= 3 {
                            format!(" (only for {})", list(&names))
                        } else {
                            String::new()
                        };
                        format!(
                            "option `{name}` is not valid for `{}`{only}; valid options for `{}` are: {}",
                            kind.name(),
                            kind.name(),
                            list(&valid)
                        )
                    };
                    errors.push(key.span(), message);
                    continue;
                }
                set_option(&mut spec, &key, value, errors);
            }
        }
    }
    if !misplaced {
        spec.resource = resource(kind, positional, attr_span, errors);
    }
    check_combinations(kind, &spec, &seen, attr_span, errors);
    spec
}

fn resource(
    kind: Kind,
    positional: Vec<Positional>,
    attr_span: Span,
    errors: &mut Errors,
) -> Option<Resource> {
    if kind.is_activity() {
        if let Some(first) = positional.first() {
            let span = match first {
                Positional::Str(s) => s.span(),
                Positional::Type(t) => t.span(),
            };
            errors.push(
                span,
                format!("`{}` handlers take no resource; remove it", kind.name()),
            );
        }
        return None;
    }
    let mut strings = Vec::new();
    let mut types = Vec::new();
    for p in positional {
        match p {
            Positional::Str(s) => strings.push(s),
            Positional::Type(t) => types.push(*t),
        }
    }
    match (types.len(), strings.len()) {
        (0, 0) => {
            errors.push(
                attr_span,
                format!("missing resource; {}", resource_help(kind)),
            );
            None
        }
        (1, 0) => types.pop().map(Resource::Typed),
        (0, 2) => {
            let gv = strings[0].value();
            let (group, version) = match gv.split_once('/') {
                Some((g, v)) => (g.to_owned(), v.to_owned()),
                None => (String::new(), gv.clone()),
            };
            dynamic(group, version, strings[1].value(), &strings, errors)
        }
        (0, 3) => dynamic(
            strings[0].value(),
            strings[1].value(),
            strings[2].value(),
            &strings,
            errors,
        ),
        (0, 1) => {
            errors.push(
                strings[0].span(),
                "a resource by plural alone needs discovery, which is not supported; write `\"group\", \"version\", \"plural\"` or a type",
            );
            None
        }
        _ => {
            let span = types
                .first()
                .map(Spanned::span)
                .or(strings.first().map(LitStr::span))
                .unwrap_or(attr_span);
            errors.push(
                span,
                format!("expected one resource; {}", resource_help(kind)),
            );
            None
        }
    }
}

fn dynamic(
    group: String,
    version: String,
    plural: String,
    strings: &[LitStr],
    errors: &mut Errors,
) -> Option<Resource> {
    let span = strings.last().map_or_else(Span::call_site, LitStr::span);
    if version.is_empty() || plural.is_empty() {
        errors.push(
            span,
            "the version and plural of a resource must not be empty",
        );
        return None;
    }
    if plural.chars().any(|c| c.is_uppercase()) {
        errors.push(
            span,
            format!(
                "`{plural}` must be the lowercase plural name (e.g. `configmaps`), not the kind"
            ),
        );
        return None;
    }
    Some(Resource::Dynamic {
        group,
        version,
        plural,
    })
}

fn check_combinations(
    kind: Kind,
    spec: &Spec,
    seen: &BTreeMap<String, Span>,
    attr_span: Span,
    errors: &mut Errors,
) {
    if kind == Kind::OnField && spec.field.is_none() && !seen.contains_key("field") {
        errors.push(
            attr_span,
            "`on_field` needs a field: add `field = \"spec.path\"`",
        );
    }
    if kind != Kind::OnField && spec.field.is_none() && !seen.contains_key("field") {
        for option in ["value", "old", "new"] {
            if let Some(span) = seen.get(option) {
                errors.push(
                    *span,
                    format!("`{option}` needs a `field` to compare; add `field = \"spec.path\"`"),
                );
            }
        }
    }
    if let Some(span) = seen.get("value")
        && (seen.contains_key("old") || seen.contains_key("new"))
    {
        errors.push(*span, "use either `value` or `old`/`new`, not both");
    }
}

fn literal(expr: &Expr) -> Option<&Lit> {
    match expr {
        Expr::Lit(ExprLit { lit, .. }) => Some(lit),
        Expr::Group(group) => literal(&group.expr),
        _ => None,
    }
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

fn str_value(key: &Ident, raw: Raw, errors: &mut Errors) -> Option<LitStr> {
    let expr = expect_value(key, raw, "\"…\"", errors)?;
    match literal(&expr) {
        Some(Lit::Str(s)) if !s.value().is_empty() => Some(s.clone()),
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

fn secs_value(key: &Ident, raw: Raw, errors: &mut Errors) -> Option<Secs> {
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

fn bool_value(key: &Ident, raw: Raw, errors: &mut Errors) -> bool {
    match raw {
        Raw::Flag => true,
        Raw::Value(expr) => match literal(&expr) {
            Some(Lit::Bool(b)) => b.value,
            _ => {
                errors.push(
                    expr.span(),
                    format!("`{key}` expects `true` or `false` (or write just `{key}`)"),
                );
                false
            }
        },
        Raw::List(_) => {
            errors.push(
                key.span(),
                format!("`{key}` is a flag: write `{key}` or `{key} = true`"),
            );
            false
        }
    }
}

fn last_segment(path: &syn::Path) -> String {
    path.segments
        .last()
        .map(|s| s.ident.to_string())
        .unwrap_or_default()
}

fn value_spec(key: &str, expr: Expr, errors: &mut Errors) -> Option<ValueSpec> {
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

fn meta_entries(key: &Ident, raw: Raw, errors: &mut Errors) -> Vec<(LitStr, MetaSpec)> {
    let Raw::List(entries) = raw else {
        errors.push(
            key.span(),
            format!(
                "`{key}` expects a list: `{key}(\"key\" = \"value\", \"other\" = kopf::PRESENT)`"
            ),
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut keys = BTreeMap::new();
    for (entry_key, value) in entries {
        let Some(entry_key) = entry_key else {
            errors.push(
                value.span(),
                format!("`{key}` entries are `\"key\" = value`"),
            );
            continue;
        };
        if keys.insert(entry_key.value(), ()).is_some() {
            errors.push(
                entry_key.span(),
                format!("duplicate key `{}` in `{key}`", entry_key.value()),
            );
            continue;
        }
        let spec = match &value {
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) => Some(MetaSpec::Equals(s.clone())),
            Expr::Path(p) if p.qself.is_none() => Some(match last_segment(&p.path).as_str() {
                "PRESENT" => MetaSpec::Present,
                "ABSENT" => MetaSpec::Absent,
                _ => MetaSpec::Callback(p.path.clone()),
            }),
            other => {
                errors.push(
                    other.span(),
                    format!(
                        "`{key}` values are a string, `kopf::PRESENT`, `kopf::ABSENT` or a fn path"
                    ),
                );
                None
            }
        };
        if let Some(spec) = spec {
            out.push((entry_key, spec));
        }
    }
    out
}

const OPERATIONS: [&str; 4] = ["CREATE", "UPDATE", "DELETE", "CONNECT"];

fn set_option(spec: &mut Spec, key: &Ident, raw: Raw, errors: &mut Errors) {
    let name = key.to_string();
    match name.as_str() {
        // id = "…"
        "id" => spec.id = str_value(key, raw, errors),
        // field = "spec.path"
        "field" => {
            spec.field = str_value(key, raw, errors);
            if let Some(field) = &spec.field
                && field.value().split('.').any(str::is_empty)
            {
                errors.push(
                    field.span(),
                    "`field` must be a dot-separated path like `spec.size`",
                );
            }
        }
        // subresource = "status"
        "subresource" => spec.subresource = str_value(key, raw, errors),
        // retries = 3
        "retries" => {
            if let Some(expr) = expect_value(key, raw, "<count>", errors) {
                match literal(&expr) {
                    Some(Lit::Int(int)) if int.base10_parse::<u32>().is_ok() => {
                        spec.retries = int.base10_parse().ok()
                    }
                    _ => errors.push(
                        expr.span(),
                        "`retries` expects a non-negative integer, e.g. `retries = 3`",
                    ),
                }
            }
        }
        // backoff = 10 | 0.5
        "backoff" => spec.backoff = secs_value(key, raw, errors),
        "timeout" => spec.timeout = secs_value(key, raw, errors),
        "interval" => spec.interval = secs_value(key, raw, errors),
        "initial_delay" => spec.initial_delay = secs_value(key, raw, errors),
        "idle" => spec.idle = secs_value(key, raw, errors),
        "cancellation_backoff" => spec.cancellation_backoff = secs_value(key, raw, errors),
        "cancellation_timeout" => spec.cancellation_timeout = secs_value(key, raw, errors),
        "cancellation_polling" => spec.cancellation_polling = secs_value(key, raw, errors),
        // errors = kopf::ErrorsMode::PERMANENT | "permanent"
        "errors" => {
            if let Some(expr) = expect_value(key, raw, "kopf::ErrorsMode::Permanent", errors) {
                let mode = match &expr {
                    Expr::Path(p) => Some(last_segment(&p.path)),
                    Expr::Lit(ExprLit {
                        lit: Lit::Str(s), ..
                    }) => Some(s.value()),
                    _ => None,
                };
                let variant = match mode.map(|m| m.to_lowercase()).as_deref() {
                    Some("temporary") => Some("Temporary"),
                    Some("permanent") => Some("Permanent"),
                    Some("ignored") => Some("Ignored"),
                    _ => None,
                };
                match variant {
                    Some(v) => spec.errors = Some(Ident::new(v, expr.span())),
                    None => errors.push(
                        expr.span(),
                        "`errors` expects `kopf::ErrorsMode::Temporary`, `kopf::ErrorsMode::Permanent` or `kopf::ErrorsMode::Ignored`",
                    ),
                }
            }
        }
        // param = <literal or json!(…)>
        "param" => {
            if let Some(expr) = expect_value(key, raw, "<literal>", errors) {
                match value_spec("param", expr, errors) {
                    Some(ValueSpec::Json(expr)) => spec.param = Some(expr),
                    Some(_) => errors.push(key.span(), "`param` expects a literal or `json!(…)`"),
                    None => {}
                }
            }
        }
        // labels("key" = "value" | kopf::PRESENT | kopf::ABSENT | callback, …)
        "labels" => spec.labels = meta_entries(key, raw, errors),
        "annotations" => spec.annotations = meta_entries(key, raw, errors),
        // when = path::to::callback
        "when" => {
            if let Some(expr) = expect_value(key, raw, "my_filter_fn", errors) {
                match expr {
                    Expr::Path(p) if p.qself.is_none() => spec.when = Some(p.path),
                    other => errors.push(
                        other.span(),
                        "`when` expects the path of a `fn(&kopf::Kwargs) -> bool`",
                    ),
                }
            }
        }
        // value/old/new = literal | json!(…) | kopf::PRESENT | kopf::ABSENT | callback
        "value" | "old" | "new" => {
            if let Some(expr) = expect_value(key, raw, "<literal>", errors) {
                let parsed = value_spec(&name, expr, errors);
                match name.as_str() {
                    "value" => spec.value = parsed,
                    "old" => spec.old = parsed,
                    _ => spec.new = parsed,
                }
            }
        }
        // operations("CREATE", "UPDATE")
        "operations" => {
            let Raw::List(entries) = raw else {
                errors.push(
                    key.span(),
                    "`operations` expects a list: `operations(\"CREATE\", \"UPDATE\")`",
                );
                return;
            };
            for (entry_key, value) in entries {
                let lit = match (entry_key, literal(&value)) {
                    (None, Some(Lit::Str(s))) => s.clone(),
                    _ => {
                        errors.push(
                            value.span(),
                            format!("`operations` entries are strings: {}", list(&OPERATIONS)),
                        );
                        continue;
                    }
                };
                let upper = lit.value();
                if !OPERATIONS.contains(&upper.as_str()) {
                    errors.push(
                        lit.span(),
                        format!(
                            "unknown operation `{upper}`; valid operations are: {}",
                            list(&OPERATIONS)
                        ),
                    );
                    continue;
                }
                let variant = match upper.as_str() {
                    "CREATE" => "Create",
                    "UPDATE" => "Update",
                    "DELETE" => "Delete",
                    _ => "Connect",
                };
                spec.operations.push(Ident::new(variant, lit.span()));
            }
        }
        "deleted" => spec.deleted = bool_value(key, raw, errors),
        "optional" => spec.optional = bool_value(key, raw, errors),
        "no_finalizers" => spec.no_finalizers = bool_value(key, raw, errors),
        "sharp" => spec.sharp = bool_value(key, raw, errors),
        "persistent" => spec.persistent = bool_value(key, raw, errors),
        "side_effects" => spec.side_effects = bool_value(key, raw, errors),
        "ignore_failures" => spec.ignore_failures = bool_value(key, raw, errors),
        _ => errors.push(key.span(), format!("option `{name}` is not implemented")),
    }
}
