//! Temporary throughput probe.
#![cfg(test)]
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::Emulator;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe() {
    let emulator = Emulator::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(emulator.client());
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("a".into());
    api.create(&PostParams::default(), &cm).await.unwrap();
    // GET throughput
    let count = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let api = api.clone();
        let count = count.clone();
        tasks.push(tokio::spawn(async move {
            while start.elapsed() < Duration::from_secs(2) {
                api.get("a").await.unwrap();
                count.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    println!(
        "GET/s: {}",
        count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
    );
    let count = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let api = api.clone();
        let count = count.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while start.elapsed() < Duration::from_secs(2) {
                n += 1;
                let p = json!({"data": {format!("k{i}"): format!("{n}")}});
                api.patch("a", &PatchParams::default(), &Patch::Merge(&p))
                    .await
                    .unwrap();
                count.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    println!(
        "PATCH/s: {}",
        count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
    );

    // watch fan-out
    let rv = emulator.shared.store().current_rv();
    let total = 50_000u64;
    let mut watchers = Vec::new();
    let client = reqwest_like(emulator.url());
    for _ in 0..10 {
        let url = format!(
            "{}/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}",
            client
        );
        watchers.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(
                url.trim_start_matches("http://").split('/').next().unwrap(),
            )
            .await
            .unwrap();
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                    .await
                    .unwrap();
            tokio::spawn(conn);
            let path = url.splitn(4, '/').nth(3).unwrap().to_string();
            let req = http::Request::builder()
                .uri(format!("/{path}"))
                .header("host", "x")
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .unwrap();
            let resp = sender.send_request(req).await.unwrap();
            let mut body = http_body_util::BodyDataStream::new(resp.into_body());
            let mut seen = 0u64;
            while let Some(chunk) = body.next().await {
                let chunk = chunk.unwrap();
                seen += chunk.iter().filter(|b| **b == b'\n').count() as u64;
                if seen >= total {
                    break;
                }
            }
            seen
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let def = emulator
        .shared
        .store()
        .find_def("", "v1", "configmaps")
        .unwrap();
    let start = Instant::now();
    for i in 0..total {
        let p = json!({"data": {"n": i.to_string()}});
        emulator
            .shared
            .store()
            .patch(
                &def,
                Some("default"),
                "a",
                crate::patching::PatchKind::Merge,
                &p,
                crate::store::Target::Main,
                false,
            )
            .unwrap();
        if i % 1000 == 0 {
            tokio::task::yield_now().await;
        }
    }
    let produced = start.elapsed();
    for w in watchers {
        assert!(w.await.unwrap() >= total);
    }
    println!(
        "produced {total} in {produced:?}; delivered to 10 watchers in {:?} => {:.0} events/s",
        start.elapsed(),
        (total * 10) as f64 / start.elapsed().as_secs_f64()
    );
}

fn reqwest_like(url: String) -> String {
    url
}
