//! The handler kinds: their options and the parameters (kwargs) they accept.

use proc_macro2::TokenStream;
use quote::quote;

use crate::options::Options;

/// One attribute macro.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    OnCreate,
    OnUpdate,
    OnDelete,
    OnResume,
    OnField,
    OnEvent,
    Timer,
    Daemon,
    Index,
    OnStartup,
    OnCleanup,
    OnProbe,
    OnLogin,
    OnValidate,
    OnMutate,
}

const ALL: [Kind; 15] = [
    Kind::OnCreate,
    Kind::OnUpdate,
    Kind::OnDelete,
    Kind::OnResume,
    Kind::OnField,
    Kind::OnEvent,
    Kind::Timer,
    Kind::Daemon,
    Kind::Index,
    Kind::OnStartup,
    Kind::OnCleanup,
    Kind::OnProbe,
    Kind::OnLogin,
    Kind::OnValidate,
    Kind::OnMutate,
];

/// The injection trait of the `client` parameter, which the runtime clones
/// for a call only if the fn takes it (`FunctionRecord::client`).
pub(crate) const CLIENT_TRAIT: &str = "ClientArg";

/// Every parameter name known to any kind, with the injection trait behind it.
pub(crate) const KWARGS: &[(&str, &str)] = &[
    ("body", "BodyArg"),
    ("spec", "SpecArg"),
    ("meta", "MetaArg"),
    ("status", "StatusArg"),
    ("uid", "UidArg"),
    ("name", "NameArg"),
    ("namespace", "NamespaceArg"),
    ("labels", "LabelsArg"),
    ("annotations", "AnnotationsArg"),
    ("patch", "PatchArg"),
    ("logger", "LoggerArg"),
    ("memo", "MemoArg"),
    ("param", "ParamArg"),
    ("retry", "RetryArg"),
    ("started", "StartedArg"),
    ("runtime", "RuntimeArg"),
    ("reason", "ReasonArg"),
    ("diff", "DiffArg"),
    ("old", "OldArg"),
    ("new", "NewArg"),
    ("event", "EventArg"),
    ("type", "TypeArg"),
    ("stopped", "StoppedArg"),
    ("live", "LiveArg"),
    ("subhandlers", "SubhandlersArg"),
    ("client", CLIENT_TRAIT),
    ("operation", "OperationArg"),
    ("dryrun", "DryrunArg"),
    ("warnings", "WarningsArg"),
    ("userinfo", "UserinfoArg"),
    ("subresource", "SubresourceArg"),
    ("headers", "HeadersArg"),
    ("sslpeer", "SslpeerArg"),
    ("settings", "SettingsArg"),
];

const OBJECT: &[&str] = &[
    "body",
    "spec",
    "meta",
    "status",
    "uid",
    "name",
    "namespace",
    "labels",
    "annotations",
];
const COMMON: &[&str] = &["logger", "memo", "param", "client"];
const TIMING: &[&str] = &["retry", "started", "runtime"];

