use kopf_runtime as kopf;

#[kopf::on_create(k8s_openapi::api::core::v1::Pod, retry = 3)]
async fn created() -> kopf::Result<()> {
    Ok(())
}

fn main() {
    // The fn stays intact: no further errors about it.
    let _ = created;
}
