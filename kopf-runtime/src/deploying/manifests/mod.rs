//! `my-operator manifests`: the objects that deploy the operator with the
//! permissions it needs and no more, printed as multi-document YAML.
//!
//! `args.rs` holds the command line and `error.rs` why it may not do;
//! `layout.rs` decides from it (names, namespace, ports, the
//! container's arguments, refusals), `rbac.rs` makes the roles of the
//! [`required`](crate::deploying::required) permissions, `workload.rs` the
//! ServiceAccount, Deployment, Service and PodDisruptionBudget.
//!
//! # Guarantees
//! - Nothing is contacted: the output depends on the command line, the
//!   handlers and the declared permissions and CRDs alone, and is the same
//!   for the same input (objects and rules in a fixed order).
//! - The container is given the run flags as they were written, so the
//!   deployed operator serves what `run` with those flags would serve.

use std::ffi::OsString;

use clap::{CommandFactory as _, FromArgMatches as _};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::deploying::{self, Named, Permission};
use crate::model::registry::Registry;

mod args;
mod error;
mod layout;
pub(crate) mod rbac;

#[cfg(feature = "emulator")]
pub(crate) use layout::name_of_binary;
mod workload;

#[cfg(test)]
mod tests;

pub use args::ManifestsArgs;
pub(crate) use error::ManifestError;
use layout::{Invocation, Layout};

/// The subcommand's name, the first argument of the binary.
pub(crate) const SUBCOMMAND: &str = "manifests";

/// What the operator owns and declares, beside its handlers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Owned<'a> {
    pub(crate) registry: &'a Registry,
    /// The CRDs of `Runner::crd`.
    pub(crate) crds: &'a [CustomResourceDefinition],
    /// The permissions of `Runner::rbac` (those of `#[kopf::rbac]` are
    /// added here).
    pub(crate) rbac: &'a [Permission],
    /// Whether Events are posted (`settings.posting.enabled`).
    pub(crate) events: bool,
}

/// The manifests, and the warnings to show beside them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rendered {
    pub(crate) yaml: String,
    pub(crate) warnings: Vec<String>,
}

/// The process's arguments after `manifests`, when it is the first one.
pub(crate) fn invoked() -> Option<Vec<OsString>> {
    let mut argv = std::env::args_os().skip(1);
    (argv.next()? == SUBCOMMAND).then(|| argv.collect())
}

/// Parses the arguments after `manifests`; `binary` is the process's
/// first argument.
///
/// # Errors
/// clap's, as [`clap::Error::exit`] shows them (help included).
pub(crate) fn parse(binary: &str, argv: Vec<OsString>) -> Result<Invocation, clap::Error> {
    let name = std::path::Path::new(binary)
        .file_name()
        .map_or_else(|| binary.to_owned(), |f| f.to_string_lossy().into_owned());
    let mut command = ManifestsArgs::command().bin_name(format!("{name} {SUBCOMMAND}"));
    let all = std::iter::once(OsString::from(SUBCOMMAND)).chain(argv.iter().cloned());
    let matches = command.try_get_matches_from_mut(all)?;
    let args = ManifestsArgs::from_arg_matches(&matches).map_err(|e| e.format(&mut command))?;
    let peering_from_env =
        matches.value_source("peering") == Some(clap::parser::ValueSource::EnvVariable);
    Ok(Invocation {
        args,
        tokens: argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        peering_from_env,
        binary: binary.to_owned(),
    })
}

/// The manifests of `invocation` for the operator that `owned` describes.
///
/// # Errors
/// [`ManifestError`]: a command line that cannot be deployed, permissions
/// that cannot be derived.
pub(crate) fn render(invocation: &Invocation, owned: Owned<'_>) -> Result<Rendered, ManifestError> {
    let mut declared = deploying::declared();
    declared.extend(owned.rbac.iter().cloned());
    let mut layout = Layout::decide(invocation, owned.registry, declared)?;
    layout.plan.events = owned.events;
    let permissions = deploying::required(owned.registry, &layout.plan, &|r| {
        Named::of(r).map(|n| vec![n])
    })?;
    let serialize = |e: serde_json::Error| ManifestError::Serialize(e.to_string());
    let mut documents = Vec::new();
    if invocation.args.crds {
        let mut crds = owned.crds.to_vec();
        crds.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        for crd in crds {
            documents.push(serde_json::to_value(crd).map_err(serialize)?);
        }
    }
    documents.push(serde_json::to_value(workload::service_account(&layout)).map_err(serialize)?);
    documents.extend(rbac::objects(&layout, &permissions).map_err(serialize)?);
    documents.push(serde_json::to_value(workload::deployment(&layout)).map_err(serialize)?);
    if let Some(service) = workload::service(&layout) {
        documents.push(serde_json::to_value(service).map_err(serialize)?);
    }
    if let Some(budget) = workload::disruption_budget(&layout) {
        documents.push(serde_json::to_value(budget).map_err(serialize)?);
    }
    let yaml = serde_saphyr::to_string_multiple(&documents)
        .map_err(|e| ManifestError::Serialize(e.to_string()))?;
    Ok(Rendered {
        yaml,
        warnings: layout.warnings,
    })
}

/// `manifests` as the binary runs it: prints the manifests to stdout and
/// the warnings to stderr; on an error, prints it to stderr and exits
/// with 2 (usage) or 1.
pub(crate) fn main(argv: Vec<OsString>, owned: Owned<'_>) {
    let binary = std::env::args()
        .next()
        .unwrap_or_else(|| "operator".to_owned());
    let invocation = match parse(&binary, argv) {
        Ok(invocation) => invocation,
        Err(error) => error.exit(),
    };
    match render(&invocation, owned) {
        Ok(rendered) => {
            for warning in &rendered.warnings {
                eprintln!("warning: {warning}");
            }
            write_out(&rendered.yaml);
        }
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(error.exit_code());
        }
    }
}

/// Writes `yaml` to stdout; a reader that stops early (`| head`) is no
/// error, any other failure is (exit code 1).
fn write_out(yaml: &str) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_all(yaml.as_bytes())
        .and_then(|()| stdout.flush());
    if let Err(error) = written
        && error.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("error: cannot write the manifests: {error}");
        std::process::exit(1);
    }
}
