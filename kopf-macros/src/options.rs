//! The handler options: one typed holder per option, grouped as the
//! registration record groups them (`kopf_runtime::__private::*Record`).
//!
//! Each group is declared once in `groups!`: an option's line names its
//! field (the option's key and the record's field), its value type, its parser
//! (in `values`) and the kinds that accept it. From that line come the holder,
//! its setter, the valid keys listed in messages, and the field in the
//! expansion.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::Ident;

use crate::attr::{Errors, Raw};
use crate::expand::{ToRecord, private};
use crate::kinds::Kind;
use crate::values::{self, Count, ErrorsMode, Flag, Json, MetaFilter, Operations, Secs, Str};
use crate::values::{ValueSpec, When};

/// One option's holder: where it was written (valid or not) and its value.
pub(crate) struct Attr<T> {
    span: Option<Span>,
    value: Option<T>,
}

impl<T> Default for Attr<T> {
    fn default() -> Self {
        Attr {
            span: None,
            value: None,
        }
    }
}

/// Parses one option's value (see `values`).
pub(crate) type Parser<T> = fn(&Ident, Raw, &mut Errors) -> Option<T>;

impl<T> Attr<T> {
    /// Sets the option from what was written; an option written twice is an
    /// error, whether or not the first value was valid.
    pub(crate) fn set(&mut self, key: &Ident, raw: Raw, errors: &mut Errors, parse: Parser<T>) {
        if let Some(first) = self.span {
            let mut error =
                syn::Error::new(key.span(), format!("duplicate option `{key}`; set it once"));
            error.combine(syn::Error::new(first, format!("`{key}` first set here")));
            errors.push_error(error);
            return;
        }
        self.span = Some(key.span());
        self.value = parse(key, raw, errors);
    }

    /// The value, if the option was written and valid.
    pub(crate) fn get(&self) -> Option<&T> {
        self.value.as_ref()
    }

    /// Where the option's key was written, if it was, valid or not.
    pub(crate) fn span(&self) -> Option<Span> {
        self.span
    }
}

/// Which kinds accept an option.
type Accepts = fn(Kind) -> bool;

