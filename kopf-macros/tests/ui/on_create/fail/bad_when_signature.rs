use kopf_runtime as kopf;

fn is_ready(name: &str) -> bool {
    name.is_empty()
}

#[kopf::on_create(k8s_openapi::api::core::v1::Pod, when = is_ready)]
async fn created() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
