//! What happens to operations over time: the default retry budget, the caps
//! on concurrent retries, and the maintenance (budgets, retention).

use std::time::Duration;

use clap::Args;

use super::values::{Overrides, Retention, optional_per_namespace};
use crate::domain::error::FieldViolation;
use crate::domain::policy::{PerNamespace, RetryPolicy};
use crate::registry::MaintenanceSettings;

/// The lifecycle.
#[derive(Clone, Debug, Args)]
pub struct Lifecycle {
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
}

/// A lifecycle setting that cannot stand.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LifecycleError {
    #[error("default {field}: {description}")]
    RetryPolicy { field: String, description: String },
    #[error("the maintenance interval and batch size must be positive")]
    Maintenance,
}

impl From<FieldViolation> for LifecycleError {
    fn from(violation: FieldViolation) -> Self {
        Self::RetryPolicy {
            field: violation.field.to_string(),
            description: violation.description,
        }
    }
}

impl Lifecycle {
    pub fn validate(&self) -> Result<(), LifecycleError> {
        if self.maintenance_interval.is_zero() || self.maintenance_batch_size == 0 {
            return Err(LifecycleError::Maintenance);
        }
        self.default_retry_policy().map(|_| ())
    }

    pub fn default_retry_policy(&self) -> Result<RetryPolicy, LifecycleError> {
        Ok(RetryPolicy::new(
            self.retry_max_attempts,
            self.retry_initial_backoff,
            self.retry_max_backoff,
            self.retry_deadline,
        )?)
    }

    /// Concurrent-retry caps by namespace (`None`: unlimited).
    pub fn retry_caps(&self) -> PerNamespace<Option<u32>> {
        optional_per_namespace(
            self.max_concurrent_retries,
            &self.namespace_max_concurrent_retries,
        )
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
}
