//! No client stalls the emulator: what one client sends or asks for is
//! worked through in time linear in its size, and without holding the
//! store for long, so that other clients are answered meanwhile.

use std::time::{Duration, Instant};

use crate::common::raw_request;
use kopf_testing::{Emulator, FailRule, MAX_FRAGMENT_BYTES};

const CMS: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test]
async fn a_body_rule_searches_bodies_in_linear_time() {
    let emulator = Emulator::start().await.expect("emulator starts");
    // The longest fragment, almost matching everywhere in a body of the
    // same byte: a search comparing it at every offset takes seconds.
    let mut fragment = "a".repeat(MAX_FRAGMENT_BYTES - 1);
    fragment.push('b');
    let rule = FailRule::status(500)
        .verb("create")
        .body_contains(&fragment);
    emulator.faults().fail_next(1, rule);
    let body = vec![b'a'; 3 * 1024 * 1024 - 1024];
    let started = Instant::now();
    for _ in 0..3 {
        let json = [("Content-Type", "application/json")];
        let resp = raw_request(emulator.addr(), "POST", CMS, &json, &body).await;
        assert_eq!(resp.status, 400, "not the rule's 500: the body is no JSON");
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "three 3 MiB bodies took {took:?} to check against one rule"
    );
}
