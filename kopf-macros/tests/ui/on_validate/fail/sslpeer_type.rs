use kopf_runtime as kopf;

#[kopf::on_validate(k8s_openapi::api::core::v1::Pod)]
async fn check(sslpeer: &kopf::Patch) -> kopf::Result<()> {
    let _ = sslpeer;
    Ok(())
}

fn main() {}
