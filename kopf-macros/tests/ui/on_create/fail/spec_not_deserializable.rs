use kopf_runtime as kopf;

struct MySpec;

#[kopf::on_create(k8s_openapi::api::core::v1::Pod)]
async fn created(spec: &MySpec) -> kopf::Result<()> {
    let _ = spec;
    Ok(())
}

fn main() {}
