//! Throughput of the emulator on the release build: GET and merge-PATCH
//! requests per second from concurrent kube clients over keep-alive, and watch
//! events per second delivered to concurrent watchers while objects are
//! created and patched (once with typed `Api::watch` consumers that decode
//! every event, once with consumers that only read the event lines, to tell
//! the server's delivery rate from the client's decoding cost; clients and
//! server share this process and its cores). Each figure is measured three times; the median and
//! range are printed.
//!
//! Run with `cargo bench -p kopf-testing --bench throughput`.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kopf_testing::Emulator;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

const CLIENTS: usize = 16;
const OBJECTS: usize = 64;
const WINDOW: Duration = Duration::from_secs(3);
const WATCHERS: usize = 10;
const WRITES: usize = 10_000;
const RUNS: usize = 3;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"n": "0"}}))
        .expect("configmap")
}

/// Runs `op` on `CLIENTS` concurrent clients, each with its own connection, for `WINDOW`.
async fn requests_per_second<F, Fut>(emu: &Emulator, op: F) -> f64
where
    F: Fn(Api<ConfigMap>, usize, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
        // Warm the connection up before the clock starts.
        api.get(&format!("o{}", c % OBJECTS))
            .await
            .expect("warm-up get");
        let (stop, done, op) = (stop.clone(), done.clone(), op.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                op(api.clone(), c, i).await;
                i += 1;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(WINDOW).await;
    stop.store(true, Ordering::Relaxed);
    let n = done.load(Ordering::Relaxed);
    let elapsed = started.elapsed();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("client stops")
            .expect("client task");
    }
    n as f64 / elapsed.as_secs_f64()
}

/// How the watchers consume their streams.
#[derive(Clone, Copy)]
enum Watchers {
    /// `Api::watch`: every event decoded into a `ConfigMap`, as an operator would.
    Typed,
    /// The same watch request read as lines: delivery without client-side decoding.
    Lines,
}

/// Events per second delivered in total to `WATCHERS` watchers while `WRITES`
/// creates and patches happen from `CLIENTS` writers.
async fn watch_events_per_second(emu: &Emulator, run: usize, kind: Watchers) -> f64 {
    let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let rv = api
        .list(&ListParams::default().limit(1))
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let prefix = format!("r{run}-{}-", kind as u8);
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let client = emu.client();
        let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
        let prefix = prefix.clone();
        match kind {
            Watchers::Typed => {
                let stream = api
                    .watch(&WatchParams::default().disable_bookmarks(), &rv)
                    .await
                    .expect("watch");
                watchers.push(tokio::spawn(async move {
                    let mut stream = stream.boxed();
                    let mut seen = 0usize;
                    while seen < WRITES {
                        match stream.try_next().await.expect("watch stream") {
                            Some(WatchEvent::Added(o) | WatchEvent::Modified(o))
                                if o.metadata
                                    .name
                                    .as_deref()
                                    .is_some_and(|n| n.starts_with(&prefix)) =>
                            {
                                seen += 1
                            }
                            Some(_) => {}
                            None => panic!("watch ended after {seen} events"),
                        }
                    }
                    Instant::now()
                }));
            }
            Watchers::Lines => {
                let uri = format!(
                    "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}"
                );
                let req = http::Request::get(uri).body(Vec::new()).expect("request");
                let body = client.request_stream(req).await.expect("watch");
                watchers.push(tokio::spawn(async move {
                    use futures::AsyncBufReadExt;
                    let mut lines = Box::pin(body).lines();
                    let mut seen = 0usize;
                    while seen < WRITES {
                        let line = lines
                            .try_next()
                            .await
                            .expect("watch stream")
                            .expect("watch ended early");
                        if line.contains(&prefix) {
                            seen += 1;
                        }
                    }
                    Instant::now()
                }));
            }
        }
    }
    let started = Instant::now();
    let per_writer = WRITES / CLIENTS;
    let mut writers = Vec::new();
    for w in 0..CLIENTS {
        let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
        let prefix = prefix.clone();
        writers.push(tokio::spawn(async move {
            let name = format!("{prefix}{w}");
            api.create(&PostParams::default(), &cm(&name))
                .await
                .expect("create");
            for i in 1..per_writer {
                let p = Patch::Merge(json!({"data": {"n": i.to_string()}}));
                api.patch(&name, &PatchParams::default(), &p)
                    .await
                    .expect("patch");
            }
        }));
    }
    for w in writers {
        tokio::time::timeout(Duration::from_secs(120), w)
            .await
            .expect("writers finish")
            .expect("writer");
    }
    let writes_done = started.elapsed();
    let mut last = started;
    for w in watchers {
        let t = tokio::time::timeout(Duration::from_secs(120), w)
            .await
            .expect("watchers finish")
            .expect("watcher");
        last = last.max(t);
    }
    let total = last - started;
    let lag = total.saturating_sub(writes_done);
    println!(
        "    run {run}: {WRITES} writes in {writes_done:.2?} ({:.0} writes/s); last watcher done {lag:.2?} after the last write",
        WRITES as f64 / writes_done.as_secs_f64()
    );
    (WATCHERS * WRITES) as f64 / total.as_secs_f64()
}

fn summary(label: &str, mut xs: Vec<f64>, target: f64) {
    xs.sort_by(|a, b| a.total_cmp(b));
    let median = xs[xs.len() / 2];
    println!(
        "{label:<36} median {median:>10.0}/s   range {:>9.0} – {:<9.0}  target {target:>7.0}/s  {}",
        xs[0],
        xs[xs.len() - 1],
        if median >= target {
            "OK"
        } else {
            "BELOW TARGET"
        }
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        let emu = Emulator::start().await.expect("emulator starts");
        let api: Api<ConfigMap> = Api::default_namespaced(emu.client());
        for i in 0..OBJECTS {
            api.create(&PostParams::default(), &cm(&format!("o{i}"))).await.expect("seed");
        }
        println!(
            "kube-emulator throughput: {CLIENTS} kube clients, {}s windows, {RUNS} runs; {WATCHERS} watchers x {WRITES} writes",
            WINDOW.as_secs()
        );

        let mut gets = Vec::new();
        for _ in 0..RUNS {
            gets.push(
                requests_per_second(&emu, |api, c, i| async move {
                    api.get(&format!("o{}", (c + i as usize) % OBJECTS)).await.expect("get");
                })
                .await,
            );
        }
        summary("GET requests", gets, 5_000.0);

        let mut patches = Vec::new();
        for _ in 0..RUNS {
            patches.push(
                requests_per_second(&emu, |api, c, i| async move {
                    let p = Patch::Merge(json!({"data": {"n": i.to_string()}}));
                    api.patch(&format!("o{}", c % OBJECTS), &PatchParams::default(), &p).await.expect("patch");
                })
                .await,
            );
        }
        summary("merge-PATCH requests", patches, 5_000.0);

        for (label, kind) in [
            ("watch events, typed kube watchers", Watchers::Typed),
            ("watch events, line-reading watchers", Watchers::Lines),
        ] {
            let mut events = Vec::new();
            for run in 0..RUNS {
                events.push(watch_events_per_second(&emu, run, kind).await);
            }
            summary(label, events, 50_000.0);
        }
        emu.shutdown().await;
    });
}
