//! Per-namespace rate limits: a token bucket per namespace on each replica,
//! refilled at the namespace's calls per second with a burst of one second's
//! worth. A call past it is answered RESOURCE_EXHAUSTED / RATE_LIMITED with a
//! RetryInfo saying when the next call would be admitted, so one tenant's
//! flood does not take the replica from the others. The clock is the
//! replica's own: limits are local, nothing durable depends on them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::domain::error::RegistryError;
use crate::domain::policy::PerNamespace;
use crate::telemetry::metrics;

/// Past this many buckets, full ones (idle namespaces) are forgotten: a full
/// bucket is the same as a new one.
const MAX_BUCKETS: usize = 10_000;

#[derive(Debug)]
pub struct RateLimits {
    /// Calls per second by namespace; `None`: unlimited.
    rates: PerNamespace<Option<u32>>,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    refilled: Instant,
}

impl Bucket {
    fn refill(&mut self, rate: f64, now: Instant) {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(rate);
        self.refilled = now;
    }
}

impl RateLimits {
    pub fn new(rates: PerNamespace<Option<u32>>) -> Self {
        Self {
            rates,
            buckets: Mutex::default(),
        }
    }

    fn per_second(&self, namespace: &str) -> Option<u32> {
        (*self.rates.get(namespace)).filter(|&rate| rate > 0)
    }

    /// Takes one call from `namespace`'s bucket, or says how long to wait.
    pub fn admit(&self, namespace: &str) -> Result<(), RegistryError> {
        let Some(per_second) = self.per_second(namespace) else {
            return Ok(());
        };
        let rate = f64::from(per_second);
        let now = Instant::now();
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(namespace) {
            buckets.retain(|namespace, bucket| {
                let rate = self.per_second(namespace).map_or(0.0, f64::from);
                bucket.refill(rate, now);
                bucket.tokens < rate
            });
        }
        let bucket = buckets.entry(namespace.to_owned()).or_insert(Bucket {
            tokens: rate,
            refilled: now,
        });
        bucket.refill(rate, now);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        metrics::rate_limited(namespace);
        Err(RegistryError::RateLimited {
            calls_per_second: per_second,
            retry_after: Duration::from_secs_f64((1.0 - bucket.tokens) / rate),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_one_second_then_the_rate_with_a_wait_to_retry() {
        let limits = RateLimits::new(PerNamespace {
            default: None,
            overrides: [("payments".to_owned(), Some(5))].into(),
        });
        for _ in 0..5 {
            assert_eq!(limits.admit("payments"), Ok(()));
        }
        let Err(RegistryError::RateLimited {
            calls_per_second,
            retry_after,
        }) = limits.admit("payments")
        else {
            panic!("the sixth call in a second is admitted");
        };
        assert_eq!(calls_per_second, 5);
        assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_millis(200));
        assert_eq!(limits.admit("billing"), Ok(()), "other namespaces are free");
        std::thread::sleep(retry_after);
        assert_eq!(limits.admit("payments"), Ok(()));
    }
}
