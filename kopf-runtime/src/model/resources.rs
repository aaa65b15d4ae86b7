//! References to the Kubernetes resources that handlers serve, as Kopf
//! selects them.
//!
//! How each form matches is documented on [`ResourceRef`].

use std::any::TypeId;
use std::borrow::Cow;
use std::fmt;

use kube::core::{ApiResource, ClusterResourceScope, GroupVersionKind, NamespaceResourceScope};

type Text = Cow<'static, str>;

/// How a [`ResourceRef`] names its resources.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ResourceName {
    /// Any of the names, as Kopf's positional name: plural, singular, kind
    /// or a short name.
    Any(Text),
    /// The plural name only (`deployments`).
    Plural(Text),
    /// The singular name only (`deployment`).
    Singular(Text),
    /// The kind only (`Deployment`).
    Kind(Text),
    /// A short name only (`deploy`); Kopf's `shortcut`.
    Shortcut(Text),
    /// Every resource of the category (`all`); it may match several
    /// resources on purpose.
    Category(Text),
}

impl ResourceName {
    /// The name as written.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Any(name)
            | Self::Plural(name)
            | Self::Singular(name)
            | Self::Kind(name)
            | Self::Shortcut(name)
            | Self::Category(name) => name,
        }
    }

    /// The keyword that names this kind of name (`None` for [`ResourceName::Any`]).
    fn keyword(&self) -> Option<&'static str> {
        match self {
            Self::Any(_) => None,
            Self::Plural(_) => Some("plural"),
            Self::Singular(_) => Some("singular"),
            Self::Kind(_) => Some("kind"),
            Self::Shortcut(_) => Some("shortcut"),
            Self::Category(_) => Some("category"),
        }
    }
}

/// A selector of the Kubernetes resources a handler serves.
///
/// A [`ResourceRef`] is a selector: a name, optionally narrowed to an API
/// group and a version. The operator resolves it through discovery at
/// start-up (and again whenever the cluster's resources change) into the
/// resources it serves:
///
/// - A name given positionally ([`ResourceRef::named`],
///   [`ResourceRef::named_in`], [`ResourceRef::dynamic`], typed handlers'
///   [`ResourceRef::of`]) matches a resource's plural, singular, kind or
///   short name, as in Kopf (`'kopfexamples'`, `'KopfExample'`, `'kex'`).
/// - A keyword name matches only that name: [`ResourceRef::by_kind`],
///   [`by_plural`](ResourceRef::by_plural), [`by_singular`](ResourceRef::by_singular),
///   [`by_shortcut`](ResourceRef::by_shortcut), or every resource of a
///   category, [`by_category`](ResourceRef::by_category).
/// - Without a version, only the group's preferred version matches. Without
///   a group, any group matches, but the core group wins over the others
///   (`pods` is `pods.v1`, not `pods.v1beta1.metrics.k8s.io`), as in
///   `kubectl`.
///
/// ```
/// use kopf_runtime::ResourceRef;
///
/// assert_eq!(ResourceRef::named("kopfexamples").to_string(), "kopfexamples");
/// assert_eq!(ResourceRef::named("deployments.apps").group(), Some("apps"));
/// assert_eq!(ResourceRef::named_in("apps", "deployment").version(), None);
/// assert_eq!(ResourceRef::named_in("apps/v1", "deployments").version(), Some("v1"));
/// assert_eq!(ResourceRef::named_in("v1", "pods").group(), Some(""));
/// assert_eq!(ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples").to_string(), "kopfexamples.v1.kopf.dev");
/// assert_eq!(ResourceRef::by_kind("Deployment").with_group("apps").to_string(), "kind=Deployment in apps");
/// ```
///
/// Two references are the same selector when their group, version and name
/// are the same; two different selectors may still resolve to one resource
/// (`KopfExample` and `"kopfexamples"`), whose watch then serves the
/// handlers of both.
#[derive(Debug, Clone)]
pub struct ResourceRef {
    /// The API group (`""` for the core group); `None` for any group.
    group: Option<Text>,
    /// The API version; `None` for the group's preferred version.
    version: Option<Text>,
    name: ResourceName,
    /// The kind, when known without discovery (typed resources).
    kind: Option<Text>,
    /// Whether objects are namespaced, when known without discovery.
    namespaced: Option<bool>,
}

