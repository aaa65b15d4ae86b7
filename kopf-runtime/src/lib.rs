//! kopf-runtime: Kubernetes operators as plain `async fn`s, in the spirit of
//! [Kopf](https://kopf.readthedocs.io).
//!
//! Operator authors annotate functions with attribute macros; each attribute
//! registers the function as a handler of one kind, for one resource, with
//! Kopf's options. Parameters are injected by name, like Kopf's kwargs.
//!
//! ```
//! use kopf_runtime as kopf;
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! #[kopf::on_create(ConfigMap, retries = 3, backoff = 10)]
//! async fn created(name: &str, logger: &kopf::Logger) -> kopf::Result<serde_json::Value> {
//!     logger.info(format!("created {name}"));
//!     Ok(serde_json::json!({"seen": true})) // stored in status.created
//! }
//! # fn main() {}
//! ```
//!
//! Users depend on `kopf-runtime` alone (write `use kopf_runtime as kopf;`);
//! it re-exports the macros. Generated code names this crate as
//! `::kopf_runtime`, so do not rename the dependency in `Cargo.toml`.
//!
//! # The guide
//!
//! The [`guide`] holds the user's guide, a chapter per module:
//!
//! - [Handlers](guide::handlers): the kinds, the resources they name, their
//!   options, an example of each kind, the registry, and `adopt`
//! - [Parameters](guide::parameters): what a handler takes, by name
//! - [Filters](guide::filters): which objects and changes a handler applies to
//! - [Errors and retries](guide::errors): return values, errors, retries
//! - [Daemons and timers](guide::daemons)
//! - [Webhooks](guide::webhooks): validating and mutating admission
//! - [Replicas](guide::replicas): peering on a Lease, and sharding
//! - [Testing](guide::testing): calling handlers, running whole operators
//! - [Running and deploying](guide::deploying): [`run()`], the command line,
//!   probes, metrics, permissions
//! - [What the runtime guarantees](guide::guarantees)
//! - [Migrating from Kopf](guide::migrating): what differs, and why
//!
//! How the engine keeps the guarantees, module by module, is in the
//! repository's `ARCHITECTURE.md`.
//!
//! # What is public
//!
//! Everything an operator author uses, and nothing of the engine:
//!
//! | item | what it is for |
//! |------|----------------|
//! | [`on_create`], [`on_update`], [`on_delete`], [`on_resume`], [`on_field`], [`on_event`], [`timer`], [`daemon`], [`index`], [`on_startup`], [`on_cleanup`], [`on_probe`], [`on_login`], [`on_validate`], [`on_mutate`] | declaring handlers (see [handlers](guide::handlers) and [parameters](guide::parameters)) |
//! | [`link!`], [`handlers_crate!`] | keeping the handlers of a crate that the binary does not otherwise use |
//! | [`run()`], [`Runner`] | the whole `main` of an operator: the command line, logging, the handlers, until a signal |
//! | [`Args`], [`LogFormat`], [`ManifestsArgs`] | the command line, as `kopf run`'s (for [`Runner::args`]), and that of `my-operator manifests` |
//! | [`Operator`] | a registry, a client and settings, run until a future completes: for embedding and tests |
//! | [`Endpoints`], [`EndpointError`], [`READINESS_PATH`] | the liveness, readiness and metrics listeners ([`Operator::endpoints`]), bound before the operator starts |
//! | [`WebhookServer`], [`WebhookArgs`], [`WebhookError`] | the admission webhook server ([`Operator::webhooks`]) and its flags, bound before the operator starts (feature `webhooks`; without it, `bind` fails) |
//! | [`TaskCounters`], [`TaskCounts`] | how many daemons and timers an operator has spawned and how they ended ([`Operator::task_counters`]), for metrics and tests |
//! | [`NamespaceSelector`] | the namespaces to serve, from `-n` patterns and `-A` ([`Operator::namespaces`]) |
//! | [`Peering`] | the Lease replicas elect a leader on, or shard the objects by, from `--peering`, `--priority`, `--dev` and `--shards` ([`Operator::peering`]) |
//! | [`OperatorSettings`] and the [`settings`] module | Kopf's settings, grouped and defaulted as in Kopf; [`settings::StartupSettings`], the settings that start-up handlers change |
//! | [`rbac`], [`Permission`], [`PermissionScope`], [`PermissionError`] | the RBAC permissions an operator needs beyond what it derives from its handlers ([`Operator::rbac`]) |
//! | [`MissingPermissions`], [`Missing`] | what the start-up check does when permissions are missing, and each one it found ([`Operator::missing_permissions`]) |
//! | `GrantError` (feature `emulator`) | why granting the operator its permissions on the embedded emulator failed (`Operator::grant_on_emulator`) |
//! | [`RunError`], [`OperatorError`], [`CliError`], [`SelectorError`], [`RegistryError`] | why an operator does not start |
//! | [`Registry`], [`RegistryBuilder`] | an operator's handlers: from the macros, or built without them |
//! | [`Handler`], [`HandlerFn`], [`HandlerKind`] | one registered handler, the function behind it, and its kind |
//! | [`Options`], [`ErrorsMode`], [`DEFAULT_BACKOFF`], [`KindOptions`], [`TimerOptions`], [`DaemonOptions`], [`WebhookOptions`] | a handler's options, with Kopf's defaults |
//! | [`Filters`], [`MetaFilter`], [`MetaValue`], [`ValueFilter`], [`FieldPath`], [`Marker`], [`PRESENT`], [`ABSENT`] | which objects and changes a handler applies to |
//! | [`ResourceRef`], [`ResourceName`] | a resource by group, version and plural, or by its Rust type; how it names its resources |
//! | [`Kwargs`] | everything a call receives; what handlers built without macros take |
//! | [`Body`] | the `body` field of [`Kwargs`]: the object's body, a `serde_json::Value` behind `Deref` |
//! | [`Logger`], [`Level`] | the `logger` parameter: log lines about the object |
//! | [`Memo`] | the `memo` parameter: what handlers keep in memory, per object and operator-wide ([`Operator::memo`]) |
//! | [`Patch`] | the `patch` parameter: changes to the object, sent with the handler's outcome |
//! | [`Diff`], [`DiffItem`], [`DiffOp`] | the `diff` parameter: what changed, as Kopf's diffs |
//! | [`Reason`] | the `reason` parameter: the cause of a change handler's call |
//! | [`EventType`] | the `type` parameter of `on_event` handlers |
//! | [`Stopped`], [`StopReason`] | the `stopped` parameter of daemons and timers, and why it is set |
//! | [`LiveBody`] | the `live` parameter of daemons and timers: their object as it is now |
//! | [`Subhandlers`], [`Lifecycle`] | the `subhandlers` parameter of change handlers: children with progress of their own (Kopf's sub-handlers), and which of them run in one step |
//! | [`Index`], [`Indexes`], [`IndexKey`], [`Store`], [`IndexError`] | the parameters named by `index` handlers' ids, an index's keys, the values under one key, and a value that does not deserialize |
//! | [`Operation`], [`Warnings`], [`Admission`] | the parameters of `on_validate` and `on_mutate` handlers |
//! | [`Timestamp`] | the `started` parameter |
//! | [`ConnectionInfo`], [`LoginError`] | what `on_login` handlers return (the API server and its credentials), and why no credential was made of it |
//! | [`adopt`], [`append_owner_reference`], [`remove_owner_reference`], [`label`], [`harmonize_naming`], [`adjust_namespace`], their `_with` forms ([`adopt_with`], [`append_owner_reference_with`], [`label_with`], [`harmonize_naming_with`], [`adjust_namespace_with`]), [`Adoption`], [`Ownership`], [`HierarchyError`] | Kopf's `kopf.adopt` and its parts: the owner, labels, name and namespace of the children an operator creates |
//! | [`Result`], [`Error`] | what handlers return, and how they fail (temporarily, permanently, regularly) |
//! | [`Outcome`], [`HandlerError`], [`KwargError`], [`IntoOutcome`] | what a call yields ([`Handler::call`]), and how return types become it |
//! | the [`guide`] module: [`guide::handlers`], [`guide::parameters`], … | the user's guide, a chapter per module, with examples that compile |
//! | the [`params`] module: [`params::OldArg`], [`params::SpecArg`], … | the traits that inject each parameter, which the compiler names when a type is not accepted |
//! | the [`posting`] module: [`posting::info`], [`posting::warn`], [`posting::exception`], [`posting::event`], with [`posting::Severity`] and [`posting::ObjectReference`] | Kubernetes Events about objects, from handlers |

