//! The record of RBAC's decisions: which rule allowed each user's requests
//! (and how many), and every request denied, so that a test can prove an
//! operator's rules are exactly enough: each rule used, nothing denied.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use serde::Serialize;

use super::attributes::{Attributes, User};
use super::authorizer::Grant;

/// How many distinct grants or denials are kept (each with its count).
const MAX_ENTRIES: usize = 10_000;

/// What RBAC decided since the emulator started (or since
/// [`Emulator::clear_rbac_usage`](crate::Emulator::clear_rbac_usage)).
/// Requests of `system:masters` (the emulator's administrator) are not
/// recorded: no rule decides them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RbacUsage {
    /// Each rule that allowed a user's requests, sorted by user, binding,
    /// role and rule.
    pub grants: Vec<GrantUse>,
    /// Each distinct request denied, sorted by user and what was asked.
    pub denials: Vec<RbacDenial>,
}

/// A rule that allowed requests of one user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GrantUse {
    /// The user (`system:serviceaccount:NS:NAME`, ...).
    pub user: String,
    /// The binding, role and rule.
    #[serde(flatten)]
    pub grant: Grant,
    /// How many requests it allowed.
    pub count: u64,
}

/// A request RBAC denied (answered `403`), with the attributes it was
/// authorized by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RbacDenial {
    /// The user.
    pub user: String,
    /// The user's groups.
    pub groups: Vec<String>,
    /// `get`, `list`, `create`, ... (for a path, the method in lower case).
    pub verb: String,
    /// Whether it addressed a resource (else `path`).
    pub resource_request: bool,
    /// The API group, empty for core.
    pub api_group: String,
    /// The resource (plural).
    pub resource: String,
    /// The subresource, empty if none.
    pub subresource: String,
    /// The namespace, empty at the cluster scope.
    pub namespace: String,
    /// The object's name, empty if none.
    pub name: String,
    /// The request path.
    pub path: String,
    /// How many such requests were denied.
    pub count: u64,
}

#[derive(Debug, Default)]
struct Entries {
    grants: BTreeMap<(String, Grant), u64>,
    denials: BTreeMap<RbacDenial, u64>,
}

/// The record, shared by every request.
#[derive(Debug, Default)]
pub(crate) struct Usage {
    entries: Mutex<Entries>,
}

impl Usage {
    /// Counts a request `grant` allowed to `user`.
    pub(crate) fn allowed(&self, user: &User, grant: &Grant) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (user.name.clone(), grant.clone());
        if let Some(count) = entries.grants.get_mut(&key) {
            *count += 1;
        } else if entries.grants.len() < MAX_ENTRIES {
            entries.grants.insert(key, 1);
        }
    }

    /// Records a request denied to `user`.
    pub(crate) fn denied(&self, user: &User, attrs: &Attributes) {
        let key = RbacDenial {
            user: user.name.clone(),
            groups: user.groups.clone(),
            verb: attrs.verb.clone(),
            resource_request: attrs.resource_request,
            api_group: attrs.api_group.clone(),
            resource: attrs.resource.clone(),
            subresource: attrs.subresource.clone(),
            namespace: attrs.namespace.clone(),
            name: attrs.name.clone(),
            path: attrs.path.clone(),
            count: 0,
        };
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = entries.denials.get_mut(&key) {
            *count += 1;
        } else if entries.denials.len() < MAX_ENTRIES {
            entries.denials.insert(key, 1);
        }
    }

    /// The record so far.
    pub(crate) fn snapshot(&self) -> RbacUsage {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        RbacUsage {
            grants: entries
                .grants
                .iter()
                .map(|((user, grant), count)| GrantUse {
                    user: user.clone(),
                    grant: grant.clone(),
                    count: *count,
                })
                .collect(),
            denials: entries
                .denials
                .iter()
                .map(|(denial, count)| RbacDenial {
                    count: *count,
                    ..denial.clone()
                })
                .collect(),
        }
    }

    /// Forgets the record.
    pub(crate) fn clear(&self) {
        *self.entries.lock().unwrap_or_else(PoisonError::into_inner) = Entries::default();
    }
}
