//! Kopf's `05-handlers`: several handlers for one cause, and a field
//! handler.
//!
//! Two handlers run on creation, two on resuming (an object found when the
//! operator starts, already handled), one on any update, two on deletion,
//! and `field_fn` only when `spec.field` changes, with the field's old and
//! new values (on creation too, from `None`, as in Kopf). Each prints what it handles. The handlers of one cause run
//! one at a time, in the order of their ids (kopf-rs sorts them: the
//! order in which the macros register them is not known), which here is
//! the order in which Kopf runs them.
//!
//! ```sh
//! cargo run -p kopf-examples --bin handlers -- --emulator
//! ```
//!
//! Under `--emulator`, the demo does what the README of Kopf's example
//! asks of the user: it creates the demo object, then, once each step is
//! handled, changes `spec.field` to `newvalue` and adds `spec.newfield`,
//! then deletes the object.

use std::time::Duration;

use kopf_examples::{DEMO_NAME, KopfExample};
use kopf_runtime as kopf;
use serde_json::{Value, json};

#[kopf::on_resume(KopfExample)]
async fn resume_fn_1() {
    println!("RESUMED 1st");
}

#[kopf::on_create(KopfExample)]
async fn create_fn_1() {
    println!("CREATED 1st");
}

#[kopf::on_resume(KopfExample)]
async fn resume_fn_2() {
    println!("RESUMED 2nd");
}

#[kopf::on_create(KopfExample)]
async fn create_fn_2() {
    println!("CREATED 2nd");
}

#[kopf::on_update(KopfExample)]
async fn update_fn(old: Option<Value>, new: Option<Value>, diff: &kopf::Diff) {
    let _ = (old, new, diff);
    println!("UPDATED");
}

#[kopf::on_delete(KopfExample)]
async fn delete_fn_1() {
    println!("DELETED 1st");
}

#[kopf::on_delete(KopfExample)]
async fn delete_fn_2() {
    println!("DELETED 2nd");
}

#[kopf::on_field(KopfExample, field = "spec.field")]
async fn field_fn(old: Option<String>, new: Option<String>) {
    println!(
        "FIELD CHANGED: {} -> {}",
        old.as_deref().unwrap_or("None"),
        new.as_deref().unwrap_or("None")
    );
}

/// Creates, changes and deletes the demo object, one handled step at a time.
async fn demo(client: kube::Client) {
    let patience = Duration::from_secs(30);
    kopf_examples::create(client.clone(), &kopf_examples::demo_object()).await;
    kopf_examples::wait_handled(client.clone(), DEMO_NAME, patience).await;
    kopf_examples::patch(
        client.clone(),
        DEMO_NAME,
        json!({"spec": {"field": "newvalue", "newfield": 100}}),
    )
    .await;
    kopf_examples::wait_handled(client.clone(), DEMO_NAME, patience).await;
    kopf_examples::delete(client, DEMO_NAME).await;
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    kopf_examples::runner().on_emulator(demo).run().await?;
    Ok(())
}
