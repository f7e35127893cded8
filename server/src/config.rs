//! Configuration from flags and `OPREG_*` environment variables, validated at
//! load time so a bad setting stops the server before it serves.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use sqlx::postgres::PgConnectOptions;

use crate::access::tls::TlsFiles;
use crate::domain::ids::Namespace;
use crate::domain::policy::{LeaseBounds, PerNamespace, RetryPolicy};
use crate::grpc::{ParameterLimits, RequestLimits};
use crate::registry::{GatherSettings, MaintenanceSettings, ReplaySettings};
use crate::store::{PoolSettings, Pooler};
use crate::transport::ConnectionLimits;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Plain,
    Json,
}

/// opreg-server: the operation registry.
///
/// With no database URL a build with the `embedded-postgres` feature (the
/// default, for the quick start) runs a PostgreSQL of its own from the locally
/// installed server binaries, in a data directory it owns; a build without it
/// (the image) refuses to start.
#[derive(Clone, Debug, Parser)]
#[command(name = "opreg-server", version, about, long_about)]
pub struct Config {
    #[command(subcommand)]
    pub command: Option<Command>,

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
    /// the maintenance lock need OPREG_SESSION_DATABASE_URL).
    #[arg(long, env = "OPREG_DATABASE_POOLER", default_value = "none")]
    pub database_pooler: Pooler,

    /// A URL with session semantics (PostgreSQL itself, or a pooler's session
    /// pool) for what must keep one server connection: migrations, the
    /// maintenance lock and the gauges. Absent: the main URL.
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

    /// Lease length when a request gives none.
    #[arg(long, env = "OPREG_LEASE_TTL_DEFAULT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub lease_ttl_default: Duration,

    /// Shortest lease a request may ask for (inclusive).
    #[arg(long, env = "OPREG_LEASE_TTL_MIN", default_value = "1s", value_parser = humantime::parse_duration)]
    pub lease_ttl_min: Duration,

    /// Longest lease a request may ask for (inclusive).
    #[arg(long, env = "OPREG_LEASE_TTL_MAX", default_value = "1h", value_parser = humantime::parse_duration)]
    pub lease_ttl_max: Duration,

    /// Largest result (result + result_ref bytes) or fenced value accepted.
    #[arg(long, env = "OPREG_MAX_RESULT_BYTES", default_value_t = 1 << 20)]
    pub max_result_bytes: usize,

    /// Largest Claim parameters, as canonical JSON bytes.
    #[arg(long, env = "OPREG_MAX_PARAMETERS_BYTES", default_value_t = 64 << 10)]
    pub max_parameters_bytes: usize,

    /// Most values (object members and array items, at every depth) in Claim parameters.
    #[arg(long, env = "OPREG_MAX_PARAMETERS_VALUES", default_value_t = 10_000)]
    pub max_parameters_values: usize,

    /// Deepest nesting of objects and arrays in Claim parameters.
    #[arg(long, env = "OPREG_MAX_PARAMETERS_DEPTH", default_value_t = 20)]
    pub max_parameters_depth: usize,

    /// Default retry budget: executions allowed per operation.
    #[arg(long, env = "OPREG_RETRY_MAX_ATTEMPTS", default_value_t = 5)]
    pub retry_max_attempts: u32,

    /// Default first backoff, doubled per attempt.
    #[arg(long, env = "OPREG_RETRY_INITIAL_BACKOFF", default_value = "1s", value_parser = humantime::parse_duration)]
    pub retry_initial_backoff: Duration,

    /// Default cap on one backoff.
    #[arg(long, env = "OPREG_RETRY_MAX_BACKOFF", default_value = "5m", value_parser = humantime::parse_duration)]
    pub retry_max_backoff: Duration,

    /// Default time from registration after which no attempt starts.
    #[arg(long, env = "OPREG_RETRY_DEADLINE", default_value = "24h", value_parser = humantime::parse_duration)]
    pub retry_deadline: Duration,

    /// Registry and admin calls in flight at once; more are answered
    /// UNAVAILABLE (OVERLOADED) with RetryInfo at once. Health is never shed.
    #[arg(long, env = "OPREG_MAX_CONCURRENT_CALLS", default_value_t = 1024)]
    pub max_concurrent_calls: usize,

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

