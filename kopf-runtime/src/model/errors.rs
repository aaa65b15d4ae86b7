//! Errors returned by handlers, and the outcome the engine receives.
//!
//! Handler authors return [`Result<T>`](Result) whose error is [`Error`], Kopf's
//! three flavours of failure:
//!
//! * [`Error::Temporary`] — retry later, after `delay` (or the handler's `backoff`);
//! * [`Error::Permanent`] — give up, the handler has failed for this object;
//! * [`Error::Regular`] — any other error (`?` on `kube::Error`, `serde_json::Error`,
//!   or any [`std::error::Error`]); treated per the handler's `errors` mode, which is
//!   retry-with-backoff by default, as in Kopf.
//!
//! Admission handlers additionally reject requests with [`Error::Admission`].
//!
//! The engine never sees [`Error`] directly: every invocation yields an
//! [`Outcome`], whose error side is the [`HandlerError`] enum.

use std::fmt;
use std::time::Duration;

/// The result type of handlers: `kopf::Result<T>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What an invocation of a handler produced, as seen by the engine.
///
/// `Ok(Some(value))` is the handler's serialized return value (Kopf stores it in
/// `status.<handler id>`); `Ok(None)` means the handler returned `()` or `null`.
pub type Outcome = std::result::Result<Option<serde_json::Value>, HandlerError>;

/// An error returned by a handler.
///
/// Like `anyhow::Error`, this type converts from every [`std::error::Error`] with
/// `?` (as a [`Regular`](Error::Regular) error) and therefore does not implement
/// [`std::error::Error`] itself.
///
/// ```
/// use std::time::Duration;
/// use kopf_runtime as kopf;
///
/// fn check(ready: bool, valid: bool) -> kopf::Result<()> {
///     if !valid {
///         return Err(kopf::Error::permanent("spec.size must be positive"));
///     }
///     if !ready {
///         return Err(kopf::Error::temporary("not ready yet", Duration::from_secs(10)));
///     }
///     let _n: u32 = "42".parse()?; // any std error converts as a regular error
///     Ok(())
/// }
/// assert!(check(true, true).is_ok());
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// Retry the handler later: after `delay` if given, else after its `backoff`.
    Temporary {
        /// Human-readable reason, logged and posted as an Event.
        message: String,
        /// How long to wait before the next attempt.
        delay: Option<Duration>,
    },
    /// Give up: the handler has permanently failed for this object.
    Permanent {
        /// Human-readable reason, logged and posted as an Event.
        message: String,
    },
    /// Any other error; handled per the handler's `errors` mode (retried by default).
    Regular {
        /// The error's display text (with its sources, separated by `: `).
        message: String,
    },
    /// Reject an admission request (only meaningful in `on_validate`/`on_mutate`).
    Admission {
        /// The message shown to the client.
        message: String,
        /// The HTTP status code of the rejection (Kopf's default is 500).
        code: u16,
    },
}

impl Error {
    /// A temporary error: retry after `delay`.
    pub fn temporary(message: impl Into<String>, delay: Duration) -> Self {
        Error::Temporary {
            message: message.into(),
            delay: Some(delay),
        }
    }

    /// A temporary error retried after the handler's `backoff`.
    pub fn retry(message: impl Into<String>) -> Self {
        Error::Temporary {
            message: message.into(),
            delay: None,
        }
    }

    /// A permanent error: do not retry.
    pub fn permanent(message: impl Into<String>) -> Self {
        Error::Permanent {
            message: message.into(),
        }
    }

    /// A regular error from a message (handled per the `errors` mode).
    pub fn regular(message: impl Into<String>) -> Self {
        Error::Regular {
            message: message.into(),
        }
    }

    /// An admission rejection with an HTTP status `code`.
    pub fn admission(message: impl Into<String>, code: u16) -> Self {
        Error::Admission {
            message: message.into(),
            code,
        }
    }

    /// A regular error from a boxed error, e.g. `anyhow::Error` via `.into()`.
    pub fn from_boxed(error: Box<dyn std::error::Error + Send + Sync + 'static>) -> Self {
        Error::Regular {
            message: chain(&*error),
        }
    }

    /// The human-readable message of any variant.
    pub fn message(&self) -> &str {
        match self {
            Error::Temporary { message, .. }
            | Error::Permanent { message }
            | Error::Regular { message }
            | Error::Admission { message, .. } => message,
        }
    }
}

fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Temporary {
                message,
                delay: Some(delay),
            } => {
                write!(f, "temporary error (retry in {delay:?}): {message}")
            }
            Error::Temporary {
                message,
                delay: None,
            } => write!(f, "temporary error: {message}"),
            Error::Permanent { message } => write!(f, "permanent error: {message}"),
            Error::Regular { message } => f.write_str(message),
            Error::Admission { message, code } => {
                write!(f, "admission rejected ({code}): {message}")
            }
        }
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for Error {
    fn from(error: E) -> Self {
        Error::Regular {
            message: chain(&error),
        }
    }
}

