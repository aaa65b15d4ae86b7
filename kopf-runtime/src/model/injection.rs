//! Parameter injection: one trait per kwarg name, used by the generated code.
//!
//! For a handler parameter `spec: &MySpec`, the macro emits
//! `<&MySpec as SpecArg<'_, ByRef>>::load(&kwargs)` to extract an owned
//! `Storage` (here `MySpec`) before the call, then `get(&mut storage)` to lend
//! it to the fn. Parameters that borrow (`&T`, `Option<&T>`) use [`ByRef`],
//! all others [`ByValue`]: the two impls of one name never overlap, where
//! a blanket `T` and an `Option<&T>` of one mode would. A type not accepted
//! for a parameter fails to compile with the trait's `on_unimplemented`
//! message, spanned on the parameter's type.
//!
//! Extraction never panics on cluster data: a body that does not deserialize
//! into the requested type yields [`KwargError::Deserialize`].

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::model::errors::KwargError;
use crate::model::kwargs::{
    Diff, EventType, Index, Kwargs, LiveBody, Logger, Memo, Operation, Patch, Reason, Stopped,
    Warnings,
};
use crate::processing::execution::Subhandlers;
use crate::settings::{OperatorSettings, StartupSettings};

/// Marks a parameter that borrows: written as a reference (`&T`, `&str`)
/// or an optional one (`Option<&T>`, `Option<&str>`).
#[derive(Debug)]
pub struct ByRef;
/// Marks a parameter written as an owned type (`T`, `String`, `Option<T>`).
#[derive(Debug)]
pub struct ByValue;

