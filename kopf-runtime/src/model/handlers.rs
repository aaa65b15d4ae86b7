//! The handler model: [`Handler`], [`HandlerKind`] and the options, with
//! Kopf's defaults (see [`Handler`] for how handlers are made and run).

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::model::errors::{IntoOutcome, Outcome};
use crate::model::filters::{FieldPath, FieldValues, Filters, MetaFilter, MetaValue, ValueFilter};
use crate::model::kwargs::{Kwargs, Operation};
use crate::model::resources::ResourceRef;
use crate::operations::metrics::HandlerMetrics;

mod kind;

pub use kind::HandlerKind;

/// The callable behind a handler: takes the kwargs, returns the outcome.
///
/// The future is `'static` and `Send`: it owns the kwargs. Blocking (non-async)
/// handlers run on tokio's blocking threads inside it.
pub type HandlerFn = Arc<dyn Fn(Kwargs) -> BoxFuture<'static, Outcome> + Send + Sync>;

/// Kopf's default delay between retries: 60 seconds, the default of
/// `settings.execution.default_backoff`, which a handler without a
/// `backoff` of its own retries after.
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(60);

/// What to do with regular (non-`kopf::Error`) errors, Kopf's `errors=` option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ErrorsMode {
    /// Retry with `backoff` (the default, but for `index` handlers).
    #[default]
    Temporary,
    /// Fail the handler.
    Permanent,
    /// Log and consider the handler done (the default of `index` handlers,
    /// whose values then stay as they were).
    Ignored,
}

impl ErrorsMode {
    /// Kopf's default for a kind: [`ErrorsMode::Ignored`] for `index`
    /// handlers, [`ErrorsMode::Temporary`] for the others.
    pub fn default_for(kind: HandlerKind) -> Self {
        match kind {
            HandlerKind::Index => ErrorsMode::Ignored,
            _ => ErrorsMode::Temporary,
        }
    }
}

/// Retry options of handlers that retry (all but `on_event` and webhooks).
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Maximum retries; `None` (the default) retries forever.
    pub retries: Option<u32>,
    /// Delay between retries; `None` (the default) retries after the
    /// operator's `settings.execution.default_backoff` (60 s unless set).
    pub backoff: Option<Duration>,
    /// Give up after this long since the first attempt; `None` (default) never.
    pub timeout: Option<Duration>,
    /// What regular errors mean; [`ErrorsMode::Temporary`] by default.
    pub errors: ErrorsMode,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            retries: None,
            backoff: None,
            timeout: None,
            errors: ErrorsMode::Temporary,
        }
    }
}

/// Options of `#[timer]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TimerOptions {
    /// Time between runs. `None` (Kopf's default) makes the timer one-shot, or,
    /// with `idle`, run once after each idle period following a change.
    pub interval: Option<Duration>,
    /// Delay before the first run.
    pub initial_delay: Option<Duration>,
    /// Keep runs on an `interval` grid counted from the previous start, rather than
    /// sleeping `interval` after each run ends.
    pub sharp: bool,
    /// Run only after the object has been unchanged for this long (the idle clock
    /// resets on every change).
    pub idle: Option<Duration>,
}

/// Options of `#[daemon]`; unset durations fall back to the operator's settings.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DaemonOptions {
    /// Delay before the daemon starts.
    pub initial_delay: Option<Duration>,
    /// After setting `stopped`, wait this long before cancelling the task.
    pub cancellation_backoff: Option<Duration>,
    /// After cancelling, wait this long before abandoning the task.
    pub cancellation_timeout: Option<Duration>,
    /// How often to check whether a stopping daemon has exited.
    pub cancellation_polling: Option<Duration>,
}

/// Options of `#[on_validate]` and `#[on_mutate]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WebhookOptions {
    /// The operations to serve; empty means all.
    pub operations: Vec<Operation>,
    /// The subresource to serve (e.g. `status`); `None` means the main resource.
    pub subresource: Option<String>,
    /// Keep serving while the operator is paused or another one is active.
    pub persistent: bool,
    /// The webhook has side effects (`sideEffects`); used with dry runs.
    pub side_effects: bool,
    /// Fail open (`failurePolicy: Ignore`) when the operator is unreachable.
    pub ignore_failures: bool,
}

