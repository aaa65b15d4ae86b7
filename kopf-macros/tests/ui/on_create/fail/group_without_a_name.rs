use kopf_runtime as kopf;

#[kopf::on_create(group = "apps")]
async fn created() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