    /// Address of the Prometheus `/metrics` endpoint.
    #[arg(long, env = "OPREG_METRICS_ADDR", default_value = "127.0.0.1:9464")]
    pub metrics_addr: SocketAddr,

    /// Distinct namespaces reported as metric labels; the rest are reported as "other".
    #[arg(long, env = "OPREG_METRICS_MAX_NAMESPACES", default_value_t = 100)]
    pub metrics_max_namespaces: usize,

    /// The namespaces reported as metric labels, comma-separated; every other
    /// one is `other`. Empty: the first OPREG_METRICS_MAX_NAMESPACES seen.
    #[arg(long, env = "OPREG_METRIC_NAMESPACES", value_delimiter = ',')]
    pub metric_namespaces: Vec<String>,

    /// How often the backlog gauges and the health status are read from the database
    /// (less often while one refresh takes over a twentieth of it).
    #[arg(long, env = "OPREG_GAUGE_REFRESH_INTERVAL", default_value = "15s", value_parser = humantime::parse_duration)]
    pub gauge_refresh_interval: Duration,

    /// Most retry, takeover and reconcile leases ClaimDue keeps live at once in
    /// a namespace, so a recovering downstream is not flooded [default: unlimited].
    #[arg(long, env = "OPREG_MAX_CONCURRENT_RETRIES")]
    pub max_concurrent_retries: Option<u32>,

    /// Per-namespace caps on concurrent retries, e.g. `payments=10,callbacks=50`.
    #[arg(
        long,
        env = "OPREG_NAMESPACE_MAX_CONCURRENT_RETRIES",
        default_value = ""
    )]
    pub namespace_max_concurrent_retries: Overrides<u32>,

    /// Calls per second each namespace may make on this replica (a token bucket
    /// with a burst of one second); more are RESOURCE_EXHAUSTED / RATE_LIMITED
    /// with a RetryInfo [default: unlimited].
    #[arg(long, env = "OPREG_RATE_LIMIT")]
    pub rate_limit: Option<u32>,

    /// Per-namespace rate limits in calls per second, e.g. `payments=500,reports=20`.
    #[arg(long, env = "OPREG_NAMESPACE_RATE_LIMITS", default_value = "")]
    pub namespace_rate_limits: Overrides<u32>,

    /// How often the maintenance (budgets, retention) runs, on one replica at a time.
    #[arg(long, env = "OPREG_MAINTENANCE_INTERVAL", default_value = "30s", value_parser = humantime::parse_duration)]
    pub maintenance_interval: Duration,

    /// How long finished (SUCCEEDED, FAILED) operations are kept: a duration or `forever`.
    #[arg(long, env = "OPREG_RETENTION", default_value = "30d")]
    pub retention: Retention,

    /// Per-namespace retention, e.g. `payments=forever,callbacks=3d`.
    #[arg(long, env = "OPREG_NAMESPACE_RETENTION", default_value = "")]
    pub namespace_retention: Overrides<Retention>,

    /// Rows one maintenance statement changes or deletes at most.
    #[arg(long, env = "OPREG_MAINTENANCE_BATCH_SIZE", default_value_t = 1000)]
    pub maintenance_batch_size: u32,

    /// Pause between two maintenance batches, so callers keep the database.
    #[arg(long, env = "OPREG_MAINTENANCE_BATCH_PAUSE", default_value = "100ms", value_parser = humantime::parse_duration)]
    pub maintenance_batch_pause: Duration,

    /// Log format on stderr.
    #[arg(long, env = "OPREG_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
}

/// What the binary does; serving is the default.
#[derive(Clone, Debug, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Serve the registry (the default).
    Serve,
    /// Run the database migrations against OPREG_DATABASE_URL and exit.
    Migrate,
}

impl Config {
    /// The defaults, as if started with no flags and no environment.
    pub fn defaults() -> Self {
        Self::parse_from(["opreg-server"])
    }

    /// Reads the settings kept in files (secrets), so no secret needs a flag.
    pub fn read_secret_files(&mut self) -> Result<(), String> {
        if let Some(path) = &self.database_url_file {
            let url = std::fs::read_to_string(path).map_err(|error| {
                format!(
                    "cannot read OPREG_DATABASE_URL_FILE {}: {error}",
                    path.display()
                )
            })?;
            let url = url.trim();
            if url.is_empty() {
                return Err(format!(
                    "OPREG_DATABASE_URL_FILE {} is empty",
                    path.display()
                ));
            }
            self.database_url = Some(url.to_owned());
        }
        Ok(())
    }

