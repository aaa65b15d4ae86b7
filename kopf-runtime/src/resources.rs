//! References to the Kubernetes resources that handlers serve.
//!
//! A [`ResourceRef`] names a resource by group, version and plural (and kind
//! and scope when known). Typed handlers get one from any [`kube::Resource`]
//! ([`ResourceRef::of`]); dynamic handlers from strings ([`ResourceRef::dynamic`]).
//! Two references are the same resource when group, version and plural match.

use std::any::TypeId;
use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

use kube::core::{ApiResource, ClusterResourceScope, GroupVersionKind, NamespaceResourceScope};

/// A reference to a Kubernetes resource (an API collection).
#[derive(Debug, Clone)]
pub struct ResourceRef {
    /// API group; `""` for the core group.
    pub group: Cow<'static, str>,
    /// API version, e.g. `v1`.
    pub version: Cow<'static, str>,
    /// Plural resource name, e.g. `configmaps`.
    pub plural: Cow<'static, str>,
    /// The kind, e.g. `ConfigMap`; `None` when declared dynamically (discover it).
    pub kind: Option<Cow<'static, str>>,
    /// Whether objects are namespaced; `None` when unknown (discover it).
    pub namespaced: Option<bool>,
}

impl ResourceRef {
    /// The resource of a typed Kubernetes object (k8s-openapi or `#[derive(CustomResource)]`).
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let r = kopf_runtime::ResourceRef::of::<ConfigMap>();
    /// assert_eq!((r.group.as_ref(), r.version.as_ref(), r.plural.as_ref()), ("", "v1", "configmaps"));
    /// assert_eq!(r.namespaced, Some(true));
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
            group: Cow::Owned(ar.group),
            version: Cow::Owned(ar.version),
            plural: Cow::Owned(ar.plural),
            kind: Some(Cow::Owned(ar.kind)),
            namespaced,
        }
    }

    /// A resource named by group, version and plural; kind and scope are discovered later.
    ///
    /// ```
    /// let r = kopf_runtime::ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples");
    /// assert_eq!(r.to_string(), "kopfexamples.v1.kopf.dev");
    /// ```
    pub const fn dynamic(group: &'static str, version: &'static str, plural: &'static str) -> Self {
        ResourceRef {
            group: Cow::Borrowed(group),
            version: Cow::Borrowed(version),
            plural: Cow::Borrowed(plural),
            kind: None,
            namespaced: None,
        }
    }

    /// Sets the kind (builder style), e.g. for dynamic resources whose kind is known.
    pub fn with_kind(mut self, kind: impl Into<Cow<'static, str>>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Sets the scope (builder style).
    pub fn with_namespaced(mut self, namespaced: bool) -> Self {
        self.namespaced = Some(namespaced);
        self
    }

    /// `group/version`, or just `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// A [`kube::core::ApiResource`] for a `kube::Api<DynamicObject>`, if the kind is known.
    pub fn api_resource(&self) -> Option<ApiResource> {
        let kind = self.kind.as_deref()?;
        let gvk = GroupVersionKind::gvk(&self.group, &self.version, kind);
        Some(ApiResource::from_gvk_with_plural(&gvk, &self.plural))
    }

    fn key(&self) -> (&str, &str, &str) {
        (&self.group, &self.version, &self.plural)
    }
}

impl PartialEq for ResourceRef {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for ResourceRef {}

impl Hash for ResourceRef {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl PartialOrd for ResourceRef {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ResourceRef {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// `plural.version.group` (`plural.version` for the core group), as kubectl spells it.
impl fmt::Display for ResourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}.{}", self.plural, self.version)
        } else {
            write!(f, "{}.{}.{}", self.plural, self.version, self.group)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Namespace, Secret};

    #[test]
    fn typed_and_dynamic_references_to_one_resource_are_equal() {
        let typed = ResourceRef::of::<Secret>();
        assert_eq!(typed, ResourceRef::dynamic("", "v1", "secrets"));
        assert_eq!(typed.kind.as_deref(), Some("Secret"));
        assert_eq!(typed.api_version(), "v1");
    }

    #[test]
    fn scope_is_known_for_typed_resources() {
        assert_eq!(ResourceRef::of::<Namespace>().namespaced, Some(false));
        assert_eq!(ResourceRef::dynamic("a", "v1", "bs").namespaced, None);
    }

    #[test]
    fn api_resource_needs_a_kind() {
        let r = ResourceRef::dynamic("kopf.dev", "v1", "kopfexamples");
        assert!(r.api_resource().is_none());
        let ar = r
            .with_kind("KopfExample")
            .api_resource()
            .expect("kind is set");
        assert_eq!(ar.api_version, "kopf.dev/v1");
        assert_eq!(ar.plural, "kopfexamples");
    }
}
