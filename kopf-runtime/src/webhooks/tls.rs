//! The webhook server's certificates: from PEM files, re-read when they
//! change, or a CA and a server certificate made at start with `rcgen`;
//! and the CA bundle that clients (API servers) verify the server with.
//!
//! # Guarantees
//! - With files, each new TLS connection checks whether their contents
//!   changed (and so does a poll every [`POLL_INTERVAL`]): modification
//!   times are too coarse to tell two quick writes apart, and mounted
//!   Secrets change by a symlink swap. A change is read at once, and new connections get the new certificate, without a
//!   restart. A pair that does not load (half written, key and
//!   certificate not matching) is reported once and the previous one kept.
//! - The CA bundle is published on a `watch` channel whenever it changes,
//!   so that the managed configurations follow it.

use std::hash::{Hash as _, Hasher as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::watch;

use super::error::WebhookError;

/// How often certificate files are checked for changes between
/// connections (Kopf checks every 60 s).
pub(crate) const POLL_INTERVAL: Duration = Duration::from_secs(10);

/// The crypto provider: `ring`, as kube's own TLS uses.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Where the server's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CertSource {
    /// PEM files: the certificate chain, its key, and optionally the CA
    /// bundle for clients (else the certificate file is the bundle, as in
    /// Kopf).
    Files {
        /// The certificate chain (leaf first).
        cert: PathBuf,
        /// The private key.
        key: PathBuf,
        /// The CA bundle for the configurations.
        ca: Option<PathBuf>,
    },
    /// A CA and a server certificate for these names (DNS names or IPs),
    /// made at start.
    SelfSigned {
        /// The names of the server, the first one its common name.
        names: Vec<String>,
    },
}

/// The server's certificates and the CA bundle.
#[derive(Debug)]
pub(crate) struct Certificates {
    resolver: Arc<Resolver>,
    ca: watch::Receiver<Arc<str>>,
}

impl Certificates {
    /// Loads or makes the certificates.
    ///
    /// # Errors
    /// [`WebhookError::Certificate`] when the files do not load or the
    /// names are not valid in a certificate.
    pub(crate) fn new(source: &CertSource) -> Result<Self, WebhookError> {
        let provider = provider();
        let (served, ca_pem) = match source {
            CertSource::SelfSigned { names } => {
                let (key, ca) = self_signed(names, &provider)?;
                (ServedKey::Fixed(Arc::new(key)), ca)
            }
            CertSource::Files { cert, key, ca } => {
                let paths = Paths {
                    cert: cert.clone(),
                    key: key.clone(),
                    ca: ca.clone(),
                };
                let stamp = paths.stamp();
                let (key, ca) = paths.load(&provider)?;
                let files = Files {
                    paths,
                    stamp,
                    failed: None,
                    current: Arc::new(key),
                };
                (ServedKey::Files(Mutex::new(files)), ca)
            }
        };
        let (sender, ca) = watch::channel(Arc::from(ca_pem));
        Ok(Self {
            resolver: Arc::new(Resolver {
                served,
                provider,
                ca: sender,
            }),
            ca,
        })
    }

    /// The TLS configuration of the server: HTTP/1.1 only, the certificate
    /// resolved per connection.
    pub(crate) fn server_config(&self) -> Result<rustls::ServerConfig, WebhookError> {
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|error| WebhookError::Certificate(error.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(&self.resolver) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }

    /// The CA bundle (PEM) as it is now and as it changes.
    pub(crate) fn ca(&self) -> watch::Receiver<Arc<str>> {
        self.ca.clone()
    }

    /// Checks the files for changes now (for the poll between connections).
    pub(crate) fn refresh(&self) {
        self.resolver.refresh();
    }
}

#[derive(Debug)]
struct Resolver {
    served: ServedKey,
    provider: Arc<CryptoProvider>,
    ca: watch::Sender<Arc<str>>,
}

#[derive(Debug)]
/// The certificate and key served: made once, or re-read from files
/// when they change.
enum ServedKey {
    Fixed(Arc<CertifiedKey>),
    Files(Mutex<Files>),
}

#[derive(Debug)]
struct Files {
    paths: Paths,
    /// The files' stamps when last read.
    stamp: Stamp,
    /// The stamps of a change that did not load (reported once).
    failed: Option<Stamp>,
    current: Arc<CertifiedKey>,
}

/// A digest of each file's contents (`None` if it cannot be read).
type Stamp = Vec<Option<u64>>;

#[derive(Debug, Clone)]
struct Paths {
    cert: PathBuf,
    key: PathBuf,
    ca: Option<PathBuf>,
}

impl Paths {
    fn stamp(&self) -> Stamp {
        [Some(&self.cert), Some(&self.key), self.ca.as_ref()]
            .into_iter()
            .flatten()
            .map(|path| {
                std::fs::read(path).ok().map(|bytes| {
                    let mut hasher = std::hash::DefaultHasher::new();
                    bytes.hash(&mut hasher);
                    hasher.finish()
                })
            })
            .collect()
    }

