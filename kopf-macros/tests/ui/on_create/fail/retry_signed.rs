use kopf_runtime as kopf;

#[kopf::on_create(k8s_openapi::api::core::v1::Pod)]
async fn created(retry: i32) -> kopf::Result<()> {
    let _ = retry;
    Ok(())
}

fn main() {}
