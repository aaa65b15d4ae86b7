//! Parsing and validating the attribute's arguments into an [`Attribute`].
//!
//! Syntax: `#[kind(RESOURCE, option, option, …)]` where `RESOURCE` is a Rust
//! type (`Secret`, `k8s_openapi::api::core::v1::Pod`) or strings
//! (`"group", "version", "plural"` or `"group/version", "plural"`), absent for
//! activities; each option is `key = value`, `key(…)` or a bare `flag`.
//! Every problem is collected and reported at once. The options themselves
//! are held and set in `options`, their values parsed in `values`.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, Ident, LitStr, Token};

use crate::kinds::{Kind, list, suggestion};
use crate::options::Options;

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
        if (fork.is_empty() || fork.peek(Token![,])) && Options::is_key(&ident.to_string()) {
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

/// The validated attribute.
#[derive(Default)]
pub(crate) struct Attribute {
    pub(crate) resource: Option<Resource>,
    pub(crate) options: Options,
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
pub(crate) fn validate(
    kind: Kind,
    raw: RawArgs,
    attr_span: Span,
    errors: &mut Errors,
) -> Attribute {
    let mut attribute = Attribute::default();
    let mut positional = Vec::new();
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
                let valid = kind.options();
                if !valid.contains(&name.as_str()) {
                    let kinds = Kind::kinds_with_option(&name);
                    let message = if kinds.is_empty() {
                        format!(
                            "unknown option `{name}`; valid options for `{}` are: {}{}",
                            kind.name(),
                            list(&valid),
                            suggestion(&name, &valid)
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
                attribute.options.set(&key, value, errors);
            }
        }
    }
    if !misplaced {
        attribute.resource = resource(kind, positional, attr_span, errors);
    }
    check_combinations(kind, &attribute.options, attr_span, errors);
    attribute
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

fn check_combinations(kind: Kind, options: &Options, attr_span: Span, errors: &mut Errors) {
    let filters = &options.filters;
    let field = filters.field.span();
    if kind == Kind::OnField && field.is_none() {
        errors.push(
            attr_span,
            "`on_field` needs a field: add `field = \"spec.path\"`",
        );
    }
    if kind != Kind::OnField && field.is_none() {
        let compared = [
            ("value", filters.value.span()),
            ("old", filters.old.span()),
            ("new", filters.new.span()),
        ];
        for (option, span) in compared {
            if let Some(span) = span {
                errors.push(
                    span,
                    format!("`{option}` needs a `field` to compare; add `field = \"spec.path\"`"),
                );
            }
        }
    }
    if let Some(span) = filters.value.span()
        && (filters.old.span().is_some() || filters.new.span().is_some())
    {
        errors.push(span, "use either `value` or `old`/`new`, not both");
    }
}
