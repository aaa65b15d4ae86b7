//! Parsing and validating the attribute's arguments into an [`Attribute`].
//!
//! Syntax: `#[kind(RESOURCE, option, option, …)]`, where `RESOURCE` (absent
//! for activities) mirrors Kopf's resource selectors: a Rust type (`Secret`,
//! `k8s_openapi::api::core::v1::Pod`), or one to three strings (`"name"`,
//! `"group", "name"`, `"group", "version", "name"`), or keywords among the
//! options (`kind = "Deployment"`, `group = "apps"`); each option is
//! `key = value`, `key(…)` or a bare `flag`. Every problem is collected and
//! reported at once. The options themselves are held and set in `options`,
//! their values parsed in `values`.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, Ident, LitStr, Token};

use crate::kinds::{Kind, list, suggestion};
use crate::options::Options;

/// The resource a handler serves, as Kopf's selectors name it.
pub(crate) enum Resource {
    /// A Rust type implementing `kube::Resource`.
    Typed(syn::Type),
    /// Group, version and a name.
    Dynamic {
        group: String,
        version: String,
        name: String,
    },
    /// One string: a name, maybe with `.group` or `.version.group`.
    Named(String),
    /// A group (its preferred version) and a name.
    NamedIn { group: String, name: String },
    /// A keyword name (`kind = "…"`, …), maybe narrowed to a group and a version.
    Keyword {
        key: NameKey,
        name: String,
        group: Option<String>,
        version: Option<String>,
    },
}

/// The keywords that name a resource (Kopf's `kind=`, `plural=`, …).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameKey {
    Kind,
    Plural,
    Singular,
    Shortcut,
    Category,
}

impl NameKey {
    const ALL: [NameKey; 5] = [
        NameKey::Kind,
        NameKey::Plural,
        NameKey::Singular,
        NameKey::Shortcut,
        NameKey::Category,
    ];

    pub(crate) fn key(self) -> &'static str {
        match self {
            NameKey::Kind => "kind",
            NameKey::Plural => "plural",
            NameKey::Singular => "singular",
            NameKey::Shortcut => "shortcut",
            NameKey::Category => "category",
        }
    }

    /// The `ResourceRef` constructor of this keyword.
    pub(crate) fn constructor(self) -> &'static str {
        match self {
            NameKey::Kind => "by_kind",
            NameKey::Plural => "by_plural",
            NameKey::Singular => "by_singular",
            NameKey::Shortcut => "by_shortcut",
            NameKey::Category => "by_category",
        }
    }

    fn of(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.key() == key)
    }
}

/// The keywords that narrow a keyword name.
const NARROWING_KEYS: [&str; 2] = ["group", "version"];