/// Why an invocation failed, as the engine sees it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum HandlerError {
    /// The handler returned [`Error::Temporary`].
    #[error("temporary error: {message}")]
    Temporary {
        /// The handler's message.
        message: String,
        /// The requested delay; `None` means the handler's `backoff`.
        delay: Option<Duration>,
    },
    /// The handler returned [`Error::Permanent`].
    #[error("permanent error: {message}")]
    Permanent {
        /// The handler's message.
        message: String,
    },
    /// The handler returned a regular error; apply the handler's `errors` mode.
    #[error("{message}")]
    Regular {
        /// The error's message.
        message: String,
    },
    /// The handler rejected an admission request.
    #[error("admission rejected ({code}): {message}")]
    Admission {
        /// The message for the client.
        message: String,
        /// The HTTP status code.
        code: u16,
    },
    /// A parameter could not be extracted from the kwargs (e.g. a malformed object).
    ///
    /// Treat it like a regular error: the object may be fixed later.
    #[error(transparent)]
    Kwarg(#[from] KwargError),
    /// The handler's return value could not be serialized to JSON.
    #[error("cannot serialize the result of the handler: {0}")]
    Result(String),
    /// A blocking (non-async) handler panicked or was cancelled on its thread.
    #[error("the blocking handler did not complete: {0}")]
    Blocking(String),
}

impl From<Error> for HandlerError {
    fn from(error: Error) -> Self {
        match error {
            Error::Temporary { message, delay } => HandlerError::Temporary { message, delay },
            Error::Permanent { message } => HandlerError::Permanent { message },
            Error::Regular { message } => HandlerError::Regular { message },
            Error::Admission { message, code } => HandlerError::Admission { message, code },
        }
    }
}

/// A parameter could not be injected into a handler.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum KwargError {
    /// The value for the parameter is absent in this invocation (e.g. `name: &str`
    /// on an object without a name, `stopped` outside daemons and timers).
    #[error("the parameter `{kwarg}` has no value in this invocation")]
    Missing {
        /// The parameter's name.
        kwarg: &'static str,
    },
    /// The JSON value does not deserialize into the parameter's type.
    #[error("the parameter `{kwarg}` does not deserialize into `{type_name}`: {message}")]
    Deserialize {
        /// The parameter's name.
        kwarg: &'static str,
        /// The Rust type requested by the handler.
        type_name: &'static str,
        /// The deserializer's message.
        message: String,
    },
    /// An index named by a parameter is not in the kwargs.
    #[error("the index `{name}` is not available")]
    UnknownIndex {
        /// The index (and parameter) name.
        name: &'static str,
    },
}

/// Converts what a handler returns into an [`Outcome`].
///
/// Implemented for `()` and for `Result<T, E>` where `T: Serialize` and
/// `E: Into<kopf::Error>` (so `kopf::Result<T>`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a valid return type for a kopf handler",
    label = "unsupported return type",
    note = "return `kopf::Result<T>` where `T: serde::Serialize` (e.g. `kopf::Result<()>`), or `()`"
)]
pub trait IntoOutcome {
    /// Performs the conversion.
    fn into_outcome(self) -> Outcome;
}

impl IntoOutcome for () {
    fn into_outcome(self) -> Outcome {
        Ok(None)
    }
}

impl<T: serde::Serialize, E: Into<Error>> IntoOutcome for std::result::Result<T, E> {
    fn into_outcome(self) -> Outcome {
        match self {
            Ok(value) => match serde_json::to_value(value) {
                Ok(serde_json::Value::Null) => Ok(None),
                Ok(value) => Ok(Some(value)),
                Err(error) => Err(HandlerError::Result(error.to_string())),
            },
            Err(error) => Err(error.into().into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn std_errors_convert_to_regular_errors_with_their_sources() {
        let error: Error = "x".parse::<u32>().unwrap_err().into();
        assert_eq!(error, Error::regular("invalid digit found in string"));
    }

    #[test]
    fn constructors_build_the_expected_variants() {
        assert_eq!(
            Error::temporary("wait", Duration::from_secs(3)),
            Error::Temporary {
                message: "wait".into(),
                delay: Some(Duration::from_secs(3))
            }
        );
        assert_eq!(Error::retry("w").message(), "w");
        assert_eq!(
            Error::permanent("no"),
            Error::Permanent {
                message: "no".into()
            }
        );
        assert_eq!(
            Error::admission("no", 400).to_string(),
            "admission rejected (400): no"
        );
    }

    #[test]
    fn outcomes_carry_values_and_errors() {
        assert_eq!(().into_outcome(), Ok(None));
        assert_eq!(Ok::<_, Error>(()).into_outcome(), Ok(None));
        assert_eq!(
            Ok::<_, Error>(serde_json::json!({"a": 1})).into_outcome(),
            Ok(Some(serde_json::json!({"a": 1})))
        );
        assert_eq!(
            Err::<(), _>(Error::permanent("p")).into_outcome(),
            Err(HandlerError::Permanent {
                message: "p".into()
            })
        );
    }
}