macro_rules! kwarg_traits {
    ($($(#[$doc:meta])* $trait:ident $(+ $json:ident)?, $msg:tt, $note:tt;)*) => {$(
        $(#[$doc])*
        #[diagnostic::on_unimplemented(message = $msg, label = "not an accepted type for this parameter", note = $note)]
        pub trait $trait<'a, M>: Sized + 'a {
            /// What is extracted from the kwargs before the call.
            type Storage: Send + 'static;
            /// Extracts the storage from the kwargs.
            fn load(kwargs: &Kwargs) -> Result<Self::Storage, KwargError>;
            /// Lends (or moves) the parameter value out of the storage.
            fn get(storage: &'a mut Self::Storage) -> Self;
        }
        $(
            #[doc = concat!("What [`", stringify!($trait), "`] deserializes into: any `DeserializeOwned` type.")]
            ///
            /// The impls of the parameter's trait require this one rather than
            /// `DeserializeOwned`, so that a type that does not deserialize
            /// is reported with the parameter's message.
            #[diagnostic::on_unimplemented(message = $msg, label = "not an accepted type for this parameter", note = $note)]
            pub trait $json: DeserializeOwned + Send + 'static {}
            #[diagnostic::do_not_recommend]
            impl<T: DeserializeOwned + Send + 'static> $json for T {}
        )?
    )*};
}

kwarg_traits! {
    /// `body`.
    BodyArg + BodyJson, "`{Self}` cannot be injected as `body`", "`body` accepts `&T`, `T`, `Option<T>` or `Option<&T>` for any `T: serde::de::DeserializeOwned` (e.g. the resource type, `serde_json::Value`)";
    /// `spec`.
    SpecArg + SpecJson, "`{Self}` cannot be injected as `spec`", "`spec` accepts `&T`, `T`, `Option<T>` or `Option<&T>` for any `T: serde::de::DeserializeOwned` (e.g. the CRD's spec type, `serde_json::Value`)";
    /// `status`.
    StatusArg + StatusJson, "`{Self}` cannot be injected as `status`", "`status` accepts `&T`, `T`, `Option<T>` or `Option<&T>` for any `T: serde::de::DeserializeOwned` (an absent status is an empty object)";
    /// `meta`.
    MetaArg + MetaJson, "`{Self}` cannot be injected as `meta`", "`meta` accepts `&T`, `T`, `Option<T>` or `Option<&T>` for any `T: serde::de::DeserializeOwned` (e.g. `ObjectMeta`, `serde_json::Value`)";
    /// `labels`.
    LabelsArg + LabelsJson, "`{Self}` cannot be injected as `labels`", "`labels` accepts `&T`, `T`, `Option<T>` or `Option<&T>` for any `T: serde::de::DeserializeOwned` (e.g. `BTreeMap<String, String>`)";
    /// `annotations`.
    AnnotationsArg + AnnotationsJson, "`{Self}` cannot be injected as `annotations`", "`annotations` accepts `&T`, `T`, `Option<T>` or `Option<&T>` for any `T: serde::de::DeserializeOwned` (e.g. `BTreeMap<String, String>`)";
    /// `old`.
    OldArg + OldJson, "`{Self}` cannot be injected as `old`", "`old` accepts `&T`, `T`, `Option<T>` or `Option<&T>` for any `T: serde::de::DeserializeOwned` (take an `Option`: there is no `old` on creation)";
    /// `new`.
    NewArg + NewJson, "`{Self}` cannot be injected as `new`", "`new` accepts `&T`, `T`, `Option<T>` or `Option<&T>` for any `T: serde::de::DeserializeOwned` (take an `Option`: there is no `new` on deletion)";
    /// `param`.
    ParamArg + ParamJson, "`{Self}` cannot be injected as `param`", "`param` accepts `&T`, `T`, `Option<T>` or `Option<&T>` for any `T: serde::de::DeserializeOwned` (take an `Option` if the `param` option may be unset)";
    /// `event`.
    EventArg + EventJson, "`{Self}` cannot be injected as `event`", "`event` accepts `&T`, `T`, `Option<T>` or `Option<&T>` for any `T: serde::de::DeserializeOwned` (e.g. `serde_json::Value`)";
    /// `userinfo`.
    UserinfoArg + UserinfoJson, "`{Self}` cannot be injected as `userinfo`", "`userinfo` accepts `&T`, `T`, `Option<T>` or `Option<&T>` for any `T: serde::de::DeserializeOwned` (e.g. `serde_json::Value`)";
    /// `sslpeer`.
    SslpeerArg + SslpeerJson, "`{Self}` cannot be injected as `sslpeer`", "`sslpeer` accepts `&T`, `T`, `Option<T>` or `Option<&T>` for any `T: serde::de::DeserializeOwned` (e.g. `serde_json::Value`)";
    /// `uid`.
    UidArg, "`{Self}` cannot be injected as `uid`", "`uid` accepts `&str`, `String`, `Option<&str>` or `Option<String>`";
    /// `name`.
    NameArg, "`{Self}` cannot be injected as `name`", "`name` accepts `&str`, `String`, `Option<&str>` or `Option<String>`";
    /// `namespace`.
    NamespaceArg, "`{Self}` cannot be injected as `namespace`", "`namespace` accepts `&str`, `String`, `Option<&str>` or `Option<String>` (`None` for cluster-scoped objects)";
    /// `subresource`.
    SubresourceArg, "`{Self}` cannot be injected as `subresource`", "`subresource` accepts `&str`, `String`, `Option<&str>` or `Option<String>`";
    /// `patch`.
    PatchArg, "`{Self}` cannot be injected as `patch`", "`patch` accepts `&kopf::Patch` or `kopf::Patch`";
    /// `logger`.
    LoggerArg, "`{Self}` cannot be injected as `logger`", "`logger` accepts `&kopf::Logger` or `kopf::Logger`";
    /// `memo`.
    MemoArg, "`{Self}` cannot be injected as `memo`", "`memo` accepts `&kopf::Memo` or `kopf::Memo`";
    /// `stopped`.
    StoppedArg, "`{Self}` cannot be injected as `stopped`", "`stopped` accepts `&kopf::Stopped` or `kopf::Stopped`";
    /// `live`.
    LiveArg, "`{Self}` cannot be injected as `live`", "`live` accepts `&kopf::LiveBody` or `kopf::LiveBody` (write `mut live: kopf::LiveBody` to wait for changes)";
    /// `subhandlers`.
    SubhandlersArg, "`{Self}` cannot be injected as `subhandlers`", "`subhandlers` accepts `&kopf::Subhandlers` or `kopf::Subhandlers`";
    /// `client`.
    ClientArg, "`{Self}` cannot be injected as `client`", "`client` accepts `&kube::Client` or `kube::Client`";
    /// `diff`.
    DiffArg, "`{Self}` cannot be injected as `diff`", "`diff` accepts `&kopf::Diff` or `kopf::Diff`";
    /// `warnings`.
    WarningsArg, "`{Self}` cannot be injected as `warnings`", "`warnings` accepts `&kopf::Warnings` or `kopf::Warnings`";
    /// `retry`.
    RetryArg, "`{Self}` cannot be injected as `retry`", "`retry` accepts `u32`, `u64` or `usize`";
    /// `started`.
    StartedArg, "`{Self}` cannot be injected as `started`", "`started` accepts `kopf::Timestamp`, `Option<kopf::Timestamp>` or `std::time::SystemTime`";
    /// `runtime`.
    RuntimeArg, "`{Self}` cannot be injected as `runtime`", "`runtime` accepts `std::time::Duration`";
    /// `reason`.
    ReasonArg, "`{Self}` cannot be injected as `reason`", "`reason` accepts `kopf::Reason` or `Option<kopf::Reason>`";
    /// `type`.
    TypeArg, "`{Self}` cannot be injected as `type`", "`type` accepts `Option<kopf::EventType>`, `Option<&str>` or `Option<String>` (`None` for the initial listing)";
    /// `operation`.
    OperationArg, "`{Self}` cannot be injected as `operation`", "`operation` accepts `kopf::Operation`, `&str` or `String`";
    /// `dryrun`.
    DryrunArg, "`{Self}` cannot be injected as `dryrun`", "`dryrun` accepts `bool`";
    /// `headers`.
    HeadersArg, "`{Self}` cannot be injected as `headers`", "`headers` accepts `&BTreeMap<String, String>` or `BTreeMap<String, String>`";
    /// `settings`.
    SettingsArg, "`{Self}` cannot be injected as `settings`", "`settings` accepts `&mut kopf::OperatorSettings` (to change them) or `&kopf::OperatorSettings`";
}

/// An index, injected by its name.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be injected as an index",
    label = "not an accepted type for an index parameter",
    note = "index parameters accept `&kopf::Index<T>` or `kopf::Index<T>` (`T` is `serde_json::Value` unless given)"
)]
pub trait IndexArg<'a, M>: Sized + 'a {
    /// What is extracted from the kwargs before the call.
    type Storage: Send + 'static;
    /// Extracts the index `name` from the kwargs.
    fn load(kwargs: &Kwargs, name: &'static str) -> Result<Self::Storage, KwargError>;
    /// Lends (or moves) the parameter value out of the storage.
    fn get(storage: &'a mut Self::Storage) -> Self;
}

static EMPTY_OBJECT: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| Value::Object(Default::default()));
static NULL: Value = Value::Null;

fn deserialize<T: DeserializeOwned>(kwarg: &'static str, value: &Value) -> Result<T, KwargError> {
    T::deserialize(value).map_err(|error| KwargError::Deserialize {
        kwarg,
        type_name: std::any::type_name::<T>(),
        message: error.to_string(),
    })
}

const TAKEN: &str = "invariant: each parameter is moved out of its storage once";

macro_rules! json_kwarg {
    ($($trait:ident, $json:ident, $kw:literal, |$k:ident| $source:expr;)*) => {$(
        #[diagnostic::do_not_recommend]
        impl<'a, T: $json + Sync> $trait<'a, ByRef> for &'a T {
            type Storage = T;
            fn load($k: &Kwargs) -> Result<T, KwargError> {
                deserialize($kw, $source)
            }
            fn get(storage: &'a mut T) -> Self {
                storage
            }
        }
        #[diagnostic::do_not_recommend]
        impl<'a, T: $json + Sync> $trait<'a, ByRef> for Option<&'a T> {
            type Storage = Option<T>;
            fn load($k: &Kwargs) -> Result<Option<T>, KwargError> {
                deserialize($kw, $source)
            }
            fn get(storage: &'a mut Option<T>) -> Self {
                storage.as_ref()
            }
        }
        #[diagnostic::do_not_recommend]
        impl<'a, T: $json> $trait<'a, ByValue> for T {
            type Storage = Option<T>;
            fn load($k: &Kwargs) -> Result<Option<T>, KwargError> {
                deserialize($kw, $source).map(Some)
            }
            fn get(storage: &'a mut Option<T>) -> Self {
                storage.take().expect(TAKEN)
            }
        }
    )*};
}

