use kopf_runtime as kopf;

// Kopf's deprecated `operation=` is not accepted: `operations(…)` is.
#[kopf::on_validate(k8s_openapi::api::core::v1::Pod, operation = "CREATE")]
async fn check() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
