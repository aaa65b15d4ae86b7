use kopf_runtime as kopf;

#[kopf::on_create("kopfexamples")]
async fn created() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
