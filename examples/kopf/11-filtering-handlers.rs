//! Kopf's `11-filtering-handlers`: handlers that run only for the objects
//! and changes their filters match.
//!
//! Each creation handler logs a line when it runs: by labels and
//! annotations (a value, [`kopf::PRESENT`], [`kopf::ABSENT`], or a
//! callback), by a `when` callback, and by a field's value or presence.
//! The demo object (`somelabel: somevalue`, `someannotation: somevalue`,
//! `spec.field: value`) matches the handlers whose lines say "matching",
//! "present", "absent", "satisfied"; the "mismatch" and "not satisfied"
//! ones never run. An update handler runs only when `spec.field` turns
//! from `value` to `changed`, and a daemon runs only while `spec.field`
//! is `value`, logging every second.
//!
//! ```sh
//! cargo run -p kopf-examples --bin filtering -- --emulator
//! ```
//!
//! Under `--emulator`, the demo object is created, then, once handled, its
//! `spec.field` is changed to `changed`: the update handler runs and the
//! daemon stops.

use std::time::Duration;

use kopf_examples::{DEMO_NAME, KopfExample};
use kopf_runtime as kopf;
use serde_json::json;

fn say_yes(value: Option<&str>, kw: &kopf::Kwargs) -> bool {
    value == Some("somevalue") && !kw.spec()["field"].is_null()
}

fn say_no(value: Option<&str>, kw: &kopf::Kwargs) -> bool {
    value == Some("somevalue") && kw.spec()["field"] == "not-this-value-for-sure"
}

fn always(_: &kopf::Kwargs) -> bool {
    true
}

fn never(_: &kopf::Kwargs) -> bool {
    false
}

#[kopf::on_create(KopfExample, labels("somelabel" = "somevalue"))]
async fn create_with_labels_matching(logger: &kopf::Logger) {
    logger.info("Label is matching.");
}

#[kopf::on_create(KopfExample, labels("somelabel" = kopf::PRESENT))]
async fn create_with_labels_present(logger: &kopf::Logger) {
    logger.info("Label is present.");
}

#[kopf::on_create(KopfExample, labels("nonexistent" = kopf::ABSENT))]
async fn create_with_labels_absent(logger: &kopf::Logger) {
    logger.info("Label is absent.");
}

#[kopf::on_create(KopfExample, labels("somelabel" = say_yes))]
async fn create_with_labels_callback_matching(logger: &kopf::Logger) {
    logger.info("Label callback matching.");
}

#[kopf::on_create(KopfExample, annotations("someannotation" = "somevalue"))]
async fn create_with_annotations_matching(logger: &kopf::Logger) {
    logger.info("Annotation is matching.");
}

#[kopf::on_create(KopfExample, annotations("someannotation" = kopf::PRESENT))]
async fn create_with_annotations_present(logger: &kopf::Logger) {
    logger.info("Annotation is present.");
}

#[kopf::on_create(KopfExample, annotations("nonexistent" = kopf::ABSENT))]
async fn create_with_annotations_absent(logger: &kopf::Logger) {
    logger.info("Annotation is absent.");
}

#[kopf::on_create(KopfExample, annotations("someannotation" = say_no))]
async fn create_with_annotations_callback_matching(logger: &kopf::Logger) {
    logger.info("Annotation callback mismatch.");
}

#[kopf::on_create(KopfExample, when = always)]
async fn create_with_filter_satisfied(logger: &kopf::Logger) {
    logger.info("Filter satisfied.");
}

#[kopf::on_create(KopfExample, when = never)]
async fn create_with_filter_not_satisfied(logger: &kopf::Logger) {
    logger.info("Filter not satisfied.");
}

#[kopf::on_create(KopfExample, field = "spec.field", value = "value")]
async fn create_with_field_value_satisfied(logger: &kopf::Logger) {
    logger.info("Field value is satisfied.");
}

#[kopf::on_create(KopfExample, field = "spec.field", value = "something-else")]
async fn create_with_field_value_not_satisfied(logger: &kopf::Logger) {
    logger.info("Field value is not satisfied.");
}

#[kopf::on_create(KopfExample, field = "spec.field", value = kopf::PRESENT)]
async fn create_with_field_presence_satisfied(logger: &kopf::Logger) {
    logger.info("Field presence is satisfied.");
}

#[kopf::on_create(KopfExample, field = "spec.inexistent", value = kopf::PRESENT)]
async fn create_with_field_presence_not_satisfied(logger: &kopf::Logger) {
    logger.info("Field presence is not satisfied.");
}

#[kopf::on_update(KopfExample, field = "spec.field", old = "value", new = "changed")]
async fn update_with_field_change_satisfied(logger: &kopf::Logger) {
    logger.info("Field change is satisfied.");
}

#[kopf::daemon(KopfExample, field = "spec.field", value = "value")]
fn daemon_with_field(stopped: &kopf::Stopped, logger: &kopf::Logger) {
    while !stopped.is_set() {
        logger.info("Field daemon is satisfied.");
        stopped.wait_blocking(Duration::from_secs(1));
    }
    logger.info("Field daemon is stopped.");
}

/// Creates the demo object, then changes its field once it is handled.
async fn demo(client: kube::Client) {
    kopf_examples::create(client.clone(), &kopf_examples::demo_object()).await;
    kopf_examples::wait_handled(client.clone(), DEMO_NAME, Duration::from_secs(30)).await;
    kopf_examples::patch(client, DEMO_NAME, json!({"spec": {"field": "changed"}})).await;
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    kopf_examples::runner().on_emulator(demo).run().await?;
    Ok(())
}
