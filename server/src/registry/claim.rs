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
#[derive(Debug)]
pub(super) enum Registration {
    Registered(ClaimAnswer),
    Exists(Observed),
}

/// What the state machine asks next of an existing operation. Returned once
/// per decision and matched at once, so the answer is not boxed.
#[allow(clippy::large_enum_variant)]
enum Next {
    Answer(ClaimAnswer),
    Transition(ClaimStep),
}

impl Registry {
    /// An ordinary claim of a kept terminal result is answered from memory;
    /// otherwise it is registered (or its operation read) in a statement
    /// shared with concurrent claims, and a database session of its own is
    /// opened only when the operation exists and must change.
    pub async fn claim(&self, claim: &ClaimCommand) -> Result<ClaimAnswer> {
        if let Some(original) = &claim.compensates {
            let answer = self
                .run(
                    async |db| match register_compensation(db, claim, original).await? {
                        Registration::Registered(answer) => Ok(answer),
                        Registration::Exists(observed) => conclude(db, claim, observed).await,
                    },
                )
                .await;
            // The original's `compensated_by` may have just been set.
            self.replays.forget(&claim.namespace, original);
            return answer;
        }
        let (kept, ticket) = self.replays.get(&claim.namespace, &claim.operation_key);
        if let Some(kept) = kept
            && let Next::Answer(answer) = judge(claim, &kept)?
        {
            return Ok(answer);
        }
        let observed = match self.claims.submit(claim.clone()).await? {
            Some(Registration::Registered(answer)) => return Ok(answer),
            Some(Registration::Exists(observed)) => observed,
            None => {
                return self
                    .run(async |db| {
                        let observed = find_registered(db, claim).await?;
                        conclude(db, claim, observed).await
                    })
                    .await;
            }
        };
        self.replays.keep(&observed, ticket);
        match judge(claim, &observed)? {
            Next::Answer(answer) => Ok(answer),
            Next::Transition(step) => {
                self.run(async |db| settle(db, claim, observed, step).await)
                    .await
            }
        }
    }
}

/// Decides on an existing operation and takes the step the decision asks.
async fn conclude(
    db: &mut PgConnection,
    claim: &ClaimCommand,
    observed: Observed,
) -> Result<ClaimAnswer> {
    match judge(claim, &observed)? {
        Next::Answer(answer) => Ok(answer),
        Next::Transition(step) => settle(db, claim, observed, step).await,
    }
}

/// The same key must mean the same operation; then the state machine decides.
fn judge(claim: &ClaimCommand, observed: &Observed) -> Result<Next> {
    check_fingerprint(&observed.operation, claim)?;
    Ok(
        match claim::decide(&observed.operation, &claim.lease.owner, observed.db_now) {
            ClaimStep::Answer {
                outcome,
                retry_after,
            } => {
                if matches!(outcome, ClaimOutcome::Acquired | ClaimOutcome::Reconcile) {
                    metrics::execution(&claim.namespace, None);
                }
                Next::Answer(ClaimAnswer::new(
                    outcome,
                    observed.operation.clone(),
                    retry_after,
                ))
            }
            step => Next::Transition(step),
        },
    )
}

/// Takes `step`; a guarded transition lost to a concurrent one is decided
/// again from a fresh read.
async fn settle(
    db: &mut PgConnection,
    claim: &ClaimCommand,
    mut observed: Observed,
    mut step: ClaimStep,
) -> Result<ClaimAnswer> {
    for _ in 0..MAX_ROUNDS {
        if let Some(answer) = transition(db, claim, &observed.operation, step).await? {
            return Ok(answer);
        }
        observed = find_registered(db, claim).await?;
        step = match judge(claim, &observed)? {
            Next::Answer(answer) => return Ok(answer),
            Next::Transition(step) => step,
        };
    }
    tracing::warn!(namespace = %claim.namespace, key = %claim.operation_key, "claim kept losing races");
    Err(RegistryError::StoreUnavailable)
}

/// One guarded transition; `None` when the operation moved since it was read.
async fn transition(
    db: &mut PgConnection,
    claim: &ClaimCommand,
    operation: &Operation,
    step: ClaimStep,
) -> Result<Option<ClaimAnswer>> {
    Ok(match step {
        ClaimStep::Answer { .. } => None,
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
    })
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
    let registered = operations::register(&mut *tx, &[claim])
        .await
        .map(|mut found| found.pop().flatten());
    match registered {
        Ok(Some(operations::Registration::Inserted(registered))) if registered.linked_original => {
            let operation = fresh_first_lease(&mut tx, registered, claim).await?;
            tx.commit().await?;
            metrics::compensation(&claim.namespace);
            Ok(Registration::Registered(first_answer(claim, operation)))
        }
        Ok(Some(operations::Registration::Inserted(_))) => {
            tx.rollback().await?;
            Err(already_compensated(db, claim, original_key).await)
        }
        Ok(Some(operations::Registration::Existing(existing))) => {
            tx.rollback().await?;
            Ok(Registration::Exists(existing))
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
pub(super) async fn fresh_first_lease(
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

pub(super) fn first_answer(claim: &ClaimCommand, operation: Operation) -> ClaimAnswer {
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
