//! `#[rbac(groups = "…", resources = "…", verbs = "…")]`: a permission the
//! operator needs for what its handlers do with their own client, in the
//! manner of kubebuilder's RBAC markers. The item it decorates is emitted
//! unchanged, next to a `const` record submitted to `inventory`.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Ident, LitStr, Token};

use crate::expand::private;
use crate::kinds::{list, suggestion};

/// The options `#[rbac]` takes.
const OPTIONS: [&str; 7] = [
    "groups",
    "resources",
    "verbs",
    "resource_names",
    "namespace",
    "cluster",
    "why",
];

/// The verbs the API server's authorizers know.
const VERBS: [&str; 15] = [
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "impersonate",
    "bind",
    "escalate",
    "use",
    "approve",
    "sign",
    "*",
];

/// One `key = "value"` or bare `flag`.
struct Arg {
    key: Ident,
    value: Option<LitStr>,
}

impl Parse for Arg {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let key: Ident = input.parse()?;
        let value = if input.peek(Token![=]) {
            input.parse::<Token![=]>()?;
            Some(input.parse()?)
        } else {
            None
        };
        Ok(Self { key, value })
    }
}

/// A parsed `#[rbac]`.
#[derive(Default)]
struct Rule {
    groups: Option<Vec<String>>,
    resources: Vec<String>,
    verbs: Vec<String>,
    names: Vec<String>,
    namespace: Option<String>,
    cluster: bool,
    why: String,
}

