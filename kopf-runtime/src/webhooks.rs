//! The admission webhook server ([`WebhookServer`]): HTTPS with rustls,
//! HTTP/1.1 only, each `on_validate`/`on_mutate` handler at the path of its
//! id beneath the server's root path, as Kopf's `WebhookServer` lays them
//! out; and, if asked, the webhook configurations it keeps up to date
//! (`managed`).
//!
//! `args.rs` holds the flags, `tls.rs` the certificates, `server.rs` the
//! listener, `managed.rs` the configurations; the reviews themselves are
//! [`admission`](crate::webhooks::admission)'s.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

pub(crate) mod admission;
mod args;
pub(crate) mod managed;
mod server;
mod tls;

pub use args::WebhookArgs;
pub(crate) use server::serve;

pub(crate) use args::ServiceRef;
use tls::{CertSource, Certificates};

use crate::operations::listening::{self, ListenUrl, Scheme};

/// Why the webhook server could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// The flags do not make a server.
    #[error("{0}")]
    Flags(String),
    /// `--webhook-server` is not a URL that can be served.
    #[error("the webhook server URL {url:?} cannot be served: {why}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong, and what would do.
        why: String,
    },
    /// The address cannot be listened on.
    #[error(
        "cannot listen on {address} for the webhook server: {source}; pick another port or address"
    )]
    Bind {
        /// `host:port`.
        address: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// The certificates do not load, or cannot be made.
    #[error("the webhook server's certificate: {0}")]
    Certificate(String),
    /// The CA bundle cannot be written to `--webhook-ca-dump`.
    #[error("cannot write the CA bundle to {path}: {source}")]
    CaDump {
        /// The file.
        path: PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
}

/// The bound listener of the admission webhook server, with its
/// certificates and what it tells the cluster.
///
/// Bound before the operator starts, so that an address that cannot be had
/// or certificates that do not load are start-up errors, and a port `0`
/// is known ([`WebhookServer::url`]). The operator serves it on every
/// replica, from after its start-up handlers until it exits.
///
/// ```no_run
/// use clap::Parser;
/// use kopf_runtime::{Args, Operator, Registry, WebhookServer};
///
/// # async fn example(registry: Registry) -> Result<(), Box<dyn std::error::Error>> {
/// let args = Args::try_parse_from(["operator", "--webhook-server", "https://127.0.0.1:0"])?;
/// let server = WebhookServer::bind(&args.webhooks).await?;
/// println!("webhooks at {}, CA:\n{}", server.url(), server.ca_pem());
/// Operator::new(registry).webhooks(server).run().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct WebhookServer {
    listener: TcpListener,
    /// The URL clients reach the root at (no trailing `/`).
    url: String,
    /// The root path (no trailing `/`; empty for `/`).
    path: String,
    certificates: Certificates,
    ca_dump: Option<PathBuf>,
    managed: Option<managed::Managed>,
}

impl WebhookServer {
    /// Binds the server that `args` describe (`--webhook-server` and the
    /// flags beside it), and writes the CA bundle to `--webhook-ca-dump`.
    ///
    /// # Errors
    /// [`WebhookError`]: no `--webhook-server`, a URL that cannot be served,
    /// an address that cannot be had, certificates that do not load.
    pub async fn bind(args: &WebhookArgs) -> Result<Self, WebhookError> {
        args.check()?;
        let url = args
            .server
            .as_deref()
            .ok_or_else(|| WebhookError::Flags("no --webhook-server URL is given".to_owned()))?;
        let target = target(url)?;
        let listener = TcpListener::bind((target.host.as_str(), target.port))
            .await
            .map_err(|source| WebhookError::Bind {
                address: format!("{}:{}", listening::url_host(&target.host), target.port),
                source,
            })?;
        let port = listener
            .local_addr()
            .map_or(target.port, |address| address.port());
        let accessible = accessible(&target.host);
        let host = args.host.clone().unwrap_or_else(|| accessible.clone());
        let source = match (&args.cert, &args.key) {
            (Some(cert), Some(key)) => CertSource::Files {
                cert: cert.clone(),
                key: key.clone(),
                ca: args.ca.clone(),
            },
            _ => {
                let mut names = vec![host.clone(), accessible];
                names.extend(args.extra_sans.iter().cloned());
                let mut seen = std::collections::HashSet::new();
                names.retain(|n| seen.insert(n.clone()));
                CertSource::SelfSigned { names }
            }
        };
        let certificates = Certificates::new(&source)?;
        let port_part = if port == 443 {
            String::new()
        } else {
            format!(":{port}")
        };
        let public_url = format!(
            "https://{}{port_part}{}",
            listening::url_host(&host),
            target.path
        );
        let service = args.service.as_deref().map(ServiceRef::parse).transpose()?;
        let managed = args.managed.as_ref().map(|name| managed::Managed {
            name: name.clone(),
            client: match service {
                Some(service) => managed::ClientConfig::Service {
                    service,
                    path: target.path.clone(),
                },
                None => managed::ClientConfig::Url(public_url.clone()),
            },
        });
        let server = Self {
            listener,
            url: public_url,
            path: target.path,
            certificates,
            ca_dump: args.ca_dump.clone(),
            managed,
        };
        dump_ca(server.ca_dump.as_deref(), &server.ca_pem())?;
        Ok(server)
    }

