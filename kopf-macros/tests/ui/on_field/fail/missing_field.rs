use kopf_runtime as kopf;

#[kopf::on_field(k8s_openapi::api::core::v1::Pod, old = kopf::ABSENT)]
async fn changed() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
