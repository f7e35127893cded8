//! Configuration from flags and `OPREG_*` environment variables, validated at
//! load time so a bad setting stops the server before it serves.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use crate::domain::policy::{LeaseBounds, RetryPolicy};
use crate::grpc::RequestLimits;
use crate::store::PoolSettings;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Plain,
    Json,
}

/// opreg-server: the operation registry.
///
/// With no database URL it runs an embedded PostgreSQL from the locally
/// installed server binaries, in a data directory it owns.
#[derive(Clone, Debug, Parser)]
#[command(name = "opreg-server", version, about, long_about)]
pub struct Config {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Address the gRPC server listens on.
    #[arg(long, env = "OPREG_LISTEN_ADDR", default_value = "127.0.0.1:50051")]
    pub listen_addr: SocketAddr,

    /// PostgreSQL URL; migrations run against it at start. Absent: embedded PostgreSQL.
    #[arg(long, env = "OPREG_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Directory of the embedded PostgreSQL [default: ~/.local/share/opreg, or /var/lib/opreg as root].
    #[arg(long, env = "OPREG_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// Directory holding `initdb` and `postgres` [default: searched in PATH and the usual install locations].
    #[arg(long, env = "OPREG_PG_BIN_DIR")]
    pub pg_bin_dir: Option<PathBuf>,

    /// Most database connections this replica opens.
    #[arg(long, env = "OPREG_POOL_MAX_CONNECTIONS", default_value_t = 32)]
    pub pool_max_connections: u32,

    /// How long a request may wait for a database connection before UNAVAILABLE.
    #[arg(long, env = "OPREG_POOL_ACQUIRE_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub pool_acquire_timeout: Duration,

    /// Upper bound on one SQL statement, lock waits included.
    #[arg(long, env = "OPREG_STATEMENT_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub statement_timeout: Duration,

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

    /// How often the backlog gauges and the health status are read from the database.
    #[arg(long, env = "OPREG_GAUGE_REFRESH_INTERVAL", default_value = "15s", value_parser = humantime::parse_duration)]
    pub gauge_refresh_interval: Duration,

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

    /// Checks the settings that depend on each other.
    pub fn validate(&self) -> Result<(), String> {
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
        if self.gauge_refresh_interval.is_zero() {
            return Err("the gauge refresh interval must be positive".into());
        }
        if self.pool_max_connections == 0 {
            return Err("the pool needs at least one connection".into());
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
            max_result_bytes: self.max_result_bytes,
            default_retry_policy: self
                .default_retry_policy()
                .map_err(|violation| violation.description)?,
        })
    }

    pub fn pool_settings(&self) -> PoolSettings {
        PoolSettings {
            max_connections: self.pool_max_connections,
            acquire_timeout: self.pool_acquire_timeout,
            statement_timeout: self.statement_timeout,
        }
    }

    /// The embedded PostgreSQL's directory.
    pub fn embedded_root(&self) -> PathBuf {
        if let Some(dir) = &self.data_dir {
            return dir.clone();
        }
        // Root's home is closed to the user PostgreSQL then runs as.
        if crate::embedded::is_root() {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn inconsistent_bounds_are_refused() {
        let mut config = Config::defaults();
        config.lease_ttl_min = Duration::from_secs(60);
        assert!(config.validate().is_err());
        let mut config = Config::defaults();
        config.retry_initial_backoff = Duration::from_secs(600);
        assert!(config.validate().is_err());
    }
}
