//! The database: where it is (or the embedded one), the pool, the writers
//! that gather Claims and reports, the replay cache, timeouts and the probe.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::Args;
use sqlx::postgres::PgConnectOptions;

use crate::registry::{GatherSettings, ReplaySettings};
use crate::store::{PoolSettings, Pooler};

/// The database.
#[derive(Clone, Debug, Args)]
pub struct Database {
    /// PostgreSQL URL; migrations run against it at start. Absent: the
    /// embedded PostgreSQL in a build that has it, else a configuration error.
    /// A flag shows in `ps`: give a URL with a password through the
    /// environment or OPREG_DATABASE_URL_FILE.
    #[arg(long, env = "OPREG_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// A file holding the PostgreSQL URL (a mounted secret), read at start.
    #[arg(long, env = "OPREG_DATABASE_URL_FILE", conflicts_with = "database_url")]
    pub database_url_file: Option<PathBuf>,

    /// What stands between opreg and PostgreSQL: `none` (PostgreSQL itself, or
    /// a pooler in session mode) or `transaction` (PgBouncer's transaction
    /// pooling: each call then runs in one transaction, and migrations and
    /// the maintenance connection need OPREG_SESSION_DATABASE_URL).
    #[arg(long, env = "OPREG_DATABASE_POOLER", default_value = "none")]
    pub database_pooler: Pooler,

    /// A URL with session semantics (PostgreSQL itself, or a pooler's session
    /// pool) for what must keep one server connection: migrations, the
    /// maintenance connection and the gauges. Absent: the main URL.
    #[arg(long, env = "OPREG_SESSION_DATABASE_URL", hide_env_values = true)]
    pub session_database_url: Option<String>,

    /// Directory of the embedded PostgreSQL, in builds that have it [default: ~/.local/share/opreg, or /var/lib/opreg as root].
    #[arg(long, env = "OPREG_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// Directory holding the embedded PostgreSQL's `initdb` and `postgres` [default: searched in PATH and the usual install locations].
    #[arg(long, env = "OPREG_PG_BIN_DIR")]
    pub pg_bin_dir: Option<PathBuf>,

    /// Most database connections this replica opens.
    #[arg(long, env = "OPREG_POOL_MAX_CONNECTIONS", default_value_t = 32)]
    pub pool_max_connections: u32,

    /// Tasks that register Claims, each a batch at a time on one pooled connection.
    #[arg(long, env = "OPREG_CLAIM_WRITERS", default_value_t = 4)]
    pub claim_writers: usize,

    /// Most Claims registered together in one statement.
    #[arg(long, env = "OPREG_CLAIM_BATCH_MAX", default_value_t = 128)]
    pub claim_batch_max: usize,

    /// Tasks that record the reports of lease holders, each a batch at a time on one pooled connection.
    #[arg(long, env = "OPREG_COMPLETE_WRITERS", default_value_t = 4)]
    pub complete_writers: usize,

    /// Most reports recorded together in one statement.
    #[arg(long, env = "OPREG_COMPLETE_BATCH_MAX", default_value_t = 128)]
    pub complete_batch_max: usize,

    /// Longest a terminal result answers replays from this process's memory
    /// (sooner gone when it changes); 0s turns the cache off.
    #[arg(long, env = "OPREG_REPLAY_CACHE_TTL", default_value = "5m", value_parser = humantime::parse_duration)]
    pub replay_cache_ttl: Duration,

    /// Furthest behind the database a replay from memory may be: the cache
    /// answers only while this replica's own heartbeat, sent within this
    /// long, has come back through the change notices.
    #[arg(long, env = "OPREG_REPLAY_CACHE_STALENESS", default_value = "1s", value_parser = humantime::parse_duration)]
    pub replay_cache_staleness: Duration,

    /// Most memory, in MiB, the kept terminal results take.
    #[arg(long, env = "OPREG_REPLAY_CACHE_MIB", default_value_t = 64)]
    pub replay_cache_mib: usize,

    /// How long a request may wait for a database connection before UNAVAILABLE.
    #[arg(long, env = "OPREG_POOL_ACQUIRE_TIMEOUT", default_value = "1s", value_parser = humantime::parse_duration)]
    pub pool_acquire_timeout: Duration,

    /// Upper bound on one SQL statement, lock waits included.
    #[arg(long, env = "OPREG_STATEMENT_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub statement_timeout: Duration,

    /// Upper bound on one wait for a row lock; past it the caller is told OPERATION_BUSY.
    #[arg(long, env = "OPREG_LOCK_TIMEOUT", default_value = "2s", value_parser = humantime::parse_duration)]
    pub lock_timeout: Duration,

    /// How often the health probe checks the database on its own connection.
    #[arg(long, env = "OPREG_HEALTH_PROBE_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub health_probe_interval: Duration,
}

