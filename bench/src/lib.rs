//! kopf-bench: the scenarios of `BENCHMARKS.md`, run against kopf-rs, Kopf and
//! a bare kube-runtime watcher, each as its own process on the `kube-emulator`
//! binary.
//!
//! ```text
//! cargo run --release -p kopf-bench -- --n 100,1000 --runs 3
//! ```
//!
//! - [`signals`]: how handlers report their calls to the runner.
//! - [`procfs`]: CPU and RSS of a process from `/proc`.
//! - [`stats`]: medians, ranges, percentiles.
//! - [`cluster`]: the emulator process, its admin endpoints and the driver client.
//! - [`operators`]: how each operator under test is started.
//! - [`scenarios`]: S1–S5.
//! - [`report`]: JSON lines, the summary table and the plot.

pub mod cluster;
pub mod operators;
pub mod procfs;
pub mod report;
pub mod scenarios;
pub mod signals;
pub mod stats;
