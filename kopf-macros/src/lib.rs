//! Attribute macros for `kopf-runtime`. Use them through `kopf_runtime`, which
//! re-exports them and documents them with examples.
//!
//! Each `#[proc_macro_attribute]` is a one-line call into `handler::handler`,
//! which works on `proc_macro2` and is unit-tested: it parses the attribute
//! (`attr`; the options into the typed holders of `options`, their values
//! with `values`), validates it and the fn (`signature`) collecting every
//! error, and expands (`expand`) to the unchanged fn plus a `const`
//! registration record whose groups mirror the option groups.
//! On errors the fn is emitted unchanged next to `compile_error!`s.

use proc_macro::TokenStream;

mod attr;
mod expand;
mod handler;
mod kinds;
mod options;
mod rbac;
mod signature;
mod values;

#[cfg(test)]
mod tests;

use kinds::Kind;

macro_rules! attributes {
    ($($(#[$doc:meta])* $name:ident => $kind:ident;)*) => {$(
        $(#[$doc])*
        #[proc_macro_attribute]
        pub fn $name(attr: TokenStream, item: TokenStream) -> TokenStream {
            handler::handler(Kind::$kind, attr.into(), item.into()).into()
        }
    )*};
}

attributes! {
    /// Registers a creation handler: `#[on_create(Resource, options…)]`. See `kopf_runtime`.
    on_create => OnCreate;
    /// Registers an update handler: `#[on_update(Resource, options…)]`. See `kopf_runtime`.
    on_update => OnUpdate;
    /// Registers a deletion handler: `#[on_delete(Resource, options…)]`. See `kopf_runtime`.
    on_delete => OnDelete;
    /// Registers a resuming handler: `#[on_resume(Resource, options…)]`. See `kopf_runtime`.
    on_resume => OnResume;
    /// Registers a field handler: `#[on_field(Resource, field = "…", options…)]`. See `kopf_runtime`.
    on_field => OnField;
    /// Registers a raw event handler: `#[on_event(Resource, options…)]`. See `kopf_runtime`.
    on_event => OnEvent;
    /// Registers a timer: `#[timer(Resource, interval = …, idle = …, options…)]`. See `kopf_runtime`.
    timer => Timer;
    /// Registers a daemon: `#[daemon(Resource, options…)]`. See `kopf_runtime`.
    daemon => Daemon;
    /// Registers an indexer: `#[index(Resource, options…)]`. See `kopf_runtime`.
    index => Index;
    /// Registers a start-up activity: `#[on_startup(options…)]`. See `kopf_runtime`.
    on_startup => OnStartup;
    /// Registers a clean-up activity: `#[on_cleanup(options…)]`. See `kopf_runtime`.
    on_cleanup => OnCleanup;
    /// Registers a liveness probe: `#[on_probe(options…)]`. See `kopf_runtime`.
    on_probe => OnProbe;
    /// Registers a login activity: `#[on_login(options…)]`. See `kopf_runtime`.
    on_login => OnLogin;
    /// Registers a validating admission handler: `#[on_validate(Resource, options…)]`. See `kopf_runtime`.
    on_validate => OnValidate;
    /// Registers a mutating admission handler: `#[on_mutate(Resource, options…)]`. See `kopf_runtime`.
    on_mutate => OnMutate;
}

/// Not public API: the options each kind accepts, as
/// `&[(kind, &[option, …])]` in the order messages list them, so that
/// `kopf-runtime` tests that its own table agrees.
#[doc(hidden)]
#[proc_macro]
pub fn __option_table(input: TokenStream) -> TokenStream {
    let _ = input;
    kinds::option_table().into()
}

/// Declares a permission the handlers need for what they do with their own
/// client: `#[rbac(groups = "", resources = "configmaps", verbs = "get,create,patch")]`
/// on any item, as kubebuilder's RBAC markers. See `kopf_runtime`.
#[proc_macro_attribute]
pub fn rbac(attr: TokenStream, item: TokenStream) -> TokenStream {
    rbac::rbac(attr.into(), item.into()).into()
}
