//! The kinds of handlers, and the one table of the options each accepts.

use std::fmt;

/// The kinds of handlers, one per attribute macro.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HandlerKind {
    /// `#[on_create]`: the object was created.
    OnCreate,
    /// `#[on_update]`: the object (or its `field`) changed.
    OnUpdate,
    /// `#[on_delete]`: the object is being deleted.
    OnDelete,
    /// `#[on_resume]`: the operator found the object at start-up.
    OnResume,
    /// `#[on_field]`: the `field` changed, whatever the reason.
    OnField,
    /// `#[on_event]`: every raw watch event (no retries, no progress).
    OnEvent,
    /// `#[timer]`: runs periodically for each object.
    Timer,
    /// `#[daemon]`: runs for as long as each object exists.
    Daemon,
    /// `#[index]`: maintains an in-memory index of objects.
    Index,
    /// `#[on_startup]`: once when the operator starts.
    OnStartup,
    /// `#[on_cleanup]`: once when the operator exits.
    OnCleanup,
    /// `#[on_probe]`: on each liveness probe.
    OnProbe,
    /// `#[on_login]`: to obtain cluster credentials.
    OnLogin,
    /// `#[on_validate]`: a validating admission webhook.
    OnValidate,
    /// `#[on_mutate]`: a mutating admission webhook.
    OnMutate,
}

impl HandlerKind {
    /// All kinds, in declaration order.
    pub const ALL: [HandlerKind; 15] = [
        HandlerKind::OnCreate,
        HandlerKind::OnUpdate,
        HandlerKind::OnDelete,
        HandlerKind::OnResume,
        HandlerKind::OnField,
        HandlerKind::OnEvent,
        HandlerKind::Timer,
        HandlerKind::Daemon,
        HandlerKind::Index,
        HandlerKind::OnStartup,
        HandlerKind::OnCleanup,
        HandlerKind::OnProbe,
        HandlerKind::OnLogin,
        HandlerKind::OnValidate,
        HandlerKind::OnMutate,
    ];

    /// The attribute's name, e.g. `on_create`.
    pub fn name(self) -> &'static str {
        match self {
            HandlerKind::OnCreate => "on_create",
            HandlerKind::OnUpdate => "on_update",
            HandlerKind::OnDelete => "on_delete",
            HandlerKind::OnResume => "on_resume",
            HandlerKind::OnField => "on_field",
            HandlerKind::OnEvent => "on_event",
            HandlerKind::Timer => "timer",
            HandlerKind::Daemon => "daemon",
            HandlerKind::Index => "index",
            HandlerKind::OnStartup => "on_startup",
            HandlerKind::OnCleanup => "on_cleanup",
            HandlerKind::OnProbe => "on_probe",
            HandlerKind::OnLogin => "on_login",
            HandlerKind::OnValidate => "on_validate",
            HandlerKind::OnMutate => "on_mutate",
        }
    }

    /// Operator-level handlers without a resource (startup, cleanup, probe, login).
    pub(crate) fn is_activity(self) -> bool {
        matches!(
            self,
            HandlerKind::OnStartup
                | HandlerKind::OnCleanup
                | HandlerKind::OnProbe
                | HandlerKind::OnLogin
        )
    }

    /// Change handlers with progress, retries and diff-base (create, update, delete, resume, field).
    pub(crate) fn is_changing(self) -> bool {
        matches!(
            self,
            HandlerKind::OnCreate
                | HandlerKind::OnUpdate
                | HandlerKind::OnDelete
                | HandlerKind::OnResume
                | HandlerKind::OnField
        )
    }

    /// Daemons and timers.
    pub(crate) fn is_spawning(self) -> bool {
        matches!(self, HandlerKind::Timer | HandlerKind::Daemon)
    }

    /// Whether the kind honours `retries`, `backoff`, `timeout` and `errors`.
    pub(crate) fn has_retries(self) -> bool {
        !matches!(
            self,
            HandlerKind::OnEvent | HandlerKind::OnValidate | HandlerKind::OnMutate
        )
    }

    /// Whether `old`/`new` filters apply (update and field handlers).
    pub(crate) fn has_old_new(self) -> bool {
        matches!(self, HandlerKind::OnUpdate | HandlerKind::OnField)
    }

    /// Whether a handler of the kind with a `field` runs only when the
    /// field's value changed (Kopf's `field_needs_change`): update and field
    /// handlers.
    pub fn needs_change(self) -> bool {
        self.has_old_new()
    }

    /// The scope in which handler ids must be unique (per resource).
    ///
    /// Change handlers of different kinds may share an id (stacking
    /// `#[on_create]` and `#[on_resume]` on one fn is common, as in Kopf);
    /// daemons and timers share one scope (their tasks are keyed by id);
    /// index ids are unique across all resources (they are injected by name).
    pub(crate) fn id_scope(self) -> &'static str {
        match self {
            HandlerKind::Timer | HandlerKind::Daemon => "daemon/timer",
            other => other.name(),
        }
    }

    /// Whether handlers of the kind serve a resource's objects (all but activities).
    fn has_resource(self) -> bool {
        !self.is_activity()
    }

    /// Admission handlers.
    pub(crate) fn is_webhook(self) -> bool {
        matches!(self, HandlerKind::OnValidate | HandlerKind::OnMutate)
    }

    /// Whether the kind accepts `option` (an attribute's key, e.g.
    /// `interval`), as [`OPTIONS`] says.
    pub(crate) fn accepts(self, option: &str) -> bool {
        OPTIONS
            .iter()
            .any(|(name, accepts)| *name == option && accepts(self))
    }

    /// The options the kind accepts, in the order messages list them.
    pub(crate) fn options(self) -> Vec<&'static str> {
        OPTIONS
            .iter()
            .filter(|(_, accepts)| accepts(self))
            .map(|(name, _)| *name)
            .collect()
    }
}