json_kwarg! {
    BodyArg, BodyJson, "body", |kw| &*kw.body;
    SpecArg, SpecJson, "spec", |kw| kw.body.get("spec").unwrap_or(&EMPTY_OBJECT);
    StatusArg, StatusJson, "status", |kw| kw.body.get("status").unwrap_or(&EMPTY_OBJECT);
    MetaArg, MetaJson, "meta", |kw| kw.body.get("metadata").unwrap_or(&EMPTY_OBJECT);
    LabelsArg, LabelsJson, "labels", |kw| kw.meta().get("labels").unwrap_or(&EMPTY_OBJECT);
    AnnotationsArg, AnnotationsJson, "annotations", |kw| kw.meta().get("annotations").unwrap_or(&EMPTY_OBJECT);
    OldArg, OldJson, "old", |kw| kw.old.as_deref().unwrap_or(&NULL);
    NewArg, NewJson, "new", |kw| kw.new.as_deref().unwrap_or(&NULL);
    ParamArg, ParamJson, "param", |kw| kw.param.as_ref().unwrap_or(&NULL);
    EventArg, EventJson, "event", |kw| kw.event.as_deref().unwrap_or(&NULL);
    UserinfoArg, UserinfoJson, "userinfo", |kw| kw.admission.as_ref().map_or(&NULL, |a| &a.userinfo);
    SslpeerArg, SslpeerJson, "sslpeer", |kw| kw.admission.as_ref().map_or(&EMPTY_OBJECT, |a| &a.sslpeer);
}

