//! `kube-emulator`: serves the kopf-testing emulator standalone.
fn main() {}
