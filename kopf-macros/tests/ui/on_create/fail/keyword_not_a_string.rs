use kopf_runtime as kopf;

#[kopf::on_create(kind = Deployment)]
async fn created() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
