//! The operators under test and how to start them: kopf-rs, Kopf (Python, in
//! a virtual environment the runner creates), the bare kube-runtime watcher
//! and kube-runtime's `Controller`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

use crate::cluster::{NAMESPACE, Process};
use crate::signals;

/// Which operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Operator {
    /// `kopf-rs-operator` (this workspace).
    #[serde(rename = "kopf-rs")]
    KopfRs,
    /// `bare-watcher`: the floor.
    #[serde(rename = "bare")]
    Bare,
    /// Kopf 1.45 (Python).
    #[serde(rename = "kopf")]
    Kopf,
    /// Another build of `kopf-rs-operator` (`--baseline`), e.g. of the
    /// commit before a change: its cost measured in the same run.
    #[serde(rename = "baseline")]
    Baseline,
    /// `kopf-rs-operator` serving its probes and metrics (`--liveness`,
    /// `--metrics`): what they cost.
    #[serde(rename = "kopf-rs-metrics")]
    KopfRsMetrics,
    /// `controller-operator`: kube-runtime's `Controller`, what a Rust
    /// user writes instead (a reconcile that requeues after the interval
    /// stands for the timer).
    #[serde(rename = "controller")]
    Controller,
}

impl Operator {
    /// All of them, in table order.
    pub const ALL: [Operator; 6] = [
        Operator::KopfRs,
        Operator::Bare,
        Operator::Controller,
        Operator::Kopf,
        Operator::Baseline,
        Operator::KopfRsMetrics,
    ];

    /// The name used in JSON and tables.
    pub fn name(self) -> &'static str {
        match self {
            Operator::KopfRs => "kopf-rs",
            Operator::Bare => "bare",
            Operator::Kopf => "kopf",
            Operator::Baseline => "baseline",
            Operator::KopfRsMetrics => "kopf-rs-metrics",
            Operator::Controller => "controller",
        }
    }

    /// Whether it can run as one of several replicas electing on a Lease
    /// (kopf-rs's builds; the bare watcher has no election, and Kopf's
    /// peering is not on Leases).
    pub fn elects(self) -> bool {
        matches!(
            self,
            Operator::KopfRs | Operator::Baseline | Operator::KopfRsMetrics
        )
    }

    /// Parses [`name`](Self::name).
    pub fn parse(s: &str) -> Option<Operator> {
        Operator::ALL.into_iter().find(|o| o.name() == s)
    }
}

/// A replica's place in an election (S7): the Lease and its identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The Lease's name, in [`NAMESPACE`].
    pub lease: String,
    /// The replica's `--identity`.
    pub identity: String,
    /// `--shards`, if the objects are spread over slots.
    pub shards: Option<u32>,
}

/// Which handlers the operator runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A no-op `on_create` (S1).
    Create,
    /// A no-op `on_event` (S4).
    Event,
    /// A no-op `timer(interval = 1)` keeping finalizers (S2, S3).
    Timer,
    /// A no-op `timer(interval = 1, no_finalizers)` (S2, S3, S5).
    TimerNoFinalizers,
}

impl Mode {
    /// The mode argument of `kopf-rs-operator` and `bare-watcher`.
    pub fn arg(self) -> &'static str {
        match self {
            Mode::Create => "create",
            Mode::Event => "event",
            Mode::Timer => "timer",
            Mode::TimerNoFinalizers => "timer-nofin",
        }
    }
}

/// Where the operators' programs are.
#[derive(Debug, Clone)]
pub struct Programs {
    /// The directory of `kopf-rs-operator`, `bare-watcher`,
    /// `controller-operator` and `kube-emulator`.
    pub bin_dir: PathBuf,
    /// The virtual environment holding Kopf, if Kopf runs.
    pub venv: Option<PathBuf>,
    /// `bench/kopf`: the Kopf operators.
    pub kopf_dir: PathBuf,
    /// The baseline build of `kopf-rs-operator`, if one runs.
    pub baseline: Option<PathBuf>,
}

impl Programs {
    /// The emulator binary.
    pub fn emulator(&self) -> PathBuf {
        self.bin_dir.join("kube-emulator")
    }

    /// Starts `operator` in `mode` against `kubeconfig`, signalling to
    /// `signal_file`, logging to `log`. `Ok(None)` when the operator has no
    /// such mode (Kopf's timers always keep finalizers).
    ///
    /// # Errors
    /// If the program cannot be started.
    pub fn start(
        &self,
        operator: Operator,
        mode: Mode,
        kubeconfig: &Path,
        signal_file: &Path,
        log: &Path,
    ) -> anyhow::Result<Option<Process>> {
        self.spawn(operator, mode, kubeconfig, signal_file, log, None)
    }

    /// As [`Programs::start`], as the replica `peer` of several that elect
    /// the one that serves on a Lease (`--peering`). Only kopf-rs's builds
    /// can: `Ok(None)` for the others.
    ///
    /// # Errors
    /// If the program cannot be started.
    pub fn start_replica(
        &self,
        operator: Operator,
        mode: Mode,
        kubeconfig: &Path,
        signal_file: &Path,
        log: &Path,
        peer: &Peer,
    ) -> anyhow::Result<Option<Process>> {
        if !operator.elects() {
            return Ok(None);
        }
        self.spawn(operator, mode, kubeconfig, signal_file, log, Some(peer))
    }

