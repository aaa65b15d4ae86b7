use kopf_runtime as kopf;

#[kopf::on_event(k8s_openapi::api::core::v1::Pod)]
async fn spied(r#type: kopf::EventType) {
    let _ = r#type;
}

fn main() {}
