//! What an operator needs to run in a cluster, derived from its handlers
//! and its command line: the RBAC permissions it uses ([`Permission`],
//! `permissions.rs`), checked at start-up (`check.rs`), and the manifests
//! that deploy it with exactly those (`manifests/`).

pub(crate) mod manifests;
mod permissions;

pub use manifests::ManifestsArgs;
pub(crate) use permissions::{Named, Plan, declared, required};
pub use permissions::{Permission, PermissionError, PermissionScope};
