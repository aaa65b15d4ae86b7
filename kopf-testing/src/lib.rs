//! kopf-testing: an in-memory Kubernetes API server over real HTTP.
