//! Registration records emitted by the attribute macros (not public API).
//!
//! Every attribute expands to one `const` [`HandlerRecord`] submitted with
//! `inventory`. Records hold only `'static` data and fn pointers, so they are
//! `Sync` and const-constructible; [`HandlerRecord::to_handler`] turns one into
//! the runtime [`Handler`]. The macros already reject invalid combinations; the
//! conversion re-checks what it must (field paths) so that a record is never
//! trusted blindly.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::errors::Outcome;
use crate::filters::{FieldPath, MetaFilter, MetaValue, ValueFilter};
use crate::handlers::{
    DEFAULT_BACKOFF, DaemonOptions, ErrorsMode, Handler, HandlerKind, KindOptions, Options,
    TimerOptions, WebhookOptions,
};
use crate::kwargs::{Kwargs, Operation};
use crate::resources::ResourceRef;

/// A label or annotation condition in a record.
#[derive(Debug, Clone, Copy)]
pub enum MetaRecord {
    /// Equal to the string.
    Equals(&'static str),
    /// Exists.
    Present,
    /// Does not exist.
    Absent,
    /// Decided by a callback.
    Callback(fn(Option<&str>, &Kwargs) -> bool),
}

/// A `value`/`old`/`new` condition in a record.
#[derive(Debug, Clone, Copy)]
pub enum ValueRecord {
    /// Equal to the JSON value produced by the fn (a literal in the attribute).
    Equals(fn() -> Value),
    /// Exists.
    Present,
    /// Does not exist.
    Absent,
    /// Decided by a callback.
    Callback(fn(Option<&Value>, &Kwargs) -> bool),
}

/// One handler registration, as emitted by the macros.
#[derive(Debug, Clone, Copy)]
pub struct HandlerRecord {
    /// The kind.
    pub kind: HandlerKind,
    /// `module_path!()::fn_name`.
    pub fn_path: &'static str,
    /// The fn's name (the default id).
    pub fn_name: &'static str,
    /// The `id` option.
    pub id: Option<&'static str>,
    /// The resource (`None` for activities).
    pub resource: Option<fn() -> ResourceRef>,
    /// `retries`.
    pub retries: Option<u32>,
    /// `backoff`.
    pub backoff: Option<Duration>,
    /// `timeout`.
    pub timeout: Option<Duration>,
    /// `errors`.
    pub errors: Option<ErrorsMode>,
    /// `param`.
    pub param: Option<fn() -> Value>,
    /// `labels`.
    pub labels: &'static [(&'static str, MetaRecord)],
    /// `annotations`.
    pub annotations: &'static [(&'static str, MetaRecord)],
    /// `when`.
    pub when: Option<fn(&Kwargs) -> bool>,
    /// `field`.
    pub field: Option<&'static str>,
    /// `value`.
    pub value: Option<ValueRecord>,
    /// `old`.
    pub old: Option<ValueRecord>,
    /// `new`.
    pub new: Option<ValueRecord>,
    /// `deleted` (`on_resume`).
    pub deleted: bool,
    /// `optional` (`on_delete`).
    pub optional: bool,
    /// `no_finalizers` (`timer`, `daemon`).
    pub no_finalizers: bool,
    /// `interval` (`timer`).
    pub interval: Option<Duration>,
    /// `initial_delay` (`timer`, `daemon`).
    pub initial_delay: Option<Duration>,
    /// `sharp` (`timer`).
    pub sharp: bool,
    /// `idle` (`timer`).
    pub idle: Option<Duration>,
    /// `cancellation_backoff` (`daemon`).
    pub cancellation_backoff: Option<Duration>,
    /// `cancellation_timeout` (`daemon`).
    pub cancellation_timeout: Option<Duration>,
    /// `cancellation_polling` (`daemon`).
    pub cancellation_polling: Option<Duration>,
    /// `operations` (webhooks).
    pub operations: &'static [Operation],
    /// `subresource` (webhooks).
    pub subresource: Option<&'static str>,
    /// `persistent` (webhooks).
    pub persistent: bool,
    /// `side_effects` (webhooks).
    pub side_effects: bool,
    /// `ignore_failures` (webhooks).
    pub ignore_failures: bool,
    /// Whether the fn is a plain (blocking) `fn`.
    pub blocking: bool,
    /// The names of index parameters.
    pub index_params: &'static [&'static str],
    /// The generated invoker.
    pub invoke: fn(Kwargs) -> BoxFuture<'static, Outcome>,
}

