//! The background maintenance task: every interval each replica tries to
//! become the one that maintains (the lease row `leader_leases('maintenance')`,
//! taken and renewed on a connection of its own); the one that holds it runs
//! a pass.

use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;

use crate::registry::{MaintenanceSettings, Registry};
use crate::store::{Dedicated, leadership};
use crate::telemetry::metrics;

/// How long opening the maintenance connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long taking or renewing the lease may take.
const LEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// The shortest lease: a pass longer than its lease would let a second
/// replica start one (harmless, every step is guarded, but wasted work).
const MINIMUM_LEASE: Duration = Duration::from_secs(2);

/// A lease outlives two missed renewals: a leader that stops renewing is
/// replaced within three intervals.
fn lease_for(interval: Duration) -> Duration {
    (interval * 3).max(MINIMUM_LEASE)
}

/// This process's name as a holder of a lease row (the maintenance's, a
/// console job's): unique among replicas.
pub fn holder_id() -> String {
    format!("replica-{}", hex::encode(rand::random::<[u8; 8]>()))
}

/// Runs until the task is aborted; then [`step_down`] hands the lease on at
/// once (without it, another replica takes over when it expires).
pub async fn run_forever(
    options: PgConnectOptions,
    registry: Registry,
    settings: MaintenanceSettings,
    holder: String,
) {
    // Kept open by followers too, so asking again costs a statement, not a login.
    let mut connection = Dedicated::new(options);
    let lease = lease_for(settings.interval);
    let mut leading = false;
    let mut ticker = tokio::time::interval(settings.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        leading = keep_or_take_lead(&mut connection, &holder, lease, leading).await;
        metrics::maintenance_leader(leading);
        if !leading {
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

/// Whether this replica leads now: one statement renews the lease of a
/// leader and takes an expired one for a follower. A failed connection is
/// reopened next time; until then this replica does not lead.
async fn keep_or_take_lead(
    connection: &mut Dedicated,
    holder: &str,
    lease: Duration,
    leading: bool,
) -> bool {
    let Some(open) = connection.get(CONNECT_TIMEOUT).await else {
        return false;
    };
    // A session holding the lease row (an operator's open transaction) must
    // not stall the ticks: past the timeout the connection is dropped, its
    // statement with it, and this replica does not lead this time.
    let Ok(led) = tokio::time::timeout(LEAD_TIMEOUT, leadership::lead(open, holder, lease)).await
    else {
        tracing::warn!("the maintenance lease did not answer in time");
        connection.reset();
        return false;
    };
    match led {
        Ok(true) => {
            if !leading {
                tracing::info!("this replica runs the maintenance");
            }
            true
        }
        Ok(false) => {
            if leading {
                tracing::warn!("another replica took the maintenance lease");
            }
            false
        }
        Err(error) => {
            tracing::warn!(%error, "the maintenance connection failed");
            connection.reset();
            false
        }
    }
}

/// Gives up the maintenance lease of a stopping replica, if it holds it. In
/// a transaction, so that behind a transaction pooler the statement's two
/// rounds reach one server connection. A renewal the aborted task had sent
/// may still land after it; that lease then expires by itself.
pub async fn step_down(pool: &PgPool, holder: &str) {
    let stepped = async {
        let mut transaction = pool.begin().await?;
        leadership::step_down(&mut transaction, holder).await?;
        transaction.commit().await
    };
    if let Err(error) = stepped.await {
        tracing::warn!(%error, "could not hand the maintenance lease on; it expires by itself");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_outlives_two_missed_renewals_and_never_runs_under_the_minimum() {
        assert_eq!(lease_for(Duration::from_secs(30)), Duration::from_secs(90));
        assert_eq!(lease_for(Duration::from_millis(100)), MINIMUM_LEASE);
    }
}
