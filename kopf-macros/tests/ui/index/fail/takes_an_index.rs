use kopf_runtime as kopf;

#[kopf::index(k8s_openapi::api::core::v1::Pod)]
async fn by_node(by_owner: &kopf::Index) -> kopf::Result<()> {
    let _ = by_owner;
    Ok(())
}

fn main() {}
