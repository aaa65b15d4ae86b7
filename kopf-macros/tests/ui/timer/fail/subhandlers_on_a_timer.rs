use kopf_runtime as kopf;

#[kopf::timer(k8s_openapi::api::core::v1::Pod, interval = 10)]
async fn tick(subhandlers: kopf::Subhandlers) -> kopf::Result<()> {
    let _ = subhandlers;
    Ok(())
}

fn main() {}
