use kopf_runtime as kopf;

#[kopf::on_validate(k8s_openapi::api::core::v1::Pod, operations("CREATE", "PATCH"))]
async fn check() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
