//! kopf-runtime: Kubernetes operators as plain `async fn`s.

pub mod spawning;
