//! The bearer token a secured emulator requires, checked over real HTTP as
//! the API server checks it: the scheme in any case, and the public
//! information (`/version`, `/healthz`, `/livez`, `/readyz`) open to
//! anonymous requests but not to a wrong token.

use crate::common::{raw_request, within};
use kopf_testing::Emulator;

async fn emulator() -> Emulator {
    within(
        "the emulator to start",
        Emulator::builder().require_token("s3cret").start(),
    )
    .await
    .expect("the emulator starts")
}

async fn status(emulator: &Emulator, path: &str, authorization: Option<&str>) -> u16 {
    let headers: Vec<(&str, &str)> = authorization
        .map(|a| vec![("Authorization", a)])
        .unwrap_or_default();
    raw_request(emulator.addr(), "GET", path, &headers, b"")
        .await
        .status
}

#[tokio::test]
async fn the_bearer_scheme_is_matched_in_any_case() {
    let emulator = emulator().await;
    let path = "/api/v1/namespaces/default/configmaps";
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let header = format!("{scheme} s3cret");
        assert_eq!(
            status(&emulator, path, Some(&header)).await,
            200,
            "{scheme}"
        );
    }
    assert_eq!(status(&emulator, path, Some("Bearer wrong")).await, 401);
    assert_eq!(status(&emulator, path, Some("Basic czNjcmV0")).await, 401);
    assert_eq!(status(&emulator, path, None).await, 401);
}

#[tokio::test]
async fn public_information_is_readable_anonymously() {
    let emulator = emulator().await;
    for path in ["/version", "/healthz", "/livez", "/readyz"] {
        assert_eq!(status(&emulator, path, None).await, 200, "{path}");
        assert_eq!(
            status(&emulator, path, Some("Bearer s3cret")).await,
            200,
            "{path}"
        );
        // A token that does not authenticate is not taken as anonymous.
        assert_eq!(
            status(&emulator, path, Some("Bearer wrong")).await,
            401,
            "{path}"
        );
    }
    assert_eq!(status(&emulator, "/api", None).await, 401);
    assert_eq!(status(&emulator, "/healthz/ping", None).await, 401);
}
