//! Claim: register under the primary key, or read what exists and take the
//! one step the state machine allows.

use std::time::Duration;

use sqlx::{Connection, PgConnection};

use super::Registry;
use crate::domain::claim::{self, ClaimOutcome, ClaimStep};
use crate::domain::commands::ClaimCommand;
use crate::domain::error::{RegistryError, Result};
use crate::domain::ids::OperationKey;
use crate::domain::operation::{ExecutionKind, Operation, Status};
use crate::domain::parameters::differing_fields;
use crate::store::is_violation_of;
use crate::store::operations::{self, Observed, Registered};
use crate::telemetry::metrics;

/// Guarded transitions lost to a concurrent one are decided again from a fresh
/// read; every loss means another caller made progress, so few rounds suffice.
const MAX_ROUNDS: usize = 16;

/// How late a registration may return before its lease is restarted.
const REGISTRATION_WAIT_TOLERANCE: chrono::TimeDelta = chrono::TimeDelta::milliseconds(20);

/// The unique index allowing one compensation per original.
const ONE_COMPENSATION_INDEX: &str = "operations_one_compensation";

/// What a Claim tells its caller.
#[derive(Clone, Debug)]
pub struct ClaimAnswer {
    pub outcome: ClaimOutcome,
    pub operation: Operation,
    pub retry_after: Option<Duration>,
}

/// Either the claim registered the operation, or it exists and is to be decided.
enum Registration {
    Registered(ClaimAnswer),
    Exists(Observed),
}

impl Registry {
    pub async fn claim(&self, claim: &ClaimCommand) -> Result<ClaimAnswer> {
        self.run(async |db| claim_on(db, claim).await).await
    }
}

async fn claim_on(db: &mut PgConnection, claim: &ClaimCommand) -> Result<ClaimAnswer> {
    let mut observed = match register(db, claim).await? {
        Registration::Registered(answer) => return Ok(answer),
        Registration::Exists(observed) => observed,
    };
    for _ in 0..MAX_ROUNDS {
        check_fingerprint(&observed.operation, claim)?;
        let operation = &observed.operation;
        let transitioned = match claim::decide(operation, &claim.lease.owner, observed.db_now) {
            ClaimStep::Answer {
                outcome,
                retry_after,
            } => {
                if matches!(outcome, ClaimOutcome::Acquired | ClaimOutcome::Reconcile) {
                    metrics::execution(&claim.namespace, None);
                }
                return Ok(ClaimAnswer::new(outcome, observed.operation, retry_after));
            }
            ClaimStep::Start(kind) => {
                operations::start_executions(&mut *db, &[operation], &[kind], &claim.lease)
                    .await?
                    .pop()
                    .map(|started| {
                        metrics::execution(&claim.namespace, Some(kind));
                        ClaimAnswer::new(claim::started_outcome(kind), started, None)
                    })
            }
            ClaimStep::Exhaust => operations::exhaust(&mut *db, &[operation])
                .await?
                .pop()
                .map(|dead| {
                    metrics::finished(&claim.namespace, Status::Dead, dead.attempts);
                    ClaimAnswer::new(ClaimOutcome::Dead, dead, None)
                }),
        };
        if let Some(answer) = transitioned {
            return Ok(answer);
        }
        observed = find_registered(db, claim).await?;
    }
    tracing::warn!(namespace = %claim.namespace, key = %claim.operation_key, "claim kept losing races");
    Err(RegistryError::StoreUnavailable)
}

async fn register(db: &mut PgConnection, claim: &ClaimCommand) -> Result<Registration> {
    if let Some(original) = &claim.compensates {
        return register_compensation(db, claim, original).await;
    }
    match operations::insert_new(&mut *db, claim).await? {
        Some(registered) => {
            let operation = fresh_first_lease(db, registered, claim).await?;
            Ok(Registration::Registered(first_answer(claim, operation)))
        }
        // A separate statement: in READ COMMITTED it sees the row that won.
        None => Ok(Registration::Exists(find_registered(db, claim).await?)),
    }
}