/// The kind-specific options of a handler.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum KindOptions {
    /// The kind has no specific options.
    #[default]
    None,
    /// `#[on_resume]`: also resume objects already marked for deletion.
    Resume {
        /// Kopf's `deleted=`; `false` by default.
        deleted: bool,
    },
    /// `#[on_delete]`.
    Delete {
        /// Kopf's `optional=`: do not add a finalizer for this handler.
        optional: bool,
    },
    /// `#[timer]`.
    Timer(TimerOptions),
    /// `#[daemon]`.
    Daemon(DaemonOptions),
    /// `#[on_validate]` and `#[on_mutate]`.
    Webhook(WebhookOptions),
}

/// One handler: what to run, for which objects, with which options.
///
/// Handlers come from the attribute macros (through
/// [`Registry::from_inventory`](crate::Registry::from_inventory)) or are
/// built directly with the constructors (e.g. [`Handler::on_create`]) and
/// chained option setters; the [`Registry`](crate::Registry) validates both
/// alike. [`Handler::call`] runs one with the [`Kwargs`] given, e.g. in a
/// test of the handler:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use kopf_runtime::{Handler, Kwargs, ResourceRef};
/// use serde_json::json;
/// let handler = Handler::on_create(ResourceRef::dynamic("", "v1", "configmaps"), "hello", |kw: Kwargs| async move {
///     Ok::<_, kopf_runtime::Error>(json!({"greeted": kw.name()}))
/// });
/// let kwargs = Kwargs::new(json!({"metadata": {"name": "cm"}}));
/// let outcome = handler.call(kwargs).await;          // sets `param`, then runs the fn
/// assert_eq!(outcome, Ok(Some(json!({"greeted": "cm"})))); // goes to status.hello
/// # }
/// ```
#[derive(Clone)]
pub struct Handler {
    /// The handler's id: the fn name or `id` option, plus `/field` for field-scoped
    /// handlers (not for indexes), as in Kopf.
    id: String,
    /// The handler's source: `module::path::fn_name` for macros, the id for builder handlers.
    fn_path: Cow<'static, str>,
    /// The kind.
    kind: HandlerKind,
    /// The served resource; `None` for activities.
    resource: Option<ResourceRef>,
    /// Retry options (ignored for kinds that do not retry).
    options: Options,
    /// Filters.
    filters: Filters,
    /// Kind-specific options.
    kind_options: KindOptions,
    /// The `param` option, passed as the `param` kwarg.
    param: Option<Value>,
    /// Whether the object must carry a finalizer for this handler
    /// (`on_delete` unless `optional`; daemons and timers unless `no_finalizers`).
    requires_finalizer: bool,
    /// Whether the fn is blocking (a plain `fn`), run on tokio's blocking threads.
    blocking: bool,
    /// The names of the indexes the handler takes as parameters.
    index_params: Vec<Cow<'static, str>>,
    /// Whether the fn may read the `client` kwarg (see [`Handler::client_for`]).
    takes_client: bool,
    /// The callable.
    func: HandlerFn,
    problems: Vec<String>,
    /// The operator's metrics of this handler, set on the operator's own
    /// copy when metrics are served.
    pub(crate) metrics: Option<Arc<HandlerMetrics>>,
}

impl fmt::Debug for Handler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handler")
            .field("id", &self.id)
            .field("fn_path", &self.fn_path)
            .field("kind", &self.kind)
            .field("resource", &self.resource)
            .field("options", &self.options)
            .field("filters", &self.filters)
            .field("kind_options", &self.kind_options)
            .field("param", &self.param)
            .field("requires_finalizer", &self.requires_finalizer)
            .field("blocking", &self.blocking)
            .field("index_params", &self.index_params)
            .finish_non_exhaustive()
    }
}

fn boxed<F, Fut, R>(f: F) -> HandlerFn
where
    F: Fn(Kwargs) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: IntoOutcome,
{
    Arc::new(move |kwargs| Box::pin(Outcomes { future: f(kwargs) }))
}

pin_project_lite::pin_project! {
    /// A handler fn's future, its output made an [`Outcome`]. Not an async
    /// block around the future: a block keeps what it captured and what it
    /// awaits in two places, so that every call's box held the fn's future
    /// (and its `Kwargs`) twice, and was too large for the system
    /// allocator's per-thread cache.
    struct Outcomes<Fut> {
        #[pin]
        future: Fut,
    }
}

impl<Fut> Future for Outcomes<Fut>
where
    Fut: Future,
    Fut::Output: IntoOutcome,
{
    type Output = Outcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        self.project()
            .future
            .poll(cx)
            .map(IntoOutcome::into_outcome)
    }
}