    fn load(&self, provider: &CryptoProvider) -> Result<(CertifiedKey, String), WebhookError> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|error| {
                WebhookError::Certificate(format!("cannot read {}: {error}", path.display()))
            })
        };
        let cert_pem = read(&self.cert)?;
        let chain = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| {
                WebhookError::Certificate(format!(
                    "{} holds no PEM certificate: {error}",
                    self.cert.display()
                ))
            })?;
        if chain.is_empty() {
            return Err(WebhookError::Certificate(format!(
                "{} holds no PEM certificate",
                self.cert.display()
            )));
        }
        let key = PrivateKeyDer::from_pem_slice(&read(&self.key)?).map_err(|error| {
            WebhookError::Certificate(format!(
                "{} holds no PEM private key: {error}",
                self.key.display()
            ))
        })?;
        let certified = CertifiedKey::from_der(chain, key, provider).map_err(|error| {
            WebhookError::Certificate(format!(
                "the key {} does not serve the certificate {}: {error}",
                self.key.display(),
                self.cert.display()
            ))
        })?;
        let ca = match &self.ca {
            Some(ca) => read(ca)?,
            None => cert_pem,
        };
        let ca = String::from_utf8(ca)
            .map_err(|_| WebhookError::Certificate("the CA bundle is not PEM text".to_owned()))?;
        Ok((certified, ca))
    }
}

impl Resolver {
    /// The current key, re-read first if the files changed.
    fn refresh(&self) -> Arc<CertifiedKey> {
        let files = match &self.served {
            ServedKey::Fixed(key) => return Arc::clone(key),
            ServedKey::Files(files) => files,
        };
        let mut files = files.lock().unwrap_or_else(|p| p.into_inner());
        let stamp = files.paths.stamp();
        if stamp == files.stamp || files.failed.as_ref() == Some(&stamp) {
            return Arc::clone(&files.current);
        }
        match files.paths.load(&self.provider) {
            Ok((key, ca)) => {
                tracing::info!(
                    cert = %files.paths.cert.display(),
                    "the webhook server's certificate files changed: serving the new certificate"
                );
                files.current = Arc::new(key);
                files.stamp = stamp;
                files.failed = None;
                self.ca.send_if_modified(|current| {
                    let changed = **current != *ca;
                    if changed {
                        *current = Arc::from(ca);
                    }
                    changed
                });
            }
            Err(error) => {
                tracing::warn!(%error, "the webhook server's certificate files changed but do not load; serving the previous certificate until they do");
                files.failed = Some(stamp);
            }
        }
        Arc::clone(&files.current)
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.refresh())
    }
}

/// A CA and a server certificate it signed for `names`; the key and the
/// chain for the server, and the CA's PEM for clients.
fn self_signed(
    names: &[String],
    provider: &CryptoProvider,
) -> Result<(CertifiedKey, String), WebhookError> {
    let failed = |error: rcgen::Error| {
        WebhookError::Certificate(format!("cannot make a self-signed certificate: {error}"))
    };
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kopf-rs webhook CA");
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = rcgen::KeyPair::generate().map_err(failed)?;
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).map_err(failed)?;

    let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(|error| {
        WebhookError::Certificate(format!(
            "the names {names:?} cannot be put in a certificate: {error}; give DNS names or IP addresses"
        ))
    })?;
    let common_name = names
        .iter()
        .find(|n| n.parse::<std::net::IpAddr>().is_err())
        .or(names.first())
        .cloned()
        .unwrap_or_else(|| "localhost".to_owned());
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let key = rcgen::KeyPair::generate().map_err(failed)?;
    let cert = params.signed_by(&key, &ca).map_err(failed)?;
    let key_der = PrivateKeyDer::try_from(key.serialize_der())
        .map_err(|error| WebhookError::Certificate(error.to_owned()))?;
    let chain = vec![cert.der().clone(), ca.der().clone()];
    let certified = CertifiedKey::from_der(chain, key_der, provider)
        .map_err(|error| WebhookError::Certificate(error.to_string()))?;
    Ok((certified, ca.pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_signed_chain_names_its_hosts_and_its_ca_is_pem() {
        let names = vec!["127.0.0.1".to_owned(), "webhooks.example".to_owned()];
        let certificates =
            Certificates::new(&CertSource::SelfSigned { names }).expect("certificates");
        let ca = certificates.ca().borrow().clone();
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");
        assert!(certificates.server_config().is_ok());
    }

    #[test]
    fn changed_files_are_read_again_and_a_broken_change_keeps_the_old_pair() {
        let dir = std::env::temp_dir().join(format!("kopf-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        let write = |name: &str| {
            let key_pair = rcgen::KeyPair::generate().expect("a key");
            let params = rcgen::CertificateParams::new(vec![name.to_owned()]).expect("params");
            let made = params.self_signed(&key_pair).expect("a certificate");
            std::fs::write(&cert, made.pem()).expect("written");
            std::fs::write(&key, key_pair.serialize_pem()).expect("written");
            made.der().clone()
        };
        let first = write("one.example");
        let source = CertSource::Files {
            cert: cert.clone(),
            key: key.clone(),
            ca: None,
        };
        let certificates = Certificates::new(&source).expect("loaded");
        let mut ca = certificates.ca();
        assert_eq!(certificates.resolver.refresh().cert[0], first);
        let second = write("two.example");
        assert_eq!(certificates.resolver.refresh().cert[0], second);
        assert!(ca.has_changed().expect("open"));
        ca.mark_unchanged();
        std::fs::write(&key, "not a key").expect("written");
        assert_eq!(certificates.resolver.refresh().cert[0], second);
        assert!(!ca.has_changed().expect("open"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