mod capacity;
mod deploying;
mod fields;
pub mod guide;
#[cfg(test)]
mod mock_api;
mod model;
mod operations;
mod operator;
pub mod params;
mod peering;
mod persistence;
pub mod posting;
mod processing;
#[cfg(test)]
mod proptests;
mod running;
pub mod settings;
mod spawning;
mod watching;
mod webhooks;

pub use kopf_macros::{
    daemon, index, on_cleanup, on_create, on_delete, on_event, on_field, on_login, on_mutate,
    on_probe, on_resume, on_startup, on_update, on_validate, rbac, timer,
};

#[cfg(feature = "emulator")]
pub use deploying::GrantError;
pub use deploying::{
    ManifestsArgs, Missing, MissingPermissions, Permission, PermissionError, PermissionScope,
};
pub use model::errors::{Error, HandlerError, IntoOutcome, KwargError, Outcome, Result};
pub use model::filters::{
    ABSENT, FieldPath, Filters, Marker, MetaFilter, MetaValue, PRESENT, ValueFilter,
};
pub use model::handlers::{
    DEFAULT_BACKOFF, DaemonOptions, ErrorsMode, Handler, HandlerFn, HandlerKind, KindOptions,
    Options, TimerOptions, WebhookOptions,
};
pub use model::hierarchies::{
    Adoption, HierarchyError, Ownership, adjust_namespace, adjust_namespace_with, adopt,
    adopt_with, append_owner_reference, append_owner_reference_with, harmonize_naming,
    harmonize_naming_with, label, label_with, remove_owner_reference,
};
pub use model::kwargs::{
    Admission, Body, Diff, DiffItem, DiffOp, EventType, Index, IndexError, IndexKey, Indexes,
    Kwargs, Level, LiveBody, Logger, Memo, Operation, Patch, Reason, Stopped, Store, Warnings,
};
pub use model::registry::{Registry, RegistryBuilder, RegistryError};
pub use model::resources::{ResourceName, ResourceRef};
pub use operations::endpoints::{EndpointError, Endpoints, READINESS_PATH};
pub use operator::login::{ConnectionInfo, LoginError};
pub use operator::namespaces::{NamespaceSelector, SelectorError};
pub use operator::{Operator, OperatorError};
pub use peering::Peering;
pub use processing::execution::{Lifecycle, Subhandlers};
pub use running::cli::{Args, CliError, LogFormat};
pub use running::{RunError, Runner, run};
pub use settings::OperatorSettings;
pub use spawning::stopping::StopReason;
pub use spawning::{TaskCounters, TaskCounts};
pub use webhooks::{WebhookArgs, WebhookError, WebhookServer};

