use kopf_runtime as kopf;

#[kopf::on_create(k8s_openapi::api::core::v1::Pod)]
async fn created((a, b): (u32, u32)) -> kopf::Result<()> {
    let _ = (a, b);
    Ok(())
}

fn main() {}
