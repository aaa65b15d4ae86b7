//! The user's guide, a chapter per module. The chapters are the markdown
//! files under `docs/`, included here so that rustdoc renders them and
//! `cargo test` compiles and runs their examples.
//!
//! - [`handlers`]: the kinds, resources, options, and an example of each kind
//! - [`parameters`]: what a handler can take, by name
//! - [`filters`]: which objects and changes a handler applies to
//! - [`errors`]: return values, errors, retries and timeouts
//! - [`daemons`]: timers and daemons
//! - [`webhooks`]: validating and mutating admission webhooks
//! - [`replicas`]: several replicas of an operator, on a Lease or sharded
//! - [`testing`]: calling handlers in tests, and running whole operators
//! - [`deploying`]: the command line, probes, metrics and permissions
//! - [`guarantees`]: what the runtime promises about handlers
//! - [`migrating`]: what differs from Kopf, and why

#[doc = include_str!("../docs/handlers.md")]
pub mod handlers {}

#[doc = include_str!("../docs/parameters.md")]
pub mod parameters {}

#[doc = include_str!("../docs/filters.md")]
pub mod filters {}

#[doc = include_str!("../docs/errors.md")]
pub mod errors {}

#[doc = include_str!("../docs/daemons.md")]
pub mod daemons {}

#[doc = include_str!("../docs/webhooks.md")]
pub mod webhooks {}

#[doc = include_str!("../docs/replicas.md")]
pub mod replicas {}

#[doc = include_str!("../docs/testing.md")]
pub mod testing {}

#[doc = include_str!("../docs/deploying.md")]
pub mod deploying {}

#[doc = include_str!("../docs/guarantees.md")]
pub mod guarantees {}

#[doc = include_str!("../docs/migrating.md")]
pub mod migrating {}
