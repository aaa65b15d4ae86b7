use kopf_runtime as kopf;

#[kopf::on_startup(k8s_openapi::api::core::v1::Pod)]
async fn boot() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
