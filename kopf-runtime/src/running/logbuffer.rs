//! Log lines to an output that is no terminal, written in batches.
//!
//! An operator logs a line or two for every object it handles, and written
//! one by one, every line costs a system call. When stdout is a file or a
//! pipe (a container's log), lines are gathered and written together:
//!
//! - at the latest [`FLUSH_DELAY`] after the first line of a batch, by a
//!   task on the operator's runtime (a runtime that shuts down first
//!   writes them as it drops the task);
//! - at once when [`FLUSH_SIZE`] bytes are waiting;
//! - at once, with everything before it, for a `WARN` or `ERROR` line;
//! - when the operator exits, also on an error or a panic unwinding through
//!   [`Runner::run`](crate::Runner::run) (see [`batch_on`]).
//!
//! Lines are batched only while the operator runs: before and after, they
//! are written as they come. A process killed outright (`SIGKILL`) loses
//! the `INFO` and `DEBUG` lines of its last [`FLUSH_DELAY`]. A terminal
//! gets every line as it comes.
//!
//! # Why not `tracing-appender`
//!
//! Its non-blocking writer hands every line to a worker thread, which the
//! logging thread wakes with a system call whenever the worker waits, that
//! is for nearly every line at an operator's rate. Measured on the S1
//! create burst (1,000 objects, two lines each, release builds, 2 cores,
//! `kopf-bench --scenarios s1 --runs 7`, medians): the operator's CPU was
//! 1.35× this writer's with it, against 1.10× with tracing-subscriber's
//! formatter alone over this writer. Its bounded channel also holds a slot
//! per line from the start: its default of 128,000 lines was 4 MiB of an
//! idle operator's memory (S4: 14.4 MiB against 10.0 MiB).

use std::io::{self, Write};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
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
    buffer: Mutex<Buffer>,
}

/// The lines waiting, and where and when they go.
struct Buffer {
    pending: Vec<u8>,
    output: Box<dyn Write + Send>,
    /// The runtime that writes batches out after their delay; lines are
    /// written as they come without one.
    runtime: Option<tokio::runtime::Handle>,
}

impl Batched {
    /// Batches for `output`, written as they come until
    /// [`set_runtime`](Self::set_runtime) gives a runtime to batch on.
    pub(crate) fn new(output: Box<dyn Write + Send>) -> Self {
        Self {
            shared: Arc::new(Shared {
                buffer: Mutex::new(Buffer {
                    pending: Vec::new(),
                    output,
                    runtime: None,
                }),
            }),
        }
    }

    /// The process's stdout, batched (one buffer per process, which
    /// [`flush`](Self::flush) writes out).
    pub(crate) fn stdout() -> Self {
        STDOUT
            .get_or_init(|| Self::new(Box::new(io::stdout())))
            .clone()
    }

    /// Writes out every line waiting.
    pub(crate) fn flush(&self) {
        self.shared.lock().write_out();
    }

    /// Batches lines from now on, each written out by a task on `runtime`
    /// (which must have timers enabled); `None` writes every line as it
    /// comes again, and what waits at once.
    pub(crate) fn set_runtime(&self, runtime: Option<tokio::runtime::Handle>) {
        let mut buffer = self.shared.lock();
        buffer.runtime = runtime;
        if buffer.runtime.is_none() {
            buffer.write_out();
        }
    }

