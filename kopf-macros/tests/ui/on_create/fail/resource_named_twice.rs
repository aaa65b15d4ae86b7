use kopf_runtime as kopf;

// A positional resource and a keyword name: which one is meant?
#[kopf::on_create("apps", "deployments", kind = "Deployment")]
async fn created() -> kopf::Result<()> {
    Ok(())
}

fn main() {}
