//! trybuild UI tests: `ui/<macro>/pass/*.rs` compile and run, `ui/<macro>/fail/*.rs`
//! fail with the reviewed `.stderr` next to them. Regenerate with
//! `TRYBUILD=overwrite cargo test -p kopf-macros --test ui`, then review every diff.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/*/pass/*.rs");
    cases.compile_fail("tests/ui/*/fail/*.rs");
}

/// What the compiler says about a handler names only public paths: the
/// runtime's `__private` module is not for users to read about.
#[test]
fn expected_errors_name_no_private_path() {
    let ui = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui");
    let mut naming = Vec::new();
    for kind in std::fs::read_dir(&ui).expect("tests/ui") {
        let fail = kind.expect("a macro's directory").path().join("fail");
        let Ok(cases) = std::fs::read_dir(&fail) else {
            continue;
        };
        for case in cases {
            let path = case.expect("a fail case").path();
            if path.extension().is_some_and(|e| e == "stderr")
                && std::fs::read_to_string(&path)
                    .expect("a .stderr file")
                    .contains("__private")
            {
                naming.push(path);
            }
        }
    }
    assert!(naming.is_empty(), "these name `__private`: {naming:?}");
}
