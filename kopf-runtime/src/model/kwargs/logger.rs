//! [`Logger`]: the per-object logger handed to handlers.

use std::fmt;
use std::sync::Arc;

/// The severity of a [`Logger`] message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Debugging detail.
    Debug,
    /// Normal progress (Kopf also posts these as Kubernetes Events).
    Info,
    /// Something unexpected but handled.
    Warning,
    /// A failure.
    Error,
}

/// A receiver of log messages besides `tracing`, e.g. the engine's Event poster.
pub(crate) type LogSink = Arc<dyn Fn(Level, &str) + Send + Sync>;

/// A logger bound to one object: every message carries its `namespace/name`.
///
/// Messages go to `tracing` (target `kopf::objects`) and to an optional sink that
/// the engine installs (e.g. to post Kubernetes Events, as Kopf does).
///
/// ```
/// let logger = kopf_runtime::Logger::new("default/example");
/// logger.info("created the child pod");
/// ```
#[derive(Clone, Default)]
pub struct Logger {
    object: Arc<str>,
    sink: Option<LogSink>,
}

impl fmt::Debug for Logger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Logger")
            .field("object", &self.object)
            .finish_non_exhaustive()
    }
}

impl Logger {
    /// Reads the reference count of its object's name with a plain load, for
    /// `Run::warm` (in `spawning/runner.rs`): the value means nothing.
    pub(crate) fn warm(&self) -> usize {
        Arc::strong_count(&self.object)
    }

    /// A logger for an object (`namespace/name`, or `name` for cluster objects).
    pub fn new(object: impl Into<Arc<str>>) -> Self {
        Logger {
            object: object.into(),
            sink: None,
        }
    }

    /// Installs a sink that receives every message too.
    pub(crate) fn with_sink(mut self, sink: LogSink) -> Self {
        self.sink = Some(sink);
        self
    }

    /// The object this logger speaks for.
    pub fn object(&self) -> &str {
        &self.object
    }

    /// Logs a message at `level`.
    pub fn log(&self, level: Level, message: impl fmt::Display) {
        // The message is formatted only for whoever takes it: `tracing`
        // skips disabled levels, and only a sink needs it as a string.
        match &self.sink {
            None => self.trace(level, &message),
            Some(sink) => {
                let message = message.to_string();
                self.trace(level, &message);
                sink(level, &message);
            }
        }
    }

    fn trace(&self, level: Level, message: &dyn fmt::Display) {
        // `%`: the name as it is (`ns/name`), not quoted and escaped.
        let object = &*self.object;
        match level {
            Level::Debug => tracing::debug!(target: "kopf::objects", %object, "{message}"),
            Level::Info => tracing::info!(target: "kopf::objects", %object, "{message}"),
            Level::Warning => tracing::warn!(target: "kopf::objects", %object, "{message}"),
            Level::Error => tracing::error!(target: "kopf::objects", %object, "{message}"),
        }
    }

    /// Logs at [`Level::Debug`].
    pub fn debug(&self, message: impl fmt::Display) {
        self.log(Level::Debug, message)
    }

    /// Logs at [`Level::Info`].
    pub fn info(&self, message: impl fmt::Display) {
        self.log(Level::Info, message)
    }

    /// Logs at [`Level::Warning`].
    pub fn warn(&self, message: impl fmt::Display) {
        self.log(Level::Warning, message)
    }

    /// Logs at [`Level::Error`].
    pub fn error(&self, message: impl fmt::Display) {
        self.log(Level::Error, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn the_sink_receives_every_message_with_its_level() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let store = seen.clone();
        let logger = Logger::new("ns/obj").with_sink(Arc::new(move |level, message: &str| {
            store
                .lock()
                .expect("test lock")
                .push((level, message.to_owned()));
        }));
        logger.info("one");
        logger.error(2);
        assert_eq!(
            *seen.lock().expect("test lock"),
            vec![
                (Level::Info, "one".to_owned()),
                (Level::Error, "2".to_owned())
            ]
        );
        assert_eq!(logger.object(), "ns/obj");
    }
}
