//! The command line of an operator binary promises only what runs: Kopf's
//! flags that kopf-rs does not implement yet are refused by name, before
//! the operator connects anywhere.

use std::process::Command;

/// Runs the example operator with `args`; its exit status and stderr.
fn run(args: &[&str]) -> (std::process::ExitStatus, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_ttl_secrets"))
        .args(args)
        // No cluster anywhere: a flag that were accepted would fail later,
        // on the cluster configuration, with another message.
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KOPF_RUN_PEERING")
        .output()
        .expect("the example runs");
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn flags_not_implemented_yet_are_refused_by_name() {
    for (args, flag) in [
        (
            &["--liveness", "http://0.0.0.0:8080/healthz"][..],
            "--liveness",
        ),
        (&["--peering", "team"], "--peering"),
        (&["-p", "10"], "--priority"),
        (&["--dev"], "--dev"),
    ] {
        let (status, stderr) = run(args);
        assert!(!status.success(), "{args:?} was accepted");
        assert!(
            stderr.contains(&format!("{flag} is not supported yet")),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn the_help_lists_no_flag_that_is_refused() {
    let output = Command::new(env!("CARGO_BIN_EXE_ttl_secrets"))
        .arg("--help")
        .output()
        .expect("the example runs");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in ["--liveness", "--peering", "--priority", "--dev"] {
        assert!(!help.contains(flag), "{flag} in:\n{help}");
    }
    assert!(help.contains("--emulator"));
}