impl ResourceRef {
    /// The resource of a typed Kubernetes object (k8s-openapi or `#[derive(CustomResource)]`).
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let r = kopf_runtime::ResourceRef::of::<ConfigMap>();
    /// assert_eq!((r.group(), r.version(), r.name().as_str()), (Some(""), Some("v1"), "configmaps"));
    /// assert_eq!(r.namespaced(), Some(true));
    /// ```
    pub fn of<K>() -> Self
    where
        K: kube::Resource<DynamicType = ()>,
        K::Scope: 'static,
    {
        let ar = ApiResource::erase::<K>(&());
        let scope = TypeId::of::<K::Scope>();
        let namespaced = if scope == TypeId::of::<NamespaceResourceScope>() {
            Some(true)
        } else if scope == TypeId::of::<ClusterResourceScope>() {
            Some(false)
        } else {
            None
        };
        ResourceRef {
            group: Some(Cow::Owned(ar.group)),
            version: Some(Cow::Owned(ar.version)),
            name: ResourceName::Any(Cow::Owned(ar.plural)),
            kind: Some(Cow::Owned(ar.kind)),
            namespaced,
        }
    }

    /// A resource by group, version and name (Kopf's
    /// `('kopf.dev', 'v1', 'kopfexamples')`); `""` is the core group. The
    /// name is usually the plural, but the singular, the kind or a short
    /// name match too.
    ///
    /// ```
    /// let r = kopf_runtime::ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples");
    /// assert_eq!(r.to_string(), "kopfexamples.v1.kopf.dev");
    /// ```
    pub const fn dynamic(group: &'static str, version: &'static str, name: &'static str) -> Self {
        ResourceRef {
            group: Some(Cow::Borrowed(group)),
            version: Some(Cow::Borrowed(version)),
            name: ResourceName::Any(Cow::Borrowed(name)),
            kind: None,
            namespaced: None,
        }
    }

    /// A resource by one name, as Kopf's one-argument form and `kubectl`
    /// read it: `"kopfexamples"` (any group), `"deployments.apps"` (a
    /// group), `"kopfexamples.v1.kopf.dev"` (a version and a group), or
    /// `"pods.v1"` (a version, any group, the core group first).
    ///
    /// ```
    /// use kopf_runtime::ResourceRef;
    /// let r = ResourceRef::named("kopfexamples.v1.kopf.dev");
    /// assert_eq!((r.group(), r.version(), r.name().as_str()), (Some("kopf.dev"), Some("v1"), "kopfexamples"));
    /// let r = ResourceRef::named("pods.v1");
    /// assert_eq!((r.group(), r.version()), (None, Some("v1")));
    /// ```
    pub fn named(name: impl Into<Text>) -> Self {
        let name = name.into();
        let (name, version, group) = split_dotted(&name);
        Self::selector(
            group.map(owned),
            version.map(owned),
            ResourceName::Any(owned(name)),
        )
    }

    /// A resource by a group (or `group/version`, or `v1` for the core
    /// group) and a name, as Kopf's two-argument form:
    /// `("apps", "deployment")` takes the group's preferred version.
    ///
    /// ```
    /// use kopf_runtime::ResourceRef;
    /// assert_eq!(ResourceRef::named_in("apps", "deployment").to_string(), "deployment.apps");
    /// assert_eq!(ResourceRef::named_in("apps/v1", "deployments").to_string(), "deployments.v1.apps");
    /// assert_eq!(ResourceRef::named_in("v1", "pods").to_string(), "pods.v1");
    /// ```
    pub fn named_in(group: impl Into<Text>, name: impl Into<Text>) -> Self {
        let group = group.into();
        let (group, version) = match group.rsplit_once('/') {
            Some((group, version)) => (owned(group), Some(owned(version))),
            None if group == "v1" => (Cow::Borrowed(""), Some(group)),
            None => (group, None),
        };
        Self::selector(Some(group), version, ResourceName::Any(name.into()))
    }