impl Kind {
    pub(crate) fn all() -> &'static [Kind] {
        &ALL
    }

    /// The attribute's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::OnCreate => "on_create",
            Kind::OnUpdate => "on_update",
            Kind::OnDelete => "on_delete",
            Kind::OnResume => "on_resume",
            Kind::OnField => "on_field",
            Kind::OnEvent => "on_event",
            Kind::Timer => "timer",
            Kind::Daemon => "daemon",
            Kind::Index => "index",
            Kind::OnStartup => "on_startup",
            Kind::OnCleanup => "on_cleanup",
            Kind::OnProbe => "on_probe",
            Kind::OnLogin => "on_login",
            Kind::OnValidate => "on_validate",
            Kind::OnMutate => "on_mutate",
        }
    }

    /// The variant of `kopf_runtime::HandlerKind`.
    pub(crate) fn variant(self) -> &'static str {
        match self {
            Kind::OnCreate => "OnCreate",
            Kind::OnUpdate => "OnUpdate",
            Kind::OnDelete => "OnDelete",
            Kind::OnResume => "OnResume",
            Kind::OnField => "OnField",
            Kind::OnEvent => "OnEvent",
            Kind::Timer => "Timer",
            Kind::Daemon => "Daemon",
            Kind::Index => "Index",
            Kind::OnStartup => "OnStartup",
            Kind::OnCleanup => "OnCleanup",
            Kind::OnProbe => "OnProbe",
            Kind::OnLogin => "OnLogin",
            Kind::OnValidate => "OnValidate",
            Kind::OnMutate => "OnMutate",
        }
    }

    /// Operator-level handlers without a resource.
    pub(crate) fn is_activity(self) -> bool {
        matches!(
            self,
            Kind::OnStartup | Kind::OnCleanup | Kind::OnProbe | Kind::OnLogin
        )
    }

    /// Handlers that serve a resource's objects (all but activities).
    pub(crate) fn has_resource(self) -> bool {
        !self.is_activity()
    }

    /// Handlers that retry on errors (all but `on_event` and webhooks).
    pub(crate) fn retries(self) -> bool {
        !matches!(self, Kind::OnEvent) && !self.is_webhook()
    }

    /// Handlers that see a field's old and new values.
    pub(crate) fn has_old_new(self) -> bool {
        matches!(self, Kind::OnUpdate | Kind::OnField)
    }

    /// Timers and daemons: tasks that run beside the object.
    pub(crate) fn is_task(self) -> bool {
        matches!(self, Kind::Timer | Kind::Daemon)
    }

    /// Admission handlers.
    pub(crate) fn is_webhook(self) -> bool {
        matches!(self, Kind::OnValidate | Kind::OnMutate)
    }

    /// The options this kind accepts, in the order listed in messages.
    pub(crate) fn options(self) -> Vec<&'static str> {
        Options::keys(self)
    }

    /// The kinds that accept an option (for "valid for" hints).
    pub(crate) fn kinds_with_option(option: &str) -> Vec<Kind> {
        ALL.iter()
            .copied()
            .filter(|k| k.options().contains(&option))
            .collect()
    }

    /// The parameters this kind accepts.
    pub(crate) fn kwargs(self) -> Vec<&'static str> {
        let mut kwargs = Vec::new();
        let extra: &[&str] = match self {
            Kind::OnCreate | Kind::OnUpdate | Kind::OnDelete | Kind::OnResume | Kind::OnField => &[
                "patch",
                "retry",
                "started",
                "runtime",
                "reason",
                "diff",
                "old",
                "new",
                "subhandlers",
            ],
            Kind::OnEvent => &["patch", "event", "type"],
            Kind::Timer | Kind::Daemon => {
                &["patch", "retry", "started", "runtime", "stopped", "live"]
            }
            Kind::Index => &[],
            Kind::OnStartup => &["retry", "started", "runtime", "settings"],
            Kind::OnCleanup | Kind::OnProbe => TIMING,
            Kind::OnLogin => TIMING,
            Kind::OnValidate | Kind::OnMutate => &[
                "patch",
                "diff",
                "old",
                "new",
                "operation",
                "dryrun",
                "warnings",
                "userinfo",
                "subresource",
                "headers",
                "sslpeer",
            ],
        };
        if !self.is_activity() {
            kwargs.extend(OBJECT);
        }
        kwargs.extend(
            COMMON
                .iter()
                .filter(|k| !(self == Kind::OnLogin && **k == "client")),
        );
        kwargs.extend(extra);
        kwargs
    }

    /// Whether handlers of this kind may take indexes as parameters.
    pub(crate) fn takes_indexes(self) -> bool {
        !matches!(
            self,
            Kind::Index | Kind::OnStartup | Kind::OnCleanup | Kind::OnLogin
        )
    }
}