    /// The URL clients reach the webhooks at (a handler's is this URL,
    /// `/`, and its id).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The CA bundle (PEM) that clients verify the server with, as it is now.
    pub fn ca_pem(&self) -> String {
        self.certificates.ca().borrow().to_string()
    }

    /// The CA bundle as it is now and as it changes.
    pub(crate) fn ca(&self) -> watch::Receiver<Arc<str>> {
        self.certificates.ca()
    }

    /// The configurations to keep up to date, if asked.
    pub(crate) fn managed(&self) -> Option<&managed::Managed> {
        self.managed.as_ref()
    }
}

/// Writes the CA bundle to `--webhook-ca-dump`, whole or not at all.
fn dump_ca(path: Option<&std::path::Path>, pem: &str) -> Result<(), WebhookError> {
    let Some(path) = path else {
        return Ok(());
    };
    let failed = |source| WebhookError::CaDump {
        path: path.to_owned(),
        source,
    };
    let partial = path.with_extension("partial");
    std::fs::write(&partial, pem).map_err(failed)?;
    std::fs::rename(&partial, path).map_err(failed)
}

/// How `--webhook-server` is written.
const HTTPS: Scheme = Scheme {
    name: "https",
    default_port: 443,
    example: "https://0.0.0.0:9443",
    only: "only https:// is served: API servers call webhooks over HTTPS",
};

/// `--webhook-server` taken apart; the path without a trailing `/`.
pub(crate) fn target(url: &str) -> Result<ListenUrl, WebhookError> {
    let mut target = ListenUrl::parse(url, &HTTPS).map_err(|why| WebhookError::InvalidUrl {
        url: url.to_owned(),
        why,
    })?;
    target.path = target.path.trim_end_matches('/').to_owned();
    Ok(target)
}

/// The address clients reach a listening address at: the loopback for
/// "every interface" (Kopf's `_get_accessible_addr`).
fn accessible(host: &str) -> String {
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) if ip.is_unspecified() => "127.0.0.1".to_owned(),
        Ok(IpAddr::V6(ip)) if ip.is_unspecified() => "::1".to_owned(),
        _ => host.to_owned(),
    }
}

/// A handler id as a URL path segment (Kopf's `urllib.parse.quote`: `/`
/// and the unreserved characters stay as they are).
pub(crate) fn quote(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A URL path's `%XX` escapes decoded; `None` if they make no UTF-8.
pub(crate) fn unquote(path: &str) -> Option<String> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = path.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_taken_apart_and_only_https_is_served() {
        assert_eq!(
            target("https://0.0.0.0:9443/hooks/").expect("valid"),
            ListenUrl {
                host: "0.0.0.0".into(),
                port: 9443,
                path: "/hooks".into()
            }
        );
        assert_eq!(target("https://[::]").expect("valid").port, 443);
        assert_eq!(target("https://h:1").expect("valid").path, "");
        for bad in ["http://0.0.0.0:80", "0.0.0.0:9443", "https://h:1/?x=1"] {
            assert!(target(bad).is_err(), "{bad}");
        }
        assert_eq!(accessible("0.0.0.0"), "127.0.0.1");
        assert_eq!(accessible("::"), "::1");
        assert_eq!(accessible("example.com"), "example.com");
    }

    #[test]
    fn ids_are_quoted_as_kopf_quotes_them_and_unquoted_back() {
        assert_eq!(quote("check/spec.size"), "check/spec.size");
        assert_eq!(quote("a b%"), "a%20b%25");
        assert_eq!(unquote("a%20b%25").as_deref(), Some("a b%"));
        assert_eq!(unquote("%zz").as_deref(), Some("%zz"));
    }

    #[tokio::test]
    async fn a_bound_server_knows_its_port_and_dumps_its_ca() {
        let dump = std::env::temp_dir().join(format!("kopf-ca-{}.pem", std::process::id()));
        let args = WebhookArgs {
            server: Some("https://127.0.0.1:0/hooks".into()),
            ca_dump: Some(dump.clone()),
            ..WebhookArgs::default()
        };
        let server = WebhookServer::bind(&args).await.expect("bound");
        assert!(
            server.url().starts_with("https://127.0.0.1:"),
            "{}",
            server.url()
        );
        assert!(server.url().ends_with("/hooks"));
        assert!(!server.url().contains(":0/"));
        let dumped = std::fs::read_to_string(&dump).expect("dumped");
        assert_eq!(dumped, server.ca_pem());
        std::fs::remove_file(&dump).ok();
    }
}
