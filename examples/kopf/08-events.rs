//! Kopf's `08-events`: spy handlers of the raw watch events.
//!
//! `on_event` handlers are called for every event of the watch stream,
//! the initial listing included, and store nothing on the object. One
//! fails on every call: its error is logged and ignored (event handlers
//! are not retried); the other prints the event's type and object.
//!
//! ```sh
//! cargo run -p kopf-examples --bin raw_events -- --emulator
//! ```

use kopf_examples::KopfExample;
use kopf_runtime as kopf;
use serde_json::Value;

#[kopf::on_event(KopfExample)]
async fn event_fn_with_error() -> kopf::Result<()> {
    Err(std::io::Error::other("Oops!"))?
}

#[kopf::on_event(KopfExample)]
async fn normal_event_fn(event: &Value) {
    println!("Event received: {event}");
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
