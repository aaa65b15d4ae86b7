//! kopf-bench: the scenarios of `BENCHMARKS.md`, run against kopf-rs, Kopf and
//! a bare kube-runtime watcher, each as its own process on the `kube-emulator`
//! binary.
//!
//! ```text
//! cargo run --release -p kopf-bench -- --n 100,1000 --runs 3
//! ```
//!
//! # Method
//!
//! Every job starts a fresh `kube-emulator` process and a fresh operator
//! process (ConfigMaps in namespace `default`), so runs share nothing. The
//! handlers are no-ops that append `<kind> <name> <unix-ns>` to a buffered
//! file flushed every 100 ms ([`signals`]): equal for all three operators, no
//! syscall per call, and the timestamp is taken in the handler. The runner
//! reads CPU (utime + stime, to the nanosecond from each process's CPU-time
//! clock; `/proc/PID/stat` counts it in ticks of 10 ms, too coarse for S1) and
//! RSS (`VmRSS` from `/proc`, sampled every 50 ms for peaks) of both
//! processes, and counts the operator's requests through
//! the emulator's admin endpoint (requests per User-Agent; the runner's own
//! client says `kopf-bench-driver`). Objects are created and deleted by 8
//! concurrent requests.
//!
//! - **S1 create burst** (`on_create`): a sentinel object shows the operator is
//!   up; then N creations. First POST → last handler call; operator CPU over
//!   that span (and until its requests stop); operator requests per object,
//!   by verb.
//! - **S2 timers at scale** (`timer(interval = 1)`, once keeping finalizers,
//!   once `no_finalizers`): N objects exist before the operator starts; once
//!   every one has ticked, +2 s, a steady window (`--window`, 30 s): ticks seen /
//!   expected (per object, one per second from its first to its last tick in
//!   the window, so that where the window cuts the phase of objects ticking in
//!   step does not count; the raw rate per object-second is reported too), operator CPU per 1,000 ticks, |gap − 1 s| p50/p99/max over
//!   consecutive ticks of each object, RSS (end and peak in the window) and
//!   the anonymous part of the end; the summary derives what a timer costs
//!   from it, over S4's anonymous memory with as many idle objects, listed
//!   at the operator's start as S2's are.
//! - **S3 delete burst** (right after S2, same operator): the runner watches
//!   DELETED events itself and deletes all N. First DELETE → last tick, →
//!   last response, → last DELETED event; the largest (last tick − that
//!   object's DELETED event).
//! - **S4 idle memory** (`on_event`): RSS after the sentinel (+3 s), and with
//!   N objects once all were seen (+3 s); (difference) / N per object. Then
//!   a fresh operator lists the same N at its start: its anonymous memory
//!   once all were seen (+3 s), what S2's timers are counted over.
//! - **S5 deletions in a watch gap** (timers without finalizers; Kopf cannot,
//!   so its objects keep their finalizers and the runner strips them): watch
//!   and list requests fail (500), every watch is dropped, K objects
//!   (`--s5-deletions`, N/10) vanish, the history is compacted (410), the
//!   failures stop; after the operator's re-list (seen as its next `list`),
//!   count the vanished objects with a tick 5–7 s later. Must be 0.
//! - **S7 failover** (kopf-rs only, when named): two operator processes
//!   with `--peering` on one Lease (default timings) and the same timers on
//!   N objects, each signalling to a file of its own; the leader is killed
//!   (SIGKILL), then, in a second job, terminated (SIGTERM). The signal →
//!   the new leader's first tick and every object's; the seconds in which
//!   both replicas ticked one object; the old leader's ticks of an object
//!   after the new leader's first tick of it (must be 0).
//!
//! - [`signals`] — how handlers report their calls to the runner.
//! - [`procfs`] — CPU and RSS of a process from `/proc`.
//! - [`stats`] — medians, ranges, percentiles.
//! - [`cluster`] — the emulator process, its admin endpoints and the driver client.
//! - [`operators`] — how each operator under test is started.
//! - [`peers`] — what the Rust peers (bare watcher, `Controller`) share.
//! - [`scenarios`] — S1–S5 and S7.
//! - [`report`] — JSON lines, the summary table and the plot.
//! - [`soak`] — `kopf-bench soak`: a chaos soak checking Kopf's promises.

pub mod building;
pub mod cluster;
pub mod operators;
pub mod peers;
pub mod procfs;
pub mod report;
pub mod scenarios;
pub mod signals;
pub mod soak;
pub mod stats;
