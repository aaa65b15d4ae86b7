use kopf_runtime as kopf;

#[kopf::on_create(kind = "Deployment", plural = "deployments")]
async fn created() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
