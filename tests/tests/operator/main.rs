//! Operators end to end against the emulator over real HTTP.
//!
//! One test binary with a module per area: each binary links kube, tokio
//! and the runtime, so one link instead of six keeps the build fast and small.

mod bad_input;
mod daemons;
mod faults;
mod hierarchies;
mod indexes;
mod kopf_semantics;
mod lifecycle;
mod login;
mod metrics;
mod permissions;
mod probes;
mod replicas;
mod resources;
mod retries;
mod selection;
mod startup;
mod subhandlers;
mod tasks;
mod undecodable;
mod webhooks;
