//! What the server reports: metric labels, the gauges' refresh, the log format.

use std::time::Duration;

use clap::{Args, ValueEnum};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Plain,
    Json,
}

/// Telemetry.
#[derive(Clone, Debug, Args)]
pub struct Telemetry {
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

    /// Log format on stderr.
    #[arg(long, env = "OPREG_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
}

/// A telemetry setting that cannot stand.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TelemetryError {
    #[error("the gauge refresh interval must be positive")]
    GaugeInterval,
}

impl Telemetry {
    pub fn validate(&self) -> Result<(), TelemetryError> {
        if self.gauge_refresh_interval.is_zero() {
            return Err(TelemetryError::GaugeInterval);
        }
        Ok(())
    }
}
