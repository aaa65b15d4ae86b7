//! Kopf's `14-daemons`: a task beside each object, for as long as it lives.
//!
//! - `background_sync` is a plain `fn`, so it runs on a blocking thread,
//!   which cannot be cancelled: it polls its `stopped` flag. It fails three
//!   times first (each failure noted in `status.message`, retried after
//!   1 s), then pings every 5 s for 30 s, or until stopped, and notes that
//!   it has finished.
//! - `background_async` is an `async fn` that runs until it is cancelled:
//!   when its object is deleted, it gets `cancellation_backoff` (1 s) to
//!   exit by itself, then it is cancelled; it too fails three times first.
//!   It runs only for objects annotated `someannotation: somevalue`.
//!
//! Both keep a finalizer on their object, as Kopf's daemons do, so that the
//! object's deletion waits until they have stopped. With `no_finalizers`,
//! the deletion would not wait (they are stopped all the same): see
//! `15-timers` and `ttl_secrets`.
//!
//! ```sh
//! cargo run -p kopf-examples --bin daemons -- --emulator
//! # `-v` shows the tasks being stopped and cancelled
//! ```

use std::time::{Duration, Instant};

use kopf_examples::{KopfExample, KopfExampleSpec};
use kopf_runtime as kopf;
use serde_json::json;

// Sync daemons in threads are non-interruptible, they must check for the
// `stopped` flag. This daemon exits after 3 attempts and then 30 seconds of
// running (unless stopped).
#[kopf::daemon(KopfExample, backoff = 3)]
fn background_sync(
    stopped: &kopf::Stopped,
    spec: &KopfExampleSpec,
    logger: &kopf::Logger,
    retry: u32,
    patch: &kopf::Patch,
) -> kopf::Result<()> {
    if retry < 3 {
        patch.set(
            "status.message",
            json!(format!("Failed {} times.", retry + 1)),
        );
        return Err(kopf::Error::temporary(
            "Simulated failure.",
            Duration::from_secs(1),
        ));
    }

    let started = Instant::now();
    while !stopped.is_set() && started.elapsed() <= Duration::from_secs(30) {
        logger.info(format!(
            "=> Ping from a sync daemon: field={:?}, retry={retry}",
            spec.field
        ));
        stopped.wait_blocking(Duration::from_secs(5));
    }

    patch.set("status.message", json!("Accompanying is finished."));
    Ok(())
}

// Async daemons need not check the `stopped` flag: they are cancelled.
// This daemon runs forever (until stopped, i.e. cancelled), yet fails to
// start the first 3 times.
#[kopf::daemon(
    KopfExample,
    backoff = 3,
    cancellation_backoff = 1.0,
    cancellation_timeout = 0.5,
    annotations("someannotation" = "somevalue")
)]
async fn background_async(
    spec: &KopfExampleSpec,
    logger: &kopf::Logger,
    retry: u32,
) -> kopf::Result<()> {
    if retry < 3 {
        return Err(kopf::Error::temporary(
            "Simulated failure.",
            Duration::from_secs(1),
        ));
    }

    loop {
        logger.info(format!(
            "=> Ping from an async daemon: field={:?}",
            spec.field
        ));
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    kopf_examples::runner()
        .on_emulator(|client| async move {
            kopf_examples::create(client, &kopf_examples::demo_object()).await;
        })
        .run()
        .await?;
    Ok(())
}
