use kopf_runtime as kopf;

#[kopf::on_startup]
async fn boot(spec: &serde_json::Value) -> kopf::Result<()> {
    let _ = spec;
    Ok(())
}

fn main() {}
