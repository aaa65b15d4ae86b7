//! The [`Registry`]: all handlers of an operator, sorted and validated
//! (see its docs).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use serde_json::Value;

use crate::model::errors::IntoOutcome;
use crate::model::filters::{MetaFilter, MetaValue, ValueFilter};
use crate::model::handlers::{ErrorsMode, Handler, HandlerKind, KindOptions};
use crate::model::kwargs::{Kwargs, Operation};
use crate::model::records::HandlerRecord;
use crate::model::resources::ResourceRef;
use crate::webhooks::ENABLE_WEBHOOKS;

/// A problem found while building a [`Registry`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Two handlers share an id in the same scope for the same resource.
    #[error(
        "duplicate handler id `{id}` for `{kind_scope}` handlers of {resource}: `{first}` and `{second}`; give one of them a distinct `id = \"…\"`"
    )]
    DuplicateId {
        /// The shared id.
        id: String,
        /// The resource (or `activities`).
        resource: String,
        /// The id scope: the kind, or `daemon/timer` for both (their tasks
        /// are keyed by id).
        kind_scope: &'static str,
        /// The first handler's fn path.
        first: String,
        /// The second handler's fn path.
        second: String,
    },
    /// An `on_field` handler has no `field`.
    #[error("`{handler}`: `on_field` handlers need a `field`")]
    MissingField {
        /// The handler's fn path.
        handler: String,
    },
    /// `value`, `old` or `new` without `field`.
    #[error("`{handler}`: `{option}` needs a `field` to compare")]
    FilterWithoutField {
        /// The handler's fn path.
        handler: String,
        /// `value`, `old` or `new`.
        option: &'static str,
    },
    /// `value` together with `old`/`new`.
    #[error("`{handler}`: use either `value` or `old`/`new`, not both")]
    ValueWithOldNew {
        /// The handler's fn path.
        handler: String,
    },
    /// A handler takes an index that no `index` handler declares.
    #[error(
        "`{handler}`: parameter `{index}` names no index; declare `#[index]` on a fn named `{index}` (or with `id = \"{index}\"`), known indexes: {known}"
    )]
    UnknownIndex {
        /// The handler's fn path.
        handler: String,
        /// The missing index.
        index: String,
        /// The declared indexes, in backticks, or `none`.
        known: String,
    },
    /// Two `index` handlers share an id (indexes are injected by name, across resources).
    #[error(
        "duplicate index `{id}`: `{first}` and `{second}`; index ids must be unique across resources"
    )]
    DuplicateIndex {
        /// The shared id.
        id: String,
        /// The first handler's fn path.
        first: String,
        /// The second handler's fn path.
        second: String,
    },
    /// A handler was configured with options that do not apply to it.
    #[error("`{handler}`: {problem}")]
    InvalidHandler {
        /// The handler's fn path.
        handler: String,
        /// What is wrong.
        problem: String,
    },
    /// An admission handler (`on_validate`, `on_mutate`) in a build without
    /// kopf-runtime's `webhooks` feature, which has nothing to serve it.
    #[error(
        "`{handler}` is an admission handler, but this build has no admission webhooks: {}",
        ENABLE_WEBHOOKS
    )]
    WebhooksDisabled {
        /// The handler's fn path.
        handler: String,
    },
    /// A builder option was set before any handler was added.
    #[error("`{option}` was set before any handler was added to the builder")]
    NoHandler {
        /// The option.
        option: &'static str,
    },
    /// Several problems at once.
    #[error("{} problems with the handlers:\n{}", .0.len(), .0.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n"))]
    Multiple(Vec<RegistryError>),
}

/// All handlers of an operator, sorted by resource, kind and id.
///
/// Build it from the macros' records with [`Registry::from_inventory`], or
/// without macros with [`Registry::builder`] (so tests can run several
/// operators with different handler sets in one process). Both paths run the
/// same validation and report every problem at once.
///
/// # Errors
/// [`RegistryError`] names the offending handlers by fn path (macros) or id (builder):
/// two handlers with the same id for the same resource and kind scope, field
/// filters without a field, `value` together with `old`/`new`, options not
/// valid for a kind, daemons and timers that cannot run (a timer with a zero
/// `interval`, `retries = 0`), parameters naming an index that no
/// `#[index]` declares, and admission handlers in a build without the
/// `webhooks` feature. An operator never meets an invalid handler later.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    handlers: Vec<Handler>,
}