inventory::collect!(HandlerRecord);

fn meta(records: &[(&'static str, MetaRecord)]) -> MetaFilter {
    let entries = records
        .iter()
        .map(|(key, record)| {
            let value = match *record {
                MetaRecord::Equals(v) => MetaValue::Equals(v.to_owned()),
                MetaRecord::Present => MetaValue::Present,
                MetaRecord::Absent => MetaValue::Absent,
                MetaRecord::Callback(f) => MetaValue::Callback(Arc::new(f)),
            };
            ((*key).to_owned(), value)
        })
        .collect();
    MetaFilter { entries }
}

fn value(record: Option<ValueRecord>) -> Option<ValueFilter> {
    Some(match record? {
        ValueRecord::Equals(f) => ValueFilter::Equals(f()),
        ValueRecord::Present => ValueFilter::Present,
        ValueRecord::Absent => ValueFilter::Absent,
        ValueRecord::Callback(f) => ValueFilter::Callback(Arc::new(f)),
    })
}

impl HandlerRecord {
    /// All records submitted by linked crates, in unspecified order.
    pub fn all() -> impl Iterator<Item = &'static HandlerRecord> {
        inventory::iter::<HandlerRecord>.into_iter()
    }

    /// The runtime handler for this record.
    pub fn to_handler(&self) -> Handler {
        let kind = self.kind;
        let mut problems = Vec::new();
        let field = self.field.and_then(|f| {
            let parsed = FieldPath::parse(f);
            if parsed.is_none() {
                problems.push(format!("`field` is not a valid dot-separated path: {f:?}"));
            }
            parsed
        });
        let base = self.id.unwrap_or(self.fn_name);
        let id = match (&field, kind) {
            (Some(field), k) if k != HandlerKind::Index => format!("{base}/{field}"),
            _ => base.to_owned(),
        };
        let kind_options = match kind {
            HandlerKind::OnResume => KindOptions::Resume {
                deleted: self.deleted,
            },
            HandlerKind::OnDelete => KindOptions::Delete {
                optional: self.optional,
            },
            HandlerKind::Timer => KindOptions::Timer(TimerOptions {
                interval: self.interval,
                initial_delay: self.initial_delay,
                sharp: self.sharp,
                idle: self.idle,
            }),
            HandlerKind::Daemon => KindOptions::Daemon(DaemonOptions {
                initial_delay: self.initial_delay,
                cancellation_backoff: self.cancellation_backoff,
                cancellation_timeout: self.cancellation_timeout,
                cancellation_polling: self.cancellation_polling,
            }),
            HandlerKind::OnValidate | HandlerKind::OnMutate => {
                KindOptions::Webhook(WebhookOptions {
                    operations: self.operations.to_vec(),
                    subresource: self.subresource.map(str::to_owned),
                    persistent: self.persistent,
                    side_effects: self.side_effects,
                    ignore_failures: self.ignore_failures,
                })
            }
            _ => KindOptions::None,
        };
        let requires_finalizer = match kind {
            HandlerKind::OnDelete => !self.optional,
            HandlerKind::Timer | HandlerKind::Daemon => !self.no_finalizers,
            _ => false,
        };
        let invoke = self.invoke;
        let mut handler = Handler::new(kind, self.resource.map(|f| f()), id, Arc::new(invoke));
        handler.fn_path = Cow::Borrowed(self.fn_path);
        handler.options = Options {
            retries: self.retries,
            backoff: self.backoff.unwrap_or(DEFAULT_BACKOFF),
            timeout: self.timeout,
            errors: self.errors.unwrap_or_default(),
        };
        handler.filters.labels = meta(self.labels);
        handler.filters.annotations = meta(self.annotations);
        handler.filters.when = self.when.map(|f| Arc::new(f) as _);
        handler.filters.field = field;
        handler.filters.value = value(self.value);
        handler.filters.old = value(self.old);
        handler.filters.new = value(self.new);
        handler.kind_options = kind_options;
        handler.param = self.param.map(|f| f());
        handler.requires_finalizer = requires_finalizer;
        handler.blocking = self.blocking;
        handler.index_params = self
            .index_params
            .iter()
            .map(|name| Cow::Borrowed(*name))
            .collect();
        handler.problems.extend(problems);
        handler
    }
}

const _: () = {
    const fn assert_sync<T: Sync>() {}
    assert_sync::<HandlerRecord>();
};