    /// Checks the settings that depend on each other.
    pub fn validate(&self) -> Result<(), String> {
        if self.database_url.is_none() && !cfg!(feature = "embedded-postgres") {
            return Err(
                "no database: set OPREG_DATABASE_URL or OPREG_DATABASE_URL_FILE (this build has \
                 no embedded PostgreSQL)"
                    .into(),
            );
        }
        if !self.listen_addr.ip().is_loopback()
            && self.auth_file.is_none()
            && !self.allow_unauthenticated
        {
            return Err(format!(
                "refusing to serve unauthenticated callers on {}: anyone who reaches it could \
                 complete, renew or fence any operation. Give an access policy \
                 (OPREG_AUTH_FILE), listen on a loopback address, or pass \
                 --allow-unauthenticated (OPREG_ALLOW_UNAUTHENTICATED=true) where a network \
                 boundary you trust decides who reaches the port",
                self.listen_addr
            ));
        }
        if self.database_pooler == Pooler::Transaction && self.session_database_url.is_none() {
            return Err(
                "OPREG_DATABASE_POOLER=transaction needs OPREG_SESSION_DATABASE_URL: \
                        migrations and the maintenance lock cannot run through transaction pooling"
                    .into(),
            );
        }
        if self.session_database_url.is_some() && self.database_url.is_none() {
            return Err("OPREG_SESSION_DATABASE_URL goes with OPREG_DATABASE_URL".into());
        }
        self.session_database()?;
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err("OPREG_TLS_CERT and OPREG_TLS_KEY go together".into());
        }
        if self.tls_client_ca.is_some() && self.tls_cert.is_none() {
            return Err("OPREG_TLS_CLIENT_CA needs OPREG_TLS_CERT and OPREG_TLS_KEY".into());
        }
        let lease = self.lease_bounds();
        if lease.min.is_zero() || lease.min > lease.max {
            return Err("lease TTL bounds must satisfy 0 < min <= max".into());
        }
        if lease.default < lease.min || lease.default > lease.max {
            return Err("the default lease TTL must lie within the bounds".into());
        }
        if self.shutdown_delay >= self.shutdown_grace {
            return Err(
                "the shutdown delay must be shorter than the shutdown grace, which bounds it"
                    .into(),
            );
        }
        if self.gauge_refresh_interval.is_zero() || self.health_probe_interval.is_zero() {
            return Err("the gauge refresh and health probe intervals must be positive".into());
        }
        if self.max_concurrent_calls == 0 || self.max_connections == 0 {
            return Err("the call and connection limits must be positive".into());
        }
        if self.pool_max_connections == 0 {
            return Err("the pool needs at least one connection".into());
        }
        // A writer holds one connection only while it writes a batch, so the
        // two kinds may together take the whole pool for a moment; each kind
        // alone must leave room for the calls that are not gathered.
        let pool = self.pool_max_connections as usize;
        if !(1..pool).contains(&self.claim_writers) || !(1..pool).contains(&self.complete_writers) {
            return Err(
                "the claim writers and the complete writers must each be at least one and fewer \
                 than the pool's connections"
                    .into(),
            );
        }
        if !(1..=1000).contains(&self.claim_batch_max)
            || !(1..=1000).contains(&self.complete_batch_max)
        {
            return Err("the claim and complete batch limits must lie between 1 and 1000".into());
        }
        if self.replay_cache_staleness < Duration::from_millis(100) {
            return Err("the replay cache's staleness must be at least 100ms".into());
        }
        if self.maintenance_interval.is_zero() || self.maintenance_batch_size == 0 {
            return Err("the maintenance interval and batch size must be positive".into());
        }
        self.default_retry_policy()
            .map(|_| ())
            .map_err(|violation| format!("default {}: {}", violation.field, violation.description))
    }

    pub fn lease_bounds(&self) -> LeaseBounds {
        LeaseBounds {
            min: self.lease_ttl_min,
            max: self.lease_ttl_max,
            default: self.lease_ttl_default,
        }
    }

    pub fn default_retry_policy(
        &self,
    ) -> Result<RetryPolicy, crate::domain::error::FieldViolation> {
        RetryPolicy::new(
            self.retry_max_attempts,
            self.retry_initial_backoff,
            self.retry_max_backoff,
            self.retry_deadline,
        )
    }

    /// Limits for requests; call after [`Config::validate`].
    pub fn request_limits(&self) -> Result<RequestLimits, String> {
        Ok(RequestLimits {
            lease: self.lease_bounds(),
            parameters: ParameterLimits {
                max_bytes: self.max_parameters_bytes,
                max_values: self.max_parameters_values,
                max_depth: self.max_parameters_depth,
            },
            max_result_bytes: self.max_result_bytes,
            default_retry_policy: self
                .default_retry_policy()
                .map_err(|violation| violation.description)?,
        })
    }

    /// Concurrent-retry caps by namespace (`None`: unlimited).
    pub fn retry_caps(&self) -> PerNamespace<Option<u32>> {
        optional_per_namespace(
            self.max_concurrent_retries,
            &self.namespace_max_concurrent_retries,
        )
    }

    /// Calls per second by namespace (`None`: unlimited).
    pub fn rate_limits(&self) -> PerNamespace<Option<u32>> {
        optional_per_namespace(self.rate_limit, &self.namespace_rate_limits)
    }

    pub fn maintenance_settings(&self) -> MaintenanceSettings {
        MaintenanceSettings {
            interval: self.maintenance_interval,
            retention: PerNamespace {
                default: self.retention.0,
                overrides: self
                    .namespace_retention
                    .0
                    .iter()
                    .map(|(namespace, retention)| (namespace.clone(), retention.0))
                    .collect(),
            },
            batch_size: self.maintenance_batch_size,
            batch_pause: self.maintenance_batch_pause,
        }
    }

    /// Retentions shorter than the retry deadline: a key purged while callers
    /// may still retry it registers again as a new operation.
    pub fn short_retentions(&self) -> Vec<String> {
        let short =
            |retention: &Retention| retention.0.is_some_and(|kept| kept < self.retry_deadline);
        let mut found = Vec::new();
        if short(&self.retention) {
            found.push("OPREG_RETENTION".to_owned());
        }
        for (namespace, retention) in &self.namespace_retention.0 {
            if short(retention) {
                found.push(format!("OPREG_NAMESPACE_RETENTION {namespace}"));
            }
        }
        found
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

    /// Where migrations, the maintenance lock and the gauges connect, when not
    /// the main URL. The URL may hold a password: it is parsed, never shown.
    pub fn session_database(&self) -> Result<Option<PgConnectOptions>, String> {
        self.session_database_url
            .as_deref()
            .map(|url| {
                PgConnectOptions::from_str(url)
                    .map_err(|_| "OPREG_SESSION_DATABASE_URL is not a valid PostgreSQL URL".into())
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

/// A default that may be absent (unlimited), with per-namespace values.
fn optional_per_namespace(
    default: Option<u32>,
    overrides: &Overrides<u32>,
) -> PerNamespace<Option<u32>> {
    PerNamespace {
        default,
        overrides: overrides
            .0
            .iter()
            .map(|(namespace, value)| (namespace.clone(), Some(*value)))
            .collect(),
    }
}

/// How long finished operations are kept; `forever` keeps them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention(pub Option<Duration>);

impl FromStr for Retention {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.trim() == "forever" {
            return Ok(Self(None));
        }
        humantime::parse_duration(text.trim())
            .map(|kept| Self(Some(kept)))
            .map_err(|error| format!("{text:?} is neither a duration nor `forever`: {error}"))
    }
}

/// `namespace=value` pairs separated by commas; empty for none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides<T>(pub Vec<(String, T)>);

impl<T: FromStr<Err: std::fmt::Display>> FromStr for Overrides<T> {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut pairs = Vec::new();
        for pair in text
            .split(',')
            .map(str::trim)
            .filter(|pair| !pair.is_empty())
        {
            let (namespace, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("{pair:?} is not namespace=value"))?;
            let namespace = Namespace::parse("namespace", namespace.trim().to_owned())
                .map_err(|violation| format!("{pair:?}: namespace {}", violation.description))?;
            let value = value
                .trim()
                .parse()
                .map_err(|error| format!("{pair:?}: {error}"))?;
            pairs.push((namespace.into_string(), value));
        }
        Ok(Self(pairs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OPERATIONS.md's configuration reference: the lines between these two
    /// markers are generated from the flags below.
    const REFERENCE_BEGINS: &str = "<!-- configuration reference:";
    const REFERENCE_ENDS: &str = "<!-- end of configuration reference -->";

    /// One table row per flag: its variable, flag, default and help text.
    fn configuration_reference() -> String {
        use clap::CommandFactory;
        let mut table =
            String::from("| variable | flag | default | meaning |\n|---|---|---|---|\n");
        for arg in Config::command().get_arguments() {
            let Some(long) = arg.get_long() else {
                continue;
            };
            if arg.is_hide_set() || matches!(long, "help" | "version") {
                continue;
            }
            let env = arg
                .get_env()
                .map(|env| format!("`{}`", env.to_string_lossy()))
                .unwrap_or_else(|| "—".to_owned());
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|value| value.to_string_lossy().into_owned())
                .collect();
            let default = if defaults.is_empty() {
                "—".to_owned()
            } else {
                format!("`{}`", defaults.join(","))
            };
            let help = arg
                .get_long_help()
                .or(arg.get_help())
                .map(|help| help.to_string())
                .unwrap_or_default();
            let meaning = help
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .replace('|', "\\|");
            table.push_str(&format!("| {env} | `--{long}` | {default} | {meaning} |\n"));
        }
        table
    }

    /// Rewritten by `OPREG_BLESS=1 cargo test -p opreg-server --lib
    /// configuration_reference`, so a new or changed flag cannot leave the
    /// operators' reference behind.
    #[test]
    fn configuration_reference_in_operations_md_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../OPERATIONS.md");
        let text = std::fs::read_to_string(path).expect("OPERATIONS.md");
        let begins = text
            .find(REFERENCE_BEGINS)
            .expect("the reference's first marker");
        let table_starts = begins + text[begins..].find('\n').expect("a marker line") + 1;
        let table_ends = text
            .find(REFERENCE_ENDS)
            .expect("the reference's last marker");
        let wanted = configuration_reference();
        if std::env::var_os("OPREG_BLESS").is_some() {
            let blessed = format!("{}{wanted}{}", &text[..table_starts], &text[table_ends..]);
            std::fs::write(path, blessed).expect("OPERATIONS.md written");
            return;
        }
        assert!(
            text[table_starts..table_ends] == wanted,
            "OPERATIONS.md's configuration reference is out of date: run \
             OPREG_BLESS=1 cargo test -p opreg-server --lib configuration_reference"
        );
    }

    #[test]
    fn defaults_are_valid_and_documented_values() {
        let config = Config::defaults();
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.listen_addr.to_string(), "127.0.0.1:50051");
        assert_eq!(config.lease_ttl_default, Duration::from_secs(30));
        assert_eq!(config.max_result_bytes, 1 << 20);
        let policy = config.default_retry_policy().unwrap();
        assert_eq!(policy.max_attempts, 5);
        assert_eq!(policy.max_backoff, Duration::from_secs(300));
        assert_eq!(policy.deadline, Duration::from_secs(86_400));
    }

    #[test]
    fn lifecycle_settings_parse_overrides_and_forever() {
        let config = Config::parse_from([
            "opreg-server",
            "--retention",
            "2s",
            "--namespace-retention",
            "payments=forever, callbacks=3d",
            "--namespace-max-concurrent-retries",
            "payments=10",
        ]);
        let maintenance = config.maintenance_settings();
        assert_eq!(
            *maintenance.retention.get("other"),
            Some(Duration::from_secs(2))
        );
        assert_eq!(*maintenance.retention.get("payments"), None);
        assert_eq!(
            *maintenance.retention.get("callbacks"),
            Some(Duration::from_secs(3 * 86_400))
        );
        assert_eq!(*config.retry_caps().get("payments"), Some(10));
        assert_eq!(*config.retry_caps().get("other"), None);
        let limited = Config::parse_from([
            "opreg-server",
            "--rate-limit",
            "100",
            "--namespace-rate-limits",
            "reports=5",
        ]);
        assert_eq!(*limited.rate_limits().get("reports"), Some(5));
        assert_eq!(*limited.rate_limits().get("payments"), Some(100));
        assert_eq!(*Config::defaults().rate_limits().get("payments"), None);
        assert_eq!(config.short_retentions(), ["OPREG_RETENTION"]);
        assert_eq!(Config::defaults().short_retentions(), Vec::<String>::new());
        assert!("payments".parse::<Overrides<u32>>().is_err());
        assert!(" =1".parse::<Overrides<u32>>().is_err());
        assert!("soon".parse::<Retention>().is_err());
    }

    #[test]
    fn the_database_url_can_come_from_a_file() {
        let dir = std::env::temp_dir().join(format!("opreg-url-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("url");
        std::fs::write(&file, "postgres://opreg:secret@db/opreg\n").unwrap();
        let mut config = Config::parse_from([
            "opreg-server",
            "--database-url-file",
            file.to_str().unwrap(),
        ]);
        config.read_secret_files().unwrap();
        assert_eq!(
            config.database_url.as_deref(),
            Some("postgres://opreg:secret@db/opreg")
        );
        std::fs::write(&file, "  ").unwrap();
        assert!(config.read_secret_files().is_err());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_public_address_needs_an_explicit_choice_to_serve_unauthenticated() {
        let public = Config::parse_from(["opreg-server", "--listen-addr", "0.0.0.0:50051"]);
        let refused = public.validate().unwrap_err();
        assert!(refused.contains("--allow-unauthenticated"), "{refused}");
        let allowed = Config::parse_from([
            "opreg-server",
            "--listen-addr",
            "0.0.0.0:50051",
            "--allow-unauthenticated",
        ]);
        assert_eq!(allowed.validate(), Ok(()));
        let with_policy = Config::parse_from([
            "opreg-server",
            "--listen-addr",
            "0.0.0.0:50051",
            "--auth-file",
            "/etc/opreg/policy.toml",
        ]);
        assert_eq!(with_policy.validate(), Ok(()));
        let loopback = Config::parse_from(["opreg-server", "--listen-addr", "[::1]:50051"]);
        assert_eq!(loopback.validate(), Ok(()));
    }

    #[test]
    fn inconsistent_bounds_are_refused() {
        let mut config = Config::defaults();
        config.lease_ttl_min = Duration::from_secs(60);
        assert!(config.validate().is_err());
        let mut config = Config::defaults();
        config.retry_initial_backoff = Duration::from_secs(600);
        assert!(config.validate().is_err());
    }

    #[test]
    fn each_kind_of_writer_leaves_room_in_the_pool() {
        let small = Config::parse_from(["opreg-server", "--pool-max-connections", "5"]);
        assert_eq!(small.validate(), Ok(()));
        let too_small = Config::parse_from(["opreg-server", "--pool-max-connections", "4"]);
        assert!(too_small.validate().unwrap_err().contains("writers"));
        let mut none = Config::defaults();
        none.complete_writers = 0;
        assert!(none.validate().is_err());
    }

    #[test]
    fn transaction_pooling_needs_a_session_url() {
        let pooled = Config::parse_from([
            "opreg-server",
            "--database-url=postgres://opreg@pgbouncer:6432/opreg",
            "--database-pooler=transaction",
        ]);
        assert!(
            pooled
                .validate()
                .unwrap_err()
                .contains("OPREG_SESSION_DATABASE_URL")
        );
        let with_session = Config::parse_from([
            "opreg-server",
            "--database-url=postgres://opreg@pgbouncer:6432/opreg",
            "--database-pooler=transaction",
            "--session-database-url=postgres://opreg@db:5432/opreg",
        ]);
        assert_eq!(with_session.validate(), Ok(()));
        assert_eq!(with_session.pool_settings().pooler, Pooler::Transaction);
        let unparsable = Config::parse_from([
            "opreg-server",
            "--database-url=postgres://opreg@db/opreg",
            "--session-database-url=nonsense",
        ]);
        assert!(unparsable.validate().unwrap_err().contains("not a valid"));
        assert!(Config::try_parse_from(["opreg-server", "--database-pooler=statement"]).is_err());
    }
}
