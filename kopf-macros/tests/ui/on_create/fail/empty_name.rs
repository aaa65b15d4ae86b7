use kopf_runtime as kopf;

#[kopf::on_create("apps", "")]
async fn created() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
