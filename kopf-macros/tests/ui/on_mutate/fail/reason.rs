use kopf_runtime as kopf;

// `reason` is for change handlers; webhooks have `operation`.
#[kopf::on_mutate(k8s_openapi::api::core::v1::Pod)]
async fn defaults(reason: kopf::Reason) {
    let _ = reason;
}

fn main() {}
