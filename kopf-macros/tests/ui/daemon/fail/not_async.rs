use kopf_runtime as kopf;

#[kopf::daemon(k8s_openapi::api::core::v1::Pod)]
fn monitor(stopped: kopf::Stopped) -> kopf::Result<()> {
    let _ = stopped;
    Ok(())
}

fn main() {}
