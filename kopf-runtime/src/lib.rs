//! kopf-runtime: Kubernetes operators as plain `async fn`s.

pub mod cli;
pub mod diffbase;
pub mod finalizers;
#[cfg(test)]
mod mock_api;
pub mod namespaces;
pub mod patching;
pub mod posting;
pub mod progress;
pub mod retrying;
pub mod settings;
pub mod watching;
