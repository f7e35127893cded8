//! One periodic task reads the backlog with one aggregate query and sets the
//! database gauges and the health status from it; nothing per request.

use std::collections::HashMap;
use std::time::Duration;

use sqlx::PgPool;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use super::metrics;
use crate::store::operations::{self, BacklogRow};

/// Service names whose health follows the database: the server ("") and the registry.
pub const HEALTH_SERVICES: [&str; 2] = ["", "opreg.v1.OperationRegistry"];

/// A health entry that is SERVING while the process runs, whatever the
/// database does: for liveness probes, which must not restart every replica
/// during a database outage.
pub const LIVENESS_SERVICE: &str = "liveness";

/// A gauge refresh gives up after this long, so an unreachable database shows
/// within seconds rather than after the pool's acquire timeout.
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// Refreshes the gauges every `interval` until the task is aborted.
pub async fn refresh_forever(pool: PgPool, health: HealthReporter, interval: Duration) {
    let mut reported = Reported::default();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let backlog =
            tokio::time::timeout(interval.min(QUERY_TIMEOUT), operations::backlog(&pool)).await;
        let up = matches!(backlog, Ok(Ok(_)));
        match backlog {
            Ok(Ok(rows)) => reported.set(&rows),
            Ok(Err(error)) => {
                tracing::warn!(%error, "cannot read the backlog; reporting NOT_SERVING")
            }
            Err(_) => tracing::warn!("the backlog query timed out; reporting NOT_SERVING"),
        }
        metrics::store_up(up);
        metrics::pool(pool.size(), pool.num_idle());
        set_health(&health, up).await;
    }
}

pub async fn set_health(health: &HealthReporter, serving: bool) {
    let status = if serving {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    for service in HEALTH_SERVICES {
        health.set_service_status(service, status).await;
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
