//! `kube-emulator`: serves the kopf-testing emulator standalone.
//!
//! ```text
//! kube-emulator --port 0 --kubeconfig /tmp/kc --crd example.com/v1/widgets:Widget \
//!               --crd example.com/v1/clusterwidgets:ClusterWidget:Cluster --preload objects.yaml -v
//! ```
//! Once it listens it writes the kubeconfig (atomically), then prints
//! `listening on http://127.0.0.1:PORT`; it exits with 0 on SIGTERM or SIGINT.
//!
//! The limits on clients (see the crate docs) are the library's; the watch
//! history's bounds and the connection timeouts and cap have flags.
//! `--webhook-service ops/hook:443=127.0.0.1:9443` (repeatable) serves
//! admission webhooks that configurations reach through a Service.
//! `--rbac` enforces RBAC (see `EmulatorBuilder::rbac`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use kopf_testing::Emulator;

/// An in-memory Kubernetes API server for testing operators.
#[derive(Debug, Parser)]
#[command(name = "kube-emulator", version)]
struct Args {
    /// Port on 127.0.0.1 (0 picks a free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Write a kubeconfig for the emulator here once it listens.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Register a CRD: `group/version/plural:Kind` or `group/version/plural:Kind:Cluster`.
    #[arg(long, value_name = "G/V/PLURAL:KIND[:Cluster]")]
    crd: Vec<String>,
    /// Create the objects of a multi-document YAML file at start.
    #[arg(long, value_name = "FILE.yaml")]
    preload: Vec<PathBuf>,
    /// Keep at most this many bytes of watch events, over every resource
    /// [default: 134217728, 128 MiB]; watches resuming from before the oldest
    /// kept event get 410 Gone.
    #[arg(long, value_name = "BYTES")]
    history_bytes: Option<usize>,
    /// Keep watch events at most this long [default: 300].
    #[arg(long, value_name = "SECONDS")]
    history_age: Option<u64>,
    /// Close a connection whose request headers take longer, from their
    /// first byte [default: 30].
    #[arg(long, value_name = "SECONDS")]
    header_read_timeout: Option<u64>,
    /// Close a connection with no request in flight for this long; streaming
    /// watches are requests in flight [default: 120].
    #[arg(long, value_name = "SECONDS")]
    idle_timeout: Option<u64>,
    /// Serve at most this many connections; at the cap the one idle the
    /// longest is closed, and when all are busy a newcomer gets 503 [default: 1024].
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Give each request this long for its admission webhooks together;
    /// past it the request gets 504 (the API server's flag) [default: 60].
    #[arg(long, value_name = "SECONDS")]
    request_timeout: Option<u64>,
    /// Serve the admission webhooks a configuration reaches through a
    /// Service at a local address (the emulator resolves no Service DNS):
    /// `NAMESPACE/NAME:PORT=HOST:PORT`; certificates are verified for
    /// `NAME.NAMESPACE.svc`.
    #[arg(long, value_name = "NS/NAME:PORT=HOST:PORT")]
    webhook_service: Vec<String>,
    /// Enforce RBAC as an API server does: requests without a token are
    /// `system:admin` (allowed everything); tokens minted by the
    /// TokenRequest API (`kubectl create token NAME`) are their
    /// ServiceAccount's, allowed what the stored Roles, ClusterRoles and
    /// bindings grant, and `403 Forbidden` otherwise. Which rules allowed
    /// what, and every denial: `GET /_emulator/rbac/usage`.
    #[arg(long)]
    rbac: bool,
    /// Log more (-v: debug, -vv: trace).
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

/// A parsed `--webhook-service` value.
#[derive(Debug, PartialEq)]
struct ServiceSpec {
    namespace: String,
    name: String,
    port: u16,
    addr: std::net::SocketAddr,
}

/// Parses `NAMESPACE/NAME:PORT=HOST:PORT`.
fn parse_service(spec: &str) -> Result<ServiceSpec, String> {
    let usage = || {
        format!(
            "invalid --webhook-service {spec:?}: expected NAMESPACE/NAME:PORT=HOST:PORT, e.g. default/kopf-webhook:443=127.0.0.1:9443"
        )
    };
    let (service, addr) = spec.split_once('=').ok_or_else(usage)?;
    let (path, port) = service.rsplit_once(':').ok_or_else(usage)?;
    let (namespace, name) = path.split_once('/').ok_or_else(usage)?;
    if namespace.is_empty() || name.is_empty() {
        return Err(usage());
    }
    Ok(ServiceSpec {
        namespace: namespace.into(),
        name: name.into(),
        port: port.parse().map_err(|_| usage())?,
        addr: addr.parse().map_err(|_| usage())?,
    })
}

/// A parsed `--crd` value.
#[derive(Debug, PartialEq)]
struct CrdSpec {
    group: String,
    version: String,
    plural: String,
    kind: String,
    namespaced: bool,
}

/// Parses `group/version/plural:Kind[:Cluster|:Namespaced]`.
fn parse_crd(spec: &str) -> Result<CrdSpec, String> {
    let usage = || {
        format!(
            "invalid --crd {spec:?}: expected group/version/plural:Kind[:Cluster], e.g. example.com/v1/widgets:Widget"
        )
    };
    let mut parts = spec.split(':');
    let path = parts.next().ok_or_else(usage)?;
    let kind = parts.next().filter(|k| !k.is_empty()).ok_or_else(usage)?;
    let namespaced = match parts.next() {
        None | Some("Namespaced") => true,
        Some("Cluster") => false,
        Some(_) => return Err(usage()),
    };
    if parts.next().is_some() {
        return Err(usage());
    }
    let segs: Vec<&str> = path.split('/').collect();
    let [group, version, plural] = segs.as_slice() else {
        return Err(usage());
    };
    if [group, version, plural].iter().any(|s| s.is_empty()) {
        return Err(usage());
    }
    Ok(CrdSpec {
        group: (*group).into(),
        version: (*version).into(),
        plural: (*plural).into(),
        kind: kind.into(),
        namespaced,
    })
}

async fn run(args: Args) -> Result<(), String> {
    let mut builder = Emulator::builder().port(args.port);
    if let Some(bytes) = args.history_bytes {
        builder = builder.history_bytes(bytes);
    }
    if let Some(secs) = args.history_age {
        builder = builder.history_age(Duration::from_secs(secs));
    }
    if let Some(secs) = args.header_read_timeout {
        builder = builder.header_read_timeout(Duration::from_secs(secs));
    }
    if let Some(secs) = args.idle_timeout {
        builder = builder.idle_timeout(Duration::from_secs(secs));
    }
    if let Some(n) = args.max_connections {
        builder = builder.max_connections(n);
    }
    if let Some(secs) = args.request_timeout {
        builder = builder.request_timeout(Duration::from_secs(secs));
    }
    for spec in &args.crd {
        let crd = parse_crd(spec)?;
        builder = builder.crd(
            &crd.group,
            &crd.version,
            &crd.plural,
            &crd.kind,
            crd.namespaced,
        );
    }
    for path in &args.preload {
        builder = builder.preload_file(path);
    }
    for spec in &args.webhook_service {
        let s = parse_service(spec)?;
        builder = builder.webhook_service(s.namespace, s.name, s.port, s.addr);
    }
    if args.rbac {
        builder = builder.rbac();
    }
    let emulator = builder.start().await.map_err(|e| e.to_string())?;
    // The socket listens already; write the kubeconfig before announcing it,
    // so a script waiting for the line never races the file.
    if let Some(path) = &args.kubeconfig {
        emulator
            .write_kubeconfig(path)
            .map_err(|e| format!("cannot write kubeconfig {}: {e}", path.display()))?;
        tracing::info!(path = %path.display(), "kubeconfig written");
    }
    println!("listening on {}", emulator.url());
    wait_for_signal()
        .await
        .map_err(|e| format!("cannot listen for signals: {e}"))?;
    tracing::info!("shutting down");
    emulator.shutdown().await;
    Ok(())
}

async fn wait_for_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        Ok(())
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let level = match args.verbose {
        0 => "warn",
        1 => "kopf_testing=debug,kube_emulator=debug,info",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kube-emulator: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kube-emulator: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crd_specs_parse() {
        let c = parse_crd("example.com/v1/widgets:Widget").unwrap();
        assert_eq!(
            (
                c.group.as_str(),
                c.version.as_str(),
                c.plural.as_str(),
                c.kind.as_str(),
                c.namespaced
            ),
            ("example.com", "v1", "widgets", "Widget", true)
        );
        assert!(
            !parse_crd("example.com/v1/things:Thing:Cluster")
                .unwrap()
                .namespaced
        );
        assert!(parse_crd("example.com/widgets:Widget").is_err());
        assert!(parse_crd("example.com/v1/widgets").is_err());
        assert!(parse_crd("example.com/v1/widgets:Widget:Galaxy").is_err());
    }

    #[test]
    fn webhook_services_parse() {
        assert_eq!(
            parse_service("ops/hook:443=127.0.0.1:9443").unwrap(),
            ServiceSpec {
                namespace: "ops".into(),
                name: "hook".into(),
                port: 443,
                addr: ([127, 0, 0, 1], 9443).into(),
            }
        );
        assert!(parse_service("hook:443=127.0.0.1:9443").is_err());
        assert!(parse_service("ops/hook=127.0.0.1:9443").is_err());
        assert!(parse_service("ops/hook:443=localhost").is_err());
    }

    #[test]
    fn limit_flags_parse() {
        let args = Args::try_parse_from([
            "kube-emulator",
            "--history-bytes",
            "1048576",
            "--history-age",
            "60",
            "--header-read-timeout",
            "5",
            "--idle-timeout",
            "10",
            "--max-connections",
            "64",
            "--request-timeout",
            "15",
        ])
        .unwrap();
        assert_eq!(args.history_bytes, Some(1_048_576));
        assert_eq!(args.history_age, Some(60));
        assert_eq!(args.header_read_timeout, Some(5));
        assert_eq!(args.idle_timeout, Some(10));
        assert_eq!(args.max_connections, Some(64));
        assert_eq!(args.request_timeout, Some(15));
    }
}
