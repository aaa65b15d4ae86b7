//! How an operator under test tells the runner that a handler ran.
//!
//! Every handler call appends one line, `<kind> <name> <unix-ns>\n`, to the
//! file named by `$KOPF_BENCH_SIGNALS`, through a 64 KiB buffer flushed every
//! 100 ms (and when full): no syscall per call, the same for all three
//! operators (kopf-rs, Kopf, the bare watcher), and the timestamp is taken in
//! the handler, so buffering does not blur the tick jitter. `kind` is
//! `create`, `tick` or `event`. The runner tails the file ([`Tail`]).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The environment variable naming the signal file.
pub const ENV: &str = "KOPF_BENCH_SIGNALS";

/// How often the operators flush their signal buffer.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Nanoseconds since the Unix epoch (the clock all three operators and the runner share).
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

static OUT: OnceLock<Option<Mutex<BufWriter<File>>>> = OnceLock::new();

fn out() -> Option<&'static Mutex<BufWriter<File>>> {
    OUT.get_or_init(|| {
        let path = std::env::var_os(ENV)?;
        let file = File::options().create(true).append(true).open(path).ok()?;
        Some(Mutex::new(BufWriter::with_capacity(64 * 1024, file)))
    })
    .as_ref()
}

/// Records one handler call (operator side). Does nothing without `$KOPF_BENCH_SIGNALS`.
pub fn signal(kind: &str, name: &str) {
    if let Some(out) = out() {
        let ts = now_ns();
        let mut out = out.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = writeln!(out, "{kind} {name} {ts}");
    }
}

/// Flushes the signal buffer (operator side).
pub fn flush() {
    if let Some(out) = out() {
        let _ = out.lock().unwrap_or_else(PoisonError::into_inner).flush();
    }
}

/// Flushes the signal buffer every [`FLUSH_EVERY`] until the runtime stops (operator side).
pub async fn flush_periodically() {
    let mut every = tokio::time::interval(FLUSH_EVERY);
    loop {
        every.tick().await;
        flush();
    }
}

/// What the runner has seen of one object.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// Timestamps of `create` calls.
    pub creates: Vec<i64>,
    /// Timestamps of timer ticks.
    pub ticks: Vec<i64>,
    /// Timestamps of `event` calls.
    pub events: Vec<i64>,
}

/// Everything seen so far, by object name.
#[derive(Debug, Default)]
pub struct Signals {
    /// Per object.
    pub by_name: HashMap<String, Seen>,
    /// Lines read.
    pub lines: u64,
}

impl Signals {
    fn add(&mut self, line: &str) {
        let mut parts = line.split(' ');
        let (Some(kind), Some(name), Some(ts), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return;
        };
        let Ok(ts) = ts.parse::<i64>() else { return };
        let seen = match self.by_name.get_mut(name) {
            Some(seen) => seen,
            None => self.by_name.entry(name.to_string()).or_default(),
        };
        match kind {
            "create" => seen.creates.push(ts),
            "tick" => seen.ticks.push(ts),
            "event" => seen.events.push(ts),
            _ => return,
        }
        self.lines += 1;
    }

    /// How many of `names` satisfy `pred`.
    pub fn count(&self, names: &[String], pred: impl Fn(&Seen) -> bool) -> usize {
        names
            .iter()
            .filter(|n| self.by_name.get(n.as_str()).is_some_and(&pred))
            .count()
    }
}

/// Tails a signal file on a thread and parses it into [`Signals`].
#[derive(Debug)]
pub struct Tail {
    path: PathBuf,
    signals: Arc<Mutex<Signals>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Tail {
    /// Creates (truncates) the file and starts tailing it.
    ///
    /// # Errors
    /// If the file cannot be created.
    pub fn start(path: &Path) -> std::io::Result<Tail> {
        File::create(path)?;
        let signals = Arc::new(Mutex::new(Signals::default()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let (path, signals, stop) = (path.to_path_buf(), signals.clone(), stop.clone());
            std::thread::spawn(move || tail(&path, &signals, &stop))
        };
        Ok(Tail {
            path: path.to_path_buf(),
            signals,
            stop,
            thread: Some(thread),
        })
    }

    /// The file being tailed.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on what has been seen so far.
    pub fn with<R>(&self, f: impl FnOnce(&Signals) -> R) -> R {
        f(&self.signals.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn tail(path: &Path, signals: &Mutex<Signals>, stop: &std::sync::atomic::AtomicBool) {
    let Ok(mut file) = File::open(path) else {
        return;
    };
    let mut pending = Vec::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut offset = 0u64;
    loop {
        let stopping = stop.load(std::sync::atomic::Ordering::Relaxed);
        let _ = file.seek(SeekFrom::Start(offset));
        let n = file.read(&mut buf).unwrap_or(0);
        if n > 0 {
            offset += n as u64;
            pending.extend_from_slice(&buf[..n]);
            if let Some(end) = pending.iter().rposition(|&b| b == b'\n') {
                let text = String::from_utf8_lossy(&pending[..end]);
                let mut signals = signals.lock().unwrap_or_else(PoisonError::into_inner);
                for line in text.lines() {
                    signals.add(line);
                }
                drop(signals);
                pending.drain(..=end);
            }
            continue;
        }
        if stopping {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_by_kind_and_junk_is_ignored() {
        let mut s = Signals::default();
        s.add("tick bench-000001 1000");
        s.add("tick bench-000001 2000");
        s.add("create bench-000002 5");
        s.add("2026-01-01T00:00:00Z INFO something else entirely");
        s.add("tick bench-000003 notanumber");
        assert_eq!(s.lines, 3);
        assert_eq!(s.by_name["bench-000001"].ticks, vec![1000, 2000]);
        assert_eq!(s.by_name["bench-000002"].creates, vec![5]);
        let names = vec!["bench-000001".to_string(), "bench-000002".to_string()];
        assert_eq!(s.count(&names, |seen| !seen.ticks.is_empty()), 1);
    }
}
