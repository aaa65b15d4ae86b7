//! The permissions declared with `#[kopf::rbac]`: the records the macro
//! submits (not public API), collected with `inventory`.

use crate::deploying::permissions::{Permission, PermissionScope};

/// Where a `#[kopf::rbac]` permission applies, as the macro writes it.
#[derive(Debug, Clone, Copy)]
pub enum RbacScope {
    /// Where the operator serves objects.
    Served,
    /// Cluster-wide (`cluster`).
    Cluster,
    /// One namespace (`namespace = "…"`).
    Namespace(&'static str),
}

/// One `#[kopf::rbac(…)]`.
#[derive(Debug, Clone, Copy)]
pub struct RbacRecord {
    /// API groups (`""` for the core group).
    pub groups: &'static [&'static str],
    /// Plural names, maybe with a subresource (`pods/status`).
    pub resources: &'static [&'static str],
    /// Verbs.
    pub verbs: &'static [&'static str],
    /// Object names it is limited to (none: all).
    pub resource_names: &'static [&'static str],
    /// Where it applies.
    pub scope: RbacScope,
    /// Why the operator needs it.
    pub why: &'static str,
    /// The module that declares it.
    pub path: &'static str,
}

inventory::collect!(RbacRecord);

impl RbacRecord {
    /// One permission per group and resource.
    fn permissions(&self) -> impl Iterator<Item = Permission> + '_ {
        let scope = match self.scope {
            RbacScope::Served => PermissionScope::Served,
            RbacScope::Cluster => PermissionScope::Cluster,
            RbacScope::Namespace(ns) => PermissionScope::Namespace(ns.to_owned()),
        };
        let why = if self.why.is_empty() {
            format!("declared with #[kopf::rbac] in {}", self.path)
        } else {
            self.why.to_owned()
        };
        self.groups.iter().flat_map(move |group| {
            let (scope, why) = (scope.clone(), why.clone());
            self.resources.iter().map(move |resource| {
                Permission::new(*group, resource)
                    .verbs(self.verbs.iter().copied())
                    .names(self.resource_names.iter().copied())
                    .in_scope(scope.clone())
                    .why(why.clone())
            })
        })
    }
}

/// The permissions declared with `#[kopf::rbac]` in every linked crate,
/// sorted.
pub(crate) fn declared() -> Vec<Permission> {
    let mut permissions: Vec<Permission> = inventory::iter::<RbacRecord>
        .into_iter()
        .flat_map(RbacRecord::permissions)
        .collect();
    permissions.sort();
    permissions.dedup();
    permissions
}
