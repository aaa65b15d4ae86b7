//! kopf-runtime: Kubernetes operators as plain `async fn`s.
//!
//! CRATE_DOCS_PLACEHOLDER

pub mod causes;
pub mod cli;
pub mod diffbase;
pub mod errors;
pub mod filters;
pub mod finalizers;
pub mod handlers;
pub mod handling;
pub mod kwargs;
#[cfg(test)]
mod mock_api;
pub mod namespaces;
pub mod operator;
pub mod patching;
pub mod posting;
pub mod processing;
pub mod progress;
pub mod queueing;
pub mod registry;
pub mod resources;
pub mod retrying;
pub mod running;
pub mod settings;
pub mod spawned;
pub mod spawning;
pub mod watching;

mod injection;
mod records;

pub use kopf_macros::{
    daemon, index, on_cleanup, on_create, on_delete, on_event, on_field, on_login, on_mutate,
    on_probe, on_resume, on_startup, on_update, on_validate, timer,
};

pub use errors::{Error, HandlerError, IntoOutcome, KwargError, Outcome, Result};
pub use filters::{
    ABSENT, FieldPath, Filters, Marker, MetaFilter, MetaValue, PRESENT, ValueFilter,
};
pub use handlers::{
    DEFAULT_BACKOFF, DaemonOptions, ErrorsMode, Handler, HandlerFn, HandlerKind, KindOptions,
    Options, TimerOptions, WebhookOptions,
};
pub use kwargs::{
    Admission, Diff, DiffItem, DiffOp, EventType, Index, Indexes, Kwargs, Level, Logger, Memo,
    Operation, Patch, Reason, Stopped, Warnings,
};
pub use operator::{Operator, OperatorError};
pub use registry::{Registry, RegistryBuilder, RegistryError};
pub use resources::ResourceRef;
pub use running::{RunError, Runner, run};

/// Keeps the handlers of a crate that the binary does not otherwise reference.
///
/// `inventory` collects records through link-time constructors, so the linker
/// drops the records of a dependency from which nothing is used. Put
/// `kopf_runtime::link!(my_handlers);` in the binary (any module) to reference
/// the crate; the handlers crate must declare `kopf_runtime::handlers_crate!();`
/// once at its root.
///
/// ```ignore-not-a-doctest
/// ```
#[macro_export]
macro_rules! link {
    ($($krate:ident),+ $(,)?) => {
        const _: () = {
            $(
                #[used]
                static __KOPF_LINK: fn() = $krate::__kopf_link;
            )+
        };
    };
}

/// Marks a crate as a handlers crate that binaries can [`link!`].
#[macro_export]
macro_rules! handlers_crate {
    () => {
        #[doc(hidden)]
        #[inline(never)]
        pub fn __kopf_link() {}
    };
}

/// Not public API: what the macro-generated code uses. May change without notice.
#[doc(hidden)]
pub mod __private {
    pub use ::futures::future::BoxFuture;
    pub use ::inventory;
    pub use ::serde_json;
    pub use ::std::boxed::Box;
    pub use ::std::option::Option::{None, Some};
    pub use ::std::result::Result::{Err, Ok};
    pub use ::std::time::Duration;

    pub use crate::errors::{HandlerError, IntoOutcome, Outcome};
    pub use crate::handlers::{ErrorsMode, HandlerKind};
    pub use crate::injection::*;
    pub use crate::kwargs::{Kwargs, Operation};
    pub use crate::records::{DEFAULT_RECORD, HandlerRecord, MetaRecord, ValueRecord};
    pub use crate::resources::ResourceRef;

    /// Runs a blocking handler body on tokio's blocking threads.
    pub fn run_blocking<F>(f: F) -> BoxFuture<'static, Outcome>
    where
        F: FnOnce() -> Outcome + Send + 'static,
    {
        Box::pin(async move {
            match tokio::task::spawn_blocking(f).await {
                Ok(outcome) => outcome,
                Err(error) => Err(HandlerError::Blocking(error.to_string())),
            }
        })
    }
}