/// A database setting that cannot stand.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DatabaseError {
    #[error("cannot read OPREG_DATABASE_URL_FILE {path}: {error}")]
    UnreadableUrlFile { path: String, error: String },
    #[error("OPREG_DATABASE_URL_FILE {0} is empty")]
    EmptyUrlFile(String),
    #[error(
        "no database: set OPREG_DATABASE_URL or OPREG_DATABASE_URL_FILE (this build has no \
         embedded PostgreSQL)"
    )]
    NoDatabase,
    #[error(
        "OPREG_DATABASE_POOLER=transaction needs OPREG_SESSION_DATABASE_URL: migrations cannot \
         run through transaction pooling"
    )]
    PoolerWithoutSessionUrl,
    #[error("OPREG_SESSION_DATABASE_URL goes with OPREG_DATABASE_URL")]
    SessionUrlAlone,
    #[error("OPREG_SESSION_DATABASE_URL is not a valid PostgreSQL URL")]
    InvalidSessionUrl,
    #[error("the pool needs at least one connection")]
    EmptyPool,
    #[error(
        "the claim writers and the complete writers must each be at least one and fewer than the \
         pool's connections"
    )]
    Writers,
    #[error("the claim and complete batch limits must lie between 1 and 1000")]
    BatchLimits,
    #[error("the replay cache's staleness must be at least 100ms")]
    ReplayStaleness,
    #[error("the health probe interval must be positive")]
    ProbeInterval,
}

impl Database {
    /// Reads the settings kept in files (secrets), so no secret needs a flag.
    pub fn read_secret_files(&mut self) -> Result<(), DatabaseError> {
        if let Some(path) = &self.database_url_file {
            let url = std::fs::read_to_string(path).map_err(|error| {
                DatabaseError::UnreadableUrlFile {
                    path: path.display().to_string(),
                    error: error.to_string(),
                }
            })?;
            let url = url.trim();
            if url.is_empty() {
                return Err(DatabaseError::EmptyUrlFile(path.display().to_string()));
            }
            self.database_url = Some(url.to_owned());
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), DatabaseError> {
        if self.database_url.is_none() && !cfg!(feature = "embedded-postgres") {
            return Err(DatabaseError::NoDatabase);
        }
        if self.database_pooler == Pooler::Transaction && self.session_database_url.is_none() {
            return Err(DatabaseError::PoolerWithoutSessionUrl);
        }
        if self.session_database_url.is_some() && self.database_url.is_none() {
            return Err(DatabaseError::SessionUrlAlone);
        }
        self.session_database()?;
        if self.pool_max_connections == 0 {
            return Err(DatabaseError::EmptyPool);
        }
        // A writer holds one connection only while it writes a batch, so the
        // two kinds may together take the whole pool for a moment; each kind
        // alone must leave room for the calls that are not gathered.
        let pool = usize::try_from(self.pool_max_connections).unwrap_or(usize::MAX);
        if !(1..pool).contains(&self.claim_writers) || !(1..pool).contains(&self.complete_writers) {
            return Err(DatabaseError::Writers);
        }
        if !(1..=1000).contains(&self.claim_batch_max)
            || !(1..=1000).contains(&self.complete_batch_max)
        {
            return Err(DatabaseError::BatchLimits);
        }
        if self.replay_cache_staleness < Duration::from_millis(100) {
            return Err(DatabaseError::ReplayStaleness);
        }
        if self.health_probe_interval.is_zero() {
            return Err(DatabaseError::ProbeInterval);
        }
        Ok(())
    }

    pub fn pool_settings(&self) -> PoolSettings {
        PoolSettings {
            max_connections: self.pool_max_connections,
            acquire_timeout: self.pool_acquire_timeout,
            statement_timeout: self.statement_timeout,
            lock_timeout: self.lock_timeout,
            pooler: self.database_pooler,
        }
    }

    /// How Claims, then reports, are gathered.
    pub fn gather_settings(&self) -> (GatherSettings, GatherSettings) {
        (
            GatherSettings {
                writers: self.claim_writers,
                max_batch: self.claim_batch_max,
            },
            GatherSettings {
                writers: self.complete_writers,
                max_batch: self.complete_batch_max,
            },
        )
    }

    pub fn replay_settings(&self) -> ReplaySettings {
        ReplaySettings {
            lifetime: self.replay_cache_ttl,
            max_staleness: self.replay_cache_staleness,
            max_bytes: self.replay_cache_mib.saturating_mul(1 << 20),
        }
    }

    /// Where migrations, the maintenance connection and the gauges connect, when not
    /// the main URL. The URL may hold a password: it is parsed, never shown.
    pub fn session_database(&self) -> Result<Option<PgConnectOptions>, DatabaseError> {
        self.session_database_url
            .as_deref()
            .map(|url| {
                PgConnectOptions::from_str(url).map_err(|_| DatabaseError::InvalidSessionUrl)
            })
            .transpose()
    }

    /// The embedded PostgreSQL's directory.
    #[cfg(feature = "embedded-postgres")]
    pub fn embedded_root(&self) -> PathBuf {
        if let Some(dir) = &self.data_dir {
            return dir.clone();
        }
        // Root's home is closed to the user PostgreSQL then runs as.
        if opreg_embedded::is_root() {
            return PathBuf::from("/var/lib/opreg");
        }
        std::env::var_os("XDG_DATA_HOME")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/share"))
            })
            .map_or_else(|| PathBuf::from("opreg-data"), |base| base.join("opreg"))
    }
}
