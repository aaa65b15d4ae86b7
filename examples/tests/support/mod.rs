//! What the examples' tests share beyond [`kopf_tests::process`]: the
//! RBAC rules an example may leave unused, and why.

#![allow(dead_code)] // each test binary uses a part

use kopf_tests::process::assert_explained;
pub(crate) use kopf_tests::process::{Example, at, free_port};

/// Generated rules that a run may leave unused, and why they must stay:
/// Events are posted only by explicit `posting::*` calls, the runtime's
/// reports (tasks that will not stop, undecodable objects) and, with
/// `settings.posting.loggers`, handlers' log lines.
pub(crate) const EVENTS_MAY_BE_UNUSED: (&str, &str) = (
    r#""resources":["events"]"#,
    "Events are posted only when a handler posts one or the runtime reports a problem",
);

/// The `status` subresource is written only when a handler returns a
/// result or patches `status`; the operator cannot know beforehand
/// whether its handlers will.
pub(crate) const STATUS_MAY_BE_UNUSED: (&str, &str) = (
    r#"/status"]"#,
    "status is written only when a handler returns a result or patches it",
);

/// The managed webhook configurations are patched only when they exist
/// already as the operator writes them: when the resources it serves are
/// discovered after its first write (a race at start-up), after a restart,
/// and at exit. A run may create them with their final content at once.
pub(crate) const MANAGED_PATCH_MAY_BE_UNUSED: (&str, &str) = (
    r#""resourceNames":["auto.kopf.dev"]"#,
    "the managed configurations are patched only when they exist already",
);

/// Fails the test unless the output of an example that ran an emulator
/// of its own lists, as unused (after [`kopf_examples::UNUSED_RULES`]),
/// only rules that `allowed` names (as
/// [`Example::assert_every_rule_used`]).
pub(crate) fn assert_printed_rules_used(name: &str, output: &str, allowed: &[(&str, &str)]) {
    let line = output
        .lines()
        .find_map(|line| line.strip_prefix(kopf_examples::UNUSED_RULES))
        .unwrap_or_else(|| panic!("{name} printed no unused rules; its output:\n{output}"));
    let unused: Vec<String> = serde_json::from_str(line).expect("a JSON list");
    assert_explained(name, &unused, allowed);
}