/// Splits a list written as `"a,b"` or `"a;b"` (kubebuilder's separator).
fn split(value: &str) -> Vec<String> {
    value
        .split([',', ';'])
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The API groups of `groups = "…"`: `""` and `core` are the core group,
/// as in kubebuilder.
fn groups(value: &str) -> Vec<String> {
    if value.trim().is_empty() {
        return vec![String::new()];
    }
    split(value)
        .into_iter()
        .map(|group| {
            if group == "core" {
                String::new()
            } else {
                group
            }
        })
        .collect()
}

/// Expands `#[rbac(attr)] item`. On errors, emits the item unchanged next to them.
pub(crate) fn rbac(attr: TokenStream, item: TokenStream) -> TokenStream {
    match parse(attr) {
        Ok(rule) => expand(&rule, item),
        Err(error) => {
            let error = error.to_compile_error();
            quote!(#item #error)
        }
    }
}

fn parse(attr: TokenStream) -> syn::Result<Rule> {
    let args = syn::parse::Parser::parse2(Punctuated::<Arg, Token![,]>::parse_terminated, attr)?;
    let mut rule = Rule::default();
    let mut errors: Option<syn::Error> = None;
    let mut push = |error: syn::Error| match &mut errors {
        Some(errors) => errors.combine(error),
        None => errors = Some(error),
    };
    for arg in args {
        let key = arg.key.to_string();
        let value = arg.value.as_ref().map(LitStr::value);
        match (key.as_str(), value) {
            ("cluster", None) => rule.cluster = true,
            ("cluster", Some(_)) => push(syn::Error::new(
                arg.key.span(),
                "`cluster` is a flag: write `cluster` alone",
            )),
            ("groups", Some(v)) => rule.groups = Some(groups(&v)),
            ("resources", Some(v)) => rule.resources = split(&v),
            ("verbs", Some(v)) => rule.verbs = split(&v),
            ("resource_names", Some(v)) => rule.names = split(&v),
            ("namespace", Some(v)) => rule.namespace = Some(v),
            ("why", Some(v)) => rule.why = v,
            (known, None) if OPTIONS.contains(&known) => push(syn::Error::new(
                arg.key.span(),
                format!("`{known}` takes a string: `{known} = \"…\"`"),
            )),
            (unknown, _) => push(syn::Error::new(
                arg.key.span(),
                format!(
                    "unknown option `{unknown}` of `#[rbac]`; it takes {}{}",
                    list(&OPTIONS),
                    suggestion(unknown, &OPTIONS)
                ),
            )),
        }
    }
    let span = Span::call_site();
    if rule.groups.is_none() {
        push(syn::Error::new(
            span,
            "`#[rbac]` needs `groups = \"…\"` (`\"\"` for the core group, e.g. ConfigMaps)",
        ));
    }
    if rule.resources.is_empty() {
        push(syn::Error::new(
            span,
            "`#[rbac]` needs `resources = \"…\"`: plural names, comma-separated (`pods/status` for a subresource)",
        ));
    }
    if rule.verbs.is_empty() {
        push(syn::Error::new(
            span,
            "`#[rbac]` needs `verbs = \"…\"`, comma-separated (e.g. `\"get,create,patch\"`)",
        ));
    }
    for verb in &rule.verbs {
        if !VERBS.contains(&verb.as_str()) {
            push(syn::Error::new(
                span,
                format!(
                    "unknown verb `{verb}` in `#[rbac]`; the verbs are {}{}",
                    list(&VERBS),
                    suggestion(verb, &VERBS)
                ),
            ));
        }
    }
    if rule.cluster && rule.namespace.is_some() {
        push(syn::Error::new(
            span,
            "`#[rbac]` takes `cluster` or `namespace = \"…\"`, not both",
        ));
    }
    match errors {
        Some(errors) => Err(errors),
        None => Ok(rule),
    }
}

fn expand(rule: &Rule, item: TokenStream) -> TokenStream {
    let p = private();
    let groups = rule.groups.as_deref().unwrap_or_default();
    let (resources, verbs, names, why) = (&rule.resources, &rule.verbs, &rule.names, &rule.why);
    let scope = match (&rule.namespace, rule.cluster) {
        (Some(namespace), _) => quote!(#p::RbacScope::Namespace(#namespace)),
        (None, true) => quote!(#p::RbacScope::Cluster),
        (None, false) => quote!(#p::RbacScope::Served),
    };
    let span = item.span();
    quote::quote_spanned! {span=>
        #item
        const _: () = {
            #p::inventory::submit! {
                #p::RbacRecord {
                    groups: &[#(#groups),*],
                    resources: &[#(#resources),*],
                    verbs: &[#(#verbs),*],
                    resource_names: &[#(#names),*],
                    scope: #scope,
                    why: #why,
                    path: ::core::module_path!(),
                }
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(attr: TokenStream) -> String {
        match parse(attr) {
            Ok(_) => panic!("expected an error"),
            Err(errors) => errors
                .into_iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    #[test]
    fn lists_split_on_commas_and_semicolons() {
        let rule = parse(quote!(
            groups = "",
            resources = "configmaps, secrets",
            verbs = "get;list"
        ))
        .expect("parses");
        assert_eq!(rule.groups, Some(vec![String::new()]));
        assert_eq!(rule.resources, ["configmaps", "secrets"]);
        assert_eq!(rule.verbs, ["get", "list"]);
        assert!(!rule.cluster && rule.namespace.is_none());
        let rule = parse(quote!(
            groups = "core,apps",
            resources = "pods",
            verbs = "get"
        ))
        .expect("parses");
        assert_eq!(rule.groups, Some(vec![String::new(), "apps".to_owned()]));
    }

    #[test]
    fn every_missing_part_is_reported_at_once() {
        let message = error(quote!(why = "x"));
        for part in ["groups", "resources", "verbs"] {
            assert!(message.contains(&format!("needs `{part}")), "{message}");
        }
    }

    #[test]
    fn a_misspelt_verb_or_option_gets_a_suggestion() {
        let message = error(quote!(
            groups = "",
            resources = "pods",
            verbs = "get,pach",
            clustr
        ));
        assert!(message.contains("unknown verb `pach`"), "{message}");
        assert!(message.contains("did you mean `patch`?"), "{message}");
        assert!(message.contains("unknown option `clustr`"), "{message}");
        assert!(message.contains("did you mean `cluster`?"), "{message}");
    }

    #[test]
    fn cluster_and_namespace_exclude_each_other() {
        let message = error(quote!(
            groups = "",
            resources = "pods",
            verbs = "get",
            cluster,
            namespace = "ops"
        ));
        assert!(message.contains("not both"), "{message}");
    }

    #[test]
    fn the_item_is_kept_and_a_record_submitted() {
        let out = rbac(
            quote!(
                groups = "apps",
                resources = "deployments",
                verbs = "get",
                cluster
            ),
            quote!(
                async fn f() {}
            ),
        )
        .to_string();
        assert!(out.contains("async fn f"), "{out}");
        assert!(out.contains("RbacRecord"), "{out}");
        assert!(out.contains("RbacScope :: Cluster"), "{out}");
    }
}