impl Registry {
    /// The handlers declared with the attribute macros in every linked crate.
    ///
    /// Records from a crate that the binary never references are dropped by the
    /// linker; see [`link!`](crate::link) for the remedy.
    ///
    /// # Errors
    /// All validation problems, see [`RegistryError`].
    pub fn from_inventory() -> Result<Self, RegistryError> {
        Registry::from_handlers(HandlerRecord::all().map(HandlerRecord::to_handler))
    }

    /// A builder for handlers without macros.
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
    }

    /// Validates and sorts handlers.
    ///
    /// # Errors
    /// All validation problems, see [`RegistryError`].
    pub fn from_handlers(
        handlers: impl IntoIterator<Item = Handler>,
    ) -> Result<Self, RegistryError> {
        let mut handlers: Vec<Handler> = handlers.into_iter().collect();
        handlers.sort_by(|a, b| {
            (&a.resource(), a.kind(), a.id(), a.source()).cmp(&(
                &b.resource(),
                b.kind(),
                b.id(),
                b.source(),
            ))
        });
        let errors = validate(&handlers);
        match errors.len() {
            0 => Ok(Registry { handlers }),
            1 => Err(errors.into_iter().next().expect("invariant: one error")),
            _ => Err(RegistryError::Multiple(errors)),
        }
    }

    /// All handlers, sorted by resource, kind, id.
    pub fn handlers(&self) -> &[Handler] {
        &self.handlers
    }

    /// The handlers of one kind.
    pub fn of_kind(&self, kind: HandlerKind) -> impl Iterator<Item = &Handler> {
        self.handlers.iter().filter(move |h| h.kind() == kind)
    }

    /// The handlers of one resource (all kinds).
    pub(crate) fn for_resource<'a>(
        &'a self,
        resource: &'a ResourceRef,
    ) -> impl Iterator<Item = &'a Handler> {
        self.handlers
            .iter()
            .filter(move |h| h.resource() == Some(resource))
    }

    /// The served resources, sorted and without duplicates.
    pub fn resources(&self) -> Vec<ResourceRef> {
        let mut resources: Vec<ResourceRef> = self
            .handlers
            .iter()
            .filter_map(|h| h.resource().cloned())
            .collect();
        resources.dedup();
        resources
    }

    /// The handler with this id for this kind and resource (`None` resource for activities).
    pub fn get(
        &self,
        kind: HandlerKind,
        resource: Option<&ResourceRef>,
        id: &str,
    ) -> Option<&Handler> {
        self.handlers
            .iter()
            .find(|h| h.kind() == kind && h.resource() == resource && h.id() == id)
    }

    /// The ids of all indexes.
    pub fn index_ids(&self) -> Vec<&str> {
        self.of_kind(HandlerKind::Index).map(|h| h.id()).collect()
    }

    /// Whether objects of `resource` need the operator's finalizer.
    pub fn requires_finalizer(&self, resource: &ResourceRef) -> bool {
        self.for_resource(resource).any(|h| h.requires_finalizer())
    }

    /// The number of handlers.
    pub fn len(&self) -> usize {
        self.handlers.len()
    }

    /// Whether there are no handlers.
    pub fn is_empty(&self) -> bool {
        self.handlers.is_empty()
    }
}