macro_rules! str_kwarg {
    ($($trait:ident, $kw:literal, |$k:ident| $source:expr;)*) => {$(
        #[diagnostic::do_not_recommend]
        impl<'a> $trait<'a, ByRef> for &'a str {
            type Storage = String;
            fn load($k: &Kwargs) -> Result<String, KwargError> {
                $source.map(str::to_owned).ok_or(KwargError::Missing { kwarg: $kw })
            }
            fn get(storage: &'a mut String) -> Self {
                storage
            }
        }
        #[diagnostic::do_not_recommend]
        impl<'a> $trait<'a, ByValue> for String {
            type Storage = Option<String>;
            fn load($k: &Kwargs) -> Result<Option<String>, KwargError> {
                $source.map(str::to_owned).ok_or(KwargError::Missing { kwarg: $kw }).map(Some)
            }
            fn get(storage: &'a mut Option<String>) -> Self {
                storage.take().expect(TAKEN)
            }
        }
        #[diagnostic::do_not_recommend]
        impl<'a> $trait<'a, ByRef> for Option<&'a str> {
            type Storage = Option<String>;
            fn load($k: &Kwargs) -> Result<Option<String>, KwargError> {
                Ok($source.map(str::to_owned))
            }
            fn get(storage: &'a mut Option<String>) -> Self {
                storage.as_deref()
            }
        }
        #[diagnostic::do_not_recommend]
        impl<'a> $trait<'a, ByValue> for Option<String> {
            type Storage = Option<String>;
            fn load($k: &Kwargs) -> Result<Option<String>, KwargError> {
                Ok($source.map(str::to_owned))
            }
            fn get(storage: &'a mut Option<String>) -> Self {
                storage.take()
            }
        }
    )*};
}

str_kwarg! {
    UidArg, "uid", |kw| kw.uid();
    NameArg, "name", |kw| kw.name();
    NamespaceArg, "namespace", |kw| kw.namespace();
    SubresourceArg, "subresource", |kw| kw.admission.as_ref().and_then(|a| a.subresource.as_deref());
}