/// Whether `key` belongs to the resource rather than to the options.
fn is_resource_key(key: &str) -> bool {
    NameKey::of(key).is_some() || NARROWING_KEYS.contains(&key)
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

/// A resource keyword as written: `kind = "Deployment"`.
struct ResourceKey {
    key: Ident,
    value: Raw,
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
        "write the resource first, in one of Kopf's forms: \
         `#[{k}(MyResource, …)]` (a type implementing `kube::Resource`); \
         `#[{k}(\"kopfexamples\", …)]` (a plural, singular, kind or short name, \
         optionally as `name.group` or `name.version.group`); \
         `#[{k}(\"apps\", \"deployment\", …)]` (a group, `group/version` or `v1`, then a name); \
         `#[{k}(\"kopf.dev\", \"v1\", \"kopfexamples\", …)]`; \
         or `#[{k}(kind = \"Deployment\", group = \"apps\", …)]` \
         (one of `kind`, `plural`, `singular`, `shortcut` or `category`, \
         with `group` and `version` optional)",
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
    let mut keywords = Vec::new();
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
            Item::Option(key, value) if is_resource_key(&key.to_string()) => {
                saw_option = true;
                keywords.push(ResourceKey { key, value });
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
        attribute.resource = resource(kind, positional, keywords, attr_span, errors);
    }
    check_combinations(kind, &attribute.options, attr_span, errors);
    attribute
}

fn resource(
    kind: Kind,
    positional: Vec<Positional>,
    keywords: Vec<ResourceKey>,
    attr_span: Span,
    errors: &mut Errors,
) -> Option<Resource> {
    if kind.is_activity() {
        let span = positional
            .first()
            .map(|p| match p {
                Positional::Str(s) => s.span(),
                Positional::Type(t) => t.span(),
            })
            .or(keywords.first().map(|k| k.key.span()));
        if let Some(span) = span {
            errors.push(
                span,
                format!("`{}` handlers take no resource; remove it", kind.name()),
            );
        }
        return None;
    }
    let keyword = keyword_resource(&keywords, errors)?;
    let mut strings = Vec::new();
    let mut types = Vec::new();
    for p in positional {
        match p {
            Positional::Str(s) => strings.push(s),
            Positional::Type(t) => types.push(*t),
        }
    }
    if let Some(keyword) = keyword {
        if let Some(span) = types
            .first()
            .map(Spanned::span)
            .or(strings.first().map(LitStr::span))
        {
            let by = keywords
                .iter()
                .find(|k| NameKey::of(&k.key.to_string()).is_some())
                .map_or_else(String::new, |k| k.key.to_string());
            errors.push(
                span,
                format!("the resource is named twice, here and by `{by}`; keep one"),
            );
            return None;
        }
        return keyword.finish(errors);
    }
    if let Some(narrowing) = keywords.first() {
        let message = if types.is_empty() && strings.is_empty() {
            format!(
                "`{}` narrows a keyword name, but there is none; add one of `kind`, `plural`, `singular`, `shortcut` or `category`",
                narrowing.key
            )
        } else {
            format!(
                "`{}` goes with a keyword name only; with a positional resource, write the group and version in it, e.g. `\"apps/v1\", \"deployments\"`",
                narrowing.key
            )
        };
        errors.push(narrowing.key.span(), message);
        return None;
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
        // "name", "name.group", "name.version.group"
        (0, 1) => {
            let name = strings[0].value();
            if name.is_empty() || name.starts_with('.') {
                errors.push(strings[0].span(), "the resource's name must not be empty");
                return None;
            }
            Some(Resource::Named(name))
        }
        // "group", "name"; "group/version", "name"; "v1", "name"
        (0, 2) => {
            let group = strings[0].value();
            let name = nonempty_name(&strings[1], errors)?;
            match group.rsplit_once('/') {
                Some((group, version)) => dynamic(
                    group.to_owned(),
                    version.to_owned(),
                    name,
                    &strings[0],
                    errors,
                ),
                None if group == "v1" => Some(Resource::Dynamic {
                    group: String::new(),
                    version: group,
                    name,
                }),
                None => Some(Resource::NamedIn { group, name }),
            }
        }
        // "group", "version", "name"
        (0, 3) => {
            let name = nonempty_name(&strings[2], errors)?;
            dynamic(
                strings[0].value(),
                strings[1].value(),
                name,
                &strings[1],
                errors,
            )
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

fn nonempty_name(name: &LitStr, errors: &mut Errors) -> Option<String> {
    let value = name.value();
    if value.is_empty() {
        errors.push(name.span(), "the resource's name must not be empty");
        return None;
    }
    Some(value)
}

fn dynamic(
    group: String,
    version: String,
    name: String,
    version_lit: &LitStr,
    errors: &mut Errors,
) -> Option<Resource> {
    if version.is_empty() {
        errors.push(
            version_lit.span(),
            "the resource's version must not be empty; name the group alone for its preferred version",
        );
        return None;
    }
    Some(Resource::Dynamic {
        group,
        version,
        name,
    })
}

/// The keyword resource being collected: `kind = "…"`, `group = "…"`, ….
#[derive(Default)]
struct KeywordResource {
    name: Option<(NameKey, String, Span)>,
    group: Option<String>,
    version: Option<String>,
}

impl KeywordResource {
    fn finish(self, errors: &mut Errors) -> Option<Resource> {
        let (key, name, span) = self.name?;
        if name.is_empty() {
            errors.push(span, format!("`{}` must not be empty", key.key()));
            return None;
        }
        Some(Resource::Keyword {
            key,
            name,
            group: self.group,
            version: self.version,
        })
    }
}

/// The keyword resource, if a keyword name is given: `Some(None)` when
/// there is none, `None` after an error.
fn keyword_resource(
    keywords: &[ResourceKey],
    errors: &mut Errors,
) -> Option<Option<KeywordResource>> {
    let mut resource = KeywordResource::default();
    let mut seen: Vec<&Ident> = Vec::new();
    let mut failed = false;
    for ResourceKey { key, value } in keywords {
        let name = key.to_string();
        if let Some(first) = seen.iter().find(|k| **k == key) {
            errors.push(
                key.span(),
                format!("duplicate option `{name}`; set it once"),
            );
            errors.push(first.span(), format!("`{name}` first set here"));
            failed = true;
            continue;
        }
        seen.push(key);
        let Some(text) = string_value(value) else {
            errors.push(
                key.span(),
                format!("`{name}` expects a string literal, e.g. `{name} = \"…\"`"),
            );
            failed = true;
            continue;
        };
        match NameKey::of(&name) {
            Some(name_key) => {
                if let Some((other, _, _)) = &resource.name {
                    errors.push(
                        key.span(),
                        format!(
                            "`{}` and `{name}` both name the resource; keep one",
                            other.key()
                        ),
                    );
                    failed = true;
                    continue;
                }
                resource.name = Some((name_key, text, key.span()));
            }
            None if name == "group" => resource.group = Some(text),
            None => {
                if text.is_empty() {
                    errors.push(
                        key.span(),
                        "`version` must not be empty; leave it out for the preferred version",
                    );
                    failed = true;
                }
                resource.version = Some(text);
            }
        }
    }
    if failed {
        return None;
    }
    Some(resource.name.is_some().then_some(resource))
}

/// The string of `key = "…"`.
fn string_value(raw: &Raw) -> Option<String> {
    match raw {
        Raw::Value(Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s),
            ..
        })) => Some(s.value()),
        _ => None,
    }
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
