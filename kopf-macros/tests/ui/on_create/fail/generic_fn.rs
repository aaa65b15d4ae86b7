use kopf_runtime as kopf;

#[kopf::on_create(k8s_openapi::api::core::v1::Pod)]
async fn created<T>() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
