//! The command line of an operator binary promises only what runs: every
//! flag it lists works, options that need another flag are refused naming
//! it, and an endpoint that cannot be served stops it, before the operator
//! connects anywhere.

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
fn peering_options_without_a_lease_are_refused_naming_the_flag() {
    for args in [&["-p", "10"][..], &["--dev"], &["--identity", "me"]] {
        let (status, stderr) = run(args);
        assert!(!status.success(), "{args:?} was accepted");
        assert!(stderr.contains("--peering <NAME>"), "{args:?}: {stderr}");
    }
}

#[test]
fn the_help_lists_the_flags() {
    let output = Command::new(env!("CARGO_BIN_EXE_ttl_secrets"))
        .arg("--help")
        .output()
        .expect("the example runs");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--emulator",
        "--liveness",
        "--metrics",
        "--peering",
        "--priority",
        "--dev",
        "--standalone",
    ] {
        assert!(help.contains(flag), "{flag} not in:\n{help}");
    }
}

#[test]
fn an_endpoint_address_taken_stops_the_operator_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = taken.local_addr().expect("bound").port();
    let url = format!("http://127.0.0.1:{port}/healthz");
    let (status, stderr) = run(&["--liveness", &url]);
    assert!(!status.success(), "a taken port was accepted");
    assert!(
        stderr.contains(&format!(
            "cannot listen on 127.0.0.1:{port} for the liveness endpoint"
        )),
        "{stderr}"
    );
}
