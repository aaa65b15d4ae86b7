use kopf_runtime as kopf;

struct MySpec;

#[kopf::on_update(k8s_openapi::api::core::v1::Pod)]
async fn changed(old: Option<&MySpec>, new: Vec<&serde_json::Value>) -> kopf::Result<()> {
    let _ = (old, new);
    Ok(())
}

fn main() {}
