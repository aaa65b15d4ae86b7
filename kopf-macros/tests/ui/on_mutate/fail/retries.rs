use kopf_runtime as kopf;

// Webhooks run once per request: no retries.
#[kopf::on_mutate(k8s_openapi::api::core::v1::Pod, retries = 3)]
async fn defaults(patch: &kopf::Patch) {
    let _ = patch;
}

fn main() {}
