//! `Option<&T>` borrows the admission parameters and the objects.
use kopf_runtime as kopf;
use serde_json::Value;

#[kopf::on_validate(k8s_openapi::api::core::v1::Pod)]
async fn check(
    userinfo: Option<&Value>,
    sslpeer: Option<&Value>,
    subresource: Option<&str>,
    old: Option<&Value>,
    new: Option<&k8s_openapi::api::core::v1::Pod>,
) -> kopf::Result<()> {
    let _ = (userinfo, sslpeer, subresource, old, new);
    Ok(())
}

fn main() {}
