//! CPU and memory of a process: its CPU-time clock, `/proc/PID/stat` and
//! `/proc/PID/status`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// One reading of a process.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    /// utime + stime, seconds, to the nanosecond: the process's CPU-time
    /// clock (`clock_getcpuclockid`), which counts what `/proc/PID/stat`
    /// gives in ticks of 10 ms (a figure of 0.05 s is 5 ticks there). The
    /// ticks are the fallback where the clock cannot be read.
    pub cpu_s: f64,
    /// Resident set size now (`VmRSS`), bytes.
    pub rss: u64,
    /// Peak resident set size over the process's life (`VmHWM`), bytes.
    pub hwm: u64,
    /// The anonymous part of [`rss`](Self::rss) (`RssAnon`: heap, stacks),
    /// bytes.
    pub rss_anon: u64,
    /// The file-backed part of [`rss`](Self::rss) (`RssFile`: mostly the
    /// program's own code), bytes.
    pub rss_file: u64,
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 if that fails).
fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// The CPU time of process `pid` (all its threads, live and gone), seconds.
fn cpu_clock(pid: u32) -> Option<f64> {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).ok()?);
    let clock = nix::time::clock_getcpuclockid(pid).ok()?;
    let time = nix::time::clock_gettime(clock).ok()?;
    Some(Duration::from(time).as_secs_f64())
}

/// Reads a process; `None` once it has exited.
pub fn sample(pid: u32) -> Option<Sample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces), from field 3 on.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    Some(Sample {
        cpu_s: cpu_clock(pid).unwrap_or((utime + stime) / clock_ticks()),
        rss: kib("VmRSS:"),
        hwm: kib("VmHWM:"),
        rss_anon: kib("RssAnon:"),
        rss_file: kib("RssFile:"),
    })
}

/// Samples a process's RSS every 50 ms on a thread and keeps the maximum since
/// the last [`reset`](PeakRss::reset) (for peaks within a window, which
/// `VmHWM` cannot give).
#[derive(Debug)]
pub struct PeakRss {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PeakRss {
    /// Starts sampling `pid`.
    pub fn start(pid: u32) -> PeakRss {
        let peak = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (peak, stop) = (peak.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match sample(pid) {
                        Some(s) => {
                            peak.fetch_max(s.rss, Ordering::Relaxed);
                        }
                        None => return,
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        };
        PeakRss {
            peak,
            stop,
            thread: Some(thread),
        }
    }

    /// Starts a new window.
    pub fn reset(&self) {
        self.peak.store(0, Ordering::Relaxed);
    }

    /// The peak RSS in bytes since the last reset.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for PeakRss {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_clock_counts_what_the_ticks_count() {
        // Burn CPU until the process has used 0.2 s of it (however busy the
        // machine is), so that both have something to count.
        let pid = std::process::id();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while cpu_clock(pid).is_some_and(|c| c < 0.2) && start.elapsed() < Duration::from_secs(60) {
            for _ in 0..100_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
        }
        std::hint::black_box(x);
        let clock = cpu_clock(pid).expect("the CPU-time clock of this process");
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        let fields: Vec<&str> = stat[stat.rfind(')').expect("comm") + 2..]
            .split(' ')
            .collect();
        let ticks: f64 =
            fields[11].parse::<f64>().expect("utime") + fields[12].parse::<f64>().expect("stime");
        let ticked = ticks / clock_ticks();
        assert!(clock >= 0.15, "{clock}");
        // Read one after the other, while test threads may run: within a
        // few ticks of each other.
        assert!(
            (clock - ticked).abs() < 0.2,
            "clock {clock} s, ticks {ticked} s"
        );
    }

    #[test]
    fn reads_this_process() {
        let s = sample(std::process::id()).expect("this process exists");
        assert!(s.rss > 0 && s.hwm >= s.rss, "{s:?}");
        // VmRSS is RssAnon + RssFile + RssShmem.
        assert!(s.rss_anon > 0 && s.rss_file > 0, "{s:?}");
        assert!(s.rss_anon + s.rss_file <= s.rss, "{s:?}");
        assert!(s.cpu_s >= 0.0);
    }
}
