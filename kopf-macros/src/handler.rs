//! The one expansion shape shared by every attribute: parse → validate → expand.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::ItemFn;

use crate::attr::{self, Attribute, Errors, RawArgs};
use crate::expand::expand;
use crate::kinds::Kind;
use crate::signature;

/// Expands `#[kind(attr)] item`. On errors, emits the item unchanged next to them.
pub(crate) fn handler(kind: Kind, attr: TokenStream, item: TokenStream) -> TokenStream {
    let item_fn: ItemFn = match syn::parse2(item.clone()) {
        Ok(item_fn) => item_fn,
        Err(_) => {
            let error = syn::Error::new(
                Span::call_site(),
                format!(
                    "`#[{}]` applies to a free `fn` (preferably `async fn`)",
                    kind.name()
                ),
            )
            .to_compile_error();
            return quote!(#item #error);
        }
    };
    let mut errors = Errors::default();
    let attribute = match syn::parse2::<RawArgs>(attr) {
        Ok(raw) => attr::validate(kind, raw, Span::call_site(), &mut errors),
        Err(error) => {
            errors.push_error(error);
            Attribute::default()
        }
    };
    let sig = signature::validate(kind, &item_fn, &mut errors);
    match errors.finish() {
        Ok(()) => expand(kind, &attribute, &sig, item),
        Err(error) => {
            let error = error.to_compile_error();
            quote!(#item #error)
        }
    }
}
