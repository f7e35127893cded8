//! The maintenance steps one replica runs in the background: budgets enforced
//! eagerly and retention. Each statement is short and bounded by a row limit,
//! with a pause between batches, so it never holds long locks or crowds out
//! callers.

use std::time::Duration;

use sqlx::Connection;

use super::Registry;
use crate::domain::claim::{self, ClaimStep, ReusePolicy};
use crate::domain::error::Result;
use crate::domain::operation::{Operation, Status};
use crate::domain::policy::PerNamespace;
use crate::store::operations;
use crate::telemetry::metrics;

#[derive(Clone, Debug)]
pub struct MaintenanceSettings {
    pub interval: Duration,
    /// How long finished operations are kept; `None`: forever.
    pub retention: PerNamespace<Option<Duration>>,
    /// Rows one statement changes or deletes at most.
    pub batch_size: u32,
    /// Rest between two batches.
    pub batch_pause: Duration,
}

/// What one pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaintenancePass {
    pub exhausted: u64,
    pub purged: u64,
}

/// A pass stops after this many batches of one step, so a huge backlog is
/// worked off over several passes rather than in one long run.
const MAX_BATCHES_PER_STEP: usize = 100;

impl Registry {
    /// One maintenance pass: budgets first (so nothing exhausted waits as due
    /// work), then retention.
    pub async fn maintain(&self, settings: &MaintenanceSettings) -> Result<MaintenancePass> {
        Ok(MaintenancePass {
            exhausted: self.enforce_budgets(settings).await?,
            purged: self.purge(settings).await?,
        })
    }

    /// Retries past their deadline and expired leases whose next attempt would
    /// exceed the budget become DEAD now, not when someone next claims them.
    async fn enforce_budgets(&self, settings: &MaintenanceSettings) -> Result<u64> {
        let mut exhausted = 0;
        for _ in 0..MAX_BATCHES_PER_STEP {
            let (candidates, dead) = self
                .run(async |connection| {
                    let mut tx = connection.begin().await?;
                    let candidates =
                        operations::exhaustion_candidates(&mut *tx, settings.batch_size).await?;
                    let doomed: Vec<&Operation> = candidates
                        .iter()
                        .filter(|due| {
                            claim::decide(&due.operation, "", due.db_now, ReusePolicy::Replay)
                                == ClaimStep::Exhaust
                        })
                        .map(|due| &due.operation)
                        .collect();
                    let dead = operations::exhaust(&mut *tx, &doomed).await?;
                    tx.commit().await?;
                    Ok((candidates.len(), dead))
                })
                .await?;
            for operation in &dead {
                metrics::maintenance_exhausted(&operation.namespace);
                metrics::finished(&operation.namespace, Status::Dead, operation.attempts);
            }
            exhausted += dead.len() as u64;
            if candidates < settings.batch_size as usize {
                break;
            }
            tokio::time::sleep(settings.batch_pause).await;
        }
        Ok(exhausted)
    }

    /// Deletes finished operations older than their namespace's retention.
    async fn purge(&self, settings: &MaintenanceSettings) -> Result<u64> {
        let mut purged = 0;
        let namespaces = self
            .run(async |db| Ok(operations::namespaces_with_finished(db).await?))
            .await?;
        for namespace in namespaces {
            let Some(retention) = *settings.retention.get(&namespace) else {
                continue;
            };
            for _ in 0..MAX_BATCHES_PER_STEP {
                let deleted = self
                    .run(async |db| {
                        Ok(operations::purge_finished(
                            db,
                            &namespace,
                            retention,
                            settings.batch_size,
                        )
                        .await?)
                    })
                    .await?;
                metrics::purged(&namespace, deleted);
                purged += deleted;
                if deleted < u64::from(settings.batch_size) {
                    break;
                }
                tokio::time::sleep(settings.batch_pause).await;
            }
            let lag = self
                .run(async |db| {
                    Ok(operations::oldest_finished_age(db, &namespace, retention).await?)
                })
                .await?;
            metrics::retention_lag(&namespace, lag);
        }
        Ok(purged)
    }
}
