//! Attribute macros for `kopf-runtime`. Use them through `kopf_runtime`, which re-exports them.