    /// Resources of this kind (`Deployment`), as Kopf's `kind=`.
    pub fn by_kind(kind: impl Into<Text>) -> Self {
        Self::selector(None, None, ResourceName::Kind(kind.into()))
    }

    /// Resources of this plural name (`deployments`), as Kopf's `plural=`.
    pub fn by_plural(plural: impl Into<Text>) -> Self {
        Self::selector(None, None, ResourceName::Plural(plural.into()))
    }

    /// Resources of this singular name (`deployment`), as Kopf's `singular=`.
    pub fn by_singular(singular: impl Into<Text>) -> Self {
        Self::selector(None, None, ResourceName::Singular(singular.into()))
    }

    /// Resources with this short name (`deploy`), as Kopf's `shortcut=`.
    pub fn by_shortcut(shortcut: impl Into<Text>) -> Self {
        Self::selector(None, None, ResourceName::Shortcut(shortcut.into()))
    }

    /// Every resource of the category (`all`), as Kopf's `category=`: the
    /// handlers serve each of them.
    pub fn by_category(category: impl Into<Text>) -> Self {
        Self::selector(None, None, ResourceName::Category(category.into()))
    }

    fn selector(group: Option<Text>, version: Option<Text>, name: ResourceName) -> Self {
        ResourceRef {
            group,
            version,
            name,
            kind: None,
            namespaced: None,
        }
    }

    /// Narrows the selector to an API group (`""` for the core group), as
    /// Kopf's `group=`.
    #[must_use]
    pub fn with_group(mut self, group: impl Into<Text>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Narrows the selector to an API version, as Kopf's `version=`;
    /// without it, only the group's preferred version matches.
    #[must_use]
    pub fn with_version(mut self, version: impl Into<Text>) -> Self {
        self.version = Some(version.into());
        self
    }

    /// Sets the kind (builder style), for tools that need it without
    /// discovery (e.g. to install a CRD in the embedded emulator).
    #[must_use]
    pub fn with_kind(mut self, kind: impl Into<Text>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Sets the scope (builder style), as [`with_kind`](Self::with_kind).
    #[must_use]
    pub fn with_namespaced(mut self, namespaced: bool) -> Self {
        self.namespaced = Some(namespaced);
        self
    }

    /// The API group (`""` for the core group); `None` when any group matches.
    pub fn group(&self) -> Option<&str> {
        self.group.as_deref()
    }

    /// The API version; `None` when the group's preferred version is served.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// How the resource is named.
    pub fn name(&self) -> &ResourceName {
        &self.name
    }

    /// The kind, when known without discovery.
    pub fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }

    /// Whether objects are namespaced, when known without discovery.
    pub fn namespaced(&self) -> Option<bool> {
        self.namespaced
    }

    /// `group/version` (just `version` for the core group), when both are given.
    pub fn api_version(&self) -> Option<String> {
        let (group, version) = (self.group.as_deref()?, self.version.as_deref()?);
        Some(if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        })
    }

    /// A [`kube::core::ApiResource`] for a `kube::Api<DynamicObject>`, when
    /// the group, the version and the kind are known and the name is the
    /// plural (as for typed resources).
    pub fn api_resource(&self) -> Option<ApiResource> {
        let kind = self.kind.as_deref()?;
        let gvk = GroupVersionKind::gvk(self.group.as_deref()?, self.version.as_deref()?, kind);
        let plural = match &self.name {
            ResourceName::Any(name) | ResourceName::Plural(name) => name,
            _ => return None,
        };
        Some(ApiResource::from_gvk_with_plural(&gvk, plural))
    }

