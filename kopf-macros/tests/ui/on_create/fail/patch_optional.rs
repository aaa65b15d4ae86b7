use kopf_runtime as kopf;

#[kopf::on_create(k8s_openapi::api::core::v1::Pod)]
async fn created(patch: Option<&kopf::Patch>) -> kopf::Result<()> {
    let _ = patch;
    Ok(())
}

fn main() {}
