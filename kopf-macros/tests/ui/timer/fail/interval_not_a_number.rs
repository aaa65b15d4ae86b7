use kopf_runtime as kopf;

#[kopf::timer(k8s_openapi::api::core::v1::Pod, interval = "10s")]
async fn tick() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
