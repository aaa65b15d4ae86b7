//! Every form of Kopf's resource selectors, and what each resolves to.
use kopf_runtime as kopf;

#[kopf::on_create("kopfexamples")]
#[kopf::on_update("deployments.apps")]
#[kopf::on_delete("kopfexamples.v1.kopf.dev", optional)]
#[kopf::on_resume("apps", "deployment")]
#[kopf::on_event("apps/v1", "Deployment")]
#[kopf::on_field("v1", "pods", field = "spec.nodeName")]
#[kopf::timer("kopf.dev", "v1", "kex", interval = 1)]
#[kopf::daemon(kind = "KopfExample")]
#[kopf::index(plural = "kopfexamples", group = "kopf.dev")]
#[kopf::on_validate(singular = "kopfexample", version = "v1", group = "kopf.dev")]
#[kopf::on_mutate(id = "m", shortcut = "kex", ignore_failures)]
async fn everywhere() -> kopf::Result<()> {
    Ok(())
}

#[kopf::on_event(category = "all", group = "")]
async fn all_of_them() {}

fn main() {
    let registry = kopf::Registry::from_inventory().expect("valid handlers");
    let mut selectors: Vec<String> = registry
        .handlers()
        .iter()
        .filter_map(|h| h.resource().map(ToString::to_string))
        .collect();
    selectors.sort();
    assert_eq!(
        selectors,
        [
            "Deployment.v1.apps",
            "category=all in the core group",
            "deployment.apps",
            "deployments.apps",
            "kex.v1.kopf.dev",
            "kind=KopfExample",
            "kopfexamples",
            "kopfexamples.v1.kopf.dev",
            "plural=kopfexamples in kopf.dev",
            "pods.v1",
            "shortcut=kex",
            "singular=kopfexample in kopf.dev/v1",
        ]
    );
}
