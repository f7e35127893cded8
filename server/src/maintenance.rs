//! The background maintenance task: every interval each replica tries to
//! become the one that maintains (a PostgreSQL advisory lock held on a
//! dedicated connection); the one that holds it runs a pass.

use sqlx::{Connection, PgConnection, PgPool};

use crate::registry::{MaintenanceSettings, Registry};
use crate::store::leadership;
use crate::telemetry::metrics;

/// Runs until the task is aborted; dropping it closes the leader's connection,
/// which releases the lock for another replica.
pub async fn run_forever(pool: PgPool, registry: Registry, settings: MaintenanceSettings) {
    let mut leader: Option<PgConnection> = None;
    let mut ticker = tokio::time::interval(settings.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        leader = keep_or_take_lead(&pool, leader).await;
        metrics::maintenance_leader(leader.is_some());
        if leader.is_none() {
            continue;
        }
        match registry.maintain(&settings).await {
            Ok(pass) => {
                metrics::maintenance_ran();
                if pass.exhausted > 0 || pass.purged > 0 {
                    tracing::info!(
                        exhausted = pass.exhausted,
                        purged = pass.purged,
                        "maintenance pass"
                    );
                }
            }
            Err(error) => tracing::warn!(%error, "maintenance pass failed; retrying next interval"),
        }
    }
}

/// The leader's connection if it still holds the lock, else a new connection
/// that took it, else `None` (another replica leads, or PostgreSQL is away).
async fn keep_or_take_lead(pool: &PgPool, leader: Option<PgConnection>) -> Option<PgConnection> {
    if let Some(mut connection) = leader {
        match leadership::still_leading(&mut connection).await {
            Ok(true) => return Some(connection),
            Ok(false) => tracing::warn!("lost the maintenance lock"),
            Err(error) => tracing::warn!(%error, "the maintenance connection failed"),
        }
    }
    let options = pool.connect_options();
    let mut connection = match PgConnection::connect_with(&options).await {
        Ok(connection) => connection,
        Err(error) => {
            tracing::debug!(%error, "cannot open the maintenance connection");
            return None;
        }
    };
    match leadership::try_lead(&mut connection).await {
        Ok(true) => {
            tracing::info!("this replica runs the maintenance");
            Some(connection)
        }
        Ok(false) => None,
        Err(error) => {
            tracing::debug!(%error, "cannot take the maintenance lock");
            None
        }
    }
}
