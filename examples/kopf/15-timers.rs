//! Kopf's `15-timers`: calls every few seconds while the object is idle.
//!
//! `every_few_seconds_sync` (a plain `fn`, on a blocking thread) runs every
//! 2 s once the object has been unchanged for 5 s; the `async` one every
//! 4 s once it has been unchanged for 10 s. A change of the object puts
//! both back to waiting for its `idle` time.
//!
//! Unlike Kopf's, these timers use `no_finalizers`: they only log, so
//! nothing must happen before the object goes, and `kubectl delete` does
//! not wait for the operator (the timers are stopped all the same when
//! the object is deleted).
//!
//! ```sh
//! cargo run -p kopf-examples --bin timers -- --emulator
//! ```

use kopf_examples::{KopfExample, KopfExampleSpec};
use kopf_runtime as kopf;

#[kopf::timer(KopfExample, idle = 5, interval = 2, no_finalizers)]
fn every_few_seconds_sync(spec: &KopfExampleSpec, logger: &kopf::Logger) {
    logger.info(format!("Ping from a sync timer: field={:?}", spec.field));
}

#[kopf::timer(KopfExample, idle = 10, interval = 4, no_finalizers)]
async fn every_few_seconds_async(spec: &KopfExampleSpec, logger: &kopf::Logger) {
    logger.info(format!("Ping from an async timer: field={:?}", spec.field));
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
