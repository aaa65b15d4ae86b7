use kopf_runtime as kopf;

#[kopf::on_create(id = "x")]
async fn created() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
