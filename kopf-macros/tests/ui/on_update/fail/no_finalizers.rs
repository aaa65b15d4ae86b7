use kopf_runtime as kopf;

#[kopf::on_update(k8s_openapi::api::core::v1::Pod, no_finalizers)]
async fn updated() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
