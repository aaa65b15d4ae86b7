use kopf_runtime as kopf;

#[kopf::on_create(k8s_openapi::api::core::v1::Pod)]
async fn created(nmae: &str) -> kopf::Result<()> {
    let _ = nmae;
    Ok(())
}

fn main() {}
