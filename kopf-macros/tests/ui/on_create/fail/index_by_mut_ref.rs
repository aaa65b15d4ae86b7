use kopf_runtime as kopf;

#[kopf::on_create(k8s_openapi::api::core::v1::Pod)]
async fn created(by_node: &mut kopf::Index) -> kopf::Result<()> {
    let _ = by_node;
    Ok(())
}

fn main() {}
