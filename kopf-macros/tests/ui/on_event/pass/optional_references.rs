//! `Option<&T>` borrows the event and its type.
use kopf_runtime as kopf;
use serde_json::Value;

#[kopf::on_event(k8s_openapi::api::core::v1::Pod)]
async fn spied(event: Option<&Value>, r#type: Option<&str>, name: Option<&str>) {
    let _ = (event, r#type, name);
}

fn main() {}
