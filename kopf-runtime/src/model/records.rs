//! Registration records emitted by the attribute macros (not public API).
//!
//! Every attribute expands to one `const` [`HandlerRecord`] submitted with
//! `inventory`, its options grouped by what they describe (filters, retry
//! policy, task and webhook options). Records hold only `'static` data and fn
//! pointers, so they are `Sync` and const-constructible;
//! [`HandlerRecord::to_handler`] turns one into the runtime [`Handler`]
//! through the builder's own setters, so that a kind's defaults, its
//! finalizer and the `/field` suffix of its id are decided in one place
//! ([`Handler`]'s). The macros already reject invalid combinations; the
//! setters check every option against its kind again, so that a record is
//! never trusted blindly.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::model::errors::Outcome;
use crate::model::filters::{MetaFilter, MetaValue, ValueFilter};
use crate::model::handlers::{ErrorsMode, Handler, HandlerKind};
use crate::model::kwargs::{Kwargs, Operation};
use crate::model::resources::ResourceRef;

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
///
/// The options are grouped by what they describe. Each group is a `const`
/// struct with a `DEFAULT` holding Kopf's defaults; the macros write only the
/// options given in the attribute and complete the group with
/// `..Group::DEFAULT`, so a new option is a field of its group (plus the
/// group's `DEFAULT` and conversion, right beside it) and nothing else here.
#[derive(Debug, Clone, Copy)]
pub struct HandlerRecord {
    /// The kind.
    pub kind: HandlerKind,
    /// The handler fn and how to call it.
    pub function: FunctionRecord,
    /// The `id` option.
    pub id: Option<&'static str>,
    /// The `param` option.
    pub param: Option<fn() -> Value>,
    /// The resource (`None` for activities).
    pub resource: Option<fn() -> ResourceRef>,
    /// Which objects and changes the handler serves.
    pub filters: FilterRecord,
    /// The retry policy.
    pub retry: RetryRecord,
    /// Options of the change handlers `on_resume` and `on_delete`.
    pub changes: ChangeRecord,
    /// Options of the task handlers `timer` and `daemon`.
    pub task: TaskRecord,
    /// Options of the admission handlers `on_validate` and `on_mutate`.
    pub webhook: WebhookRecord,
}

/// The handler fn, as the macro found it.
#[derive(Debug, Clone, Copy)]
pub struct FunctionRecord {
    /// `module_path!()::fn_name`.
    pub path: &'static str,
    /// The fn's name (the default id).
    pub name: &'static str,
    /// Whether the fn is a plain (blocking) `fn`.
    pub blocking: bool,
    /// The names of index parameters.
    pub index_params: &'static [&'static str],
    /// Whether the fn takes the `client` parameter.
    pub client: bool,
    /// The generated invoker.
    pub invoke: fn(Kwargs) -> BoxFuture<'static, Outcome>,
}

/// `labels`, `annotations`, `when`, `field`, `value`, `old`, `new`.
#[derive(Debug, Clone, Copy)]
pub struct FilterRecord {
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
}

impl FilterRecord {
    /// No filters: every object and change.
    pub const DEFAULT: FilterRecord = FilterRecord {
        labels: &[],
        annotations: &[],
        when: None,
        field: None,
        value: None,
        old: None,
        new: None,
    };

    /// Sets the filters given on `handler`.
    fn apply(self, mut handler: Handler) -> Handler {
        if !self.labels.is_empty() {
            handler = handler.labels(meta(self.labels));
        }
        if !self.annotations.is_empty() {
            handler = handler.annotations(meta(self.annotations));
        }
        if let Some(when) = self.when {
            handler = handler.when(when);
        }
        if let Some(field) = self.field {
            handler = handler.field(field);
        }
        if let Some(value) = value(self.value) {
            handler = handler.value(value);
        }
        if let Some(old) = value(self.old) {
            handler = handler.old(old);
        }
        if let Some(new) = value(self.new) {
            handler = handler.new_value(new);
        }
        handler
    }
}