/// The timestamp type of the `started` parameter (re-exported from `jiff`).
pub use jiff::Timestamp;

/// Keeps the handlers of crates that the binary does not otherwise reference.
///
/// `inventory` collects records through link-time constructors, so the linker
/// drops the records of a dependency from which nothing is used: a binary that
/// depends on a handlers-only crate would silently run without its handlers.
/// The remedy has two halves:
///
/// * the handlers crate declares `kopf_runtime::handlers_crate!();` once, at its root;
/// * the binary (or test) writes `kopf_runtime::link!(that_crate);` anywhere.
///
/// `link!` references an anchor in each crate from a `#[used]` static, so the
/// crate — and every record in it — is linked. Crates that the binary already
/// uses (e.g. by calling their fns) need nothing. See `examples/handlers-lib`
/// and its `linked`/`unlinked` tests.
///
/// # Caveats
/// The anchor keeps the whole crate's records, submodules included (tested in
/// debug builds by `examples/handlers-lib`). A handlers crate that is not a
/// dependency of the binary at all cannot be linked by any means.
///
/// ```text
/// // in my_handlers/src/lib.rs
/// kopf_runtime::handlers_crate!();
/// // in the binary
/// kopf_runtime::link!(my_handlers, other_handlers);
/// ```
#[macro_export]
macro_rules! link {
    ($($krate:ident),+ $(,)?) => {
        $(
            const _: () = {
                #[used]
                static __KOPF_LINK: fn() = $krate::__kopf_link;
            };
        )+
    };
}

/// Declares the current crate as a handlers crate that binaries can [`link!`].
///
/// Expands to a hidden `pub fn __kopf_link()` at the crate root.
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
    pub use ::std::option::Option::{self, None, Some};
    pub use ::std::result::Result::{Err, Ok};
    pub use ::std::time::Duration;

    pub use crate::deploying::{RbacRecord, RbacScope};
    pub use crate::model::errors::{HandlerError, IntoOutcome, Outcome};
    pub use crate::model::handlers::{ErrorsMode, HandlerKind};
    pub use crate::model::injection::*;
    pub use crate::model::kwargs::{Kwargs, Operation};
    pub use crate::model::records::{
        ChangeRecord, FilterRecord, FunctionRecord, HandlerRecord, MetaRecord, RetryRecord,
        TaskRecord, ValueRecord, WebhookRecord,
    };
    pub use crate::model::resources::ResourceRef;
    pub use crate::spawning::run_blocking;
}

#[cfg(test)]
mod tests {
    //! Tests of the engine across its modules.

    #[cfg(feature = "emulator")]
    mod emulated;
}