    /// Why the selector can never match, if it cannot: an empty name or
    /// version (Kopf refuses them too).
    pub(crate) fn problem(&self) -> Option<String> {
        if self.name.as_str().is_empty() {
            return Some("the resource's name must not be empty".to_owned());
        }
        if self.version.as_deref() == Some("") {
            return Some(format!(
                "the version of the resource `{self}` must not be empty; omit it for the preferred version"
            ));
        }
        None
    }

    /// Whether the selector names one resource (not a category): several
    /// matches are then ambiguous.
    pub(crate) fn is_specific(&self) -> bool {
        !matches!(self.name, ResourceName::Category(_))
    }

    /// Whether `resource` is one this selector selects (Kopf's `check`).
    pub(crate) fn matches(&self, resource: &Discovered) -> bool {
        self.group.as_deref().is_none_or(|g| g == resource.group)
            && match self.version.as_deref() {
                None => resource.preferred,
                Some(version) => version == resource.version,
            }
            && self.matches_name(resource)
    }

    /// Whether the name matches, whatever the group and version.
    pub(crate) fn matches_name(&self, resource: &Discovered) -> bool {
        let shortcut = |name: &str| resource.shortcuts.iter().any(|s| s == name);
        match &self.name {
            ResourceName::Any(name) => {
                name == &resource.plural
                    || name == &resource.kind
                    || name == &resource.singular
                    || shortcut(name)
            }
            ResourceName::Plural(name) => name == &resource.plural,
            ResourceName::Singular(name) => name == &resource.singular,
            ResourceName::Kind(name) => name == &resource.kind,
            ResourceName::Shortcut(name) => shortcut(name),
            ResourceName::Category(name) => resource.categories.iter().any(|c| c == name),
        }
    }

    /// The resources this selector selects among `resources` (Kopf's
    /// `select`): those it [`matches`](Self::matches), of which only the
    /// core group's when the selector names one resource and the core group
    /// has it (as `kubectl` prefers the core group).
    pub(crate) fn select<'a>(&self, resources: &'a [Discovered]) -> Vec<&'a Discovered> {
        let selected: Vec<&Discovered> = resources.iter().filter(|r| self.matches(r)).collect();
        if self.is_specific() && selected.iter().any(|r| r.group.is_empty()) {
            return selected
                .into_iter()
                .filter(|r| r.group.is_empty())
                .collect();
        }
        selected
    }

    fn key(&self) -> (Option<&str>, Option<&str>, &ResourceName) {
        (self.group.as_deref(), self.version.as_deref(), &self.name)
    }
}

fn owned(text: &str) -> Text {
    Cow::Owned(text.to_owned())
}

/// Splits Kopf's one-argument form `name[.version][.group]` into its parts:
/// a version is recognised by its conventional shape (`v1`, `v2beta1`), as
/// Kopf and `kubectl` do; anything else after the first dot is the group.
fn split_dotted(text: &str) -> (&str, Option<&str>, Option<&str>) {
    let Some((name, rest)) = text.split_once('.') else {
        return (text, None, None);
    };
    let (first, group) = match rest.split_once('.') {
        Some((first, group)) => (first, Some(group)),
        None => (rest, None),
    };
    if is_conventional_version(first) {
        (name, Some(first), group)
    } else {
        (name, None, Some(rest))
    }
}

/// `v1`, `v2alpha1`, `v1beta3`: Kubernetes' conventional version names.
fn is_conventional_version(text: &str) -> bool {
    let Some(rest) = text.strip_prefix('v') else {
        return false;
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return false;
    }
    let rest = &rest[digits..];
    let rest = rest
        .strip_prefix("alpha")
        .or_else(|| rest.strip_prefix("beta"))
        .map_or(Some(rest), |stage| {
            (!stage.is_empty() && stage.bytes().all(|b| b.is_ascii_digit())).then_some("")
        });
    rest == Some("")
}

