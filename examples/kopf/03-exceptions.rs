//! Kopf's `03-exceptions`: how handler errors are retried or not.
//!
//! Four creation handlers fail in four ways:
//!
//! - `instant_failure_with_only_a_message` fails permanently at once
//!   ([`kopf::Error::permanent`]);
//! - `eventual_success_with_a_few_messages` fails temporarily
//!   ([`kopf::Error::temporary`], retried after 1 s) three times, then
//!   succeeds;
//! - `eventual_failure_with_tracebacks` fails with a regular error (any
//!   `std::error::Error`, through `?`), which is retried after its
//!   `backoff` of 1 s until its `retries = 3` are spent;
//! - `instant_failure_with_traceback` fails with a regular error too, but
//!   `errors = Permanent` makes it final at once.
//!
//! Each failure is logged and posted as an Event on the object. Rust has
//! no tracebacks: the log line carries the error's message.
//!
//! ```sh
//! cargo run -p kopf-examples --bin exceptions -- --emulator
//! ```

use std::time::Duration;

use kopf_examples::KopfExample;
use kopf_runtime as kopf;

#[derive(Debug)]
struct MyException;

impl std::fmt::Display for MyException {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("An error that is supposed to be recoverable.")
    }
}

impl std::error::Error for MyException {}

#[kopf::on_create(KopfExample)]
async fn instant_failure_with_only_a_message() -> kopf::Result<()> {
    Err(kopf::Error::permanent("Fail once and for all."))
}

#[kopf::on_create(KopfExample)]
async fn eventual_success_with_a_few_messages(retry: u32) -> kopf::Result<()> {
    if retry < 3 {
        // 0, 1, 2: fail; 3: succeed.
        return Err(kopf::Error::temporary(
            "Expected recoverable error.",
            Duration::from_secs(1),
        ));
    }
    Ok(())
}

#[kopf::on_create(KopfExample, retries = 3, backoff = 1.0)]
async fn eventual_failure_with_tracebacks() -> kopf::Result<()> {
    Err(MyException)?
}

#[kopf::on_create(KopfExample, errors = kopf::ErrorsMode::Permanent, backoff = 1.0)]
async fn instant_failure_with_traceback() -> kopf::Result<()> {
    Err(MyException)?
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