fn validate(handlers: &[Handler]) -> Vec<RegistryError> {
    let mut errors = Vec::new();
    let mut seen: BTreeMap<(Option<&ResourceRef>, &str, &str), &Handler> = BTreeMap::new();
    let mut indexes: BTreeMap<&str, &Handler> = BTreeMap::new();
    for handler in handlers {
        let path = handler.source().to_string();
        let problems = handler.problems().iter().map(String::as_str);
        for problem in problems.chain(task_problems(handler)) {
            errors.push(RegistryError::InvalidHandler {
                handler: path.clone(),
                problem: problem.to_owned(),
            });
        }
        errors.extend(unserved(handler, cfg!(feature = "webhooks")));
        let key = (handler.resource(), handler.kind().id_scope(), handler.id());
        if let Some(first) = seen.insert(key, handler) {
            errors.push(RegistryError::DuplicateId {
                id: handler.id().to_owned(),
                resource: handler
                    .resource()
                    .as_ref()
                    .map_or_else(|| "activities".to_owned(), |r| format!("`{r}`")),
                kind_scope: handler.kind().id_scope(),
                first: first.source().to_string(),
                second: path.clone(),
            });
        }
        if handler.kind() == HandlerKind::Index
            && let Some(first) = indexes.insert(handler.id(), handler)
            && first.resource() != handler.resource()
        {
            errors.push(RegistryError::DuplicateIndex {
                id: handler.id().to_owned(),
                first: first.source().to_string(),
                second: path.clone(),
            });
        }
        let filters = handler.filters();
        if handler.kind() == HandlerKind::OnField && filters.field.is_none() {
            errors.push(RegistryError::MissingField {
                handler: path.clone(),
            });
        }
        if filters.field.is_none() {
            for (option, set) in [
                ("value", filters.value.is_some()),
                ("old", filters.old.is_some()),
                ("new", filters.new.is_some()),
            ] {
                if set {
                    errors.push(RegistryError::FilterWithoutField {
                        handler: path.clone(),
                        option,
                    });
                }
            }
        }
        if filters.value.is_some() && (filters.old.is_some() || filters.new.is_some()) {
            errors.push(RegistryError::ValueWithOldNew {
                handler: path.clone(),
            });
        }
    }
    let known: BTreeSet<&str> = indexes.keys().copied().collect();
    let known_list = if known.is_empty() {
        "none".to_owned()
    } else {
        known
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for handler in handlers {
        for index in handler.index_params() {
            if !known.contains(index.as_ref()) {
                errors.push(RegistryError::UnknownIndex {
                    handler: handler.source().to_string(),
                    index: index.to_string(),
                    known: known_list.clone(),
                });
            }
        }
    }
    errors
}

/// Refuses an admission handler in a build without webhooks (`webhooks`
/// false), rather than run an operator that never calls it.
fn unserved(handler: &Handler, webhooks: bool) -> Option<RegistryError> {
    (handler.kind().is_webhook() && !webhooks).then(|| RegistryError::WebhooksDisabled {
        handler: handler.source().to_string(),
    })
}

/// What keeps a daemon or timer from running: a timer with a zero interval
/// would tick without pause, and `retries = 0` allows no attempt at all. A
/// timer without an interval runs as in Kopf: once per idle period with
/// `idle`, once for good without.
fn task_problems(handler: &Handler) -> impl Iterator<Item = &str> {
    let spawning = handler.kind().is_spawning();
    let zero_interval = matches!(handler.kind_options(),
        KindOptions::Timer(timer) if timer.interval.is_some_and(|i| i.is_zero()));
    let no_attempts = spawning && handler.options().retries == Some(0);
    [
        zero_interval.then_some(
            "a timer's `interval` must be greater than zero; leave it out for a timer that runs once per `idle` period, or once",
        ),
        no_attempts.then_some("`retries` must be at least 1 (it counts attempts)"),
    ]
    .into_iter()
    .flatten()
}

/// Registers handlers without macros; see [`Registry::builder`].
///
/// Each `on_*`/`timer`/… method adds a handler; the option methods after it
/// configure that last handler. Options that do not apply to the handler's
/// kind are reported by [`build`](RegistryBuilder::build).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), kopf_runtime::RegistryError> {
/// use std::time::Duration;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kopf_runtime::{Kwargs, Registry, ResourceRef, HandlerKind, PRESENT};
///
/// let registry = Registry::builder()
///     .on_create(ResourceRef::of::<ConfigMap>(), "created", |kw: Kwargs| async move {
///         kw.logger.info(format!("created {:?}", kw.name()));
///         Ok::<_, kopf_runtime::Error>(())
///     })
///     .retries(3)
///     .backoff(Duration::from_secs(5))
///     .label("app", PRESENT)
///     .timer(ResourceRef::dynamic("", "v1", "secrets"), "expire", |_kw: Kwargs| async {})
///     .interval(Duration::from_secs(10))
///     .no_finalizers()
///     .on_startup("boot", |_kw: Kwargs| async {})
///     .build()?;
/// assert_eq!(registry.len(), 3);
/// assert_eq!(registry.of_kind(HandlerKind::Timer).count(), 1);
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct RegistryBuilder {
    handlers: Vec<Handler>,
    errors: Vec<RegistryError>,
}

macro_rules! add_resource {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name<F, Fut, R>(mut self, resource: ResourceRef, id: impl Into<String>, f: F) -> Self
        where
            F: Fn(Kwargs) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = R> + Send + 'static,
            R: IntoOutcome,
        {
            self.handlers.push(Handler::$name(resource, id, f));
            self
        }
    )*};
}

