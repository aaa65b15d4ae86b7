use kopf_runtime as kopf;

#[kopf::on_startup]
async fn configure(settings: kopf::OperatorSettings) -> kopf::Result<()> {
    let _ = settings;
    Ok(())
}

fn main() {}