    /// Has the batch written out after [`FLUSH_DELAY`] by a task on
    /// `runtime`.
    fn schedule(&self, runtime: &tokio::runtime::Handle) {
        // Written when the task ends, or is dropped undone (the runtime
        // shuts down).
        let due = WriteOutOnDrop(self.clone());
        runtime.spawn(async move {
            tokio::time::sleep(FLUSH_DELAY).await;
            drop(due);
        });
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Buffer> {
        // A panic mid-write leaves at worst a partial line behind.
        self.buffer.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Buffer {
    fn write_out(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        // Nowhere to report a failing log output: the lines are dropped,
        // as `tracing-subscriber` drops them.
        let _ = self.output.write_all(&self.pending);
        let _ = self.output.flush();
        if self.pending.capacity() > KEPT_CAPACITY {
            // A burst's buffer is not kept for the quiet after it.
            self.pending = Vec::new();
        } else {
            self.pending.clear();
        }
    }
}

/// The buffer capacity kept between batches.
const KEPT_CAPACITY: usize = 4 * 1024;

/// Writes out its batch when dropped.
struct WriteOutOnDrop(Batched);

impl Drop for WriteOutOnDrop {
    fn drop(&mut self) {
        self.0.flush();
    }
}

/// One line's writer: [`Batched`], and whether the line is urgent.
pub(crate) struct LineWriter<'a> {
    batched: &'a Batched,
    urgent: bool,
}

impl Write for LineWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut buffer = self.batched.shared.lock();
        let begins = buffer.pending.is_empty();
        buffer.pending.extend_from_slice(buf);
        match &buffer.runtime {
            Some(runtime) if !self.urgent && buffer.pending.len() < FLUSH_SIZE => {
                if begins {
                    let runtime = runtime.clone();
                    drop(buffer);
                    self.batched.schedule(&runtime);
                }
            }
            _ => buffer.write_out(),
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

/// Batches the lines of the process's log output (if logging set it up
/// with [`Batched::stdout`]) on `runtime` until the guard is dropped, which
/// writes out what waits then: on every way out of the operator's scope.
pub(crate) fn batch_on(runtime: tokio::runtime::Handle) -> Batching {
    if let Some(batched) = STDOUT.get() {
        batched.set_runtime(Some(runtime));
    }
    Batching
}

/// Batching of the log output, until dropped; see [`batch_on`].
pub(crate) struct Batching;

impl Drop for Batching {
    fn drop(&mut self) {
        if let Some(batched) = STDOUT.get() {
            batched.set_runtime(None);
        }
    }
}

#[cfg(test)]
mod tests {
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

    #[tokio::test(start_paused = true)]
    async fn lines_wait_for_the_flush() {
        let (batched, sink) = batched();
        line(&batched, Some(Level::INFO), "a\n");
        line(&batched, Some(Level::DEBUG), "b\n");
        assert_eq!(sink.text(), "", "nothing is written line by line");
        batched.flush();
        assert_eq!(sink.text(), "a\nb\n");
    }

    /// Batches for a sink the test reads, on the test's runtime.
    fn batched() -> (Batched, Sink) {
        let sink = Sink::default();
        let batched = Batched::new(Box::new(sink.clone()));
        batched.set_runtime(Some(tokio::runtime::Handle::current()));
        (batched, sink)
    }

    #[tokio::test(start_paused = true)]
    async fn a_warning_is_written_at_once_after_the_lines_before_it() {
        let (batched, sink) = batched();
        line(&batched, Some(Level::INFO), "a\n");
        assert_eq!(sink.text(), "");
        line(&batched, Some(Level::WARN), "w\n");
        assert_eq!(sink.text(), "a\nw\n");
        line(&batched, Some(Level::ERROR), "e\n");
        assert_eq!(sink.text(), "a\nw\ne\n");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_buffer_is_written_at_once() {
        let (batched, sink) = batched();
        let long = "x".repeat(FLUSH_SIZE / 2);
        line(&batched, None, &long);
        assert_eq!(sink.text(), "");
        line(&batched, None, &long);
        assert_eq!(sink.text().len(), FLUSH_SIZE);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_lines_are_written_after_the_delay() {
        let (batched, sink) = batched();
        line(&batched, Some(Level::INFO), "a\n");
        tokio::time::sleep(FLUSH_DELAY / 2).await;
        line(&batched, Some(Level::INFO), "b\n");
        assert_eq!(sink.text(), "");
        tokio::time::sleep(FLUSH_DELAY / 2).await;
        tokio::task::yield_now().await;
        assert_eq!(
            sink.text(),
            "a\nb\n",
            "the batch, after its first line's delay"
        );
        // And again for a later batch.
        line(&batched, Some(Level::INFO), "c\n");
        tokio::time::sleep(FLUSH_DELAY).await;
        tokio::task::yield_now().await;
        assert_eq!(sink.text(), "a\nb\nc\n");
    }

    #[test]
    fn without_a_runtime_lines_are_written_as_they_come() {
        let sink = Sink::default();
        let batched = Batched::new(Box::new(sink.clone()));
        line(&batched, Some(Level::INFO), "a\n");
        assert_eq!(sink.text(), "a\n");
    }

    #[test]
    fn a_runtime_shutting_down_writes_its_waiting_lines() {
        let sink = Sink::default();
        let batched = Batched::new(Box::new(sink.clone()));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        batched.set_runtime(Some(runtime.handle().clone()));
        // Logged from another thread: the runtime writes it all the same.
        std::thread::scope(|s| {
            s.spawn(|| line(&batched, Some(Level::INFO), "a\n"));
        });
        assert_eq!(sink.text(), "", "still waiting");
        drop(runtime);
        assert_eq!(sink.text(), "a\n");
    }

    #[tokio::test(start_paused = true)]
    async fn ending_the_batching_writes_what_waits_and_then_every_line() {
        let (batched, sink) = batched();
        line(&batched, Some(Level::INFO), "a\n");
        batched.set_runtime(None);
        assert_eq!(sink.text(), "a\n");
        line(&batched, Some(Level::INFO), "b\n");
        assert_eq!(sink.text(), "a\nb\n");
    }
}
