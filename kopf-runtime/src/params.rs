//! What each handler parameter accepts, as the traits that inject it.
//!
//! The macros inject each parameter by its name through one trait per name
//! (`old` through [`OldArg`], `spec` through [`SpecArg`], …), implemented
//! for every type the name accepts; the [parameter table](crate#parameters)
//! lists them. A type that a name does not accept fails to compile with
//! that trait's message, which says what the name accepts, e.g.:
//!
//! ```text
//! error[E0277]: `Vec<&Value>` cannot be injected as `old`
//!   = note: `old` accepts `&T`, `T`, `Option<T>` or `Option<&T>` for any `T: serde::de::DeserializeOwned` …
//! ```
//!
//! The second parameter of each trait says how the value is lent:
//! [`ByRef`] for a parameter that borrows (`&T`, `Option<&T>`), [`ByValue`]
//! for one that owns (`T`, `Option<T>`). The parameters that deserialize
//! (`old`, `spec`, …) require a companion trait ([`OldJson`], [`SpecJson`],
//! …) of every `DeserializeOwned` type, so that a type that does not
//! deserialize is reported in the parameter's words too. The traits are for
//! the macros; handlers name them only in what the compiler says.

pub use crate::model::injection::{
    AnnotationsArg, AnnotationsJson, BodyArg, BodyJson, ByRef, ByValue, ClientArg, DiffArg,
    DryrunArg, EventArg, EventJson, HeadersArg, IndexArg, LabelsArg, LabelsJson, LiveArg,
    LoggerArg, MemoArg, MetaArg, MetaJson, NameArg, NamespaceArg, NewArg, NewJson, OldArg, OldJson,
    OperationArg, ParamArg, ParamJson, PatchArg, ReasonArg, RetryArg, RuntimeArg, SettingsArg,
    SettingsLoan, SpecArg, SpecJson, SslpeerArg, SslpeerJson, StartedArg, StatusArg, StatusJson,
    StoppedArg, SubhandlersArg, SubresourceArg, TypeArg, UidArg, UserinfoArg, UserinfoJson,
    WarningsArg,
};
