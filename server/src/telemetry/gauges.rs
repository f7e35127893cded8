//! One periodic task per replica reads the backlog with one query, on a
//! connection of its own, and sets the database gauges; nothing per request.

use std::collections::HashMap;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;

use super::metrics;
use crate::store::Dedicated;
use crate::store::operations::{self, BacklogRow};

/// A refresh gives up after this long; the gauges then keep their last values.
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// Refreshes the gauges every `interval` until the task is aborted. `pool`
/// is only observed (its size and idle connections), never used.
pub async fn refresh_forever(options: PgConnectOptions, pool: PgPool, interval: Duration) {
    let mut connection = Dedicated::new(options);
    let mut reported = Reported::default();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        metrics::pool(pool.size(), pool.num_idle());
        let Some(open) = connection.get(QUERY_TIMEOUT).await else {
            continue;
        };
        match tokio::time::timeout(QUERY_TIMEOUT, operations::backlog(open)).await {
            Ok(Ok(rows)) => reported.set(&rows),
            Ok(Err(error)) => {
                tracing::warn!(%error, "cannot read the backlog");
                connection.reset();
            }
            Err(_) => {
                tracing::warn!("the backlog query timed out");
                connection.reset();
            }
        }
    }
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
            let namespace = metrics::namespace_label(&row.namespace);
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
