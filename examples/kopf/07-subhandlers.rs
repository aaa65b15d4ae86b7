//! Kopf's `07-subhandlers`: handlers decided while handling.
//!
//! The creation handler registers one sub-handler per item of
//! `spec.items`, on its `subhandlers` parameter ([`kopf::Subhandlers`],
//! Kopf's `@kopf.subhandler`). Each sub-handler has its own progress on
//! the object (as `create_fn/item1`, `create_fn/item2`), retries and
//! errors; `create_fn` is called again, with a debug line, while some are
//! unfinished, and succeeds once they all have.
//!
//! ```sh
//! cargo run -p kopf-examples --bin subhandlers -- --emulator
//! ```

use kopf_examples::{KopfExample, KopfExampleSpec};
use kopf_runtime as kopf;

#[kopf::on_create(KopfExample)]
async fn create_fn(spec: &KopfExampleSpec, subhandlers: &kopf::Subhandlers) {
    for item in &spec.items {
        let item = item.clone();
        subhandlers.register(item.clone(), move |_: kopf::Kwargs| {
            let item = item.clone();
            async move {
                println!("=== Handling creation for {item}. ===");
            }
        });
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