/// A compensation's own key is looked up first, so claiming it again is an
/// ordinary claim; only a new one checks and links its original.
async fn register_compensation(
    db: &mut PgConnection,
    claim: &ClaimCommand,
    original_key: &OperationKey,
) -> Result<Registration> {
    if let Some(existing) =
        operations::find(&mut *db, &claim.namespace, &claim.operation_key).await?
    {
        return Ok(Registration::Exists(existing));
    }
    let original = operations::find(&mut *db, &claim.namespace, original_key)
        .await?
        .map(|observed| observed.operation);
    check_compensable(original.as_ref())?;

    let mut tx = db.begin().await?;
    let inserted = operations::insert_new(&mut *tx, claim).await;
    match inserted {
        Ok(Some(registered)) if registered.linked_original => {
            let operation = fresh_first_lease(&mut tx, registered, claim).await?;
            tx.commit().await?;
            metrics::compensation(&claim.namespace);
            Ok(Registration::Registered(first_answer(claim, operation)))
        }
        Ok(Some(_)) => {
            tx.rollback().await?;
            Err(already_compensated(db, claim, original_key).await)
        }
        Ok(None) => {
            tx.rollback().await?;
            Ok(Registration::Exists(find_registered(db, claim).await?))
        }
        Err(error) if is_violation_of(&error, ONE_COMPENSATION_INDEX) => {
            tx.rollback().await?;
            // A racing claim of this very key may have won: then this is an
            // ordinary claim of an existing operation.
            match operations::find(&mut *db, &claim.namespace, &claim.operation_key).await? {
                Some(existing) => Ok(Registration::Exists(existing)),
                None => Err(already_compensated(db, claim, original_key).await),
            }
        }
        Err(error) => Err(error.into()),
    }
}

async fn already_compensated(
    db: &mut PgConnection,
    claim: &ClaimCommand,
    original_key: &OperationKey,
) -> RegistryError {
    match operations::find(db, &claim.namespace, original_key).await {
        Ok(original) => RegistryError::AlreadyCompensated {
            by: original
                .and_then(|observed| observed.operation.compensated_by)
                .map(OperationKey::into_string)
                .unwrap_or_default(),
        },
        Err(error) => error.into(),
    }
}

async fn find_registered(db: &mut PgConnection, claim: &ClaimCommand) -> Result<Observed> {
    operations::find(db, &claim.namespace, &claim.operation_key)
        .await?
        .ok_or_else(|| {
            tracing::error!(key = %claim.operation_key, "registered operation vanished");
            RegistryError::Internal
        })
}

/// A registration that waited on a racing one (which then rolled back) got its
/// times before the wait; its lease must still last the whole TTL from now.
async fn fresh_first_lease(
    db: &mut PgConnection,
    registered: Registered,
    claim: &ClaimCommand,
) -> Result<Operation> {
    let waited = registered.returned_at - registered.operation.created_at;
    if waited <= REGISTRATION_WAIT_TOLERANCE {
        return Ok(registered.operation);
    }
    operations::restart_first_lease(db, &registered.operation, claim.lease.ttl)
        .await?
        .ok_or_else(|| {
            tracing::error!(key = %claim.operation_key, "a new registration changed before its lease restarted");
            RegistryError::Internal
        })
}

fn first_answer(claim: &ClaimCommand, operation: Operation) -> ClaimAnswer {
    metrics::registered(&claim.namespace);
    metrics::execution(&claim.namespace, Some(ExecutionKind::First));
    ClaimAnswer::new(ClaimOutcome::Acquired, operation, None)
}

/// The same key must mean the same operation: same fingerprint, same original.
fn check_fingerprint(stored: &Operation, claim: &ClaimCommand) -> Result<()> {
    let same_digest = stored.parameters_digest == claim.fingerprint.digest;
    if same_digest && stored.compensates == claim.compensates {
        return Ok(());
    }
    let differing = match (&stored.parameters_canonical, &claim.fingerprint.canonical) {
        (Some(stored), Some(requested)) if !same_digest => differing_fields(stored, requested),
        _ => Vec::new(),
    };
    Err(RegistryError::ParameterConflict {
        stored_digest: stored.parameters_digest.clone(),
        request_digest: claim.fingerprint.digest.clone(),
        differing_fields: differing,
        compensates_differs: same_digest,
    })
}

/// Only a success can be compensated. An unknown outcome (reported, or being
/// reconciled) must be reconciled first; anything else has not succeeded.
fn check_compensable(original: Option<&Operation>) -> Result<()> {
    let Some(original) = original else {
        return Err(RegistryError::NothingToCompensate);
    };
    if original.status == Status::Unknown || original.reconciling {
        return Err(RegistryError::OriginalOutcomeUnknown);
    }
    match (original.status, &original.compensated_by) {
        (Status::Succeeded, Some(by)) => {
            Err(RegistryError::AlreadyCompensated { by: by.to_string() })
        }
        (Status::Succeeded, None) => Ok(()),
        _ => Err(RegistryError::NothingToCompensate),
    }
}