/// Declares the option groups. Per option:
/// `key: ValueType = parser, if accepting_kinds;`, preceded by a comment with
/// the syntax it accepts. The group expands to `Record { key: …, ..Record::DEFAULT }`
/// with the options written, so a new option is one line here plus the record's field.
macro_rules! groups {
    ($(
        $(#[$doc:meta])*
        $group:ident => $record:ident {
            $($key:ident: $ty:ty = $parse:path, if $accepts:expr;)*
        }
    )*) => {$(
        $(#[$doc])*
        #[derive(Default)]
        pub(crate) struct $group {
            $(pub(crate) $key: Attr<$ty>,)*
        }

        impl $group {
            /// The group's keys, in the order messages list them, with the kinds accepting each.
            const KEYS: &[(&'static str, Accepts)] = &[$((stringify!($key), $accepts)),*];

            /// Whether `key` is in this group.
            fn has(key: &Ident) -> bool {
                Self::KEYS.iter().any(|(name, _)| key == name)
            }

            /// Sets the option `key` of this group.
            fn set(&mut self, key: &Ident, raw: Raw, errors: &mut Errors) {
                $(if key == stringify!($key) {
                    return self.$key.set(key, raw, errors, $parse);
                })*
            }

            /// The record group: the options written, the rest from its `DEFAULT`.
            pub(crate) fn to_record(&self) -> TokenStream {
                let p = private();
                let mut fields = Vec::new();
                $(if let Some(value) = self.$key.get() {
                    let value = value.to_record();
                    fields.push(quote!($key: #value));
                })*
                if fields.is_empty() {
                    quote!(#p::$record::DEFAULT)
                } else {
                    quote!(#p::$record { #(#fields,)* ..#p::$record::DEFAULT })
                }
            }
        }
    )*};
}

groups! {
    /// Retry policy: `RetryRecord`.
    Retry => RetryRecord {
        // retries = 3
        retries: Count = values::count, if Kind::retries;
        // backoff = 10 | backoff = 0.5
        backoff: Secs = values::seconds, if Kind::retries;
        // timeout = 600
        timeout: Secs = values::seconds, if Kind::retries;
        // errors = kopf::ErrorsMode::Permanent | errors = "permanent"
        errors: ErrorsMode = values::errors_mode, if Kind::retries;
    }

    /// Which objects and changes are served: `FilterRecord`.
    Filters => FilterRecord {
        // labels("app" = "web", "tier" = kopf::PRESENT, "x" = kopf::ABSENT, "y" = callback)
        labels: MetaFilter = values::meta_filter, if Kind::has_resource;
        // annotations("example.com/ttl" = kopf::PRESENT, …)
        annotations: MetaFilter = values::meta_filter, if Kind::has_resource;
        // when = path::to::callback
        when: When = values::when, if Kind::has_resource;
        // field = "spec.path"
        field: Str = values::field_path, if Kind::has_resource;
        // value = <literal> | json!(…) | kopf::PRESENT | kopf::ABSENT | callback
        value: ValueSpec = values::value, if Kind::has_resource;
        // old = <literal> | json!(…) | kopf::PRESENT | kopf::ABSENT | callback
        old: ValueSpec = values::value, if Kind::has_old_new;
        // new = <literal> | json!(…) | kopf::PRESENT | kopf::ABSENT | callback
        new: ValueSpec = values::value, if Kind::has_old_new;
    }

    /// Options of `on_resume` and `on_delete`: `ChangeRecord`.
    Changes => ChangeRecord {
        // deleted | deleted = true
        deleted: Flag = values::flag, if |kind| kind == Kind::OnResume;
        // optional | optional = true
        optional: Flag = values::flag, if |kind| kind == Kind::OnDelete;
    }

    /// Options of `timer` and `daemon`: `TaskRecord`.
    Task => TaskRecord {
        // interval = 10 | interval = 0.5
        interval: Secs = values::seconds, if |kind| kind == Kind::Timer;
        // initial_delay = 10
        initial_delay: Secs = values::seconds, if Kind::is_task;
        // sharp | sharp = true
        sharp: Flag = values::flag, if |kind| kind == Kind::Timer;
        // idle = 60
        idle: Secs = values::seconds, if |kind| kind == Kind::Timer;
        // cancellation_backoff = 5
        cancellation_backoff: Secs = values::seconds, if |kind| kind == Kind::Daemon;
        // cancellation_timeout = 30
        cancellation_timeout: Secs = values::seconds, if |kind| kind == Kind::Daemon;
        // cancellation_polling = 1
        cancellation_polling: Secs = values::seconds, if |kind| kind == Kind::Daemon;
        // no_finalizers | no_finalizers = true
        no_finalizers: Flag = values::flag, if Kind::is_task;
    }

    /// Options of `on_validate` and `on_mutate`: `WebhookRecord`.
    Webhook => WebhookRecord {
        // operations("CREATE", "UPDATE", "DELETE", "CONNECT")
        operations: Operations = values::operations, if Kind::is_webhook;
        // subresource = "status"
        subresource: Str = values::string, if Kind::is_webhook;
        // persistent | persistent = true
        persistent: Flag = values::flag, if Kind::is_webhook;
        // side_effects | side_effects = true
        side_effects: Flag = values::flag, if Kind::is_webhook;
        // ignore_failures | ignore_failures = true
        ignore_failures: Flag = values::flag, if Kind::is_webhook;
    }
}

/// Every option of one attribute.
#[derive(Default)]
pub(crate) struct Options {
    pub(crate) id: Attr<Str>,
    pub(crate) param: Attr<Json>,
    pub(crate) retry: Retry,
    pub(crate) filters: Filters,
    pub(crate) changes: Changes,
    pub(crate) task: Task,
    pub(crate) webhook: Webhook,
}

/// The options of every kind, outside the groups.
const COMMON: &[(&str, Accepts)] = &[("id", |_| true), ("param", |_| true)];

impl Options {
    fn all_keys() -> impl Iterator<Item = &'static (&'static str, Accepts)> {
        [
            COMMON,
            Retry::KEYS,
            Filters::KEYS,
            Changes::KEYS,
            Task::KEYS,
            Webhook::KEYS,
        ]
        .into_iter()
        .flatten()
    }

    /// The keys `kind` accepts, in the order messages list them.
    pub(crate) fn keys(kind: Kind) -> Vec<&'static str> {
        Self::all_keys()
            .filter(|(_, accepts)| accepts(kind))
            .map(|(key, _)| *key)
            .collect()
    }

    /// Whether any kind accepts `key`.
    pub(crate) fn is_key(key: &str) -> bool {
        Self::all_keys().any(|(name, _)| *name == key)
    }

    /// Sets the option `key`, which the kind accepts.
    pub(crate) fn set(&mut self, key: &Ident, raw: Raw, errors: &mut Errors) {
        // id = "…"
        if key == "id" {
            return self.id.set(key, raw, errors, values::string);
        }
        // param = <literal> | json!(…)
        if key == "param" {
            return self.param.set(key, raw, errors, values::json);
        }
        if Retry::has(key) {
            self.retry.set(key, raw, errors);
        } else if Filters::has(key) {
            self.filters.set(key, raw, errors);
        } else if Changes::has(key) {
            self.changes.set(key, raw, errors);
        } else if Task::has(key) {
            self.task.set(key, raw, errors);
        } else if Webhook::has(key) {
            self.webhook.set(key, raw, errors);
        } else {
            errors.push(key.span(), format!("option `{key}` is not implemented"));
        }
    }
}
