//! Log lines to an output that is no terminal, written in batches.
//!
//! An operator logs a line or two for every object it handles, and written
//! one by one, every line costs a system call. When stdout is a file or a
//! pipe (a container's log), lines are gathered and written together:
//!
//! - at the latest [`FLUSH_DELAY`] after the first line of a batch, by a
//!   thread that sleeps while nothing is waiting;
//! - at once when [`FLUSH_SIZE`] bytes are waiting;
//! - at once, with everything before it, for a `WARN` or `ERROR` line;
//! - when the operator exits (see [`flush`]), also on an error or a panic
//!   unwinding through [`Runner::run`](crate::Runner::run).
//!
//! A process killed outright (`SIGKILL`) loses the `INFO` and `DEBUG` lines
//! of its last [`FLUSH_DELAY`]. A terminal gets every line as it comes.

use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

/// How long a line may wait for the lines after it.
pub(crate) const FLUSH_DELAY: Duration = Duration::from_millis(100);

/// How many bytes may wait before they are written at once.
pub(crate) const FLUSH_SIZE: usize = 32 * 1024;

/// The buffer of the process's log output, once logging is set up.
static STDOUT: OnceLock<Batched> = OnceLock::new();

/// A [`MakeWriter`] gathering lines for one output; cheap to clone.
#[derive(Clone)]
pub(crate) struct Batched {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when a batch begins.
    begun: Condvar,
}

struct State {
    pending: Vec<u8>,
    output: Box<dyn Write + Send>,
    /// Whether the flushing thread runs.
    flusher: bool,
    /// Whether lines are written as they come (no thread could start).
    direct: bool,
}

impl Batched {
    /// Batches for `output`; the flushing thread starts with the first line.
    pub(crate) fn new(output: Box<dyn Write + Send>) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    pending: Vec::new(),
                    output,
                    flusher: false,
                    direct: false,
                }),
                begun: Condvar::new(),
            }),
        }
    }

    /// The process's stdout, batched (one buffer per process, which
    /// [`flush`] writes out).
    pub(crate) fn stdout() -> Self {
        STDOUT
            .get_or_init(|| Self::new(Box::new(io::stdout())))
            .clone()
    }

    /// Writes out every line waiting.
    pub(crate) fn flush(&self) {
        self.shared.lock().write_out();
    }

    /// Starts the thread that writes each batch out after its delay; it
    /// sleeps while no line waits.
    fn start_flusher(&self) {
        let shared = Arc::clone(&self.shared);
        let spawned = std::thread::Builder::new()
            .name("kopf-log-flush".into())
            .spawn(move || {
                loop {
                    let state = shared.lock();
                    let state = shared
                        .begun
                        .wait_while(state, |state| state.pending.is_empty())
                        .unwrap_or_else(PoisonError::into_inner);
                    drop(state);
                    std::thread::sleep(FLUSH_DELAY);
                    shared.lock().write_out();
                }
            });
        if spawned.is_err() {
            // No thread: every line is written as it comes.
            let mut state = self.shared.lock();
            state.direct = true;
            state.write_out();
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic mid-write leaves at worst a partial line behind.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    fn write_out(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        // Nowhere to report a failing log output: the lines are dropped,
        // as `tracing-subscriber` drops them.
        let _ = self.output.write_all(&self.pending);
        let _ = self.output.flush();
        self.pending.clear();
    }
}

/// One line's writer: [`Batched`], and whether the line is urgent.
pub(crate) struct LineWriter<'a> {
    batched: &'a Batched,
    urgent: bool,
}

impl Write for LineWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let shared = &self.batched.shared;
        let mut state = shared.lock();
        let begins = state.pending.is_empty();
        state.pending.extend_from_slice(buf);
        if self.urgent || state.direct || state.pending.len() >= FLUSH_SIZE {
            state.write_out();
        } else if begins {
            if !state.flusher {
                state.flusher = true;
                drop(state);
                self.batched.start_flusher();
            }
            shared.begun.notify_one();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Batched {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter {
            batched: self,
            urgent: false,
        }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Self::Writer {
        LineWriter {
            batched: self,
            urgent: *meta.level() <= Level::WARN,
        }
    }
}

/// Writes out the log lines still waiting, if logging batches them.
pub(crate) fn flush() {
    if let Some(batched) = STDOUT.get() {
        batched.flush();
    }
}

/// Calls [`flush`] when dropped: on every way out of a scope.
pub(crate) struct FlushOnDrop;

impl Drop for FlushOnDrop {
    fn drop(&mut self) {
        flush();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// An output the test can read.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Sink {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().expect("not poisoned")).into_owned()
        }
    }

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().expect("not poisoned").extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn line(batched: &Batched, level: Option<Level>, text: &str) {
        let mut writer = LineWriter {
            batched,
            urgent: level.is_some_and(|level| level <= Level::WARN),
        };
        writer.write_all(text.as_bytes()).expect("written");
    }

    #[test]
    fn lines_wait_for_the_flush() {
        let sink = Sink::default();
        let batched = Batched::new(Box::new(sink.clone()));
        line(&batched, Some(Level::INFO), "a\n");
        line(&batched, Some(Level::DEBUG), "b\n");
        assert_eq!(sink.text(), "", "nothing is written line by line");
        batched.flush();
        assert_eq!(sink.text(), "a\nb\n");
    }

    #[test]
    fn a_warning_is_written_at_once_after_the_lines_before_it() {
        let sink = Sink::default();
        let batched = Batched::new(Box::new(sink.clone()));
        line(&batched, Some(Level::INFO), "a\n");
        line(&batched, Some(Level::WARN), "w\n");
        assert_eq!(sink.text(), "a\nw\n");
        line(&batched, Some(Level::ERROR), "e\n");
        assert_eq!(sink.text(), "a\nw\ne\n");
    }

    #[test]
    fn a_full_buffer_is_written_at_once() {
        let sink = Sink::default();
        let batched = Batched::new(Box::new(sink.clone()));
        let long = "x".repeat(FLUSH_SIZE / 2);
        line(&batched, None, &long);
        assert_eq!(sink.text(), "");
        line(&batched, None, &long);
        assert_eq!(sink.text().len(), FLUSH_SIZE);
    }

    #[test]
    fn waiting_lines_are_written_after_the_delay() {
        let sink = Sink::default();
        let batched = Batched::new(Box::new(sink.clone()));
        let started = Instant::now();
        line(&batched, Some(Level::INFO), "a\n");
        // Generous: the flushing thread is only asked to write after the delay.
        while sink.text().is_empty() && started.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(sink.text(), "a\n");
        assert!(started.elapsed() >= FLUSH_DELAY);
        // And again for a later batch.
        line(&batched, Some(Level::INFO), "b\n");
        while sink.text().len() < 4 && started.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(sink.text(), "a\nb\n");
    }
}
