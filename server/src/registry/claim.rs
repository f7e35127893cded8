//! Claim: register under the primary key, or read what exists and take the
//! one step the state machine allows.

use std::time::Duration;

use super::Registry;
use crate::domain::claim::{self, ClaimOutcome, ClaimStep};
use crate::domain::commands::ClaimCommand;
use crate::domain::error::{RegistryError, Result};
use crate::domain::operation::{Operation, Status};
use crate::domain::parameters::differing_fields;
use crate::store::is_violation_of;
use crate::store::operations::{self, Observed};

/// Guarded transitions lost to a concurrent one are decided again from a fresh
/// read; every loss means another caller made progress, so few rounds suffice.
const MAX_ROUNDS: usize = 16;

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
        let mut observed = match self.register(claim).await? {
            Registration::Registered(answer) => return Ok(answer),
            Registration::Exists(observed) => observed,
        };
        for _ in 0..MAX_ROUNDS {
            check_fingerprint(&observed.operation, claim)?;
            let operation = &observed.operation;
            let transitioned = match claim::decide(operation, &claim.owner, observed.db_now) {
                ClaimStep::Answer {
                    outcome,
                    retry_after,
                } => return Ok(ClaimAnswer::new(outcome, observed.operation, retry_after)),
                ClaimStep::Start(kind) => {
                    operations::start_execution(&self.pool, operation, kind, claim)
                        .await?
                        .map(|started| {
                            ClaimAnswer::new(claim::started_outcome(kind), started, None)
                        })
                }
                ClaimStep::Exhaust => operations::exhaust(&self.pool, operation)
                    .await?
                    .map(|dead| ClaimAnswer::new(ClaimOutcome::Dead, dead, None)),
            };
            if let Some(answer) = transitioned {
                return Ok(answer);
            }
            observed = self.find_registered(claim).await?;
        }
        tracing::warn!(namespace = %claim.namespace, key = %claim.operation_key, "claim kept losing races");
        Err(RegistryError::StoreUnavailable)
    }

    async fn register(&self, claim: &ClaimCommand) -> Result<Registration> {
        if let Some(original) = &claim.compensates {
            return self.register_compensation(claim, original).await;
        }
        match operations::insert_new(&self.pool, claim).await? {
            Some(registered) => Ok(Registration::Registered(first_answer(registered.operation))),
            // A separate statement: in READ COMMITTED it sees the row that won.
            None => Ok(Registration::Exists(self.find_registered(claim).await?)),
        }
    }

    /// A compensation's own key is looked up first, so claiming it again is an
    /// ordinary claim; only a new one checks and links its original.
    async fn register_compensation(
        &self,
        claim: &ClaimCommand,
        original_key: &str,
    ) -> Result<Registration> {
        if let Some(existing) =
            operations::find(&self.pool, &claim.namespace, &claim.operation_key).await?
        {
            return Ok(Registration::Exists(existing));
        }
        let original = operations::find(&self.pool, &claim.namespace, original_key)
            .await?
            .map(|observed| observed.operation);
        check_compensable(original.as_ref())?;

        let mut tx = self.pool.begin().await?;
        match operations::insert_new(&mut *tx, claim).await {
            Ok(Some(registered)) if registered.linked_original => {
                tx.commit().await?;
                Ok(Registration::Registered(first_answer(registered.operation)))
            }
            Ok(Some(_)) => {
                tx.rollback().await?;
                Err(self.already_compensated(claim, original_key).await)
            }
            Ok(None) => {
                tx.rollback().await?;
                Ok(Registration::Exists(self.find_registered(claim).await?))
            }
            Err(error) if is_violation_of(&error, ONE_COMPENSATION_INDEX) => {
                drop(tx);
                Err(self.already_compensated(claim, original_key).await)
            }
            Err(error) => Err(error.into()),
        }
    }

    async fn already_compensated(&self, claim: &ClaimCommand, original_key: &str) -> RegistryError {
        match operations::find(&self.pool, &claim.namespace, original_key).await {
            Ok(original) => RegistryError::AlreadyCompensated {
                by: original
                    .and_then(|observed| observed.operation.compensated_by)
                    .unwrap_or_default(),
            },
            Err(error) => error.into(),
        }
    }

    async fn find_registered(&self, claim: &ClaimCommand) -> Result<Observed> {
        operations::find(&self.pool, &claim.namespace, &claim.operation_key)
            .await?
            .ok_or_else(|| {
                tracing::error!(key = %claim.operation_key, "registered operation vanished");
                RegistryError::Internal
            })
    }
}

fn first_answer(operation: Operation) -> ClaimAnswer {
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

/// Only a success can be compensated, and only once its outcome is known.
fn check_compensable(original: Option<&Operation>) -> Result<()> {
    let Some(original) = original else {
        return Err(RegistryError::NothingToCompensate);
    };
    match original.status {
        Status::Succeeded => match &original.compensated_by {
            Some(by) => Err(RegistryError::AlreadyCompensated { by: by.clone() }),
            None => Ok(()),
        },
        Status::Failed => Err(RegistryError::NothingToCompensate),
        Status::InProgress | Status::RetryScheduled | Status::Unknown | Status::Dead => {
            Err(RegistryError::OriginalOutcomeUnknown)
        }
    }
}