macro_rules! clone_kwarg {
    ($($trait:ident, $ty:ty, $kw:literal, |$k:ident| $source:expr;)*) => {$(
        #[diagnostic::do_not_recommend]
        impl<'a> $trait<'a, ByRef> for &'a $ty {
            type Storage = $ty;
            fn load($k: &Kwargs) -> Result<$ty, KwargError> {
                $source.ok_or(KwargError::Missing { kwarg: $kw })
            }
            fn get(storage: &'a mut $ty) -> Self {
                storage
            }
        }
        #[diagnostic::do_not_recommend]
        impl<'a> $trait<'a, ByValue> for $ty {
            type Storage = Option<$ty>;
            fn load($k: &Kwargs) -> Result<Option<$ty>, KwargError> {
                $source.ok_or(KwargError::Missing { kwarg: $kw }).map(Some)
            }
            fn get(storage: &'a mut Option<$ty>) -> Self {
                storage.take().expect(TAKEN)
            }
        }
    )*};
}

clone_kwarg! {
    PatchArg, Patch, "patch", |kw| Some(kw.patch.clone());
    LoggerArg, Logger, "logger", |kw| Some(kw.logger.clone());
    MemoArg, Memo, "memo", |kw| Some(kw.memo.clone());
    StoppedArg, Stopped, "stopped", |kw| kw.stopped.clone();
    LiveArg, LiveBody, "live", |kw| kw.live.clone();
    SubhandlersArg, Subhandlers, "subhandlers", |kw| kw.subhandlers();
    ClientArg, kube::Client, "client", |kw| kw.client.clone();
    DiffArg, Diff, "diff", |kw| Some(kw.diff.clone());
    WarningsArg, Warnings, "warnings", |kw| kw.admission.as_ref().map(|a| a.warnings.clone());
    HeadersArg, BTreeMap<String, String>, "headers", |kw| kw.admission.as_ref().map(|a| a.headers.clone());
}

macro_rules! copy_kwarg {
    ($($trait:ident, $ty:ty, |$k:ident| $source:expr;)*) => {$(
        #[diagnostic::do_not_recommend]
        impl<'a> $trait<'a, ByValue> for $ty {
            type Storage = $ty;
            fn load($k: &Kwargs) -> Result<$ty, KwargError> {
                $source
            }
            fn get(storage: &'a mut $ty) -> Self {
                storage.clone()
            }
        }
    )*};
}

fn admission<'k>(
    kwargs: &'k Kwargs,
    kwarg: &'static str,
) -> Result<&'k crate::model::kwargs::Admission, KwargError> {
    kwargs
        .admission
        .as_ref()
        .ok_or(KwargError::Missing { kwarg })
}

copy_kwarg! {
    RetryArg, u32, |kw| Ok(kw.retry);
    RetryArg, u64, |kw| Ok(u64::from(kw.retry));
    RetryArg, usize, |kw| Ok(kw.retry as usize);
    StartedArg, jiff::Timestamp, |kw| kw.started.ok_or(KwargError::Missing { kwarg: "started" });
    StartedArg, Option<jiff::Timestamp>, |kw| Ok(kw.started);
    StartedArg, SystemTime, |kw| kw.started.map(SystemTime::from).ok_or(KwargError::Missing { kwarg: "started" });
    RuntimeArg, Duration, |kw| Ok(kw.runtime);
    ReasonArg, Reason, |kw| kw.reason.ok_or(KwargError::Missing { kwarg: "reason" });
    ReasonArg, Option<Reason>, |kw| Ok(kw.reason);
    TypeArg, Option<EventType>, |kw| Ok(kw.event_type);
    TypeArg, Option<String>, |kw| Ok(kw.event_type.map(|t| t.as_str().to_owned()));
    OperationArg, Operation, |kw| admission(kw, "operation").map(|a| a.operation);
    OperationArg, String, |kw| admission(kw, "operation").map(|a| a.operation.as_str().to_owned());
    DryrunArg, bool, |kw| admission(kw, "dryrun").map(|a| a.dryrun);
}

