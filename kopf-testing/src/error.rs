//! Errors starting or configuring an emulator.

use std::path::PathBuf;

/// Why an emulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}; pick another port (or 0 for any free port)")]
    Bind {
        /// The address tried.
        addr: std::net::SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A preload file could not be read.
    #[error("cannot read preload file {path}: {source}")]
    PreloadFile {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A preload document is not valid YAML.
    #[error("preload YAML is invalid: {0}; check the document separators (---) and indentation")]
    PreloadYaml(String),
    /// A preload object's apiVersion/kind is not served (register its CRD first).
    #[error(
        "preload object {name:?} has apiVersion {api_version:?} and kind {kind:?}, which the emulator does not serve; add its CRD before it"
    )]
    UnknownKind {
        /// The object's apiVersion.
        api_version: String,
        /// The object's kind.
        kind: String,
        /// The object's name.
        name: String,
    },
    /// A preload object (or builder CRD) was rejected by the API rules.
    #[error("preload object {kind} {name:?} was rejected: {source}")]
    Rejected {
        /// The object's kind.
        kind: String,
        /// The object's name.
        name: String,
        /// The API failure.
        #[source]
        source: Box<crate::failures::ApiError>,
    },
}
