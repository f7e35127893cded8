//! What one request may ask for: lease lengths, sizes of results and
//! parameters, calls in flight, calls per second per namespace, and waits.

use std::time::Duration;

use clap::Args;

use super::values::{Overrides, optional_per_namespace};
use crate::domain::policy::{LeaseBounds, PerNamespace};
use crate::grpc::ParameterLimits;
use crate::registry::WaitSettings;

/// Limits.
#[derive(Clone, Debug, Args)]
pub struct Limits {
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

    /// Registry and admin calls in flight at once; more are answered
    /// UNAVAILABLE (OVERLOADED) with RetryInfo at once. Health is never shed.
    #[arg(long, env = "OPREG_MAX_CONCURRENT_CALLS", default_value_t = 1024)]
    pub max_concurrent_calls: usize,

    /// Calls per second each namespace may make on this replica (a token bucket
    /// with a burst of one second); more are RESOURCE_EXHAUSTED / RATE_LIMITED
    /// with a RetryInfo [default: unlimited].
    #[arg(long, env = "OPREG_RATE_LIMIT")]
    pub rate_limit: Option<u32>,

    /// Per-namespace rate limits in calls per second, e.g. `payments=500,reports=20`.
    #[arg(long, env = "OPREG_NAMESPACE_RATE_LIMITS", default_value = "")]
    pub namespace_rate_limits: Overrides<u32>,

    /// Longest a Claim or Lookup may wait for its operation to move (longer
    /// waits are cut to this); 0 turns waiting off, and calls are answered at
    /// once as by a server that does not wait.
    #[arg(long, env = "OPREG_MAX_WAIT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub max_wait: Duration,

    /// Calls that may wait at once on this replica; more are
    /// RESOURCE_EXHAUSTED / TOO_MANY_WAITERS with a RetryInfo. A waiting call
    /// holds no database connection and no place among the calls in flight.
    #[arg(long, env = "OPREG_MAX_WAITERS", default_value_t = 10_000)]
    pub max_waiters: usize,
}

/// A limit that cannot stand.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    #[error("lease TTL bounds must satisfy 0 < min <= max")]
    LeaseBounds,
    #[error("the default lease TTL must lie within the bounds")]
    DefaultLease,
    #[error("the call limit must be positive")]
    NoCalls,
    #[error(
        "waiting needs OPREG_MAX_WAIT of at least 1s (0 turns it off) and OPREG_MAX_WAITERS of at least 1"
    )]
    WaitBounds,
}

impl Limits {
    pub fn validate(&self) -> Result<(), LimitsError> {
        let lease = self.lease_bounds();
        if lease.min.is_zero() || lease.min > lease.max {
            return Err(LimitsError::LeaseBounds);
        }
        if lease.default < lease.min || lease.default > lease.max {
            return Err(LimitsError::DefaultLease);
        }
        // A wait of a few milliseconds would have every client claim again
        // at once in a loop, each answer saying the server waited.
        if !self.max_wait.is_zero()
            && (self.max_wait < Duration::from_secs(1) || self.max_waiters == 0)
        {
            return Err(LimitsError::WaitBounds);
        }
        if self.max_concurrent_calls == 0 {
            return Err(LimitsError::NoCalls);
        }
        Ok(())
    }

    pub fn lease_bounds(&self) -> LeaseBounds {
        LeaseBounds {
            min: self.lease_ttl_min,
            max: self.lease_ttl_max,
            default: self.lease_ttl_default,
        }
    }

    pub fn parameter_limits(&self) -> ParameterLimits {
        ParameterLimits {
            max_bytes: self.max_parameters_bytes,
            max_values: self.max_parameters_values,
            max_depth: self.max_parameters_depth,
        }
    }

    /// Calls per second by namespace (`None`: unlimited).
    pub fn rate_limits(&self) -> PerNamespace<Option<u32>> {
        optional_per_namespace(self.rate_limit, &self.namespace_rate_limits)
    }

    pub fn wait_settings(&self) -> WaitSettings {
        WaitSettings {
            max_wait: self.max_wait,
            max_waiters: self.max_waiters,
        }
    }
}
