use kopf_runtime as kopf;

#[kopf::on_create(k8s_openapi::api::core::v1::Pod, value = "x")]
async fn created() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
