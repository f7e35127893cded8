//! The background maintenance task: every interval each replica tries to
//! become the one that maintains (a PostgreSQL advisory lock held on a
//! connection of its own); the one that holds it runs a pass.

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;

use crate::registry::{MaintenanceSettings, Registry};
use crate::store::{Dedicated, leadership};
use crate::telemetry::metrics;

/// How long opening the maintenance connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs until the task is aborted; dropping it closes the maintenance
/// connection, which releases the lock for another replica.
pub async fn run_forever(
    options: PgConnectOptions,
    registry: Registry,
    settings: MaintenanceSettings,
) {
    // Kept open by followers too, so asking again costs a statement, not a login.
    let mut connection = Dedicated::new(options);
    let mut leading = false;
    let mut ticker = tokio::time::interval(settings.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        leading = keep_or_take_lead(&mut connection, leading).await;
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

/// Whether this replica leads now: a leader checks it still holds the lock,
/// a follower tries to take it. A failed connection is reopened next time
/// (and with it went the lock, if it was held).
async fn keep_or_take_lead(connection: &mut Dedicated, leading: bool) -> bool {
    let Some(open) = connection.get(CONNECT_TIMEOUT).await else {
        return false;
    };
    let held = if leading {
        leadership::still_leading(open).await
    } else {
        leadership::try_lead(open).await
    };
    match held {
        Ok(true) => {
            if !leading {
                tracing::info!("this replica runs the maintenance");
            }
            true
        }
        Ok(false) => {
            if leading {
                tracing::warn!("lost the maintenance lock");
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