impl PartialEq for ResourceRef {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for ResourceRef {}

impl std::hash::Hash for ResourceRef {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl PartialOrd for ResourceRef {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ResourceRef {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// As `kubectl` spells resources: `name[.version][.group]` for a name
/// (`pods.v1`, `deployments.apps`, `kopfexamples.v1.kopf.dev`); a keyword
/// name as `kind=Deployment`, narrowed with ` in group[/version]`.
impl fmt::Display for ResourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = self.group.as_deref();
        let version = self.version.as_deref();
        match self.name.keyword() {
            None => {
                f.write_str(self.name.as_str())?;
                if let Some(version) = version {
                    write!(f, ".{version}")?;
                }
                match group {
                    Some("") if version.is_none() => f.write_str(" in the core group"),
                    Some("") | None => Ok(()),
                    Some(group) => write!(f, ".{group}"),
                }
            }
            Some(keyword) => {
                write!(f, "{keyword}={}", self.name.as_str())?;
                match (group, version) {
                    (None, None) => Ok(()),
                    (Some(""), None) => f.write_str(" in the core group"),
                    (Some(group), None) => write!(f, " in {group}"),
                    (None, Some(version)) => write!(f, " in any group's {version}"),
                    (Some(""), Some(version)) => write!(f, " in {version}"),
                    (Some(group), Some(version)) => write!(f, " in {group}/{version}"),
                }
            }
        }
    }
}

/// A resource as discovery describes it (Kopf's `Resource`): what
/// selectors are matched against.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Discovered {
    /// The API group; `""` for the core group.
    pub group: String,
    /// The API version.
    pub version: String,
    /// The plural name, as in URLs.
    pub plural: String,
    /// The kind.
    pub kind: String,
    /// The singular name (the lowercase kind when discovery gives none).
    pub singular: String,
    /// The short names.
    pub shortcuts: Vec<String>,
    /// The categories it belongs to.
    pub categories: Vec<String>,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Whether its version is its group's preferred one.
    pub preferred: bool,
    /// The verbs the API serves for it.
    pub verbs: Vec<String>,
    /// Whether `status` is a subresource.
    pub status_subresource: bool,
}

impl Discovered {
    /// Whether the API serves `verb` for the resource.
    pub(crate) fn supports(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// `group/version`, or `version` for the core group.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// `plural.version.group` (`plural.version` for the core group).
impl fmt::Display for Discovered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.plural, self.version)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Namespace, Secret};

    fn resource(group: &str, version: &str, plural: &str, kind: &str) -> Discovered {
        Discovered {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            kind: kind.into(),
            singular: kind.to_lowercase(),
            namespaced: true,
            preferred: true,
            verbs: vec!["list".into(), "watch".into(), "patch".into()],
            ..Discovered::default()
        }
    }

    fn kopfexamples(version: &str, preferred: bool) -> Discovered {
        Discovered {
            shortcuts: vec!["kex".into(), "kexes".into()],
            categories: vec!["kopf".into(), "all".into()],
            preferred,
            ..resource("kopf.dev", version, "kopfexamples", "KopfExample")
        }
    }

    fn cluster() -> Vec<Discovered> {
        vec![
            Discovered {
                shortcuts: vec!["po".into()],
                categories: vec!["all".into()],
                ..resource("", "v1", "pods", "Pod")
            },
            resource("metrics.k8s.io", "v1beta1", "pods", "PodMetrics"),
            Discovered {
                shortcuts: vec!["deploy".into()],
                categories: vec!["all".into()],
                ..resource("apps", "v1", "deployments", "Deployment")
            },
            kopfexamples("v1", false),
            kopfexamples("v2", true),
            resource("a.example", "v1", "widgets", "Widget"),
            resource("b.example", "v1", "widgets", "Widget"),
        ]
    }