#[diagnostic::do_not_recommend]
impl<'a> OperationArg<'a, ByRef> for &'a str {
    type Storage = &'static str;
    fn load(kwargs: &Kwargs) -> Result<&'static str, KwargError> {
        admission(kwargs, "operation").map(|a| a.operation.as_str())
    }
    fn get(storage: &'a mut &'static str) -> Self {
        storage
    }
}

#[diagnostic::do_not_recommend]
impl<'a> TypeArg<'a, ByRef> for Option<&'a str> {
    type Storage = Option<&'static str>;
    fn load(kwargs: &Kwargs) -> Result<Option<&'static str>, KwargError> {
        Ok(kwargs.event_type.map(|t| t.as_str()))
    }
    fn get(storage: &'a mut Option<&'static str>) -> Self {
        *storage
    }
}

/// The operator's settings lent to a start-up handler as
/// `&mut OperatorSettings`: a copy, written back when the call ends,
/// however it ends (see [`StartupSettings`]).
pub struct SettingsLoan {
    settings: StartupSettings,
    loaded: OperatorSettings,
    lent: OperatorSettings,
}

impl Drop for SettingsLoan {
    fn drop(&mut self) {
        let lent = std::mem::take(&mut self.lent);
        self.settings.write_back(&self.loaded, lent);
    }
}

fn startup_settings(kwargs: &Kwargs) -> Result<&StartupSettings, KwargError> {
    kwargs
        .settings
        .as_ref()
        .ok_or(KwargError::Missing { kwarg: "settings" })
}

#[diagnostic::do_not_recommend]
impl<'a> SettingsArg<'a, ByRef> for &'a mut OperatorSettings {
    type Storage = SettingsLoan;
    fn load(kwargs: &Kwargs) -> Result<SettingsLoan, KwargError> {
        let settings = startup_settings(kwargs)?.clone();
        let loaded = settings.get();
        Ok(SettingsLoan {
            lent: loaded.clone(),
            loaded,
            settings,
        })
    }
    fn get(storage: &'a mut SettingsLoan) -> Self {
        &mut storage.lent
    }
}

#[diagnostic::do_not_recommend]
impl<'a> SettingsArg<'a, ByRef> for &'a OperatorSettings {
    type Storage = OperatorSettings;
    fn load(kwargs: &Kwargs) -> Result<OperatorSettings, KwargError> {
        startup_settings(kwargs).map(StartupSettings::get)
    }
    fn get(storage: &'a mut OperatorSettings) -> Self {
        storage
    }
}

#[diagnostic::do_not_recommend]
impl<'a, T: 'static> IndexArg<'a, ByRef> for &'a Index<T> {
    type Storage = Index<T>;
    fn load(kwargs: &Kwargs, name: &'static str) -> Result<Index<T>, KwargError> {
        index(kwargs, name)
    }
    fn get(storage: &'a mut Index<T>) -> Self {
        storage
    }
}

#[diagnostic::do_not_recommend]
impl<'a, T: 'static> IndexArg<'a, ByValue> for Index<T> {
    type Storage = Index<T>;
    fn load(kwargs: &Kwargs, name: &'static str) -> Result<Index<T>, KwargError> {
        index(kwargs, name)
    }
    fn get(storage: &'a mut Index<T>) -> Self {
        storage.clone()
    }
}

