//! Finding `kubectl`, for tests that drive the real client against the
//! emulator ([`Emulator::kubeconfig`](crate::Emulator::kubeconfig) gives it
//! a kubeconfig).

use std::path::PathBuf;

/// The `kubectl` on `PATH`.
///
/// # Panics
/// When there is none, with how to install it: a test that needs kubectl
/// fails loudly rather than passing without it (CI installs it with
/// `.ci/install-tools`).
///
/// ```no_run
/// let version = std::process::Command::new(kopf_testing::kubectl())
///     .args(["version", "--client"])
///     .output()?;
/// assert!(version.status.success());
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn kubectl() -> PathBuf {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("kubectl"))
        .find(|p| p.is_file());
    match found {
        Some(p) => p,
        None => panic!(
            "\n\n*** kubectl is not installed (not found on PATH). ***\n\
             This test drives the real kubectl against the emulator; install it\n\
             (https://kubernetes.io/docs/tasks/tools/, or `bash .ci/install-tools`,\n\
             as CI does) and re-run.\n\n"
        ),
    }
}
