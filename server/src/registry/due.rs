//! ClaimDue: a worker pulls due work. Rows are taken FOR UPDATE SKIP LOCKED
//! in pages, each decided by the same state machine as a Claim and moved by
//! the same guarded statements, all in one transaction.

use sqlx::Connection;

use super::{ClaimAnswer, Registry};
use crate::domain::claim::{self, ClaimOutcome, ClaimStep, ReusePolicy};
use crate::domain::commands::ClaimDueCommand;
use crate::domain::error::Result;
use crate::domain::operation::{ExecutionKind, Operation, Status};
use crate::store::operations;
use crate::telemetry::metrics;

/// Pages read per call. A page refills only when exhaustion took some of its
/// rows (those are DEAD now and never come back), so this bounds the work
/// one call does while a backlog of exhausted operations is cleared.
const MAX_PAGES: usize = 4;

impl Registry {
    /// Up to `command.limit` due operations, each now leased to the caller.
    pub async fn claim_due(&self, command: &ClaimDueCommand) -> Result<Vec<ClaimAnswer>> {
        let namespace = &command.namespace;
        self.run(async |connection| {
            let mut tx = connection.begin().await?;
            let mut room = command.limit;
            if let Some(cap) = *self.retry_caps.get(namespace) {
                // Pullers of this namespace count and take leases one at a time,
                // so together they never exceed the cap.
                operations::serialize_retry_cap(&mut *tx, namespace).await?;
                let live = operations::live_retry_leases(&mut *tx, namespace).await?;
                room = room.min(cap.saturating_sub(live));
            }
            let mut handed = Vec::new();
            for _ in 0..MAX_PAGES {
                if room == 0 {
                    break;
                }
                let page = operations::due(&mut *tx, namespace, room).await?;
                let page_was_full = u32::try_from(page.len()).is_ok_and(|rows| rows == room);
                let mut starts: Vec<&Operation> = Vec::new();
                let mut kinds = Vec::new();
                let mut exhausts: Vec<&Operation> = Vec::new();
                for due in &page {
                    match claim::decide(
                        &due.operation,
                        &command.lease.owner,
                        due.db_now,
                        ReusePolicy::Replay,
                    ) {
                        ClaimStep::Start(kind) => {
                            starts.push(&due.operation);
                            kinds.push(kind);
                        }
                        ClaimStep::Exhaust => exhausts.push(&due.operation),
                        // Not due after all by the clock read under the lock.
                        ClaimStep::Answer { .. } => {}
                    }
                }
                for dead in operations::exhaust(&mut *tx, &exhausts).await? {
                    metrics::finished(namespace, Status::Dead, dead.attempts);
                }
                let started =
                    operations::start_executions(&mut *tx, &starts, &kinds, &command.lease).await?;
                room = room.saturating_sub(u32::try_from(started.len()).unwrap_or(u32::MAX));
                handed.extend(started);
                if exhausts.is_empty() || !page_was_full {
                    break;
                }
            }
            tx.commit().await?;
            Ok(handed.into_iter().map(answer).collect())
        })
        .await
    }
}

/// What the worker is told about one handed-out operation.
fn answer(operation: Operation) -> ClaimAnswer {
    let kind = if operation.reconciling {
        ExecutionKind::Reconcile
    } else if operation.lease_takeover {
        ExecutionKind::Takeover
    } else {
        ExecutionKind::Retry
    };
    metrics::execution(&operation.namespace, Some(kind));
    metrics::claimed_due(&operation.namespace, kind);
    let outcome: ClaimOutcome = claim::started_outcome(kind);
    ClaimAnswer::new(outcome, operation, None)
}
