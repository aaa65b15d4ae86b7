//! [`ManifestError`]: why the manifests cannot be made.

use crate::deploying::permissions::PermissionError;

/// Why the manifests cannot be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ManifestError {
    /// The command line asks for what cannot be deployed (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// The permissions cannot be derived.
    #[error(transparent)]
    Permissions(#[from] PermissionError),
    /// An object does not serialize.
    #[error("an object cannot be written as YAML: {0}")]
    Serialize(String),
}

impl ManifestError {
    /// The exit code: 2 for usage errors, as clap's, else 1.
    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            ManifestError::Usage(_) => 2,
            _ => 1,
        }
    }
}
