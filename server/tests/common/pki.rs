//! Certificates made for one test: a CA, a server certificate for 127.0.0.1
//! and localhost, and client certificates naming an identity. Nothing here is
//! committed; each run signs its own.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType};

pub struct Pki {
    pub dir: PathBuf,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, both PEM.
pub struct Issued {
    pub certificate: String,
    pub key: String,
}

impl Pki {
    /// A new CA; its files go to a fresh directory named after `name`.
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("opreg-pki-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("opreg test CA {name}"));
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Self { dir, issuer }
    }

    pub fn ca_pem(&self) -> String {
        self.issuer.pem()
    }

    /// The CA certificate as a file, for OPREG_TLS_CLIENT_CA.
    pub fn ca_file(&self) -> PathBuf {
        write(&self.dir.join("ca.pem"), &self.ca_pem())
    }

    /// A server certificate for 127.0.0.1 and localhost.
    pub fn server(&self) -> Issued {
        let params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        self.issue(params)
    }

    /// The server certificate and key as files, for OPREG_TLS_CERT and OPREG_TLS_KEY.
    pub fn server_files(&self) -> (PathBuf, PathBuf) {
        let issued = self.server();
        (
            write(&self.dir.join("server.pem"), &issued.certificate),
            write(&self.dir.join("server-key.pem"), &issued.key),
        )
    }

    /// A client certificate whose URI SAN is `identity`.
    pub fn client(&self, identity: &str) -> Issued {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .subject_alt_names
            .push(SanType::URI(identity.try_into().unwrap()));
        params.distinguished_name.push(DnType::CommonName, identity);
        self.issue(params)
    }

    fn issue(&self, params: CertificateParams) -> Issued {
        let key = KeyPair::generate().unwrap();
        let certificate = params.signed_by(&key, &self.issuer).unwrap();
        Issued {
            certificate: certificate.pem(),
            key: key.serialize_pem(),
        }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).unwrap();
    path.to_owned()
}