/// Which kinds accept an option.
type Accepts = fn(HandlerKind) -> bool;

/// Every option of a handler, with the kinds that accept it, in the order
/// messages list them: the one table the builder's setters (and so the
/// macros' records, which are built by them) check against. The macros
/// accept the same options per kind (`kopf-macros`' `options.rs`); a test
/// here compares the two tables kind by kind.
pub(super) const OPTIONS: &[(&str, Accepts)] = &[
    ("id", |_| true),
    ("param", |_| true),
    ("retries", HandlerKind::has_retries),
    ("backoff", HandlerKind::has_retries),
    ("timeout", HandlerKind::has_retries),
    ("errors", HandlerKind::has_retries),
    ("labels", HandlerKind::has_resource),
    ("annotations", HandlerKind::has_resource),
    ("when", HandlerKind::has_resource),
    ("field", HandlerKind::has_resource),
    ("value", HandlerKind::has_resource),
    ("old", HandlerKind::has_old_new),
    ("new", HandlerKind::has_old_new),
    ("deleted", |kind| kind == HandlerKind::OnResume),
    ("optional", |kind| kind == HandlerKind::OnDelete),
    ("interval", |kind| kind == HandlerKind::Timer),
    ("initial_delay", HandlerKind::is_spawning),
    ("sharp", |kind| kind == HandlerKind::Timer),
    ("idle", |kind| kind == HandlerKind::Timer),
    ("cancellation_backoff", |kind| kind == HandlerKind::Daemon),
    ("cancellation_timeout", |kind| kind == HandlerKind::Daemon),
    ("cancellation_polling", |kind| kind == HandlerKind::Daemon),
    ("no_finalizers", HandlerKind::is_spawning),
    ("operations", HandlerKind::is_webhook),
    ("subresource", HandlerKind::is_webhook),
    ("persistent", HandlerKind::is_webhook),
    ("side_effects", HandlerKind::is_webhook),
    ("ignore_failures", HandlerKind::is_webhook),
];

impl fmt::Display for HandlerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_accepts_the_options_the_macros_accept() {
        let macros: &[(&str, &[&str])] = kopf_macros::__option_table!();
        assert_eq!(macros.len(), HandlerKind::ALL.len());
        for kind in HandlerKind::ALL {
            let (_, options) = macros
                .iter()
                .find(|(name, _)| *name == kind.name())
                .unwrap_or_else(|| panic!("the macros have no `{kind}`"));
            assert_eq!(kind.options(), *options, "{kind}");
        }
    }
}
