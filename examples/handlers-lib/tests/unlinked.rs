//! Without `link!`, a dependency from which nothing is used contributes no
//! records: this pins the problem that `link!` solves.

#[test]
fn records_of_an_unreferenced_crate_are_dropped_without_link() {
    let registry = kopf_runtime::Registry::from_inventory().expect("valid handlers");
    assert!(registry.is_empty(), "{:?}", registry.handlers());
}
