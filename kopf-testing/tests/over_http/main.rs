//! The emulator driven over real HTTP by kube clients and raw requests.
//!
//! One test binary with a module per area, so the build links once.

#[path = "../common/mod.rs"]
mod common;

mod admin;
mod admission;
mod api;
mod auth;
mod hostile_webhooks;
mod limits;
mod names;
mod options;
mod rbac;
mod stalls;
mod updates;
mod validation;
mod watch;
