//! What an operator needs to run in a cluster, derived from its handlers
//! and its command line: the RBAC permissions it uses ([`Permission`],
//! `permissions.rs`), checked at start-up (`check.rs`), and the manifests
//! that deploy it with exactly those (`manifests/`).

mod check;
mod declared;
#[cfg(feature = "emulator")]
pub(crate) mod emulated;
pub(crate) mod manifests;
mod permissions;

pub use check::{Missing, MissingPermissions};
pub(crate) use check::{StartUp, at_start_up};
pub(crate) use declared::declared;
pub use declared::{RbacRecord, RbacScope};
#[cfg(feature = "emulator")]
pub use emulated::GrantError;
pub use manifests::ManifestsArgs;
pub(crate) use permissions::{Named, Plan, required};
pub use permissions::{Permission, PermissionError, PermissionScope};
