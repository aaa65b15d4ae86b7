//! With `link!`, the records of a handlers crate that the test never uses
//! otherwise are registered (root module and submodules alike).

kopf_runtime::link!(kopf_example_handlers);

#[test]
fn link_keeps_the_records_of_an_otherwise_unused_handlers_crate() {
    let registry = kopf_runtime::Registry::from_inventory().expect("valid handlers");
    let mut paths: Vec<_> = registry.handlers().iter().map(|h| h.source()).collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "kopf_example_handlers::configmap_created",
            "kopf_example_handlers::more::configmaps_by_namespace",
            "kopf_example_handlers::more::goodbye",
        ]
    );
}
