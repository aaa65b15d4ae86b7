//! Building the binaries the runner starts, and finding the workspace.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// The workspace's root directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Builds `kube-emulator` and the bench binaries `bins` (every one when
/// empty) in the release or the debug profile.
///
/// # Errors
/// If cargo cannot run or the build fails.
pub fn build(release: bool, bins: &[&str]) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root())
        .args(["build", "--quiet", "-p", "kopf-bench"]);
    if bins.is_empty() {
        cmd.arg("--bins");
    }
    for bin in bins {
        cmd.args(["--bin", bin]);
    }
    cmd.args([
        "-p",
        "kopf-testing",
        "--features",
        "kopf-testing/cli",
        "--bin",
        "kube-emulator",
    ]);
    if release {
        cmd.arg("--release");
    }
    if !cmd.status().context("cannot run cargo")?.success() {
        bail!("building the benchmark binaries failed");
    }
    Ok(())
}
