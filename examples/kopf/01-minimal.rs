//! Kopf's `01-minimal`: the least code that makes an operator.
//!
//! It notices the creation of a `KopfExample`, prints its spec, and returns
//! a message, which the operator stores in the object's status under the
//! handler's id: `status.create_fn.message` is `hello world` (Kopf's CRD
//! shows it in the `MESSAGE` column of `kubectl get kopfexamples`).
//!
//! ```sh
//! cargo run -p kopf-examples --bin minimal -- --emulator
//! ```
//!
//! Under `--emulator`, the demo object of Kopf's `obj.yaml` is created.

use kopf_examples::{KopfExample, KopfExampleSpec};
use kopf_runtime as kopf;
use serde_json::{Value, json};

#[kopf::on_create(KopfExample)]
async fn create_fn(spec: &KopfExampleSpec) -> kopf::Result<Value> {
    println!("And here we are! Creating: {spec:?}");
    Ok(json!({"message": "hello world"})) // will be the new status
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
