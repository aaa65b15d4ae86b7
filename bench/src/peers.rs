//! What the Rust peers of kopf-rs share (the bare watcher and the
//! `Controller`): their command line, their client, and a current-thread
//! runtime that flushes their signals and stops on `SIGTERM` or `SIGINT`.
//!
//! ```text
//! PEER MODE --kubeconfig FILE [-n NAMESPACE]    MODE: create | event | timer | timer-nofin
//! ```

use std::future::Future;
use std::process::ExitCode;

use kube::Client;

use crate::signals;

/// The handlers a peer runs: the modes of [`Mode`](crate::operators::Mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerMode {
    /// S1: mark each new object with one merge PATCH.
    Create,
    /// S4: signal every event.
    Event,
    /// S2, S3, S5: tick every second, with or without a finalizer.
    Timer {
        /// Whether a finalizer is kept while the timer runs.
        finalizers: bool,
    },
}

/// A peer's command line.
#[derive(Debug, Clone)]
pub struct PeerArgs {
    /// Its handlers.
    pub mode: PeerMode,
    /// The kubeconfig file to connect with.
    pub kubeconfig: String,
    /// The namespace of the ConfigMaps served.
    pub namespace: String,
}

impl PeerArgs {
    /// Parses `argv` (without the program's name).
    ///
    /// # Errors
    /// An unknown mode or argument, or no `--kubeconfig`.
    pub fn parse(mut argv: impl Iterator<Item = String>) -> Result<Self, String> {
        let mode = match argv.next().as_deref() {
            Some("create") => PeerMode::Create,
            Some("event") => PeerMode::Event,
            Some("timer") => PeerMode::Timer { finalizers: true },
            Some("timer-nofin") => PeerMode::Timer { finalizers: false },
            other => {
                return Err(format!(
                    "unknown mode {other:?}: expected create, event, timer or timer-nofin"
                ));
            }
        };
        let (mut kubeconfig, mut namespace) = (None, "default".to_string());
        while let Some(arg) = argv.next() {
            match arg.as_str() {
                "--kubeconfig" => kubeconfig = argv.next(),
                "-n" | "--namespace" => namespace = argv.next().ok_or("-n needs a value")?,
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        Ok(Self {
            mode,
            kubeconfig: kubeconfig.ok_or("--kubeconfig FILE is required")?,
            namespace,
        })
    }

    /// A client from the kubeconfig file.
    ///
    /// # Errors
    /// If the file cannot be read or describes no usable cluster.
    pub async fn client(&self) -> Result<Client, String> {
        let kubeconfig =
            kube::config::Kubeconfig::read_from(&self.kubeconfig).map_err(|e| e.to_string())?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .map_err(|e| e.to_string())?;
        Client::try_from(config).map_err(|e| e.to_string())
    }
}

/// Runs the peer `name` on a current-thread runtime: `run` with the
/// arguments of this process, until it ends or the process is asked to stop,
/// flushing the signals every 100 ms and at the end. Errors are printed
/// prefixed with `name`; a bad command line exits with 2.
pub fn main<F, Fut>(name: &str, run: F) -> ExitCode
where
    F: FnOnce(PeerArgs) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let args = match PeerArgs::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let flusher = tokio::spawn(signals::flush_periodically());
        let result = tokio::select! {
            r = run(args) => r,
            () = shutdown() => Ok(()),
        };
        flusher.abort();
        result
    });
    signals::flush();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Resolves on `SIGTERM` or `SIGINT`.
async fn shutdown() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        }
        _ => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<PeerArgs, String> {
        PeerArgs::parse(args.iter().map(|a| (*a).to_owned()))
    }

    #[test]
    fn a_peers_command_line_names_its_mode_and_kubeconfig() {
        let args = parse(&["timer-nofin", "--kubeconfig", "k", "-n", "ns"]).expect("valid");
        assert_eq!(args.mode, PeerMode::Timer { finalizers: false });
        assert_eq!(
            (args.kubeconfig.as_str(), args.namespace.as_str()),
            ("k", "ns")
        );
        assert!(parse(&["tick", "--kubeconfig", "k"]).is_err());
        assert!(parse(&["event"]).is_err(), "no kubeconfig");
        assert!(parse(&["event", "--kubeconfig", "k", "--verbose"]).is_err());
    }
}
