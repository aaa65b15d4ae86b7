//! Code generation: the unchanged fn, plus an invoker and a `const` record
//! submitted to `inventory`, both inside an anonymous `const _: () = { … };`.
//!
//! Generated code names the runtime only as `::kopf_runtime::__private::…`.

use crate::attr::{Attribute, Resource};
use crate::kinds::{self, Kind};
use crate::signature::{Signature, Source};
use crate::values::{
    Count, ErrorsMode, Flag, Json, MetaFilter, MetaSpec, Operations, Secs, Str, ValueSpec, When,
};
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};

/// The runtime's hidden module, the only way generated code reaches it.
pub(crate) fn private() -> TokenStream {
    quote!(::kopf_runtime::__private)
}

/// A parsed option value as the record field it fills.
pub(crate) trait ToRecord {
    fn to_record(&self) -> TokenStream;
}

impl ToRecord for Str {
    fn to_record(&self) -> TokenStream {
        let p = private();
        let lit = &self.0;
        quote!(#p::Some(#lit))
    }
}

impl ToRecord for Count {
    fn to_record(&self) -> TokenStream {
        let p = private();
        let count = self.0;
        quote!(#p::Some(#count))
    }
}

impl ToRecord for Secs {
    fn to_record(&self) -> TokenStream {
        let p = private();
        let Secs { secs, nanos } = *self;
        quote!(#p::Some(#p::Duration::new(#secs, #nanos)))
    }
}

impl ToRecord for Flag {
    fn to_record(&self) -> TokenStream {
        let flag = self.0;
        quote!(#flag)
    }
}

impl ToRecord for ErrorsMode {
    fn to_record(&self) -> TokenStream {
        let p = private();
        let mode = &self.0;
        quote!(#p::Some(#p::ErrorsMode::#mode))
    }
}

impl ToRecord for Json {
    fn to_record(&self) -> TokenStream {
        let p = private();
        let expr = &self.0;
        quote!(#p::Some(|| #p::serde_json::json!(#expr)))
    }
}

impl ToRecord for When {
    fn to_record(&self) -> TokenStream {
        let p = private();
        let path = &self.0;
        let span = syn::spanned::Spanned::span(path);
        let f = quote_spanned!(span=> {
            const __KOPF_WHEN: fn(&::kopf_runtime::__private::Kwargs) -> bool = #path;
            __KOPF_WHEN
        });
        quote!(#p::Some(#f))
    }
}

impl ToRecord for Operations {
    fn to_record(&self) -> TokenStream {
        let p = private();
        let operations = self.0.iter().map(|op| quote!(#p::Operation::#op));
        quote!(&[#(#operations),*])
    }
}

impl ToRecord for ValueSpec {
    fn to_record(&self) -> TokenStream {
        let p = private();
        match self {
            ValueSpec::Present => quote!(#p::Some(#p::ValueRecord::Present)),
            ValueSpec::Absent => quote!(#p::Some(#p::ValueRecord::Absent)),
            ValueSpec::Json(expr) => {
                quote!(#p::Some(#p::ValueRecord::Equals(|| #p::serde_json::json!(#expr))))
            }
            ValueSpec::Callback(path) => {
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
}

impl ToRecord for MetaFilter {
    fn to_record(&self) -> TokenStream {
        let p = private();
        let items = self.0.iter().map(|(key, spec)| {
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
}

fn optional<T: ToRecord>(value: Option<&T>) -> TokenStream {
    let p = private();
    value.map_or_else(|| quote!(#p::None), ToRecord::to_record)
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
            name,
        }) => {
            quote!(#p::Some(|| #p::ResourceRef::dynamic(#group, #version, #name)))
        }
        Some(Resource::Named(name)) => quote!(#p::Some(|| #p::ResourceRef::named(#name))),
        Some(Resource::NamedIn { group, name }) => {
            quote!(#p::Some(|| #p::ResourceRef::named_in(#group, #name)))
        }
        Some(Resource::Keyword {
            key,
            name,
            group,
            version,
        }) => {
            let constructor = format_ident!("{}", key.constructor());
            let group = group.iter();
            let version = version.iter();
            quote!(#p::Some(|| #p::ResourceRef::#constructor(#name)
                #(.with_group(#group))*
                #(.with_version(#version))*))
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
pub(crate) fn expand(
    kind: Kind,
    attribute: &Attribute,
    sig: &Signature,
    item: TokenStream,
) -> TokenStream {
    let p = private();
    let ident = &sig.ident;
    let variant = syn::Ident::new(kind.variant(), Span::call_site());
    let invoker = invoker(sig);
    let options = &attribute.options;
    let id = optional(options.id.get());
    let param = optional(options.param.get());
    let resource = resource(&attribute.resource);
    let filters = options.filters.to_record();
    let retry = options.retry.to_record();
    let changes = options.changes.to_record();
    let task = options.task.to_record();
    let webhook = options.webhook.to_record();
    let blocking = !sig.is_async;
    let index_params = sig.params.iter().filter_map(|param| match &param.source {
        Source::Index { name } => Some(name.as_str()),
        Source::Kwarg { .. } => None,
    });
    let takes_client = sig.params.iter().any(
        |param| matches!(param.source, Source::Kwarg { trait_name } if trait_name == kinds::CLIENT_TRAIT),
    );
    quote! {
        #item

        #[doc(hidden)]
        #[allow(non_upper_case_globals, clippy::all)]
        const _: () = {
            #invoker

            const __KOPF_RECORD: #p::HandlerRecord = #p::HandlerRecord {
                kind: #p::HandlerKind::#variant,
                function: #p::FunctionRecord {
                    path: ::core::concat!(::core::module_path!(), "::", ::core::stringify!(#ident)),
                    name: ::core::stringify!(#ident),
                    blocking: #blocking,
                    index_params: &[#(#index_params),*],
                    client: #takes_client,
                    invoke: __kopf_invoke,
                },
                id: #id,
                param: #param,
                resource: #resource,
                filters: #filters,
                retry: #retry,
                changes: #changes,
                task: #task,
                webhook: #webhook,
            };

            #p::inventory::submit!(__KOPF_RECORD);
        };
    }
}
