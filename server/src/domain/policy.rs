//! Retry budgets and lease bounds. Pure arithmetic, property-tested.

use std::time::Duration;

use super::error::FieldViolation;

/// How often and for how long an operation may be attempted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Executions allowed, reconciliations excluded.
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Measured from registration; no attempt starts after it.
    pub deadline: Duration,
}

impl RetryPolicy {
    /// A policy with no zero and no inverted bounds.
    pub fn new(
        max_attempts: u32,
        initial_backoff: Duration,
        max_backoff: Duration,
        deadline: Duration,
    ) -> Result<Self, FieldViolation> {
        if max_attempts == 0 {
            return Err(FieldViolation::new(
                "retry_policy.max_attempts",
                "must be at least 1",
            ));
        }
        if initial_backoff.is_zero() {
            return Err(FieldViolation::new(
                "retry_policy.initial_backoff",
                "must be positive",
            ));
        }
        if max_backoff < initial_backoff {
            return Err(FieldViolation::new(
                "retry_policy.max_backoff",
                "must not be shorter than initial_backoff",
            ));
        }
        if deadline.is_zero() {
            return Err(FieldViolation::new(
                "retry_policy.deadline",
                "must be positive",
            ));
        }
        Ok(Self {
            max_attempts,
            initial_backoff,
            max_backoff,
            deadline,
        })
    }

    /// `min(max_backoff, initial_backoff × 2^(attempt−1))`, saturating.
    pub fn backoff_cap(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(63);
        self.initial_backoff
            .checked_mul(1u32.checked_shl(doublings).unwrap_or(u32::MAX))
            .map_or(self.max_backoff, |backoff| backoff.min(self.max_backoff))
    }

    /// Full jitter: `unit` (uniform in [0, 1]) of the cap for `attempt`.
    pub fn full_jitter(&self, attempt: u32, unit: f64) -> Duration {
        self.backoff_cap(attempt).mul_f64(unit.clamp(0.0, 1.0))
    }
}

/// Inclusive bounds for lease lengths, and the length used when none is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseBounds {
    pub min: Duration,
    pub max: Duration,
    pub default: Duration,
}

impl LeaseBounds {
    /// The lease length for a request: the default when absent, an error outside the bounds.
    pub fn resolve(
        &self,
        field: &'static str,
        requested: Option<Duration>,
    ) -> Result<Duration, FieldViolation> {
        let ttl = requested.unwrap_or(self.default);
        if ttl < self.min || ttl > self.max {
            return Err(FieldViolation::new(
                field,
                format!(
                    "must be between {} and {} inclusive",
                    humantime::format_duration(self.min),
                    humantime::format_duration(self.max)
                ),
            ));
        }
        Ok(ttl)
    }
}

/// A setting with per-namespace overrides (`OPREG_NAMESPACE_*`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerNamespace<T> {
    pub default: T,
    pub overrides: std::collections::HashMap<String, T>,
}

impl<T> PerNamespace<T> {
    pub fn uniform(default: T) -> Self {
        Self {
            default,
            overrides: std::collections::HashMap::new(),
        }
    }

    /// The value in force for `namespace`.
    pub fn get(&self, namespace: &str) -> &T {
        self.overrides.get(namespace).unwrap_or(&self.default)
    }
}

/// Microseconds for the database, rounded up so a bound is never shortened.
pub fn micros_ceil(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos().div_ceil(1_000)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn policy(initial_ms: u64, max_ms: u64) -> RetryPolicy {
        RetryPolicy::new(
            5,
            Duration::from_millis(initial_ms),
            Duration::from_millis(max_ms),
            Duration::from_secs(3600),
        )
        .unwrap()
    }

    #[test]
    fn backoff_doubles_until_the_cap() {
        let p = policy(1_000, 5_000);
        let caps: Vec<_> = (1..=5).map(|a| p.backoff_cap(a).as_millis()).collect();
        assert_eq!(caps, [1_000, 2_000, 4_000, 5_000, 5_000]);
    }

    #[test]
    fn zero_and_inverted_bounds_are_refused() {
        let s = Duration::from_secs(1);
        assert!(RetryPolicy::new(0, s, s, s).is_err());
        assert!(RetryPolicy::new(1, Duration::ZERO, s, s).is_err());
        assert!(RetryPolicy::new(1, s * 2, s, s).is_err());
        assert!(RetryPolicy::new(1, s, s, Duration::ZERO).is_err());
    }

    #[test]
    fn lease_bounds_are_inclusive_to_the_nanosecond() {
        let bounds = LeaseBounds {
            min: Duration::from_secs(1),
            max: Duration::from_secs(3600),
            default: Duration::from_secs(30),
        };
        assert_eq!(bounds.resolve("ttl", None), Ok(Duration::from_secs(30)));
        assert!(bounds.resolve("ttl", Some(Duration::from_secs(1))).is_ok());
        assert!(
            bounds
                .resolve("ttl", Some(Duration::from_secs(3600)))
                .is_ok()
        );
        assert!(
            bounds
                .resolve("ttl", Some(Duration::from_nanos(999_999_999)))
                .is_err()
        );
        assert!(bounds.resolve("ttl", Some(Duration::new(3600, 1))).is_err());
    }

    #[test]
    fn micros_round_up() {
        assert_eq!(micros_ceil(Duration::from_nanos(1)), 1);
        assert_eq!(micros_ceil(Duration::from_micros(7)), 7);
    }

    proptest! {
        #[test]
        fn jitter_stays_within_zero_and_the_cap(
            initial_ms in 1u64..10_000,
            extra_ms in 0u64..1_000_000,
            attempt in 0u32..200,
            unit in 0.0f64..=1.0,
        ) {
            let p = policy(initial_ms, initial_ms + extra_ms);
            let cap = p.backoff_cap(attempt);
            prop_assert!(cap >= p.initial_backoff && cap <= p.max_backoff);
            prop_assert!(p.full_jitter(attempt, unit) <= cap);
        }

        #[test]
        fn caps_never_shrink_with_attempts(initial_ms in 1u64..10_000, attempt in 1u32..100) {
            let p = policy(initial_ms, initial_ms * 1_000);
            prop_assert!(p.backoff_cap(attempt + 1) >= p.backoff_cap(attempt));
        }
    }
}
