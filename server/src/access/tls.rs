//! TLS for the gRPC port: the server's certificate and key, and with a client
//! CA, mutual TLS that requires a client certificate signed by it. The rustls
//! configuration is replaced whole when the files change ([`super::reload`]);
//! each new connection takes the configuration current when it arrives.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

/// Where the PEM files are.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub certificate: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    pub fn paths(&self) -> Vec<PathBuf> {
        let mut paths = vec![self.certificate.clone(), self.key.clone()];
        paths.extend(self.client_ca.clone());
        paths
    }

    /// Reads and checks every file; a file that is missing, unreadable or
    /// holds no usable PEM is an error naming it.
    pub fn load(&self) -> Result<Arc<rustls::ServerConfig>, String> {
        let named = |path: &PathBuf| {
            let path = path.display().to_string();
            move |error: rustls::pki_types::pem::Error| format!("{path}: {error}")
        };
        let chain = CertificateDer::pem_file_iter(&self.certificate)
            .map_err(named(&self.certificate))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(named(&self.certificate))?;
        if chain.is_empty() {
            return Err(format!(
                "{}: no certificate in it",
                self.certificate.display()
            ));
        }
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(named(&self.key))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|error| error.to_string())?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(path) => {
                let mut roots = RootCertStore::empty();
                for certificate in CertificateDer::pem_file_iter(path).map_err(named(path))? {
                    roots
                        .add(certificate.map_err(named(path))?)
                        .map_err(|error| format!("{}: {error}", path.display()))?;
                }
                if roots.is_empty() {
                    return Err(format!("{}: no CA certificate in it", path.display()));
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|error| format!("{}: {error}", path.display()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_single_cert(chain, key).map_err(|error| {
            format!(
                "{} and {} do not make a usable certificate and key: {error}",
                self.certificate.display(),
                self.key.display()
            )
        })?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }
}

/// The configuration new connections are accepted with; swapped on reload.
#[derive(Clone, Debug)]
pub struct TlsConfig(Arc<RwLock<Arc<rustls::ServerConfig>>>);

impl TlsConfig {
    pub fn new(config: Arc<rustls::ServerConfig>) -> Self {
        Self(Arc::new(RwLock::new(config)))
    }

    pub fn current(&self) -> Arc<rustls::ServerConfig> {
        Arc::clone(
            &self
                .0
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
    }

    pub fn replace(&self, config: Arc<rustls::ServerConfig>) {
        *self
            .0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = config;
    }
}

/// The identities a verified client certificate names: its URI SANs (such
/// as SPIFFE IDs) and DNS SANs, which `tls_identity` is matched against.
pub fn certificate_identities(certificate: &CertificateDer<'_>) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(certificate.as_ref()) else {
        return Vec::new();
    };
    let Ok(Some(names)) = parsed.subject_alternative_name() else {
        return Vec::new();
    };
    names
        .value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::URI(uri) => Some((*uri).to_owned()),
            GeneralName::DNSName(dns) => Some((*dns).to_owned()),
            _ => None,
        })
        .collect()
}
