//! One periodic task per replica reads the backlog with one query, and the
//! SQL door's call counts with another, on a connection of its own, and sets
//! the database gauges; nothing per request.

use std::collections::HashMap;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;

use crate::store::Dedicated;
use crate::store::operations::{self, BacklogRow};
use crate::store::sql_door;
use crate::telemetry::metrics;

/// A refresh gives up after this long; the gauges then keep their last values.
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// The most of one core's time the refreshes may take: a refresh that took
/// `t` is followed by a pause of at least `t` times this factor.
const PAUSE_PER_REFRESH_TIME: u32 = 19;

/// Refreshes the gauges every `interval` until the task is aborted, or less
/// often when the backlog makes a refresh slow (its query counts every
/// unfinished row), so the gauges never take more than a twentieth of the
/// database's time. `pool` is only observed (its size and idle connections),
/// never used.
pub async fn refresh_forever(options: PgConnectOptions, pool: PgPool, interval: Duration) {
    let mut connection = Dedicated::new(options);
    let mut reported = Reported::default();
    loop {
        metrics::pool(pool.size(), pool.num_idle());
        metrics::runtime(
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks(),
        );
        let started = tokio::time::Instant::now();
        if let Some(open) = connection.get(QUERY_TIMEOUT).await {
            // Each read on its own: neither keeps the other's gauges from moving.
            let backlog = timed("the backlog", operations::backlog(&mut *open)).await;
            if let Some(rows) = &backlog {
                reported.set(rows);
            }
            let calls = timed(
                "the SQL door's call counts",
                sql_door::call_counts(&mut *open),
            )
            .await;
            for count in calls.iter().flatten() {
                metrics::sql_door_calls(&count.call, &count.outcome, count.calls);
            }
            if backlog.is_none() || calls.is_none() {
                connection.reset();
            }
        }
        tokio::time::sleep(pause_after(interval, started.elapsed())).await;
    }
}

/// The answer of one refresh query within [`QUERY_TIMEOUT`], or `None` after a
/// warning naming `what` could not be read.
async fn timed<T>(what: &str, query: impl Future<Output = sqlx::Result<T>>) -> Option<T> {
    match tokio::time::timeout(QUERY_TIMEOUT, query).await {
        Ok(Ok(answer)) => Some(answer),
        Ok(Err(error)) => {
            tracing::warn!(%error, "cannot read {what}");
            None
        }
        Err(_) => {
            tracing::warn!("reading {what} timed out");
            None
        }
    }
}

/// How long to wait before the next refresh, after one that took `took`.
fn pause_after(interval: Duration, took: Duration) -> Duration {
    interval
        .saturating_sub(took)
        .max(took.saturating_mul(PAUSE_PER_REFRESH_TIME))
}

/// Label sets reported so far, so a backlog that empties drops to zero
/// instead of freezing at its last value.
#[derive(Default)]
struct Reported {
    backlog: HashMap<(String, String), f64>,
    namespaces: HashMap<String, NamespaceGauges>,
}

/// The per-namespace gauges beyond the backlog counts.
#[derive(Clone, Copy, Default)]
struct NamespaceGauges {
    unknown: f64,
    oldest_unknown_age: f64,
    oldest_due_age: f64,
    compensations: f64,
}

impl Reported {
    fn set(&mut self, rows: &[BacklogRow]) {
        let mut backlog: HashMap<(String, String), f64> =
            self.backlog.keys().map(|key| (key.clone(), 0.0)).collect();
        let mut namespaces: HashMap<String, NamespaceGauges> = self
            .namespaces
            .keys()
            .map(|namespace| (namespace.clone(), NamespaceGauges::default()))
            .collect();
        for row in rows {
            let namespace = metrics::namespace_label(&row.namespace).to_owned();
            *backlog
                .entry((namespace.clone(), row.state.clone()))
                .or_default() += row.operations as f64;
            let gauges = namespaces.entry(namespace).or_default();
            gauges.unknown += row.unknown as f64;
            gauges.compensations += row.compensations as f64;
            gauges.oldest_unknown_age = gauges
                .oldest_unknown_age
                .max(row.oldest_unknown_age_seconds.unwrap_or(0.0));
            gauges.oldest_due_age = gauges
                .oldest_due_age
                .max(row.oldest_due_age_seconds.unwrap_or(0.0));
        }
        for ((namespace, state), operations) in &backlog {
            metrics::backlog(namespace, state, *operations);
        }
        for (namespace, gauges) in &namespaces {
            metrics::unknown(namespace, gauges.unknown, gauges.oldest_unknown_age);
            metrics::due_and_compensations(namespace, gauges.oldest_due_age, gauges.compensations);
        }
        self.backlog = backlog;
        self.namespaces = namespaces;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refreshes_keep_their_interval_until_they_would_take_a_twentieth_of_the_time() {
        let interval = Duration::from_secs(15);
        let ms = Duration::from_millis;
        assert_eq!(
            pause_after(interval, ms(20)),
            ms(14_980),
            "start to start: 15 s"
        );
        assert_eq!(pause_after(interval, ms(750)), ms(14_250));
        assert_eq!(
            pause_after(interval, ms(1_900)),
            ms(36_100),
            "1.9 s in every 38 s"
        );
        assert_eq!(pause_after(interval, Duration::ZERO), interval);
    }
}
