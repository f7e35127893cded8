//! Re-reads the policy and TLS files on SIGHUP and when they change (checked
//! every few seconds, which also catches a Kubernetes Secret's symlink swap).
//! A file that no longer reads or checks keeps what is in force and logs why.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio::signal::unix::{Signal, SignalKind, signal};

use super::tls::{TlsConfig, TlsFiles};
use super::{Access, Policy};
use crate::telemetry::metrics;

/// How often the files' modification times are compared.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// What a reload replaces, with the stamps of the files it was read from.
#[derive(Debug)]
pub struct Reloadable {
    policy: Option<(PathBuf, Access, Stamp)>,
    tls: Option<(TlsFiles, TlsConfig, Stamp)>,
}

/// The policy and TLS configuration read at start, and what reloads them.
#[derive(Debug)]
pub struct Loaded {
    pub access: Access,
    pub tls: Option<TlsConfig>,
    pub reloadable: Reloadable,
}

impl Loaded {
    /// Reads the files. Each file's stamp is taken before it is read, so a
    /// change made meanwhile is seen by the first poll.
    pub fn read(auth_file: Option<&Path>, tls_files: Option<TlsFiles>) -> Result<Self, String> {
        let policy = match auth_file {
            None => None,
            Some(path) => {
                let stamp = stamp(&[path.to_owned()]);
                let policy = Policy::load(path)?;
                tracing::info!(principals = policy.principals(), "access policy loaded");
                Some((path.to_owned(), Access::with_policy(policy), stamp))
            }
        };
        let tls = match tls_files {
            None => None,
            Some(files) => {
                let stamp = stamp(&files.paths());
                let config = TlsConfig::new(files.load()?);
                Some((files, config, stamp))
            }
        };
        Ok(Self {
            access: policy
                .as_ref()
                .map_or_else(Access::unrestricted, |(_, access, _)| access.clone()),
            tls: tls.as_ref().map(|(_, config, _)| config.clone()),
            reloadable: Reloadable { policy, tls },
        })
    }
}

/// The SIGHUP handler, installed at start so a SIGHUP never kills the server.
pub fn hangups() -> std::io::Result<Signal> {
    signal(SignalKind::hangup())
}

/// What identifies a file's content cheaply: its modification time and length.
type Stamp = Vec<Option<(SystemTime, u64)>>;

fn stamp(paths: &[PathBuf]) -> Stamp {
    paths
        .iter()
        .map(|path| {
            std::fs::metadata(path)
                .ok()
                .and_then(|meta| Some((meta.modified().ok()?, meta.len())))
        })
        .collect()
}

pub async fn watch_forever(mut reloadable: Reloadable, mut hangups: Signal, interval: Duration) {
    loop {
        let forced = tokio::select! {
            _ = hangups.recv() => true,
            () = tokio::time::sleep(interval) => false,
        };
        if forced && reloadable.policy.is_none() && reloadable.tls.is_none() {
            tracing::info!("SIGHUP: no policy or TLS files to reload");
        }
        if let Some((path, access, last)) = &mut reloadable.policy {
            let now = stamp(std::slice::from_ref(path));
            if forced || now != *last {
                *last = now;
                reload_policy(path, access);
            }
        }
        if let Some((files, config, last)) = &mut reloadable.tls {
            let now = stamp(&files.paths());
            if forced || now != *last {
                *last = now;
                reload_tls(files, config);
            }
        }
    }
}

fn reload_policy(path: &std::path::Path, access: &Access) {
    match Policy::load(path) {
        Ok(policy) => {
            tracing::info!(principals = policy.principals(), "policy reloaded");
            access.replace(policy);
            metrics::config_reloaded("policy", true);
        }
        Err(problem) => {
            tracing::warn!("policy not reloaded; the previous one stays in force: {problem}");
            metrics::config_reloaded("policy", false);
        }
    }
}

fn reload_tls(files: &TlsFiles, config: &TlsConfig) {
    match files.load() {
        Ok(loaded) => {
            tracing::info!(certificate = %files.certificate.display(), "TLS certificates reloaded");
            config.replace(loaded);
            metrics::config_reloaded("tls", true);
        }
        Err(problem) => {
            tracing::warn!(
                "TLS certificates not reloaded; the previous ones stay in force: {problem}"
            );
            metrics::config_reloaded("tls", false);
        }
    }
}
