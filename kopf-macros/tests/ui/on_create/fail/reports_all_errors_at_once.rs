use kopf_runtime as kopf;

// Every problem is reported in one go: an option, a value and a parameter.
#[kopf::on_create(k8s_openapi::api::core::v1::Pod, retry = 3, backoff = "soon")]
async fn created(nmae: &str) -> kopf::Result<()> {
    let _ = nmae;
    Ok(())
}

fn main() {}
