//! Each of Kopf's examples, ported, does what its README says: each test
//! runs the example's binary with `--emulator` (which creates its demo
//! objects), as a user would, and waits for what the README describes, in
//! the output and on the objects in the example's emulator.

mod support;

use kopf_examples::{DEMO_NAME, examples_api};
use serde_json::json;
use support::{Example, at};

/// `01-minimal`: the creation is noticed, and the status has the message.
#[tokio::test]
async fn minimal_notices_the_creation_and_sets_the_status() {
    let mut example = Example::start(env!("CARGO_BIN_EXE_minimal"), &[]);
    let api = examples_api(example.client().await);
    example.wait_for("And here we are! Creating:").await;
    example
        .wait_object(&api, DEMO_NAME, "status.create_fn.message", |o| {
            at(o, "/status/create_fn/message") == Some(&json!("hello world"))
        })
        .await;
    let (status, output) = example.terminate().await;
    assert!(status.success(), "{status}: {output}");
}
