//! Kopf's `09-testing`: an operator tested in-process with
//! [`KopfRunner`], as Kopf's `kopf.testing.KopfRunner`.
//!
//! The operator of this test binary is the one handler below (the macros
//! collect the handlers of each binary). The runner starts it against a
//! fresh emulator with Kopf's `KopfExample` CRD; the test creates and
//! deletes the demo object, waits for what the handler logged, stops the
//! operator, and checks how it ended and what it logged, as Kopf's
//! `test_example_09.py` does with `runner.exit_code`, `runner.exception`
//! and `runner.output`, but waiting for the output instead of sleeping.
//!
//! ```sh
//! cargo test -p kopf-examples --test testing
//! ```

use std::time::Duration;

use kopf_examples::{DEMO_NAME, KopfExample, demo_object, examples_api};
use kopf_runtime as kopf;
use kopf_testing::KopfRunner;
use kube::api::{DeleteParams, PostParams};

#[kopf::on_create(KopfExample)]
async fn create_fn(logger: &kopf::Logger) {
    logger.info("Something was logged here.");
}

/// The emulator with Kopf's demo CRD, as `kubectl apply -f crd.yaml`.
fn emulator() -> kopf_testing::EmulatorBuilder {
    kopf_examples::emulator()
}

#[tokio::test]
async fn resource_lifecycle() {
    let registry = kopf::Registry::from_inventory().expect("the handlers are valid");
    let runner = KopfRunner::builder()
        .emulator(emulator())
        .start(|client, stop| kopf::Operator::new(registry).client(client).run_until(stop))
        .await
        .expect("the emulator starts");

    // Simulate some activity with the operated resource.
    let api = examples_api(runner.client());
    api.create(&PostParams::default(), &demo_object())
        .await
        .expect("the object is created");
    runner
        .wait_for_output("Creation is processed: 1 succeeded; 0 failed.")
        .await
        .expect("the creation is handled");
    api.delete(DEMO_NAME, &DeleteParams::default())
        .await
        .expect("the object is deleted");
    runner
        .wait_until("the object to be gone", || async {
            api.get_opt(DEMO_NAME).await.ok()?.is_none().then_some(())
        })
        .await
        .expect("the finalizer is released");

    let finished = runner.stop().await.expect("the operator stops");

    // Ensure that the operator did not die on start, or during the operation.
    assert!(finished.result.is_ok(), "{:?}", finished.result);
    // There are usually more than these messages, but we only check for the certain ones.
    let output = &finished.output;
    assert!(
        output.contains("Something was logged here. object=default/kopf-example-1"),
        "{output}"
    );
    assert!(
        output.contains("Handler 'create_fn' succeeded. object=default/kopf-example-1"),
        "{output}"
    );
}

/// An operator that cannot start ends with its error, as Kopf's runner
/// has `exit_code != 0` and the `exception`.
#[tokio::test]
async fn a_failed_start_up_is_the_result() {
    let registry = kopf::Registry::builder()
        .on_startup("refuse", |_: kopf::Kwargs| async {
            Err::<(), _>(kopf::Error::permanent("Unable to start!"))
        })
        .build()
        .expect("a valid registry");
    let runner = KopfRunner::builder()
        .emulator(emulator())
        .timeout(Duration::from_secs(30))
        .start(|client, stop| kopf::Operator::new(registry).client(client).run_until(stop))
        .await
        .expect("the emulator starts");
    let error = runner
        .wait_for_output("never logged")
        .await
        .expect_err("the operator exits");
    assert!(
        matches!(error, kopf_testing::RunnerError::Exited { .. }),
        "{error}"
    );
    let finished = runner.stop().await.expect("the operator has stopped");
    let error = finished.result.expect_err("the start-up failed");
    assert!(
        matches!(error, kopf::OperatorError::Startup { .. }),
        "{error:?}"
    );
    assert!(
        finished
            .output
            .contains("Handler 'refuse' failed permanently: Unable to start!"),
        "{}",
        finished.output
    );
}
