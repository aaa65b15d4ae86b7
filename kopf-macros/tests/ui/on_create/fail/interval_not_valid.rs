use kopf_runtime as kopf;

#[kopf::on_create(k8s_openapi::api::core::v1::Pod, interval = 10)]
async fn created() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
