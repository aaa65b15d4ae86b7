//! Kopf's `04-events`: Kubernetes Events about objects, from a handler.
//!
//! On the creation of a `KopfExample`, the handler posts an Event with
//! [`kopf::posting::event`], then the conventional ones with
//! [`kopf::posting::info`] (`Normal`), [`kopf::posting::warn`] (`Warning`)
//! and [`kopf::posting::exception`] (`Warning`, with the error's text after
//! the message).
//!
//! Unlike Kopf, the Event types are only Kubernetes' two, `Normal` and
//! `Warning`: Kopf's custom `SomeType` and its `Error` type (which the API
//! server would refuse) become `Normal` and `Warning`. They are posted in the background, never
//! blocking the handler; `kubectl describe kopfexample kopf-example-1`
//! shows them, beside the operator's own (`Handler 'create_fn'
//! succeeded.`).
//!
//! ```sh
//! cargo run -p kopf-examples --bin events -- --emulator
//! ```

use kopf_examples::KopfExample;
use kopf_runtime as kopf;
use kopf_runtime::posting::{self, Severity};
use serde_json::Value;

#[kopf::on_create(KopfExample)]
async fn create_fn(body: &Value) {
    // The all-purpose function for the event creation. Kubernetes takes
    // only `Normal` and `Warning` Events, so Kopf's custom `SomeType` has
    // no equivalent: this one is `Normal`.
    posting::event(body, Severity::Normal, "SomeReason", "Some message");

    // The shortcuts for the conventional events and common cases.
    posting::info(body, "SomeReason", "Some message");
    posting::warn(body, "SomeReason", "Some message");

    let error = std::io::Error::other("Exception text.");
    posting::exception(body, Some("SomeReason"), "Some exception:", &error);
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
