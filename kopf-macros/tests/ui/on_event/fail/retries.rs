use kopf_runtime as kopf;

#[kopf::on_event(k8s_openapi::api::core::v1::Pod, retries = 1)]
async fn spied() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
