//! Log lines to a stdout that is no terminal (a file, a pipe: a container's
//! log), written by `tracing-appender`'s worker thread while the operator
//! runs, so that no line waits for a system call on the operator's runtime.
//!
//! # Guarantees
//!
//! - While a [`Handoff`] lives, every line goes to the worker, which writes
//!   what it has gathered in one piece as soon as it wakes up.
//! - Dropping the [`Handoff`] (on every way out of
//!   [`Runner::run`](crate::Runner::run): a normal exit, an error, a panic
//!   unwinding) writes every line handed over before it, and lines logged
//!   from then on are written as they come.
//! - Before and after a [`Handoff`], lines are written as they come.
//! - No line is dropped: a worker that falls 128,000 lines behind makes the
//!   loggers wait (the writer is not lossy).
//!
//! # Caveats
//!
//! A process killed outright (`SIGKILL`) loses the lines the worker has not
//! written yet.

use std::io::{self, BufWriter, Write};
use std::sync::{OnceLock, PoisonError, RwLock, RwLockReadGuard};

use tracing_appender::non_blocking::{NonBlocking, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::fmt::MakeWriter;

/// The process's log output, once logging writes to a stdout that is no
/// terminal.
static STDOUT: OnceLock<Output> = OnceLock::new();

/// The stdout of the process as a [`MakeWriter`]: lines to the worker while
/// a [`Handoff`] lives, otherwise straight to stdout.
pub(crate) fn stdout() -> impl for<'w> MakeWriter<'w> + Send + Sync + 'static {
    let output = STDOUT.get_or_init(Output::new);
    move || output.line(io::stdout())
}

/// Has the process's log output (if logging set it up with [`stdout`])
/// written by a worker thread until the returned guard is dropped.
pub(crate) fn hand_to_worker() -> Handoff<'static> {
    match STDOUT.get() {
        Some(output) => output.hand_to_worker(BufWriter::new(io::stdout())),
        None => Handoff { worker: None },
    }
}

/// One output of log lines, and the worker that writes them while there is
/// one.
pub(crate) struct Output {
    worker: RwLock<Option<NonBlocking>>,
}

impl Output {
    fn new() -> Self {
        Self {
            worker: RwLock::new(None),
        }
    }

    /// The writer of one line: the worker if there is one, otherwise
    /// `direct`. The line is handed over before a [`Handoff`] ends.
    fn line<W: Write>(&self, direct: W) -> Line<'_, W> {
        Line {
            // A panic while handing over a line leaves the worker as it was.
            worker: self.worker.read().unwrap_or_else(PoisonError::into_inner),
            direct,
        }
    }

    /// Lines go to a worker writing them to `output` until the returned
    /// guard is dropped; while a worker is there, this starts none.
    fn hand_to_worker<W: Write + Send + 'static>(&self, output: W) -> Handoff<'_> {
        let mut worker = self.worker.write().unwrap_or_else(PoisonError::into_inner);
        if worker.is_some() {
            return Handoff { worker: None };
        }
        let (writer, guard) = NonBlockingBuilder::default()
            .lossy(false)
            .thread_name("kopf-log-writer")
            .finish(output);
        *worker = Some(writer);
        Handoff {
            worker: Some((self, guard)),
        }
    }
}

/// The writer of one log line; see [`Output::line`].
pub(crate) struct Line<'a, W> {
    worker: RwLockReadGuard<'a, Option<NonBlocking>>,
    direct: W,
}

impl<W: Write> Write for Line<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &*self.worker {
            Some(worker) => worker.clone().write(buf),
            None => self.direct.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &*self.worker {
            Some(worker) => worker.clone().write_all(buf),
            None => self.direct.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &*self.worker {
            Some(_) => Ok(()),
            None => self.direct.flush(),
        }
    }
}

/// Log lines written by a worker thread, until dropped; see
/// [`hand_to_worker`].
#[must_use = "the worker stops when the handoff is dropped"]
pub(crate) struct Handoff<'a> {
    worker: Option<(&'a Output, WorkerGuard)>,
}

impl Drop for Handoff<'_> {
    fn drop(&mut self) {
        let Some((output, guard)) = self.worker.take() else {
            return;
        };
        // Once the lines being handed over are, new lines are written as
        // they come.
        output
            .worker
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // The worker writes every line handed over, then stops.
        drop(guard);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

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

    fn line(output: &Output, sink: &Sink, text: &str) {
        output
            .line(sink.clone())
            .write_all(text.as_bytes())
            .expect("written");
    }

    #[test]
    fn without_a_worker_lines_are_written_as_they_come() {
        let (output, sink) = (Output::new(), Sink::default());
        line(&output, &sink, "a\n");
        assert_eq!(sink.text(), "a\n");
    }

    #[test]
    fn ending_the_handoff_writes_every_line_handed_over_and_then_each_as_it_comes() {
        let (output, sink) = (Output::new(), Sink::default());
        line(&output, &sink, "before\n");
        let handoff = output.hand_to_worker(sink.clone());
        let lines: Vec<String> = (0..10_000).map(|i| format!("line {i}\n")).collect();
        for text in &lines {
            line(&output, &sink, text);
        }
        drop(handoff);
        let expected = format!("before\n{}", lines.concat());
        assert_eq!(sink.text(), expected, "every line, in order");
        line(&output, &sink, "after\n");
        assert_eq!(sink.text(), format!("{expected}after\n"));
    }

    #[test]
    fn lines_from_other_threads_are_written_before_the_handoff_ends() {
        let (output, sink) = (Output::new(), Sink::default());
        let handoff = output.hand_to_worker(sink.clone());
        std::thread::scope(|s| {
            for t in 0..4 {
                let (output, sink) = (&output, &sink);
                s.spawn(move || {
                    for i in 0..1_000 {
                        line(output, sink, &format!("{t} {i}\n"));
                    }
                });
            }
        });
        drop(handoff);
        assert_eq!(sink.text().lines().count(), 4_000);
    }

    #[test]
    fn a_second_handoff_starts_no_second_worker() {
        let (output, sink) = (Output::new(), Sink::default());
        let first = output.hand_to_worker(sink.clone());
        let second = output.hand_to_worker(sink.clone());
        line(&output, &sink, "a\n");
        drop(second);
        line(&output, &sink, "b\n");
        drop(first);
        assert_eq!(sink.text(), "a\nb\n");
    }
}
