use kopf_runtime as kopf;

#[kopf::on_startup(kind = "Pod")]
async fn boot() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
