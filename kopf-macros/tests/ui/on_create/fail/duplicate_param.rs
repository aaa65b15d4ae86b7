use kopf_runtime as kopf;

#[kopf::on_create(k8s_openapi::api::core::v1::Pod)]
async fn created(name: &str, _name: String) -> kopf::Result<()> {
    let _ = name;
    Ok(())
}

fn main() {}
