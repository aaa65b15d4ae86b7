//! The kopf-rs side of the benchmarks: no-op handlers on ConfigMaps that only
//! signal their calls (see `kopf_bench::signals`).
//!
//! The handlers take no client (`takes_client(false)`), as a no-op `async fn`
//! written with the macros takes none: their calls are spared a clone of it.
//!
//! It runs on a current-thread runtime, as the bare watcher does, so that the
//! comparison is of the framework's work and not of tokio's schedulers. (On
//! the default multi-threaded runtime, the S1 create burst took about 20 %
//! more CPU and S4 about 0.6 MiB more memory, from the wake-ups between
//! threads and a malloc arena per thread.)
//!
//! ```text
//! kopf-rs-operator MODE [kopf run options…]    MODE: create | event | timer | timer-nofin
//! ```

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use kopf_bench::signals;
use kopf_runtime::{Args, Kwargs, Registry, ResourceRef, Runner};

fn registry(mode: &str) -> Result<Registry, String> {
    let configmaps = ResourceRef::dynamic("", "v1", "configmaps");
    let builder = Registry::builder();
    let builder = match mode {
        // S1: one no-op `on_create` handler.
        "create" => builder
            .on_create(configmaps, "created", |kw: Kwargs| async move {
                signals::signal("create", kw.name().unwrap_or(""));
            })
            .takes_client(false),
        // S4: one no-op `on_event` handler.
        "event" => builder
            .on_event(configmaps, "seen", |kw: Kwargs| async move {
                signals::signal("event", kw.name().unwrap_or(""));
            })
            .takes_client(false),
        // S2, S3, S5: one no-op `timer(interval = 1)`, with or without finalizers.
        "timer" | "timer-nofin" => {
            let b = builder
                .timer(configmaps, "ticked", |kw: Kwargs| async move {
                    signals::signal("tick", kw.name().unwrap_or(""));
                })
                .interval(Duration::from_secs(1))
                .takes_client(false);
            if mode == "timer-nofin" {
                b.no_finalizers()
            } else {
                b
            }
        }
        other => {
            return Err(format!(
                "unknown mode {other:?}: expected create, event, timer or timer-nofin"
            ));
        }
    };
    builder.build().map_err(|e| e.to_string())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut argv = std::env::args();
    let program = argv.next().unwrap_or_default();
    let mode = argv.next().unwrap_or_default();
    let registry = match registry(&mode) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kopf-rs-operator: {e}");
            return ExitCode::from(2);
        }
    };
    let args = Args::parse_from(std::iter::once(program).chain(argv));
    let flusher = tokio::spawn(signals::flush_periodically());
    let result = Runner::new().args(args).registry(registry).run().await;
    flusher.abort();
    signals::flush();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kopf-rs-operator: {e}");
            ExitCode::FAILURE
        }
    }
}
