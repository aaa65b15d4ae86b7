//! Validating the handler fn: its shape and its parameters (kwargs) by name.

use std::collections::BTreeMap;

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{FnArg, Ident, ItemFn, Pat, ReturnType, Type};

use crate::attr::Errors;
use crate::kinds::{KWARGS, Kind, list, suggestion};

/// How a parameter is injected.
pub(crate) enum Source {
    /// A kwarg, through the named injection trait.
    Kwarg { trait_name: &'static str },
    /// An index, by name.
    Index { name: String },
}

/// One parameter of the handler fn.
pub(crate) struct Param {
    pub(crate) source: Source,
    pub(crate) ty: Type,
    pub(crate) by_ref: bool,
}

/// The validated fn.
pub(crate) struct Signature {
    pub(crate) ident: Ident,
    pub(crate) is_async: bool,
    pub(crate) params: Vec<Param>,
    pub(crate) output_span: Span,
}

fn is_index_type(ty: &Type) -> bool {
    let inner = match ty {
        Type::Reference(r) => &*r.elem,
        other => other,
    };
    match inner {
        Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == "Index"),
        _ => false,
    }
}

/// Whether a parameter borrows its value: `&T`, or `Option<&T>` by the last
/// segment of its path (`Option`, `std::option::Option`). The runtime's
/// injection traits have one impl per mode, so that a blanket `T` never
/// overlaps an `Option<&T>`.
fn borrows(ty: &Type) -> bool {
    match ty {
        Type::Reference(_) => true,
        Type::Path(p) if p.qself.is_none() => p.path.segments.last().is_some_and(|last| {
            let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
                return false;
            };
            last.ident == "Option"
                && args.args.len() == 1
                && matches!(
                    args.args.first(),
                    Some(syn::GenericArgument::Type(Type::Reference(_)))
                )
        }),
        Type::Paren(inner) => borrows(&inner.elem),
        Type::Group(inner) => borrows(&inner.elem),
        _ => false,
    }
}

/// Why a parameter is available to few kinds, where it is not obvious.
fn why_only(name: &str) -> &'static str {
    match name {
        "settings" => ": the settings change only before the operator starts serving",
        _ => "",
    }
}

/// Checks the fn and resolves its parameters for `kind`.
pub(crate) fn validate(kind: Kind, item: &ItemFn, errors: &mut Errors) -> Signature {
    let sig = &item.sig;
    if let Some(constness) = &sig.constness {
        errors.push(constness.span(), "handlers cannot be `const fn`");
    }
    if let Some(unsafety) = &sig.unsafety {
        errors.push(unsafety.span(), "handlers cannot be `unsafe fn`");
    }
    if let Some(abi) = &sig.abi {
        errors.push(abi.span(), "handlers cannot declare an ABI");
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.push(
            sig.generics.span(),
            "handlers cannot be generic; name concrete types in the parameters",
        );
    }
    if let Some(variadic) = &sig.variadic {
        errors.push(variadic.span(), "handlers cannot be variadic");
    }
    let allowed = kind.kwargs();
    let mut seen: BTreeMap<String, Span> = BTreeMap::new();
    let mut params = Vec::new();
    for input in &sig.inputs {
        let typed = match input {
            FnArg::Receiver(receiver) => {
                errors.push(
                    receiver.span(),
                    "handlers must be free functions, not methods with `self`",
                );
                continue;
            }
            FnArg::Typed(typed) => typed,
        };
        let ident = match &*typed.pat {
            Pat::Ident(pat) if pat.subpat.is_none() => &pat.ident,
            other => {
                errors.push(
                    other.span(),
                    format!("handler parameters are injected by name; write `name: Type` with one of: {}", list(&allowed)),
                );
                continue;
            }
        };
        let raw = ident.to_string();
        let raw = raw.strip_prefix("r#").unwrap_or(&raw);
        // `_name` injects `name` too, so that unused parameters stay quiet.
        let name = raw
            .strip_prefix('_')
            .filter(|n| !n.is_empty())
            .unwrap_or(raw)
            .to_owned();
        if let Some(previous) = seen.insert(name.clone(), ident.span()) {
            let mut error = syn::Error::new(
                ident.span(),
                format!("parameter `{name}` is injected twice"),
            );
            error.combine(syn::Error::new(previous, "first injected here"));
            errors.push_error(error);
            continue;
        }
        let ty = (*typed.ty).clone();
        if let Type::ImplTrait(impl_trait) = &ty {
            errors.push(
                impl_trait.span(),
                "`impl Trait` parameters are not supported; name a concrete type",
            );
            continue;
        }
        let by_ref = borrows(&ty);
        let known = KWARGS.iter().find(|(kwarg, _)| *kwarg == name);
        match known {
            Some((kwarg, trait_name)) if allowed.contains(kwarg) => params.push(Param {
                source: Source::Kwarg { trait_name },
                ty,
                by_ref,
            }),
            Some(_) => {
                let kinds: Vec<&str> = Kind::all()
                    .iter()
                    .filter(|k| k.kwargs().contains(&name.as_str()))
                    .map(|k| k.name())
                    .collect();
                let only = if kinds.len() <= 3 {
                    format!(" (only to {}{})", list(&kinds), why_only(&name))
                } else {
                    String::new()
                };
                errors.push(
                    ident.span(),
                    format!(
                        "parameter `{name}` is not available to `{}` handlers{only}; available: {}",
                        kind.name(),
                        list(&allowed)
                    ),
                );
            }
            None if is_index_type(&ty) && kind.takes_indexes() => params.push(Param {
                source: Source::Index { name },
                ty,
                by_ref,
            }),
            None if is_index_type(&ty) => {
                errors.push(
                    ident.span(),
                    format!("`{}` handlers cannot take indexes", kind.name()),
                );
            }
            None => {
                let index_hint = if kind.takes_indexes() {
                    "; or an index by its id with type `&kopf::Index`"
                } else {
                    ""
                };
                errors.push(
                    ident.span(),
                    format!(
                        "unknown parameter `{name}` for `{}` handlers; available: {}{index_hint}{}",
                        kind.name(),
                        list(&allowed),
                        suggestion(&name, &allowed)
                    ),
                );
            }
        }
    }
    let output_span = match &sig.output {
        ReturnType::Default => sig.ident.span(),
        ReturnType::Type(_, ty) => ty.span(),
    };
    Signature {
        ident: sig.ident.clone(),
        is_async: sig.asyncness.is_some(),
        params,
        output_span,
    }
}

#[cfg(test)]
mod tests {
    use super::borrows;

    #[test]
    fn references_and_optional_references_borrow() {
        for ty in [
            "&str",
            "&Value",
            "&mut OperatorSettings",
            "Option<&str>",
            "Option<&'a Value>",
            "std::option::Option<&Spec>",
        ] {
            let ty: syn::Type = syn::parse_str(ty).expect("a type");
            assert!(borrows(&ty), "{}", quote::quote!(#ty));
        }
        for ty in [
            "Value",
            "Option<Value>",
            "Option<String>",
            "Vec<&str>",
            "Result<&str, ()>",
        ] {
            let ty: syn::Type = syn::parse_str(ty).expect("a type");
            assert!(!borrows(&ty), "{}", quote::quote!(#ty));
        }
    }
}