    fn selected(selector: &ResourceRef) -> Vec<String> {
        let resources = cluster();
        let mut names: Vec<String> = selector
            .select(&resources)
            .iter()
            .map(ToString::to_string)
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_positional_name_matches_the_plural_singular_kind_or_a_short_name() {
        for name in ["kopfexamples", "kopfexample", "KopfExample", "kex", "kexes"] {
            assert_eq!(
                selected(&ResourceRef::named(name)),
                ["kopfexamples.v2.kopf.dev"],
                "{name}"
            );
        }
        assert!(selected(&ResourceRef::named("KopfExamples")).is_empty());
    }

    #[test]
    fn keyword_names_match_only_their_own_name() {
        let deployments = ["deployments.v1.apps"];
        assert_eq!(selected(&ResourceRef::by_kind("Deployment")), deployments);
        assert_eq!(
            selected(&ResourceRef::by_plural("deployments")),
            deployments
        );
        assert_eq!(
            selected(&ResourceRef::by_singular("deployment")),
            deployments
        );
        assert_eq!(selected(&ResourceRef::by_shortcut("deploy")), deployments);
        assert!(selected(&ResourceRef::by_kind("deployments")).is_empty());
        assert!(selected(&ResourceRef::by_plural("Deployment")).is_empty());
        assert!(selected(&ResourceRef::by_singular("deploy")).is_empty());
        assert!(selected(&ResourceRef::by_shortcut("deployment")).is_empty());
    }

    #[test]
    fn without_a_version_only_the_preferred_one_matches() {
        assert_eq!(
            selected(&ResourceRef::named_in("kopf.dev", "kopfexamples")),
            ["kopfexamples.v2.kopf.dev"]
        );
        assert_eq!(
            selected(&ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples")),
            ["kopfexamples.v1.kopf.dev"]
        );
        assert_eq!(
            selected(&ResourceRef::named("kopfexamples.v1.kopf.dev")),
            ["kopfexamples.v1.kopf.dev"]
        );
        assert_eq!(
            selected(&ResourceRef::by_kind("KopfExample").with_version("v1")),
            ["kopfexamples.v1.kopf.dev"]
        );
    }

    #[test]
    fn the_group_narrows_and_the_core_group_wins_without_one() {
        assert_eq!(selected(&ResourceRef::named("pods")), ["pods.v1"]);
        assert_eq!(selected(&ResourceRef::named("pods.v1")), ["pods.v1"]);
        assert_eq!(
            selected(&ResourceRef::named("pods.metrics.k8s.io")),
            ["pods.v1beta1.metrics.k8s.io"]
        );
        assert_eq!(
            selected(&ResourceRef::named_in("metrics.k8s.io", "pods")),
            ["pods.v1beta1.metrics.k8s.io"]
        );
        assert_eq!(
            selected(&ResourceRef::named("deployments.apps")),
            ["deployments.v1.apps"]
        );
        assert!(selected(&ResourceRef::named_in("apps", "pods")).is_empty());
    }

    #[test]
    fn a_name_in_two_groups_selects_both_so_that_it_is_ambiguous() {
        let selector = ResourceRef::named("widgets");
        assert!(selector.is_specific());
        assert_eq!(
            selected(&selector),
            ["widgets.v1.a.example", "widgets.v1.b.example"]
        );
        assert_eq!(
            selected(&ResourceRef::named("widgets.a.example")),
            ["widgets.v1.a.example"]
        );
    }

    #[test]
    fn a_category_selects_every_member_even_beside_the_core_group() {
        let all = ResourceRef::by_category("all");
        assert!(!all.is_specific());
        assert_eq!(
            selected(&all),
            ["deployments.v1.apps", "kopfexamples.v2.kopf.dev", "pods.v1"]
        );
        assert_eq!(
            selected(&ResourceRef::by_category("all").with_group("apps")),
            ["deployments.v1.apps"]
        );
        assert!(selected(&ResourceRef::by_category("none")).is_empty());
    }

    #[test]
    fn the_one_argument_form_reads_versions_by_their_shape() {
        let parts = |text: &str| {
            let r = ResourceRef::named(text.to_owned());
            (
                r.name().as_str().to_owned(),
                r.version().map(str::to_owned),
                r.group().map(str::to_owned),
            )
        };
        let s = |t: &str| Some(t.to_owned());
        assert_eq!(parts("pods"), ("pods".into(), None, None));
        assert_eq!(parts("pods.v1"), ("pods".into(), s("v1"), None));
        assert_eq!(
            parts("deployments.apps"),
            ("deployments".into(), None, s("apps"))
        );
        assert_eq!(
            parts("kopfexamples.v1beta2.kopf.dev"),
            ("kopfexamples".into(), s("v1beta2"), s("kopf.dev"))
        );
        assert_eq!(
            parts("kopfexamples.kopf.dev"),
            ("kopfexamples".into(), None, s("kopf.dev"))
        );
        // Not conventional versions: parts of the group.
        assert_eq!(parts("x.v1x.io"), ("x".into(), None, s("v1x.io")));
        assert_eq!(parts("x.vbeta.io"), ("x".into(), None, s("vbeta.io")));
        assert_eq!(parts("x.v1beta.io"), ("x".into(), None, s("v1beta.io")));
    }

    #[test]
    fn the_two_argument_form_reads_a_group_version_or_v1() {
        let r = ResourceRef::named_in("apps/v1", "deployments");
        assert_eq!((r.group(), r.version()), (Some("apps"), Some("v1")));
        let r = ResourceRef::named_in("v1", "pods");
        assert_eq!((r.group(), r.version()), (Some(""), Some("v1")));
        let r = ResourceRef::named_in("", "pods");
        assert_eq!((r.group(), r.version()), (Some(""), None));
        let r = ResourceRef::named_in("kopf.dev", "kex");
        assert_eq!((r.group(), r.version()), (Some("kopf.dev"), None));
    }

    #[test]
    fn typed_and_dynamic_references_to_one_resource_are_equal() {
        let typed = ResourceRef::of::<Secret>();
        assert_eq!(typed, ResourceRef::dynamic("", "v1", "secrets"));
        assert_eq!(typed.kind(), Some("Secret"));
        assert_eq!(typed.api_version().as_deref(), Some("v1"));
        assert_ne!(typed, ResourceRef::named("secrets"));
        assert_ne!(
            ResourceRef::by_plural("secrets"),
            ResourceRef::named("secrets")
        );
    }

    #[test]
    fn scope_is_known_for_typed_resources() {
        assert_eq!(ResourceRef::of::<Namespace>().namespaced(), Some(false));
        assert_eq!(ResourceRef::dynamic("a", "v1", "bs").namespaced(), None);
    }

    #[test]
    fn api_resource_needs_a_kind_a_group_and_a_version() {
        let r = ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples");
        assert!(r.api_resource().is_none());
        let ar = r
            .with_kind("KopfExample")
            .api_resource()
            .expect("kind is set");
        assert_eq!(ar.api_version, "kopf.dev/v1");
        assert_eq!(ar.plural, "kopfexamples");
        assert!(
            ResourceRef::named("kopfexamples")
                .with_kind("KopfExample")
                .api_resource()
                .is_none()
        );
    }

    #[test]
    fn empty_names_and_versions_are_problems() {
        assert!(ResourceRef::named("").problem().is_some());
        assert!(ResourceRef::by_kind("").problem().is_some());
        assert!(ResourceRef::dynamic("", "", "pods").problem().is_some());
        assert!(ResourceRef::dynamic("", "v1", "pods").problem().is_none());
        assert!(ResourceRef::named_in("", "pods").problem().is_none());
    }

    #[test]
    fn selectors_display_as_written() {
        assert_eq!(
            ResourceRef::dynamic("", "v1", "pods").to_string(),
            "pods.v1"
        );
        assert_eq!(
            ResourceRef::named_in("", "pods").to_string(),
            "pods in the core group"
        );
        assert_eq!(ResourceRef::by_category("all").to_string(), "category=all");
        assert_eq!(
            ResourceRef::by_plural("kopfexamples")
                .with_group("kopf.dev")
                .with_version("v1")
                .to_string(),
            "plural=kopfexamples in kopf.dev/v1"
        );
        assert_eq!(
            ResourceRef::by_shortcut("po")
                .with_group("")
                .with_version("v1")
                .to_string(),
            "shortcut=po in v1"
        );
    }
}
