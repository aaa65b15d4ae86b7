//! The admission webhook server ([`WebhookServer`]): HTTPS with rustls,
//! HTTP/1.1 only, each `on_validate`/`on_mutate` handler at the path of its
//! id beneath the server's root path, as Kopf's `WebhookServer` lays them
//! out; and, if asked, the webhook configurations it keeps up to date
//! (`managed`).
//!
//! `args.rs` holds the flags, `error.rs` what can go wrong with them,
//! `tls.rs` the certificates, `server.rs` the listener, `paths.rs` the
//! handlers' paths beneath it, `managed.rs` the configurations,
//! `serving.rs` all of them started for an operator; the reviews
//! themselves are [`admission`]'s.

pub(crate) mod admission;
mod args;
mod error;
pub(crate) mod managed;
mod paths;
mod server;
mod serving;
mod tls;

pub use args::WebhookArgs;
pub use error::WebhookError;
pub use server::WebhookServer;

pub(crate) use args::ServiceRef;
pub(crate) use server::target;
pub(crate) use serving::{Admission, start};
