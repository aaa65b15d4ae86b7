use kopf_runtime as kopf;

struct NotAResource;

#[kopf::on_create(NotAResource)]
async fn created() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
