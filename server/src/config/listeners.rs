//! Where the server listens and how: the gRPC and metrics addresses, TLS and
//! the access policy, connection limits, and the shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::access::tls::TlsFiles;
use crate::transport::ConnectionLimits;

/// Listeners and TLS.
#[derive(Clone, Debug, Args)]
pub struct Listeners {
    /// Address the gRPC server listens on.
    #[arg(long, env = "OPREG_LISTEN_ADDR", default_value = "127.0.0.1:50051")]
    pub listen_addr: SocketAddr,

    /// Serve callers without authenticating them on a non-loopback address.
    /// Without it the server refuses to start there: anyone who reaches the
    /// port could act on every operation.
    #[arg(long, env = "OPREG_ALLOW_UNAUTHENTICATED", action = clap::ArgAction::SetTrue,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub allow_unauthenticated: bool,

    /// The access policy (TOML): principals, their credentials, namespaces and
    /// roles. Re-read on SIGHUP and when it changes. Without it every caller
    /// may do everything, which is allowed only on loopback or with
    /// --allow-unauthenticated.
    #[arg(long, env = "OPREG_AUTH_FILE")]
    pub auth_file: Option<PathBuf>,

    /// The server's TLS certificate chain (PEM); with OPREG_TLS_KEY, the gRPC
    /// port speaks TLS only. Reloaded on SIGHUP and when the files change.
    #[arg(long, env = "OPREG_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key of OPREG_TLS_CERT (PEM).
    #[arg(long, env = "OPREG_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// CA certificates (PEM) that sign client certificates: with it, every
    /// connection must present one (mutual TLS), matched to `tls_identity`.
    #[arg(long, env = "OPREG_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,

    /// Address of the Prometheus `/metrics` endpoint.
    #[arg(long, env = "OPREG_METRICS_ADDR", default_value = "127.0.0.1:9464")]
    pub metrics_addr: SocketAddr,

    /// Client connections open at once; more are closed as they arrive.
    #[arg(long, env = "OPREG_MAX_CONNECTIONS", default_value_t = 4096)]
    pub max_connections: usize,

    /// A connection that has not sent its HTTP/2 preface by then is closed.
    #[arg(long, env = "OPREG_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub handshake_timeout: Duration,

    /// How long an HTTP/2 keep-alive ping may go unanswered before the peer is
    /// taken for dead and its connection closed (pings every 30 s).
    #[arg(long, env = "OPREG_KEEPALIVE_TIMEOUT", default_value = "20s", value_parser = humantime::parse_duration)]
    pub keepalive_timeout: Duration,

    /// How long in-flight calls may take to finish after SIGTERM or SIGINT.
    #[arg(long, env = "OPREG_SHUTDOWN_GRACE", default_value = "10s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,

    /// How long health reports NOT_SERVING before the server stops accepting calls.
    #[arg(long, env = "OPREG_SHUTDOWN_DELAY", default_value = "0s", value_parser = humantime::parse_duration)]
    pub shutdown_delay: Duration,
}

/// A listener setting that cannot stand.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ListenersError {
    #[error(
        "refusing to serve unauthenticated callers on {0}: anyone who reaches it could \
         complete, renew or fence any operation. Give an access policy \
         (OPREG_AUTH_FILE), listen on a loopback address, or pass \
         --allow-unauthenticated (OPREG_ALLOW_UNAUTHENTICATED=true) where a network \
         boundary you trust decides who reaches the port"
    )]
    Unauthenticated(SocketAddr),
    #[error("OPREG_TLS_CERT and OPREG_TLS_KEY go together")]
    CertificateWithoutKey,
    #[error("OPREG_TLS_CLIENT_CA needs OPREG_TLS_CERT and OPREG_TLS_KEY")]
    ClientCaWithoutCertificate,
    #[error("the shutdown delay must be shorter than the shutdown grace, which bounds it")]
    ShutdownDelay,
    #[error("the connection limit must be positive")]
    NoConnections,
}

impl Listeners {
    pub fn validate(&self) -> Result<(), ListenersError> {
        if !self.listen_addr.ip().is_loopback()
            && self.auth_file.is_none()
            && !self.allow_unauthenticated
        {
            return Err(ListenersError::Unauthenticated(self.listen_addr));
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(ListenersError::CertificateWithoutKey);
        }
        if self.tls_client_ca.is_some() && self.tls_cert.is_none() {
            return Err(ListenersError::ClientCaWithoutCertificate);
        }
        if self.shutdown_delay >= self.shutdown_grace {
            return Err(ListenersError::ShutdownDelay);
        }
        if self.max_connections == 0 {
            return Err(ListenersError::NoConnections);
        }
        Ok(())
    }

    /// The TLS files, when the gRPC port speaks TLS.
    pub fn tls_files(&self) -> Option<TlsFiles> {
        Some(TlsFiles {
            certificate: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
            client_ca: self.tls_client_ca.clone(),
        })
    }

    pub fn connection_limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: self.max_connections,
            handshake_timeout: self.handshake_timeout,
        }
    }
}
