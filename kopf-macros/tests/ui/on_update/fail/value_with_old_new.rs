use kopf_runtime as kopf;

#[kopf::on_update(k8s_openapi::api::core::v1::Pod, field = "spec.x", value = 1, old = 2)]
async fn updated() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
