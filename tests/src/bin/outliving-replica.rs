//! A replica whose daemon ignores its stop flag: run with `--peering`, it
//! cannot pause when it stops leading, and must exit with code 3 before
//! another replica may take the Lease (see `tests/operator/replicas.rs`).
//!
//! ```text
//! outliving-replica --peering op --identity a -n default --kubeconfig KC
//! ```
//!
//! The Lease's timings are short: 1.5 s, 1 s and 0.2 s.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime::settings::{OperatorSettings, PeeringSettings};

/// Says that it started, then never returns: a thread cannot be
/// cancelled, and the stop flag is not looked at.
#[kopf_runtime::daemon(ConfigMap, id = "outliving", cancellation_timeout = 60)]
fn outliving() {
    println!("outliving: started");
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[kopf_runtime::on_startup]
fn configure(settings: &mut OperatorSettings) {
    settings.peering = PeeringSettings {
        lease_duration: Duration::from_millis(1500),
        renew_deadline: Duration::from_millis(1000),
        retry_period: Duration::from_millis(200),
    };
}

#[tokio::main]
async fn main() -> Result<(), kopf_runtime::RunError> {
    kopf_runtime::run().await
}