macro_rules! add_activity {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name<F, Fut, R>(mut self, id: impl Into<String>, f: F) -> Self
        where
            F: Fn(Kwargs) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = R> + Send + 'static,
            R: IntoOutcome,
        {
            self.handlers.push(Handler::$name(id, f));
            self
        }
    )*};
}

macro_rules! last_option {
    ($($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        $(#[$doc])*
        pub fn $name(mut self, $($arg: $ty),*) -> Self {
            match self.handlers.pop() {
                Some(handler) => self.handlers.push(handler.$name($($arg),*)),
                None => self.errors.push(RegistryError::NoHandler { option: stringify!($name) }),
            }
            self
        }
    )*};
}

impl RegistryBuilder {
    /// Adds a handler built with the [`Handler`] constructors.
    pub fn handler(mut self, handler: Handler) -> Self {
        self.handlers.push(handler);
        self
    }

    add_resource! {
        /// Adds an `on_create` handler.
        on_create;
        /// Adds an `on_update` handler.
        on_update;
        /// Adds an `on_delete` handler.
        on_delete;
        /// Adds an `on_resume` handler.
        on_resume;
        /// Adds an `on_event` handler.
        on_event;
        /// Adds a `timer`.
        timer;
        /// Adds a `daemon`.
        daemon;
        /// Adds an `index`.
        index;
        /// Adds an `on_validate` handler.
        on_validate;
        /// Adds an `on_mutate` handler.
        on_mutate;
    }

    add_activity! {
        /// Adds an `on_startup` handler.
        on_startup;
        /// Adds an `on_cleanup` handler.
        on_cleanup;
        /// Adds an `on_probe` handler.
        on_probe;
        /// Adds an `on_login` handler.
        on_login;
    }

    /// Adds an `on_field` handler for `field`.
    pub fn on_field<F, Fut, R>(
        mut self,
        resource: ResourceRef,
        id: impl Into<String>,
        field: &str,
        f: F,
    ) -> Self
    where
        F: Fn(Kwargs) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: IntoOutcome,
    {
        self.handlers
            .push(Handler::on_field(resource, id, field, f));
        self
    }

    last_option! {
        /// `retries` of the last handler.
        retries(retries: u32);
        /// `backoff` of the last handler.
        backoff(backoff: Duration);
        /// `timeout` of the last handler.
        timeout(timeout: Duration);
        /// `errors` of the last handler.
        errors(errors: ErrorsMode);
        /// `param` of the last handler.
        param(param: Value);
        /// Whether the last handler's fn reads `client` (see [`Handler::takes_client`]).
        takes_client(takes: bool);
        /// `labels` of the last handler (replaces).
        labels(labels: MetaFilter);
        /// `annotations` of the last handler (replaces).
        annotations(annotations: MetaFilter);
        /// `field` of the last handler.
        field(field: &str);
        /// `deleted` of the last handler (`on_resume`).
        deleted(deleted: bool);
        /// `optional` of the last handler (`on_delete`).
        optional(optional: bool);
        /// `no_finalizers` of the last handler (`timer`, `daemon`).
        no_finalizers();
        /// `interval` of the last handler (`timer`).
        interval(interval: Duration);
        /// `sharp` of the last handler (`timer`).
        sharp(sharp: bool);
        /// `idle` of the last handler (`timer`).
        idle(idle: Duration);
        /// `initial_delay` of the last handler (`timer`, `daemon`).
        initial_delay(delay: Duration);
        /// `cancellation_backoff` of the last handler (`daemon`).
        cancellation_backoff(value: Duration);
        /// `cancellation_timeout` of the last handler (`daemon`).
        cancellation_timeout(value: Duration);
        /// `cancellation_polling` of the last handler (`daemon`).
        cancellation_polling(value: Duration);
        /// `subresource` of the last handler (webhooks).
        subresource(subresource: String);
        /// `persistent` of the last handler (webhooks).
        persistent(persistent: bool);
        /// `side_effects` of the last handler (webhooks).
        side_effects(side_effects: bool);
        /// `ignore_failures` of the last handler (webhooks).
        ignore_failures(ignore_failures: bool);
        /// `operations` of the last handler (webhooks).
        operations(operations: Vec<Operation>);
        /// Declares that the last handler reads the index `name`.
        uses_index(name: String);
    }

    /// Adds a label condition to the last handler.
    pub fn label(self, key: &str, value: impl Into<MetaValue>) -> Self {
        let value = value.into();
        self.map_last("labels", |h| h.label(key, value))
    }

    /// Adds an annotation condition to the last handler.
    pub fn annotation(self, key: &str, value: impl Into<MetaValue>) -> Self {
        let value = value.into();
        self.map_last("annotations", |h| h.annotation(key, value))
    }

    /// `when` of the last handler.
    pub fn when(self, when: impl Fn(&Kwargs) -> bool + Send + Sync + 'static) -> Self {
        self.map_last("when", |h| h.when(when))
    }

    /// `value` of the last handler.
    pub fn value(self, value: impl Into<ValueFilter>) -> Self {
        let value = value.into();
        self.map_last("value", |h| h.value(value))
    }

    /// `old` of the last handler.
    pub fn old(self, old: impl Into<ValueFilter>) -> Self {
        let old = old.into();
        self.map_last("old", |h| h.old(old))
    }

    /// `new` of the last handler.
    pub fn new_value(self, new: impl Into<ValueFilter>) -> Self {
        let new = new.into();
        self.map_last("new", |h| h.new_value(new))
    }

    fn map_last(mut self, option: &'static str, f: impl FnOnce(Handler) -> Handler) -> Self {
        match self.handlers.pop() {
            Some(handler) => self.handlers.push(f(handler)),
            None => self.errors.push(RegistryError::NoHandler { option }),
        }
        self
    }

    /// Validates and builds the registry.
    ///
    /// # Errors
    /// All validation problems, see [`RegistryError`].
    pub fn build(self) -> Result<Registry, RegistryError> {
        let mut errors = self.errors;
        match Registry::from_handlers(self.handlers) {
            Ok(registry) if errors.is_empty() => Ok(registry),
            Ok(_) if errors.len() == 1 => Err(errors.remove(0)),
            Ok(_) => Err(RegistryError::Multiple(errors)),
            Err(RegistryError::Multiple(more)) => {
                errors.extend(more);
                Err(RegistryError::Multiple(errors))
            }
            Err(error) if errors.is_empty() => Err(error),
            Err(error) => {
                errors.push(error);
                Err(RegistryError::Multiple(errors))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> ResourceRef {
        ResourceRef::dynamic("", "v1", "pods")
    }

    async fn noop(_: Kwargs) {}

    #[test]
    fn admission_handlers_are_refused_in_a_build_without_webhooks() {
        let validate = Handler::on_validate(pods(), "check", noop).fn_path("ops::check");
        let refused = unserved(&validate, false).expect("refused");
        assert_eq!(
            refused,
            RegistryError::WebhooksDisabled {
                handler: "ops::check".into()
            }
        );
        assert!(
            refused
                .to_string()
                .contains(r#"kopf-runtime = { version = "0.1", features = ["webhooks"] }"#),
            "{refused}"
        );
        assert_eq!(unserved(&validate, true), None);
        let mutate = Handler::on_mutate(pods(), "fix", noop);
        assert!(unserved(&mutate, false).is_some());
        let create = Handler::on_create(pods(), "create", noop);
        assert_eq!(unserved(&create, false), None);
        // This build's registry applies the same rule.
        let built = Registry::builder()
            .on_validate(pods(), "check", noop)
            .build();
        assert_eq!(
            matches!(built, Err(RegistryError::WebhooksDisabled { .. })),
            !cfg!(feature = "webhooks")
        );
    }

    #[test]
    fn duplicate_ids_for_one_resource_name_both_handlers() {
        let error = Registry::builder()
            .handler(Handler::on_create(pods(), "x", noop).fn_path("a::first"))
            .handler(Handler::on_create(pods(), "x", noop).fn_path("b::second"))
            .build()
            .expect_err("duplicate ids");
        assert_eq!(
            error.to_string(),
            "duplicate handler id `x` for `on_create` handlers of `pods.v1`: `a::first` and `b::second`; give one of them a distinct `id = \"…\"`"
        );
    }

    #[test]
    fn the_same_id_is_fine_across_kinds_and_resources() {
        let registry = Registry::builder()
            .on_create(pods(), "x", noop)
            .on_resume(pods(), "x", noop)
            .on_create(ResourceRef::dynamic("", "v1", "secrets"), "x", noop)
            .build()
            .expect("no conflicts");
        assert_eq!(registry.len(), 3);
        assert_eq!(registry.resources().len(), 2);
    }

    #[test]
    fn daemons_and_timers_share_an_id_scope() {
        let error = Registry::builder()
            .timer(pods(), "x", noop)
            .interval(Duration::from_secs(1))
            .daemon(pods(), "x", noop)
            .build();
        assert!(matches!(
            error,
            Err(RegistryError::DuplicateId {
                kind_scope: "daemon/timer",
                ..
            })
        ));
    }

    #[test]
    fn unknown_indexes_and_bad_filters_are_all_reported() {
        let error = Registry::builder()
            .on_update(pods(), "u", noop)
            .value(crate::PRESENT)
            .on_event(pods(), "e", noop)
            .uses_index("by_owner".into())
            .build()
            .expect_err("two problems");
        let RegistryError::Multiple(errors) = error else {
            panic!("expected several errors")
        };
        assert_eq!(errors.len(), 2);
        assert!(errors.iter().any(|e| matches!(e, RegistryError::UnknownIndex { index, known, .. } if index == "by_owner" && known == "none")));
    }

    #[test]
    fn options_before_any_handler_and_for_wrong_kinds_are_errors() {
        assert_eq!(
            Registry::builder()
                .retries(1)
                .build()
                .expect_err("no handler"),
            RegistryError::NoHandler { option: "retries" }
        );
        let error = Registry::builder()
            .on_create(pods(), "c", noop)
            .interval(Duration::from_secs(1))
            .build();
        assert!(matches!(error, Err(RegistryError::InvalidHandler { .. })));
    }

    #[test]
    fn daemons_and_timers_that_cannot_run_are_refused_at_registration() {
        let problem = |builder: RegistryBuilder| match builder.build() {
            Err(RegistryError::InvalidHandler { handler, problem }) => {
                format!("{handler}: {problem}")
            }
            other => panic!("expected one invalid handler, got {other:?}"),
        };
        assert_eq!(
            problem(
                Registry::builder()
                    .timer(pods(), "t", noop)
                    .interval(Duration::ZERO)
            ),
            "t: a timer's `interval` must be greater than zero; leave it out for a timer that runs once per `idle` period, or once"
        );
        assert_eq!(
            problem(Registry::builder().daemon(pods(), "d", noop).retries(0)),
            "d: `retries` must be at least 1 (it counts attempts)"
        );
        let both = Registry::builder()
            .timer(pods(), "t", noop)
            .interval(Duration::ZERO)
            .retries(0)
            .build()
            .expect_err("two problems");
        assert!(
            matches!(both, RegistryError::Multiple(ref errors) if errors.len() == 2),
            "{both}"
        );
        Registry::builder()
            .timer(pods(), "t", noop)
            .interval(Duration::from_secs(1))
            .retries(1)
            .daemon(pods(), "d", noop)
            .build()
            .expect("both can run");
        Registry::builder()
            .timer(pods(), "idle_only", noop)
            .idle(Duration::from_secs(10))
            .timer(pods(), "once", noop)
            .build()
            .expect("timers without an interval run as in Kopf");
    }

    #[test]
    fn handlers_are_sorted_by_resource_kind_and_id() {
        let registry = Registry::builder()
            .on_update(pods(), "b", noop)
            .on_create(pods(), "z", noop)
            .on_create(pods(), "a", noop)
            .build()
            .expect("valid");
        let ids: Vec<_> = registry.handlers().iter().map(|h| h.id()).collect();
        assert_eq!(ids, ["a", "z", "b"]);
    }
}