    fn spawn(
        &self,
        operator: Operator,
        mode: Mode,
        kubeconfig: &Path,
        signal_file: &Path,
        log: &Path,
        peer: Option<&Peer>,
    ) -> anyhow::Result<Option<Process>> {
        let mut cmd = match operator {
            Operator::KopfRs | Operator::Baseline | Operator::KopfRsMetrics => {
                let program = match (operator, &self.baseline) {
                    (Operator::Baseline, Some(baseline)) => baseline.clone(),
                    (Operator::Baseline, None) => bail!("no --baseline program given"),
                    _ => self.bin_dir.join("kopf-rs-operator"),
                };
                let mut cmd = Command::new(program);
                cmd.arg(mode.arg()).arg("--kubeconfig").arg(kubeconfig);
                match peer {
                    None => cmd.arg("--standalone"),
                    Some(peer) => {
                        if let Some(shards) = peer.shards {
                            cmd.args(["--shards", &shards.to_string()]);
                        }
                        cmd.args(["--peering", &peer.lease, "--identity", &peer.identity])
                            .args(["--peering-namespace", NAMESPACE])
                    }
                };
                cmd.args(["-n", NAMESPACE]);
                if operator == Operator::KopfRsMetrics {
                    // One free loopback port serves both.
                    cmd.args([
                        "--liveness",
                        "http://127.0.0.1:0/healthz",
                        "--metrics",
                        "http://127.0.0.1:0/metrics",
                    ]);
                }
                cmd
            }
            Operator::Bare | Operator::Controller => {
                let program = match operator {
                    Operator::Bare => "bare-watcher",
                    _ => "controller-operator",
                };
                let mut cmd = Command::new(self.bin_dir.join(program));
                cmd.arg(mode.arg())
                    .arg("--kubeconfig")
                    .arg(kubeconfig)
                    .args(["-n", NAMESPACE]);
                cmd
            }
            Operator::Kopf => {
                let file = match mode {
                    Mode::Create => "create.py",
                    Mode::Event => "event.py",
                    Mode::Timer => "timer.py",
                    Mode::TimerNoFinalizers => return Ok(None),
                };
                let Some(venv) = &self.venv else {
                    bail!("Kopf is not installed (no virtual environment)");
                };
                let mut cmd = Command::new(venv.join("bin").join("kopf"));
                cmd.args(["run", "--standalone", "--namespace", NAMESPACE])
                    .arg(self.kopf_dir.join(file))
                    .env("KUBECONFIG", kubeconfig)
                    .env("PYTHONPATH", &self.kopf_dir);
                cmd
            }
        };
        evict_from_page_cache(Path::new(cmd.get_program()));
        let log = std::fs::File::create(log)?;
        let child = cmd
            .env(signals::ENV, signal_file)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {cmd:?}"))?;
        Ok(Some(Process::new(operator.name(), child)))
    }
}

/// Drops the pages of `program` (and of the interpreter a script names)
/// from the page cache, so that every operator's code starts from the same
/// state. How much of a program's code is resident depends on how its file
/// sits in the page cache: a file the linker has just written stays cached
/// in large folios, each mapped whole on its first fault, and was measured
/// at up to 1 MiB more RSS than the same file read back from disk. Only
/// pages no process maps are dropped; failing is harmless and silent.
fn evict_from_page_cache(program: &Path) {
    let evict = |path: &Path| {
        if let Ok(file) = std::fs::File::open(path) {
            let _ = nix::fcntl::posix_fadvise(
                &file,
                0,
                0,
                nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
            );
        }
    };
    evict(program);
    if let Some(interpreter) = interpreter_of(program) {
        evict(&interpreter);
    }
}

/// The interpreter named by the `#!` line of a script, resolved through
/// symbolic links (a virtual environment's `python` is one).
fn interpreter_of(script: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(script).ok()?.read(&mut head).ok()?;
    let line = head[..n]
        .strip_prefix(b"#!")?
        .split(|&b| b == b'\n')
        .next()?;
    let path = std::str::from_utf8(line).ok()?.split_whitespace().next()?;
    std::fs::canonicalize(path).ok()
}

/// Creates `venv` with `python -m venv` and installs Kopf 1.45 into it with
/// pip, unless it already holds `bin/kopf`.
///
/// # Errors
/// If venv or pip fail.
pub fn ensure_kopf(python: &str, venv: &Path) -> anyhow::Result<()> {
    if venv.join("bin").join("kopf").exists() {
        return Ok(());
    }
    eprintln!("kopf-bench: installing Kopf 1.45 into {}", venv.display());
    let ok = Command::new(python)
        .args(["-m", "venv"])
        .arg(venv)
        .status()
        .with_context(|| format!("cannot run {python}"))?
        .success();
    if !ok {
        bail!("{python} -m venv {} failed", venv.display());
    }
    let ok = Command::new(venv.join("bin").join("pip"))
        .args(["install", "--quiet", "kopf==1.45.2"])
        .status()?
        .success();
    if !ok {
        bail!("pip install kopf==1.45.2 failed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scripts_interpreter_is_read_from_its_first_line() {
        let dir = std::env::temp_dir().join(format!("kopf-bench-shebang-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let script = dir.join("script");
        let target = std::fs::canonicalize("/bin/sh").expect("/bin/sh exists");
        std::fs::write(&script, "#!/bin/sh -e\necho hi\n").expect("write the script");
        assert_eq!(interpreter_of(&script), Some(target));
        std::fs::write(&script, [0x7f, b'E', b'L', b'F', 0, 0]).expect("write a binary");
        assert_eq!(interpreter_of(&script), None);
        assert_eq!(interpreter_of(&dir.join("missing")), None);
        // Evicting what is not there, or not cached, is harmless.
        evict_from_page_cache(&dir.join("missing"));
        evict_from_page_cache(&script);
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
