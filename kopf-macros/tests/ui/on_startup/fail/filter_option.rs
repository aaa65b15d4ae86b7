use kopf_runtime as kopf;

#[kopf::on_startup(labels("app" = "x"))]
async fn boot() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