/// `retries`, `backoff`, `timeout`, `errors`.
#[derive(Debug, Clone, Copy)]
pub struct RetryRecord {
    /// `retries`.
    pub retries: Option<u32>,
    /// `backoff`.
    pub backoff: Option<Duration>,
    /// `timeout`.
    pub timeout: Option<Duration>,
    /// `errors`.
    pub errors: Option<ErrorsMode>,
}

impl RetryRecord {
    /// Kopf's defaults: retry forever, after the operator's
    /// `settings.execution.default_backoff`, errors temporary.
    pub const DEFAULT: RetryRecord = RetryRecord {
        retries: None,
        backoff: None,
        timeout: None,
        errors: None,
    };

    /// Sets the retry options given on `handler`.
    fn apply(self, mut handler: Handler) -> Handler {
        if let Some(retries) = self.retries {
            handler = handler.retries(retries);
        }
        if let Some(backoff) = self.backoff {
            handler = handler.backoff(backoff);
        }
        if let Some(timeout) = self.timeout {
            handler = handler.timeout(timeout);
        }
        if let Some(errors) = self.errors {
            handler = handler.errors(errors);
        }
        handler
    }
}

/// `deleted` (`on_resume`), `optional` (`on_delete`).
#[derive(Debug, Clone, Copy)]
pub struct ChangeRecord {
    /// `deleted`.
    pub deleted: bool,
    /// `optional`.
    pub optional: bool,
}

impl ChangeRecord {
    /// Kopf's defaults: resume live objects only, deletion handlers hold a finalizer.
    pub const DEFAULT: ChangeRecord = ChangeRecord {
        deleted: false,
        optional: false,
    };

    /// Sets the options given on `handler`.
    fn apply(self, mut handler: Handler) -> Handler {
        if self.deleted {
            handler = handler.deleted(true);
        }
        if self.optional {
            handler = handler.optional(true);
        }
        handler
    }
}

/// `interval`, `initial_delay`, `sharp`, `idle` (`timer`),
/// `cancellation_backoff`, `cancellation_timeout`, `cancellation_polling`
/// (`daemon`) and `no_finalizers` (both).
#[derive(Debug, Clone, Copy)]
pub struct TaskRecord {
    /// `interval`.
    pub interval: Option<Duration>,
    /// `initial_delay`.
    pub initial_delay: Option<Duration>,
    /// `sharp`.
    pub sharp: bool,
    /// `idle`.
    pub idle: Option<Duration>,
    /// `cancellation_backoff`.
    pub cancellation_backoff: Option<Duration>,
    /// `cancellation_timeout`.
    pub cancellation_timeout: Option<Duration>,
    /// `cancellation_polling`.
    pub cancellation_polling: Option<Duration>,
    /// `no_finalizers`.
    pub no_finalizers: bool,
}

impl TaskRecord {
    /// Kopf's defaults; unset durations fall back to the operator's settings.
    pub const DEFAULT: TaskRecord = TaskRecord {
        interval: None,
        initial_delay: None,
        sharp: false,
        idle: None,
        cancellation_backoff: None,
        cancellation_timeout: None,
        cancellation_polling: None,
        no_finalizers: false,
    };

    /// Sets the options given on `handler`.
    fn apply(self, mut handler: Handler) -> Handler {
        if let Some(interval) = self.interval {
            handler = handler.interval(interval);
        }
        if let Some(delay) = self.initial_delay {
            handler = handler.initial_delay(delay);
        }
        if self.sharp {
            handler = handler.sharp(true);
        }
        if let Some(idle) = self.idle {
            handler = handler.idle(idle);
        }
        if let Some(value) = self.cancellation_backoff {
            handler = handler.cancellation_backoff(value);
        }
        if let Some(value) = self.cancellation_timeout {
            handler = handler.cancellation_timeout(value);
        }
        if let Some(value) = self.cancellation_polling {
            handler = handler.cancellation_polling(value);
        }
        if self.no_finalizers {
            handler = handler.no_finalizers();
        }
        handler
    }
}

