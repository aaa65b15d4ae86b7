use kopf_runtime as kopf;

#[kopf::on_cleanup]
async fn bye(settings: &mut kopf::OperatorSettings) {
    let _ = settings;
}

fn main() {}
