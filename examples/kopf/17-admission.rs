//! Kopf's `17-admission`: validating and mutating admission webhooks of
//! `KopfExample`.
//!
//! - `authhook` warns with the client's `User-Agent`, and that the SSL
//!   peer is not identified (the server asks clients for no certificate).
//! - `validate1` denies an object whose `spec.field` is `wrong`, unless
//!   the request is a dry run.
//! - `validate2` denies `spec.field: not-allowed` with the code 555.
//! - `validate_subresources` serves every subresource too: a `status`
//!   whose `field` differs from the spec's is denied, and the main
//!   resource gets a warning when they differ.
//! - `mutate1` injects `spec.injected: 123` into objects labelled
//!   `somelabel: somevalue`.
//!
//! Kopf's example picks its server in an `on_startup` handler
//! (`settings.admission.server`, `settings.admission.managed =
//! "auto.kopf.dev"`); kopf-rs takes it from the command line, and
//! `--emulator` sets up what the example's last lines do, without a flag:
//! a server on a free loopback port with a self-signed certificate, and
//! the configurations `auto.kopf.dev` managed. Against a cluster:
//!
//! ```sh
//! cargo run -p kopf-examples --bin admission -- --emulator
//! cargo run -p kopf-examples --bin admission -- \
//!     --webhook-server https://0.0.0.0:9443 --webhook-host 192.168.1.10 \
//!     --webhook-managed auto.kopf.dev --webhook-ca-dump ca.pem
//! ```
//!
//! Kopf's `AdmissionError` defaults to the code 500; `kopf::Error::admission`
//! takes the code always.

use std::collections::BTreeMap;

use kopf_examples::KopfExample;
use kopf_runtime as kopf;
use serde_json::{Value, json};

#[kopf::on_validate(KopfExample)]
async fn authhook(headers: &BTreeMap<String, String>, sslpeer: &Value, warnings: &kopf::Warnings) {
    let user_agent = headers
        .get("user-agent")
        .map_or("(unidentified)", String::as_str);
    warnings.push(format!("Accessing as user-agent: {user_agent}"));
    match sslpeer.get("subject") {
        None => warnings.push("SSL peer is not identified."),
        Some(subject) => warnings.push(format!("SSL peer is {subject}.")),
    }
}

#[kopf::on_validate(KopfExample)]
async fn validate1(spec: &Value, dryrun: bool) -> kopf::Result<()> {
    if !dryrun && spec["field"] == "wrong" {
        return Err(kopf::Error::admission(
            "Meh! I don't like it. Change the field.",
            500,
        ));
    }
    Ok(())
}

#[kopf::on_validate(KopfExample, field = "spec.field", value = "not-allowed")]
async fn validate2() -> kopf::Result<()> {
    Err(kopf::Error::admission("I'm too lazy anyway. Go away!", 555))
}

#[kopf::on_validate(KopfExample, subresource = "*")]
async fn validate_subresources(
    spec: &Value,
    status: &Value,
    subresource: Option<&str>,
    warnings: &kopf::Warnings,
) -> kopf::Result<()> {
    let (wanted, got) = (&spec["field"], &status["field"]);
    if subresource == Some("status") && got != wanted {
        return Err(kopf::Error::admission(
            "status.field MUST be equal to spec.field!",
            500,
        ));
    }
    if subresource.is_none() && got != wanted {
        warnings.push(format!(
            "Also update status.field to match spec.field: {wanted} != {got}"
        ));
    }
    Ok(())
}

#[kopf::on_mutate(KopfExample, labels("somelabel" = "somevalue"))]
async fn mutate1(patch: &kopf::Patch) {
    patch.set("spec.injected", json!(123));
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