/// Every kind's name with the options it accepts, as a
/// `&[(&str, &[&str])]` expression (see `__option_table`).
pub(crate) fn option_table() -> TokenStream {
    let rows = ALL.iter().map(|kind| {
        let name = kind.name();
        let options = kind.options();
        quote!((#name, &[#(#options),*] as &[&str]))
    });
    quote!(&[#(#rows),*] as &[(&str, &[&str])])
}

/// The candidate closest to a misspelt `name`, if one is close enough to be
/// what was meant: at most a third of its letters differ (at least one), or
/// the two share most of their beginning (`retry` for `retries`).
pub(crate) fn closest<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    let shared_start = |candidate: &str| {
        let shared = name
            .chars()
            .zip(candidate.chars())
            .take_while(|(a, b)| a == b)
            .count();
        shared >= 3 && shared + 1 >= name.chars().count().min(candidate.chars().count())
    };
    candidates
        .iter()
        .map(|candidate| (strsim::damerau_levenshtein(name, candidate), *candidate))
        .filter(|(distance, candidate)| *distance <= limit || shared_start(candidate))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// `; did you mean `x`?` for the closest candidate, or nothing.
pub(crate) fn suggestion(name: &str, candidates: &[&str]) -> String {
    closest(name, candidates)
        .map(|candidate| format!("; did you mean `{candidate}`?"))
        .unwrap_or_default()
}

/// `a`, `b`, `c` → "`a`, `b`, `c`".
pub(crate) fn list(items: &[&str]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_name_suggests_the_closest_candidate() {
        let candidates = ["name", "namespace", "interval", "idle"];
        assert_eq!(closest("nmae", &candidates), Some("name"));
        assert_eq!(closest("intervall", &candidates), Some("interval"));
        assert_eq!(closest("namespce", &candidates), Some("namespace"));
        assert_eq!(closest("colour", &candidates), None);
        assert_eq!(closest("retry", &["retries", "backoff"]), Some("retries"));
        assert_eq!(suggestion("idel", &candidates), "; did you mean `idle`?");
        assert_eq!(suggestion("zzz", &candidates), "");
    }

    #[test]
    fn every_kwarg_of_every_kind_has_a_trait() {
        for kind in Kind::all() {
            for kwarg in kind.kwargs() {
                assert!(KWARGS.iter().any(|(name, _)| *name == kwarg), "{kwarg}");
            }
        }
    }

    #[test]
    fn kind_specific_options_are_not_offered_elsewhere() {
        assert_eq!(Kind::kinds_with_option("interval"), [Kind::Timer]);
        assert_eq!(
            Kind::kinds_with_option("no_finalizers"),
            [Kind::Timer, Kind::Daemon]
        );
        assert!(!Kind::OnEvent.options().contains(&"retries"));
        assert!(!Kind::OnStartup.options().contains(&"labels"));
    }

    #[test]
    fn every_kind_lists_its_options_in_a_stable_order() {
        const RETRY: &[&str] = &["retries", "backoff", "timeout", "errors"];
        const FILTERS: &[&str] = &["labels", "annotations", "when", "field", "value"];
        let expected = |groups: &[&[&'static str]]| -> Vec<&'static str> {
            let mut keys = vec!["id", "param"];
            for group in groups {
                keys.extend_from_slice(group);
            }
            keys
        };
        let timer = &[
            "interval",
            "initial_delay",
            "sharp",
            "idle",
            "no_finalizers",
        ][..];
        let daemon = &[
            "initial_delay",
            "cancellation_backoff",
            "cancellation_timeout",
            "cancellation_polling",
            "no_finalizers",
        ][..];
        let webhook = &[
            "operations",
            "subresource",
            "persistent",
            "side_effects",
            "ignore_failures",
        ][..];
        for kind in Kind::all() {
            let groups: Vec<&[&'static str]> = match kind {
                Kind::OnCreate | Kind::Index => vec![RETRY, FILTERS],
                Kind::OnUpdate | Kind::OnField => vec![RETRY, FILTERS, &["old", "new"]],
                Kind::OnDelete => vec![RETRY, FILTERS, &["optional"]],
                Kind::OnResume => vec![RETRY, FILTERS, &["deleted"]],
                Kind::OnEvent => vec![FILTERS],
                Kind::Timer => vec![RETRY, FILTERS, timer],
                Kind::Daemon => vec![RETRY, FILTERS, daemon],
                Kind::OnStartup | Kind::OnCleanup | Kind::OnProbe | Kind::OnLogin => vec![RETRY],
                Kind::OnValidate | Kind::OnMutate => vec![FILTERS, webhook],
            };
            assert_eq!(kind.options(), expected(&groups), "{}", kind.name());
        }
    }

    #[test]
    fn settings_are_only_for_startup_handlers() {
        let kinds: Vec<_> = Kind::all()
            .iter()
            .filter(|k| k.kwargs().contains(&"settings"))
            .collect();
        assert_eq!(kinds, [&Kind::OnStartup]);
    }

    #[test]
    fn stopped_and_live_are_only_for_daemons_and_timers() {
        for kwarg in ["stopped", "live"] {
            let kinds: Vec<_> = Kind::all()
                .iter()
                .filter(|k| k.kwargs().contains(&kwarg))
                .collect();
            assert_eq!(kinds, [&Kind::Timer, &Kind::Daemon], "{kwarg}");
        }
    }
}