macro_rules! resource_constructors {
    ($($(#[$doc:meta])* $name:ident => $kind:expr;)*) => {$(
        $(#[$doc])*
        pub fn $name<F, Fut, R>(resource: ResourceRef, id: impl Into<String>, f: F) -> Self
        where
            F: Fn(Kwargs) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = R> + Send + 'static,
            R: IntoOutcome,
        {
            Handler::new($kind, Some(resource), id.into(), boxed(f))
        }
    )*};
}

macro_rules! activity_constructors {
    ($($(#[$doc:meta])* $name:ident => $kind:expr;)*) => {$(
        $(#[$doc])*
        pub fn $name<F, Fut, R>(id: impl Into<String>, f: F) -> Self
        where
            F: Fn(Kwargs) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = R> + Send + 'static,
            R: IntoOutcome,
        {
            Handler::new($kind, None, id.into(), boxed(f))
        }
    )*};
}

impl Handler {
    /// A handler of any kind with Kopf's defaults, from a [`HandlerFn`].
    ///
    /// The kind-specific constructors below ([`Handler::on_create`], …) are easier to use.
    pub fn new(
        kind: HandlerKind,
        resource: Option<ResourceRef>,
        id: String,
        func: HandlerFn,
    ) -> Self {
        let kind_options = match kind {
            HandlerKind::OnResume => KindOptions::Resume { deleted: false },
            HandlerKind::OnDelete => KindOptions::Delete { optional: false },
            HandlerKind::Timer => KindOptions::Timer(TimerOptions::default()),
            HandlerKind::Daemon => KindOptions::Daemon(DaemonOptions::default()),
            HandlerKind::OnValidate | HandlerKind::OnMutate => {
                KindOptions::Webhook(WebhookOptions::default())
            }
            _ => KindOptions::None,
        };
        let requires_finalizer = matches!(
            kind,
            HandlerKind::OnDelete | HandlerKind::Timer | HandlerKind::Daemon
        );
        let mut problems: Vec<String> = resource.iter().filter_map(ResourceRef::problem).collect();
        if kind.is_activity() != resource.is_none() {
            problems.push(if resource.is_none() {
                format!("`{kind}` handlers need a resource")
            } else {
                format!("`{kind}` handlers take no resource")
            });
        }
        Handler {
            fn_path: Cow::Owned(id.clone()),
            id,
            kind,
            resource,
            options: Options {
                errors: ErrorsMode::default_for(kind),
                ..Options::default()
            },
            filters: Filters::default(),
            kind_options,
            param: None,
            requires_finalizer,
            blocking: false,
            index_params: Vec::new(),
            takes_client: true,
            func,
            problems,
            metrics: None,
        }
    }

    resource_constructors! {
        /// An `on_create` handler (see [`Handler`] for the options).
        on_create => HandlerKind::OnCreate;
        /// An `on_update` handler.
        on_update => HandlerKind::OnUpdate;
        /// An `on_delete` handler.
        on_delete => HandlerKind::OnDelete;
        /// An `on_resume` handler.
        on_resume => HandlerKind::OnResume;
        /// An `on_event` handler.
        on_event => HandlerKind::OnEvent;
        /// A `timer` (set `interval`).
        timer => HandlerKind::Timer;
        /// A `daemon`; the fn gets a `stopped` flag in `kwargs.stopped`.
        daemon => HandlerKind::Daemon;
        /// An `index` handler; its id names the index.
        index => HandlerKind::Index;
        /// An `on_validate` admission handler.
        on_validate => HandlerKind::OnValidate;
        /// An `on_mutate` admission handler.
        on_mutate => HandlerKind::OnMutate;
    }

    /// An `on_field` handler for `field` (a dot-separated path); the id gets `/field` appended.
    pub fn on_field<F, Fut, R>(
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
        Handler::new(HandlerKind::OnField, Some(resource), id.into(), boxed(f)).field(field)
    }

    activity_constructors! {
        /// An `on_startup` activity.
        on_startup => HandlerKind::OnStartup;
        /// An `on_cleanup` activity.
        on_cleanup => HandlerKind::OnCleanup;
        /// An `on_probe` activity; its result is reported under its id.
        on_probe => HandlerKind::OnProbe;
        /// An `on_login` activity; returns connection info.
        on_login => HandlerKind::OnLogin;
    }

    /// A sub-handler `id`, with Kopf's defaults, for
    /// [`Subhandlers::add`](crate::Subhandlers::add); set its options and
    /// filters with the methods below. It takes its kind and resource from
    /// its parent.
    pub fn subhandler<F, Fut, R>(id: impl Into<String>, f: F) -> Self
    where
        F: Fn(Kwargs) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: IntoOutcome,
    {
        let mut handler = Handler::new(HandlerKind::OnCreate, None, id.into(), boxed(f));
        // Without a resource of its own, which its parent has.
        handler.problems.clear();
        handler
    }

    /// The sub-handler as a child of the handler `parent` of `kind`: its id
    /// becomes `parent/id`, and it takes its parent's kind.
    pub(crate) fn child_of(mut self, parent: &str, kind: HandlerKind) -> Self {
        self.id = format!("{parent}/{}", self.id);
        self.kind = kind;
        self
    }

    /// Runs the handler: sets `kwargs.param` from the `param` option and calls the fn.
    pub fn call(&self, mut kwargs: Kwargs) -> BoxFuture<'static, Outcome> {
        kwargs.param = self.param.clone();
        (self.func)(kwargs)
    }

    /// The handler's id: the fn name or `id` option, plus `/field` for
    /// field-scoped handlers (not for indexes), as in Kopf.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The handler's source: `module::path::fn_name` for macros, the id for
    /// builder handlers (see [`fn_path`](Handler::fn_path)).
    pub fn source(&self) -> &str {
        &self.fn_path
    }

    /// The kind.
    pub fn kind(&self) -> HandlerKind {
        self.kind
    }

    /// The served resource; `None` for activities.
    pub fn resource(&self) -> Option<&ResourceRef> {
        self.resource.as_ref()
    }

    /// The retry options (ignored for kinds that do not retry).
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The filters.
    pub fn filters(&self) -> &Filters {
        &self.filters
    }

    /// The kind-specific options.
    pub fn kind_options(&self) -> &KindOptions {
        &self.kind_options
    }

    /// The `param` option, passed as the `param` kwarg.
    pub fn param_value(&self) -> Option<&Value> {
        self.param.as_ref()
    }

    /// Whether the object must carry a finalizer for this handler
    /// (`on_delete` unless `optional`; daemons and timers unless
    /// `no_finalizers`).
    pub fn requires_finalizer(&self) -> bool {
        self.requires_finalizer
    }

    /// Whether the fn is blocking (a plain `fn`), run on tokio's blocking
    /// threads.
    pub fn is_blocking(&self) -> bool {
        self.blocking
    }

    /// The names of the indexes the handler takes as parameters.
    pub fn index_params(&self) -> &[Cow<'static, str>] {
        &self.index_params
    }

    /// Narrows change kwargs to the handler's `field`, as Kopf does for field-scoped
    /// change handlers: `old`/`new` become the field's values and `diff` is reduced
    /// to the changes under the field. Kwargs of other handlers are returned as is.
    ///
    /// [`matches`](Handler::matches) and [`call`](Handler::call) of a change
    /// handler take kwargs scoped so; the engine scopes them the same way.
    pub(crate) fn scope_kwargs(&self, mut kwargs: Kwargs) -> Kwargs {
        if let (Some(field), true) = (&self.filters.field, self.kind.is_changing()) {
            let parts = field.parts();
            let narrow = |value: Option<Arc<Value>>| {
                value
                    .and_then(|v| crate::fields::resolve_field(&v, &parts).cloned())
                    .map(Arc::new)
            };
            kwargs.old = narrow(kwargs.old.take());
            kwargs.new = narrow(kwargs.new.take());
            kwargs.diff = kwargs.diff.reduce(&parts);
        }
        kwargs
    }

    /// Whether the handler applies, as Kopf matches it (see
    /// [`Filters`] for the field rules). Change handlers
    /// take scoped kwargs: their `field` is matched against `old`/`new`
    /// (the field's values in the essences), and `on_update`/`on_field`
    /// handlers with a `field` need it to have changed. Other handlers
    /// match the field in the body.
    pub fn matches(&self, kwargs: &Kwargs) -> bool {
        if !self.kind.is_changing() {
            return self.filters.matches_object(kwargs);
        }
        let values = FieldValues {
            old: kwargs.old.as_deref(),
            new: kwargs.new.as_deref(),
        };
        self.filters
            .matches_change(kwargs, values, self.kind.needs_change())
    }

    /// The problems found while configuring the handler (options not valid for its kind).
    pub(crate) fn problems(&self) -> &[String] {
        &self.problems
    }

    /// Whether the kind refuses `option`; if so, the refusal is recorded
    /// as a problem, worded as the macros word it.
    fn refuses(&mut self, option: &str) -> bool {
        if self.kind.accepts(option) {
            return false;
        }
        let kinds: Vec<&str> = HandlerKind::ALL
            .iter()
            .filter(|kind| kind.accepts(option))
            .map(|kind| kind.name())
            .collect();
        let only = if kinds.len() <= 3 {
            format!(" (only for {})", quoted(&kinds))
        } else {
            String::new()
        };
        self.problems.push(format!(
            "option `{option}` is not valid for `{kind}`{only}; valid options for `{kind}` are: {}",
            quoted(&self.kind.options()),
            kind = self.kind,
        ));
        true
    }

    /// Sets the source path shown in errors (the macros set `module::fn`).
    pub fn fn_path(mut self, path: impl Into<Cow<'static, str>>) -> Self {
        self.fn_path = path.into();
        self
    }

    /// Marks the fn as blocking (informational; the fn itself decides where it runs).
    pub fn blocking(mut self, blocking: bool) -> Self {
        self.blocking = blocking;
        self
    }

    /// Declares whether the fn reads `client` from its [`Kwargs`]. The
    /// macros tell from the fn's parameters. A handler made with these
    /// constructors gets the whole `Kwargs`, so it gets the client unless
    /// told otherwise: `takes_client(false)` spares each of its calls a
    /// clone of the operator's client (two allocations, on every tick of a
    /// timer), and `kw.client` is then `None`.
    ///
    /// ```
    /// use kopf_runtime::{Handler, Kwargs, ResourceRef};
    /// use std::time::Duration;
    ///
    /// let configmaps = ResourceRef::dynamic("", "v1", "configmaps");
    /// let tick = Handler::timer(configmaps, "tick", |kw: Kwargs| async move {
    ///     assert!(kw.client.is_none());
    /// })
    /// .interval(Duration::from_secs(1))
    /// .takes_client(false);
    /// # let _ = tick;
    /// ```
    #[must_use]
    pub fn takes_client(mut self, takes: bool) -> Self {
        self.takes_client = takes;
        self
    }

    /// The client a call of the fn gets in its `Kwargs`: a clone of the
    /// operator's, or none for a fn without a `client` parameter. A clone
    /// is two allocations (its request buffer's sender and its default
    /// namespace), which a timer would pay on every tick for nothing.
    pub(crate) fn client_for(&self, client: &kube::Client) -> Option<kube::Client> {
        self.takes_client.then(|| client.clone())
    }

    /// Declares that the fn reads the index `name` (validated at registry build).
    pub fn uses_index(mut self, name: impl Into<Cow<'static, str>>) -> Self {
        self.index_params.push(name.into());
        self
    }

    /// `retries`: the maximum number of retries.
    pub fn retries(mut self, retries: u32) -> Self {
        if self.refuses("retries") {
            return self;
        }
        self.options.retries = Some(retries);
        self
    }

    /// `backoff`: the delay between retries (instead of the operator's
    /// `settings.execution.default_backoff`).
    pub fn backoff(mut self, backoff: Duration) -> Self {
        if self.refuses("backoff") {
            return self;
        }
        self.options.backoff = Some(backoff);
        self
    }

    /// `timeout`: give up after this long.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        if self.refuses("timeout") {
            return self;
        }
        self.options.timeout = Some(timeout);
        self
    }

    /// `errors`: how regular errors are treated.
    pub fn errors(mut self, errors: ErrorsMode) -> Self {
        if self.refuses("errors") {
            return self;
        }
        self.options.errors = errors;
        self
    }

    /// `param`: a value passed as the `param` kwarg.
    pub fn param(mut self, param: Value) -> Self {
        self.param = Some(param);
        self
    }

    /// `labels`: adds a condition on a label.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<MetaValue>) -> Self {
        if self.refuses("labels") {
            return self;
        }
        self.filters.labels.entries.push((key.into(), value.into()));
        self
    }

    /// `labels`: replaces all label conditions.
    pub fn labels(mut self, labels: MetaFilter) -> Self {
        if self.refuses("labels") {
            return self;
        }
        self.filters.labels = labels;
        self
    }

    /// `annotations`: adds a condition on an annotation.
    pub fn annotation(mut self, key: impl Into<String>, value: impl Into<MetaValue>) -> Self {
        if self.refuses("annotations") {
            return self;
        }
        self.filters
            .annotations
            .entries
            .push((key.into(), value.into()));
        self
    }

    /// `annotations`: replaces all annotation conditions.
    pub fn annotations(mut self, annotations: MetaFilter) -> Self {
        if self.refuses("annotations") {
            return self;
        }
        self.filters.annotations = annotations;
        self
    }

    /// `when`: a callback on the kwargs.
    pub fn when(mut self, when: impl Fn(&Kwargs) -> bool + Send + Sync + 'static) -> Self {
        if self.refuses("when") {
            return self;
        }
        self.filters.when = Some(Arc::new(when));
        self
    }

    /// `field`: scopes the handler to a dot-separated field; appends `/field` to the id
    /// (except for indexes, as in Kopf).
    pub fn field(mut self, field: &str) -> Self {
        if self.refuses("field") {
            return self;
        }
        match FieldPath::parse(field) {
            Some(path) => {
                if self.kind != HandlerKind::Index {
                    self.id = format!("{}/{}", self.id, path);
                }
                self.filters.field = Some(path);
            }
            None => self.problems.push(format!(
                "`field` is not a valid dot-separated path: {field:?}"
            )),
        }
        self
    }

    /// `value`: a condition on the field's value (needs `field`).
    pub fn value(mut self, value: impl Into<ValueFilter>) -> Self {
        if self.refuses("value") {
            return self;
        }
        self.filters.value = Some(value.into());
        self
    }

    /// `old`: a condition on the field's old value (`on_update`, `on_field`; needs `field`).
    pub fn old(mut self, old: impl Into<ValueFilter>) -> Self {
        if self.refuses("old") {
            return self;
        }
        self.filters.old = Some(old.into());
        self
    }

    /// `new`: a condition on the field's new value (`on_update`, `on_field`; needs `field`).
    pub fn new_value(mut self, new: impl Into<ValueFilter>) -> Self {
        if self.refuses("new") {
            return self;
        }
        self.filters.new = Some(new.into());
        self
    }

    /// Sets a kind-specific option, if the kind accepts it (the kind's
    /// [`KindOptions`] variant is then the one `set` expects).
    fn kind_option(mut self, option: &str, set: impl FnOnce(&mut KindOptions)) -> Self {
        if !self.refuses(option) {
            set(&mut self.kind_options);
        }
        self
    }

    /// `deleted` (`on_resume`): also resume objects being deleted.
    pub fn deleted(self, deleted: bool) -> Self {
        self.kind_option("deleted", |options| {
            if let KindOptions::Resume { deleted: d } = options {
                *d = deleted;
            }
        })
    }

    /// `optional` (`on_delete`): no finalizer for this handler.
    pub fn optional(mut self, optional: bool) -> Self {
        if self.refuses("optional") {
            return self;
        }
        if let KindOptions::Delete { optional: o } = &mut self.kind_options {
            *o = optional;
        }
        self.requires_finalizer = !optional;
        self
    }

    /// `no_finalizers` (`timer`, `daemon`): never block deletion for this handler.
    pub fn no_finalizers(mut self) -> Self {
        if self.refuses("no_finalizers") {
            return self;
        }
        self.requires_finalizer = false;
        self
    }

    fn timer_option(self, option: &str, set: impl FnOnce(&mut TimerOptions)) -> Self {
        self.kind_option(option, |options| {
            if let KindOptions::Timer(timer) = options {
                set(timer);
            }
        })
    }

    fn daemon_option(self, option: &str, set: impl FnOnce(&mut DaemonOptions)) -> Self {
        self.kind_option(option, |options| {
            if let KindOptions::Daemon(daemon) = options {
                set(daemon);
            }
        })
    }

    fn webhook_option(self, option: &str, set: impl FnOnce(&mut WebhookOptions)) -> Self {
        self.kind_option(option, |options| {
            if let KindOptions::Webhook(webhook) = options {
                set(webhook);
            }
        })
    }

    /// `interval` (`timer`).
    pub fn interval(self, interval: Duration) -> Self {
        self.timer_option("interval", |t| t.interval = Some(interval))
    }

    /// `sharp` (`timer`).
    pub fn sharp(self, sharp: bool) -> Self {
        self.timer_option("sharp", |t| t.sharp = sharp)
    }

    /// `idle` (`timer`).
    pub fn idle(self, idle: Duration) -> Self {
        self.timer_option("idle", |t| t.idle = Some(idle))
    }

    /// `initial_delay` (`timer`, `daemon`).
    pub fn initial_delay(self, delay: Duration) -> Self {
        self.kind_option("initial_delay", |options| match options {
            KindOptions::Timer(t) => t.initial_delay = Some(delay),
            KindOptions::Daemon(d) => d.initial_delay = Some(delay),
            _ => {}
        })
    }

    /// `cancellation_backoff` (`daemon`).
    pub fn cancellation_backoff(self, value: Duration) -> Self {
        self.daemon_option("cancellation_backoff", |d| {
            d.cancellation_backoff = Some(value);
        })
    }

    /// `cancellation_timeout` (`daemon`).
    pub fn cancellation_timeout(self, value: Duration) -> Self {
        self.daemon_option("cancellation_timeout", |d| {
            d.cancellation_timeout = Some(value);
        })
    }

    /// `cancellation_polling` (`daemon`).
    pub fn cancellation_polling(self, value: Duration) -> Self {
        self.daemon_option("cancellation_polling", |d| {
            d.cancellation_polling = Some(value);
        })
    }

    /// `operations` (webhooks): the operations to serve.
    pub fn operations(self, operations: impl IntoIterator<Item = Operation>) -> Self {
        let operations: Vec<_> = operations.into_iter().collect();
        self.webhook_option("operations", |w| w.operations = operations)
    }

    /// `subresource` (webhooks).
    pub fn subresource(self, subresource: impl Into<String>) -> Self {
        let subresource = subresource.into();
        self.webhook_option("subresource", |w| w.subresource = Some(subresource))
    }

    /// `persistent` (webhooks).
    pub fn persistent(self, persistent: bool) -> Self {
        self.webhook_option("persistent", |w| w.persistent = persistent)
    }

    /// `side_effects` (webhooks).
    pub fn side_effects(self, side_effects: bool) -> Self {
        self.webhook_option("side_effects", |w| w.side_effects = side_effects)
    }

    /// `ignore_failures` (webhooks).
    pub fn ignore_failures(self, ignore_failures: bool) -> Self {
        self.webhook_option("ignore_failures", |w| w.ignore_failures = ignore_failures)
    }
}

