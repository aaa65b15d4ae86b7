//! Code generation: the unchanged fn, plus an invoker and a `const` record
//! submitted to `inventory`, both inside an anonymous `const _: () = { … };`.
//!
//! Generated code names the runtime only as `::kopf_runtime::__private::…`.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::LitStr;

use crate::attr::{MetaSpec, Resource, Secs, Spec, ValueSpec};
use crate::kinds::Kind;
use crate::signature::{Signature, Source};

fn private() -> TokenStream {
    quote!(::kopf_runtime::__private)
}

fn duration(value: Option<Secs>) -> TokenStream {
    let p = private();
    match value {
        Some(Secs { secs, nanos }) => quote!(#p::Some(#p::Duration::new(#secs, #nanos))),
        None => quote!(#p::None),
    }
}

fn option_str(value: &Option<LitStr>) -> TokenStream {
    let p = private();
    match value {
        Some(lit) => quote!(#p::Some(#lit)),
        None => quote!(#p::None),
    }
}

fn value_record(value: &Option<ValueSpec>) -> TokenStream {
    let p = private();
    match value {
        None => quote!(#p::None),
        Some(ValueSpec::Present) => quote!(#p::Some(#p::ValueRecord::Present)),
        Some(ValueSpec::Absent) => quote!(#p::Some(#p::ValueRecord::Absent)),
        Some(ValueSpec::Json(expr)) => {
            quote!(#p::Some(#p::ValueRecord::Equals(|| #p::serde_json::json!(#expr))))
        }
        Some(ValueSpec::Callback(path)) => {
            let span = syn::spanned::Spanned::span(path);
            let f = quote_spanned!(span=> {
                const __KOPF_VALUE: fn(
                    ::kopf_runtime::__private::Option<&::kopf_runtime::__private::serde_json::Value>,
                    &::kopf_runtime::__private::Kwargs,
                ) -> bool = #path;
                __KOPF_VALUE
            });
            quote!(#p::Some(#p::ValueRecord::Callback(#f)))
        }
    }
}

fn meta_records(entries: &[(LitStr, MetaSpec)]) -> TokenStream {
    let p = private();
    let items = entries.iter().map(|(key, spec)| {
        let value = match spec {
            MetaSpec::Equals(lit) => quote!(#p::MetaRecord::Equals(#lit)),
            MetaSpec::Present => quote!(#p::MetaRecord::Present),
            MetaSpec::Absent => quote!(#p::MetaRecord::Absent),
            MetaSpec::Callback(path) => {
                let span = syn::spanned::Spanned::span(path);
                let f = quote_spanned!(span=> {
                    const __KOPF_META: fn(
                        ::kopf_runtime::__private::Option<&str>,
                        &::kopf_runtime::__private::Kwargs,
                    ) -> bool = #path;
                    __KOPF_META
                });
                quote!(#p::MetaRecord::Callback(#f))
            }
        };
        quote!((#key, #value))
    });
    quote!(&[#(#items),*])
}

fn resource(resource: &Option<Resource>) -> TokenStream {
    let p = private();
    match resource {
        None => quote!(#p::None),
        Some(Resource::Typed(ty)) => {
            let span = syn::spanned::Spanned::span(ty);
            let of = quote_spanned!(span=> ::kopf_runtime::__private::ResourceRef::of::<#ty>());
            quote!(#p::Some(|| #of))
        }
        Some(Resource::Dynamic {
            group,
            version,
            plural,
        }) => {
            quote!(#p::Some(|| #p::ResourceRef::dynamic(#group, #version, #plural)))
        }
    }
}

fn invoker(sig: &Signature) -> TokenStream {
    let p = private();
    let ident = &sig.ident;
    let mut loads = Vec::new();
    let mut gets = Vec::new();
    for (i, param) in sig.params.iter().enumerate() {
        let ty = &param.ty;
        let span = syn::spanned::Spanned::span(ty);
        // Spanned like the type: type errors on the binding point at the parameter.
        let storage = format_ident!("__kopf_storage_{}", i, span = span);
        // Every token of the trait path carries the parameter type's span, so that
        // "not an accepted type" errors point at the user's type.
        let mode = syn::Ident::new(if param.by_ref { "ByRef" } else { "ByValue" }, span);
        let (trait_path, load_args) = match &param.source {
            Source::Kwarg { trait_name, .. } => {
                let trait_ident = syn::Ident::new(trait_name, span);
                (
                    quote_spanned!(span=> <#ty as ::kopf_runtime::__private::#trait_ident<'_, ::kopf_runtime::__private::#mode>>),
                    quote!(&__kopf_kwargs),
                )
            }
            Source::Index { name } => (
                quote_spanned!(span=> <#ty as ::kopf_runtime::__private::IndexArg<'_, ::kopf_runtime::__private::#mode>>),
                quote!(&__kopf_kwargs, #name),
            ),
        };
        let load = quote_spanned!(span=> #trait_path::load);
        let get = quote_spanned!(span=> #trait_path::get);
        loads.push(quote_spanned! {span=>
            let mut #storage = match #load(#load_args) {
                ::kopf_runtime::__private::Ok(value) => value,
                ::kopf_runtime::__private::Err(error) => {
                    return ::kopf_runtime::__private::Err(::kopf_runtime::__private::HandlerError::from(error));
                }
            };
        });
        gets.push(quote_spanned!(span=> #get(&mut #storage)));
    }
    // Spanned like the return type, so that "not a valid return type" points there only.
    let result = syn::Ident::new("__kopf_result", sig.output_span);
    let into_outcome = quote_spanned! {sig.output_span=>
        ::kopf_runtime::__private::IntoOutcome::into_outcome(#result)
    };
    if sig.is_async {
        quote! {
            fn __kopf_invoke(__kopf_kwargs: #p::Kwargs) -> #p::BoxFuture<'static, #p::Outcome> {
                #p::Box::pin(async move {
                    #(#loads)*
                    let #result = #ident(#(#gets),*).await;
                    #into_outcome
                })
            }
        }
    } else {
        quote! {
            fn __kopf_invoke(__kopf_kwargs: #p::Kwargs) -> #p::BoxFuture<'static, #p::Outcome> {
                #p::run_blocking(move || {
                    #(#loads)*
                    let #result = #ident(#(#gets),*);
                    #into_outcome
                })
            }
        }
    }
}

/// The full expansion for a valid attribute.
pub(crate) fn expand(kind: Kind, spec: &Spec, sig: &Signature, item: TokenStream) -> TokenStream {
    let p = private();
    let ident = &sig.ident;
    let variant = syn::Ident::new(kind.variant(), Span::call_site());
    let invoker = invoker(sig);
    let id = option_str(&spec.id);
    let resource = resource(&spec.resource);
    let retries = match spec.retries {
        Some(n) => quote!(#p::Some(#n)),
        None => quote!(#p::None),
    };
    let backoff = duration(spec.backoff);
    let timeout = duration(spec.timeout);
    let errors = match &spec.errors {
        Some(mode) => quote!(#p::Some(#p::ErrorsMode::#mode)),
        None => quote!(#p::None),
    };
    let param = match &spec.param {
        Some(expr) => quote!(#p::Some(|| #p::serde_json::json!(#expr))),
        None => quote!(#p::None),
    };
    let labels = meta_records(&spec.labels);
    let annotations = meta_records(&spec.annotations);
    let when = match &spec.when {
        Some(path) => {
            let span = syn::spanned::Spanned::span(path);
            let f = quote_spanned!(span=> {
                const __KOPF_WHEN: fn(&::kopf_runtime::__private::Kwargs) -> bool = #path;
                __KOPF_WHEN
            });
            quote!(#p::Some(#f))
        }
        None => quote!(#p::None),
    };
    let field = option_str(&spec.field);
    let value = value_record(&spec.value);
    let old = value_record(&spec.old);
    let new = value_record(&spec.new);
    let deleted = spec.deleted;
    let optional = spec.optional;
    let no_finalizers = spec.no_finalizers;
    let interval = duration(spec.interval);
    let initial_delay = duration(spec.initial_delay);
    let sharp = spec.sharp;
    let idle = duration(spec.idle);
    let cancellation_backoff = duration(spec.cancellation_backoff);
    let cancellation_timeout = duration(spec.cancellation_timeout);
    let cancellation_polling = duration(spec.cancellation_polling);
    let operations = spec.operations.iter().map(|op| quote!(#p::Operation::#op));
    let subresource = option_str(&spec.subresource);
    let persistent = spec.persistent;
    let side_effects = spec.side_effects;
    let ignore_failures = spec.ignore_failures;
    let blocking = !sig.is_async;
    let index_params = sig.params.iter().filter_map(|param| match &param.source {
        Source::Index { name } => Some(name.as_str()),
        Source::Kwarg { .. } => None,
    });
    quote! {
        #item

        #[doc(hidden)]
        #[allow(non_upper_case_globals, clippy::all)]
        const _: () = {
            #invoker

            #p::inventory::submit! {
                #p::HandlerRecord {
                    kind: #p::HandlerKind::#variant,
                    fn_path: ::core::concat!(::core::module_path!(), "::", ::core::stringify!(#ident)),
                    fn_name: ::core::stringify!(#ident),
                    id: #id,
                    resource: #resource,
                    retries: #retries,
                    backoff: #backoff,
                    timeout: #timeout,
                    errors: #errors,
                    param: #param,
                    labels: #labels,
                    annotations: #annotations,
                    when: #when,
                    field: #field,
                    value: #value,
                    old: #old,
                    new: #new,
                    deleted: #deleted,
                    optional: #optional,
                    no_finalizers: #no_finalizers,
                    interval: #interval,
                    initial_delay: #initial_delay,
                    sharp: #sharp,
                    idle: #idle,
                    cancellation_backoff: #cancellation_backoff,
                    cancellation_timeout: #cancellation_timeout,
                    cancellation_polling: #cancellation_polling,
                    operations: &[#(#operations),*],
                    subresource: #subresource,
                    persistent: #persistent,
                    side_effects: #side_effects,
                    ignore_failures: #ignore_failures,
                    blocking: #blocking,
                    index_params: &[#(#index_params),*],
                    invoke: __kopf_invoke,
                }
            }
        };
    }
}
