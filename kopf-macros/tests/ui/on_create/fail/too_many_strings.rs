use kopf_runtime as kopf;

#[kopf::on_create("kopf.dev", "v1", "kopfexamples", "extra")]
async fn created() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