/// `a`, `b` → "`a`, `b`".
fn quoted(items: &[&str]) -> String {
    items
        .iter()
        .map(|item| format!("`{item}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop(_: Kwargs) -> std::future::Ready<()> {
        std::future::ready(())
    }

    #[test]
    fn defaults_are_kopfs() {
        let h = Handler::on_create(ResourceRef::dynamic("", "v1", "pods"), "h", noop);
        assert_eq!(
            h.options,
            Options {
                retries: None,
                backoff: None,
                timeout: None,
                errors: ErrorsMode::Temporary
            }
        );
        assert!(!h.requires_finalizer);
        assert!(
            Handler::on_delete(ResourceRef::dynamic("", "v1", "pods"), "d", noop)
                .requires_finalizer
        );
        assert!(
            Handler::timer(ResourceRef::dynamic("", "v1", "pods"), "t", noop).requires_finalizer
        );
        assert!(
            !Handler::timer(ResourceRef::dynamic("", "v1", "pods"), "t", noop)
                .no_finalizers()
                .requires_finalizer
        );
    }

    #[test]
    fn a_call_holds_the_fn_future_once() {
        // Every call allocates its future: an async block around the fn's
        // future held it (and its `Kwargs`) twice.
        let f = |kw: Kwargs| async move {
            std::hint::black_box(&kw);
        };
        let alone = std::mem::size_of_val(&f(Kwargs::default()));
        let handler = Handler::on_event(ResourceRef::dynamic("", "v1", "pods"), "e", f);
        let call = handler.call(Kwargs::default());
        let held = std::mem::size_of_val(&*call);
        assert!(
            held <= alone + 16,
            "a call holds {held} bytes for a fn future of {alone}"
        );
    }

    #[test]
    fn field_scoped_ids_get_the_field_appended_except_for_indexes() {
        let r = ResourceRef::dynamic("", "v1", "pods");
        assert_eq!(
            Handler::on_field(r.clone(), "f", "spec.x", noop).id,
            "f/spec.x"
        );
        assert_eq!(Handler::index(r, "i", noop).field("spec.x").id, "i");
    }

    #[test]
    fn field_handlers_see_their_field_and_need_a_change_under_it() {
        use serde_json::json;
        let h = Handler::on_update(ResourceRef::dynamic("", "v1", "pods"), "u", noop)
            .field("spec.size")
            .new_value(json!(2));
        let old = json!({"spec": {"size": 1, "x": 1}});
        let new = json!({"spec": {"size": 2, "x": 1}});
        let mut kwargs = Kwargs::new(new.clone());
        kwargs.diff = crate::model::kwargs::Diff::between(Some(&old), Some(&new));
        kwargs.old = Some(Arc::new(old));
        kwargs.new = Some(Arc::new(new));
        let scoped = h.scope_kwargs(kwargs);
        assert_eq!(scoped.old.as_deref(), Some(&json!(1)));
        assert_eq!(scoped.new.as_deref(), Some(&json!(2)));
        assert_eq!(scoped.diff.len(), 1);
        assert!(h.matches(&scoped));

        let unrelated =
            Handler::on_update(ResourceRef::dynamic("", "v1", "pods"), "v", noop).field("spec.x");
        let old = json!({"spec": {"size": 1, "x": 1}});
        let new = json!({"spec": {"size": 2, "x": 1}});
        let mut kwargs = Kwargs::new(new.clone());
        kwargs.diff = crate::model::kwargs::Diff::between(Some(&old), Some(&new));
        assert!(!unrelated.matches(&unrelated.scope_kwargs(kwargs)));
    }

    #[test]
    fn options_for_other_kinds_are_recorded_as_problems() {
        let h = Handler::on_create(ResourceRef::dynamic("", "v1", "pods"), "h", noop)
            .interval(Duration::from_secs(1));
        assert_eq!(
            h.problems(),
            [
                "option `interval` is not valid for `on_create` (only for `timer`); valid options \
                 for `on_create` are: `id`, `param`, `retries`, `backoff`, `timeout`, `errors`, \
                 `labels`, `annotations`, `when`, `field`, `value`"
            ]
        );
        let h = Handler::on_startup("s", noop).label("a", "b");
        assert_eq!(h.problems().len(), 1);
    }

    /// Sets `option` on a handler of `kind` through its setter.
    fn set(kind: HandlerKind, option: &str) -> Handler {
        let resource = (!kind.is_activity()).then(|| ResourceRef::dynamic("", "v1", "pods"));
        let h = Handler::new(kind, resource, "h".to_owned(), boxed(noop));
        let secs = Duration::from_secs(1);
        match option {
            "id" => h,
            "param" => h.param(Value::Null),
            "retries" => h.retries(1),
            "backoff" => h.backoff(secs),
            "timeout" => h.timeout(secs),
            "errors" => h.errors(ErrorsMode::Permanent),
            "labels" => h.label("a", "b"),
            "annotations" => h.annotation("a", "b"),
            "when" => h.when(|_| true),
            "field" => h.field("spec.x"),
            "value" => h.value(Value::Null),
            "old" => h.old(Value::Null),
            "new" => h.new_value(Value::Null),
            "deleted" => h.deleted(true),
            "optional" => h.optional(true),
            "interval" => h.interval(secs),
            "initial_delay" => h.initial_delay(secs),
            "sharp" => h.sharp(true),
            "idle" => h.idle(secs),
            "cancellation_backoff" => h.cancellation_backoff(secs),
            "cancellation_timeout" => h.cancellation_timeout(secs),
            "cancellation_polling" => h.cancellation_polling(secs),
            "no_finalizers" => h.no_finalizers(),
            "operations" => h.operations([Operation::Create]),
            "subresource" => h.subresource("status"),
            "persistent" => h.persistent(true),
            "side_effects" => h.side_effects(true),
            "ignore_failures" => h.ignore_failures(true),
            other => panic!("no setter for `{other}`"),
        }
    }

    #[test]
    fn every_setter_checks_its_own_option() {
        for kind in HandlerKind::ALL {
            for option in kind::OPTIONS.iter().map(|(option, _)| option) {
                let h = set(kind, option);
                let refused = h
                    .problems()
                    .iter()
                    .any(|p| p.contains(&format!("`{option}`")));
                assert_eq!(refused, !kind.accepts(option), "`{option}` of `{kind}`");
                assert_eq!(
                    h.problems().len(),
                    usize::from(refused),
                    "{:?}",
                    h.problems()
                );
            }
        }
    }
}
