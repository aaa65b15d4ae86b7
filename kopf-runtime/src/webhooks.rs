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
//! themselves are `admission.rs`'s.
//!
//! All of it is kopf-runtime's `webhooks` feature, off by default: the
//! server's TLS and certificate generation are code that an operator
//! without admission handlers should not carry.

// The flags and errors are in every build, so that a build without the
// `webhooks` feature refuses the flags with a reason; the rest only in
// builds with it, and `disabled.rs` stands in for it in the others.
#[cfg(feature = "webhooks")]
pub(crate) mod admission;
mod args;
#[cfg(not(feature = "webhooks"))]
mod disabled;
mod error;
#[cfg(feature = "webhooks")]
pub(crate) mod managed;
#[cfg(feature = "webhooks")]
mod paths;
#[cfg(feature = "webhooks")]
mod server;
#[cfg(feature = "webhooks")]
mod serving;
#[cfg(feature = "webhooks")]
mod tls;

pub use args::WebhookArgs;
pub use error::WebhookError;
#[cfg(feature = "webhooks")]
pub use server::WebhookServer;

pub(crate) use args::ServiceRef;
#[cfg(not(feature = "webhooks"))]
pub use disabled::WebhookServer;
#[cfg(not(feature = "webhooks"))]
pub(crate) use disabled::{Admission, start, target};
pub(crate) use error::ENABLE_WEBHOOKS;
#[cfg(feature = "webhooks")]
pub(crate) use server::target;
#[cfg(feature = "webhooks")]
pub(crate) use serving::{Admission, start};
