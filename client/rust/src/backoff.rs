//! Exponential backoff with full jitter, bounded by an overall deadline.

use std::time::Duration;

use tokio::time::Instant;

const INITIAL: Duration = Duration::from_millis(50);
const MAX: Duration = Duration::from_secs(5);

/// Uniform in `[0, min(MAX, INITIAL × 2^attempt)]`.
pub fn full_jitter(attempt: u32) -> Duration {
    let cap = INITIAL
        .saturating_mul(1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX))
        .min(MAX);
    cap.mul_f64(rand::random::<f64>())
}

/// `wait` stretched by up to a tenth, so callers told the same time spread out.
pub fn spread(wait: Duration) -> Duration {
    wait + wait.mul_f64(rand::random::<f64>() / 10.0)
}

/// Sleeps `wait`, unless that would pass `deadline`; false then.
pub async fn sleep_within(wait: Duration, deadline: Instant) -> bool {
    let Some(until) = Instant::now().checked_add(wait) else {
        return false;
    };
    if until > deadline {
        return false;
    }
    tokio::time::sleep_until(until).await;
    true
}