/// `operations`, `subresource`, `persistent`, `side_effects`, `ignore_failures`.
#[derive(Debug, Clone, Copy)]
pub struct WebhookRecord {
    /// `operations`.
    pub operations: &'static [Operation],
    /// `subresource`.
    pub subresource: Option<&'static str>,
    /// `persistent`.
    pub persistent: bool,
    /// `side_effects`.
    pub side_effects: bool,
    /// `ignore_failures`.
    pub ignore_failures: bool,
}

impl WebhookRecord {
    /// Kopf's defaults: all operations on the main resource, fail closed.
    pub const DEFAULT: WebhookRecord = WebhookRecord {
        operations: &[],
        subresource: None,
        persistent: false,
        side_effects: false,
        ignore_failures: false,
    };

    /// Sets the options given on `handler`.
    fn apply(self, mut handler: Handler) -> Handler {
        if !self.operations.is_empty() {
            handler = handler.operations(self.operations.iter().copied());
        }
        if let Some(subresource) = self.subresource {
            handler = handler.subresource(subresource);
        }
        if self.persistent {
            handler = handler.persistent(true);
        }
        if self.side_effects {
            handler = handler.side_effects(true);
        }
        if self.ignore_failures {
            handler = handler.ignore_failures(true);
        }
        handler
    }
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

    /// The runtime handler for this record, built by the same setters as
    /// a handler made without macros: an option given is set (and checked
    /// against its kind) as the builder sets it, the rest keep their
    /// defaults.
    pub fn to_handler(&self) -> Handler {
        let resource = self.resource.map(|f| f());
        let id = self.id.unwrap_or(self.function.name).to_owned();
        let invoke = self.function.invoke;
        let mut handler = Handler::new(self.kind, resource, id, Arc::new(invoke))
            .fn_path(self.function.path)
            .blocking(self.function.blocking)
            .takes_client(self.function.client);
        for name in self.function.index_params {
            handler = handler.uses_index(*name);
        }
        if let Some(param) = self.param {
            handler = handler.param(param());
        }
        let handler = self.filters.apply(handler);
        let handler = self.retry.apply(handler);
        let handler = self.changes.apply(handler);
        let handler = self.task.apply(handler);
        self.webhook.apply(handler)
    }
}