/// The index `name`, its values read as `T`.
fn index<T>(kwargs: &Kwargs, name: &'static str) -> Result<Index<T>, KwargError> {
    kwargs
        .indexes
        .get(name)
        .map(Index::typed)
        .ok_or(KwargError::UnknownIndex { name })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn take<'a, T: SpecArg<'a, M>, M>(storage: &'a mut T::Storage) -> T {
        T::get(storage)
    }

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Spec {
        size: u32,
    }

    #[test]
    fn typed_parts_deserialize_or_report_the_type() {
        let kw = Kwargs::new(json!({"spec": {"size": 3}}));
        let mut storage = <&Spec as SpecArg<'_, ByRef>>::load(&kw).expect("valid spec");
        let spec: &Spec = take::<&Spec, ByRef>(&mut storage);
        assert_eq!(spec, &Spec { size: 3 });

        let bad = Kwargs::new(json!({"spec": {"size": "x"}}));
        let error = <Spec as SpecArg<'_, ByValue>>::load(&bad).expect_err("malformed");
        assert!(
            matches!(error, KwargError::Deserialize { kwarg: "spec", .. }),
            "{error:?}"
        );
    }

    #[test]
    fn optional_references_borrow_what_optional_values_own() {
        let mut kw = Kwargs::new(json!({"spec": {"size": 3}}));
        kw.new = Some(std::sync::Arc::new(json!({"size": 4})));
        let mut storage = <Option<&Spec> as OldArg<'_, ByRef>>::load(&kw).expect("absent");
        assert_eq!(
            <Option<&Spec> as OldArg<'_, ByRef>>::get(&mut storage),
            None
        );
        let mut storage = <Option<&Spec> as NewArg<'_, ByRef>>::load(&kw).expect("present");
        assert_eq!(
            <Option<&Spec> as NewArg<'_, ByRef>>::get(&mut storage),
            Some(&Spec { size: 4 })
        );
        let mut storage = <Option<&Value> as SpecArg<'_, ByRef>>::load(&kw).expect("a spec");
        assert_eq!(
            <Option<&Value> as SpecArg<'_, ByRef>>::get(&mut storage),
            Some(&json!({"size": 3}))
        );
        let error = <Option<&Spec> as BodyArg<'_, ByRef>>::load(&kw).expect_err("no `size`");
        assert!(
            matches!(error, KwargError::Deserialize { kwarg: "body", .. }),
            "{error:?}"
        );
    }

    #[test]
    fn names_are_missing_or_optional() {
        let kw = Kwargs::new(json!({"metadata": {"name": "n"}}));
        let mut s = <&str as NameArg<'_, ByRef>>::load(&kw).expect("has a name");
        assert_eq!(<&str as NameArg<'_, ByRef>>::get(&mut s), "n");
        assert_eq!(
            <&str as NamespaceArg<'_, ByRef>>::load(&kw),
            Err(KwargError::Missing { kwarg: "namespace" })
        );
        let mut s = <Option<&str> as NamespaceArg<'_, ByRef>>::load(&kw).expect("optional");
        assert_eq!(<Option<&str> as NamespaceArg<'_, ByRef>>::get(&mut s), None);
    }

    #[test]
    fn lent_settings_are_written_back_when_the_call_ends() {
        let settings = StartupSettings::new(OperatorSettings::default());
        let kw = Kwargs {
            settings: Some(settings.clone()),
            ..Kwargs::default()
        };
        {
            let mut storage =
                <&mut OperatorSettings as SettingsArg<'_, ByRef>>::load(&kw).expect("lent");
            let lent = <&mut OperatorSettings as SettingsArg<'_, ByRef>>::get(&mut storage);
            lent.persistence.finalizer = "example.com/f".into();
            assert_ne!(
                settings.get().persistence.finalizer,
                "example.com/f",
                "not before the call ends"
            );
        }
        assert_eq!(settings.get().persistence.finalizer, "example.com/f");
        let mut read = <&OperatorSettings as SettingsArg<'_, ByRef>>::load(&kw).expect("read");
        let read = <&OperatorSettings as SettingsArg<'_, ByRef>>::get(&mut read);
        assert_eq!(read.persistence.finalizer, "example.com/f");

        assert_eq!(
            <&OperatorSettings as SettingsArg<'_, ByRef>>::load(&Kwargs::default()).err(),
            Some(KwargError::Missing { kwarg: "settings" })
        );
    }

    #[test]
    fn absent_status_is_an_empty_object_and_stopped_is_missing_outside_daemons() {
        let kw = Kwargs::new(json!({}));
        assert_eq!(
            <Value as StatusArg<'_, ByValue>>::load(&kw),
            Ok(Some(json!({})))
        );
        assert!(<Stopped as StoppedArg<'_, ByValue>>::load(&kw).is_err());
        assert_eq!(
            <Index as IndexArg<'_, ByValue>>::load(&kw, "x").err(),
            Some(KwargError::UnknownIndex { name: "x" })
        );
    }
}
