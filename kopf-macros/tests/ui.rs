//! trybuild UI tests: `ui/<macro>/pass/*.rs` compile and run, `ui/<macro>/fail/*.rs`
//! fail with the reviewed `.stderr` next to them. Regenerate with
//! `TRYBUILD=overwrite cargo test -p kopf-macros --test ui`, then review every diff.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/*/pass/*.rs");
    cases.compile_fail("tests/ui/*/fail/*.rs");
}