const _: () = {
    const fn assert_sync<T: Sync>() {}
    assert_sync::<HandlerRecord>();
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::handlers::{KindOptions, TimerOptions};

    fn invoke(_: Kwargs) -> BoxFuture<'static, Outcome> {
        Box::pin(std::future::pending())
    }

    fn record(kind: HandlerKind) -> HandlerRecord {
        HandlerRecord {
            kind,
            function: FunctionRecord {
                path: "crate::f",
                name: "f",
                blocking: false,
                index_params: &[],
                client: false,
                invoke,
            },
            id: None,
            param: None,
            resource: if kind.is_activity() {
                None
            } else {
                Some(|| ResourceRef::dynamic("", "v1", "pods"))
            },
            filters: FilterRecord::DEFAULT,
            retry: RetryRecord::DEFAULT,
            changes: ChangeRecord::DEFAULT,
            task: TaskRecord::DEFAULT,
            webhook: WebhookRecord::DEFAULT,
        }
    }

    #[test]
    fn default_groups_give_the_same_handler_as_the_builder() {
        for kind in HandlerKind::ALL {
            let record = record(kind);
            let built = Handler::new(
                kind,
                record.resource.map(|f| f()),
                "f".to_owned(),
                Arc::new(invoke),
            );
            let handler = record.to_handler();
            assert_eq!(handler.id(), built.id(), "{kind}");
            assert_eq!(handler.options(), built.options(), "{kind}");
            assert_eq!(handler.kind_options(), built.kind_options(), "{kind}");
            assert_eq!(
                handler.requires_finalizer(),
                built.requires_finalizer(),
                "{kind}"
            );
            assert_eq!(handler.filters().labels, built.filters().labels, "{kind}");
            assert!(handler.filters().field.is_none(), "{kind}");
            assert!(handler.filters().when.is_none(), "{kind}");
            assert!(handler.param_value().is_none(), "{kind}");
            assert!(handler.problems().is_empty(), "{kind}");
        }
    }

    #[tokio::test]
    async fn a_fn_gets_the_client_only_if_it_takes_one() {
        let (client, _) =
            crate::mock_api::client(|_| crate::mock_api::Reply::Json(200, serde_json::json!({})));
        let mut timer = record(HandlerKind::Timer);
        assert!(timer.to_handler().client_for(&client).is_none());
        timer.function.client = true;
        assert!(timer.to_handler().client_for(&client).is_some());
        let built = Handler::new(HandlerKind::Timer, None, "f".to_owned(), Arc::new(invoke));
        assert!(
            built.client_for(&client).is_some(),
            "a handler made without macros may read any kwarg"
        );
    }

    #[test]
    fn groups_reach_their_handler_options() {
        let mut timer = record(HandlerKind::Timer);
        timer.task = TaskRecord {
            interval: Some(Duration::from_secs(10)),
            no_finalizers: true,
            ..TaskRecord::DEFAULT
        };
        timer.retry = RetryRecord {
            retries: Some(3),
            ..RetryRecord::DEFAULT
        };
        timer.filters = FilterRecord {
            field: Some("spec.size"),
            ..FilterRecord::DEFAULT
        };
        let handler = timer.to_handler();
        assert_eq!(handler.id(), "f/spec.size");
        assert_eq!(handler.options().retries, Some(3));
        assert_eq!(
            handler.options().backoff,
            None,
            "unset: the settings decide"
        );
        assert_eq!(
            *handler.kind_options(),
            KindOptions::Timer(TimerOptions {
                interval: Some(Duration::from_secs(10)),
                ..TimerOptions::default()
            })
        );
        assert!(!handler.requires_finalizer());

        let mut delete = record(HandlerKind::OnDelete);
        delete.changes = ChangeRecord {
            optional: true,
            ..ChangeRecord::DEFAULT
        };
        let handler = delete.to_handler();
        assert_eq!(
            *handler.kind_options(),
            KindOptions::Delete { optional: true }
        );
        assert!(!handler.requires_finalizer());

        let mut mutate = record(HandlerKind::OnMutate);
        mutate.webhook = WebhookRecord {
            subresource: Some("status"),
            ..WebhookRecord::DEFAULT
        };
        let handler = mutate.to_handler();
        let KindOptions::Webhook(options) = handler.kind_options() else {
            panic!("a webhook's options");
        };
        assert_eq!(options.subresource.as_deref(), Some("status"));
    }

    #[test]
    fn options_of_another_kind_are_problems_as_in_the_builder() {
        let mut create = record(HandlerKind::OnCreate);
        create.task = TaskRecord {
            interval: Some(Duration::from_secs(1)),
            ..TaskRecord::DEFAULT
        };
        let built = Handler::new(
            HandlerKind::OnCreate,
            create.resource.map(|f| f()),
            "f".to_owned(),
            Arc::new(invoke),
        )
        .interval(Duration::from_secs(1));
        assert_eq!(create.to_handler().problems(), built.problems());
        assert_eq!(built.problems().len(), 1);
    }

    #[test]
    fn an_invalid_field_path_is_a_problem_of_the_handler() {
        let mut record = record(HandlerKind::OnField);
        record.filters = FilterRecord {
            field: Some("spec..size"),
            ..FilterRecord::DEFAULT
        };
        let handler = record.to_handler();
        assert_eq!(handler.problems().len(), 1, "{:?}", handler.problems());
    }
}
