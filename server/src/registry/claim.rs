//! Claim: register under the primary key, or read what exists and take the
//! one step the state machine allows.

use std::collections::HashSet;
use std::time::Duration;

use sqlx::{Connection, PgConnection};

use super::Registry;
use super::gather::Gathered;
use super::replays::Ticket;
use crate::domain::claim::{self, ClaimOutcome, ClaimStep, ReusePolicy};
use crate::domain::commands::ClaimCommand;
use crate::domain::error::{RegistryError, Result};
use crate::domain::ids::OperationKey;
use crate::domain::operation::{ExecutionKind, Operation, Status};
use crate::domain::parameters::differing_fields;
use crate::store::operations::{self, Observed, Registered};
use crate::telemetry::metrics;

/// Guarded transitions lost to a concurrent one are decided again from a fresh
/// read; every loss means another caller made progress, so few rounds suffice.
const MAX_ROUNDS: usize = 16;

/// How late a registration may return before its lease is restarted: at
/// least this long, and at least [`REGISTRATION_WAIT_SHARE`] of the lease.
const REGISTRATION_WAIT_TOLERANCE: chrono::TimeDelta = chrono::TimeDelta::milliseconds(20);

/// The share of its lease (one part in this many) that a registration's
/// statement may take before the lease is restarted. A shared statement of a
/// few hundred keys takes tens of milliseconds under load, and restarting
/// every one of its leases is one more statement per key, in the writer's
/// transaction, exactly when the writers are already behind; a wait on a
/// racing registration, which this restart is for, lasts as long as that
/// transaction (up to the lock timeout). The caller's lease is safe either
/// way: clients trust a lease from the moment they sent the call, and the
/// statement began after that.
const REGISTRATION_WAIT_SHARE: i32 = 100;

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
        if claim.compensates.is_some() {
            return self.follow_up(claim, FollowUp::Compensate).await;
        }
        let ticket = match self.replayed(claim) {
            Ok(answer) => return answer,
            Err(ticket) => ticket,
        };
        let gathered = self.claims.submit(claim.clone()).await;
        self.conclude_gathered(claim, gathered, ticket).await
    }

    /// Claims of one batch call, answered in their order exactly as
    /// [`Registry::claim`] answers each: the ordinary ones that memory does
    /// not answer are queued together, so they share registration statements
    /// in the order given instead of meeting in the queue one by one. A key
    /// queued once is not queued again: the queue's chunks go to several
    /// writers, and a later chunk may be written first, so a repeat is
    /// claimed once everything queued is answered.
    pub async fn claim_all(&self, claims: &[ClaimCommand]) -> Vec<Result<ClaimAnswer>> {
        let mut answers: Vec<Option<Result<ClaimAnswer>>> = Vec::with_capacity(claims.len());
        let mut own_sessions = Vec::new();
        let mut queued = Vec::new();
        let mut queued_keys = HashSet::new();
        for (index, claim) in claims.iter().enumerate() {
            answers.push(None);
            if claim.compensates.is_some() {
                own_sessions.push((index, FollowUp::Compensate));
                continue;
            }
            if queued_keys.contains(&claim.identity()) {
                own_sessions.push((index, FollowUp::Repeat));
                continue;
            }
            match self.replayed(claim) {
                Ok(answer) => answers[index] = Some(answer),
                Err(ticket) => {
                    queued_keys.insert(claim.identity());
                    queued.push((index, ticket));
                }
            }
        }
        let gathered = self
            .claims
            .submit_all(
                queued
                    .iter()
                    .map(|&(index, _)| claims[index].clone())
                    .collect(),
            )
            .await;
        for ((index, ticket), gathered) in queued.into_iter().zip(gathered) {
            match self.answered_by_gathering(&claims[index], gathered, ticket) {
                Ok(answer) => answers[index] = Some(answer),
                Err(follow_up) => own_sessions.push((index, follow_up)),
            }
        }
        let settled = super::each_operation_in_order(
            own_sessions,
            |index| claims[index].identity(),
            |index, follow_up| self.follow_up(&claims[index], follow_up),
        )
        .await;
        for (index, answer) in settled {
            answers[index] = Some(answer);
        }
        super::filled(answers)
    }

    /// A compensation registers (and links its original) in a transaction of
    /// its own, never in a shared statement.
    async fn compensate(&self, claim: &ClaimCommand) -> Result<ClaimAnswer> {
        let Some(original) = &claim.compensates else {
            return Err(RegistryError::Internal);
        };
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
        answer
    }

    /// The answer from a kept terminal record, or the ticket for a read.
    fn replayed(&self, claim: &ClaimCommand) -> std::result::Result<Result<ClaimAnswer>, Ticket> {
        let (kept, ticket) = self.replays.get(&claim.namespace, &claim.operation_key);
        match kept.map(|kept| judge(claim, &kept)) {
            Some(Ok(Next::Answer(answer))) => Ok(Ok(answer)),
            Some(Err(refused)) => Ok(Err(refused)),
            // A kept record asks for a transition only under a reuse policy
            // (a FAILED one started again): read it afresh.
            Some(Ok(Next::Transition(_))) | None => Err(ticket),
        }
    }

    async fn conclude_gathered(
        &self,
        claim: &ClaimCommand,
        gathered: Result<Gathered>,
        ticket: Ticket,
    ) -> Result<ClaimAnswer> {
        match self.answered_by_gathering(claim, gathered, ticket) {
            Ok(answer) => answer,
            Err(step) => self.follow_up(claim, step).await,
        }
    }

    /// What the shared statement settled, or the step that needs a session.
    fn answered_by_gathering(
        &self,
        claim: &ClaimCommand,
        gathered: Result<Gathered>,
        ticket: Ticket,
    ) -> std::result::Result<Result<ClaimAnswer>, FollowUp> {
        let observed = match gathered {
            Err(error) => return Ok(Err(error)),
            Ok(Some(Registration::Registered(answer))) => return Ok(Ok(answer)),
            Ok(Some(Registration::Exists(observed))) => observed,
            Ok(None) => return Err(FollowUp::ReadAgain),
        };
        self.replays.keep(&observed, ticket);
        match judge(claim, &observed) {
            Ok(Next::Answer(answer)) => Ok(Ok(answer)),
            Err(refused) => Ok(Err(refused)),
            Ok(Next::Transition(step)) => Err(FollowUp::Settle(Box::new(observed), step)),
        }
    }

    async fn follow_up(&self, claim: &ClaimCommand, follow_up: FollowUp) -> Result<ClaimAnswer> {
        let answer = match follow_up {
            FollowUp::Compensate => self.compensate(claim).await,
            FollowUp::Repeat => self.run(async |db| claim_on(db, claim).await).await,
            FollowUp::ReadAgain => {
                self.run(async |db| {
                    let observed = find_registered(db, claim).await?;
                    conclude(db, claim, observed).await
                })
                .await
            }
            FollowUp::Settle(observed, step) => {
                self.run(async |db| settle(db, claim, *observed, step).await)
                    .await
            }
        };
        if claim.reuse == ReusePolicy::AfterFailure {
            // A FAILED record kept here may have just started again; do not
            // wait for its notice to stop replaying it.
            self.replays.forget(&claim.namespace, &claim.operation_key);
        }
        answer
    }
}

/// A Claim on the caller's own connection, inside its transaction (the
/// transactional door): the registration statement a gathered Claim shares,
/// then the same decision and transition, all on `db`. A racing registration
/// not yet committed is waited on by the statement and read once it has.
pub(crate) async fn claim_on(db: &mut PgConnection, claim: &ClaimCommand) -> Result<ClaimAnswer> {
    let gathered = match &claim.compensates {
        Some(original) => Some(register_compensation(db, claim, original).await?),
        None => super::gather::register_in_order(db, &[claim])
            .await?
            .pop()
            .unwrap_or(Ok(None))?,
    };
    match gathered {
        Some(Registration::Registered(answer)) => Ok(answer),
        Some(Registration::Exists(observed)) => conclude(db, claim, observed).await,
        None => {
            let observed = find_registered(db, claim).await?;
            conclude(db, claim, observed).await
        }
    }
}

/// A claim that needs a session of its own.
enum FollowUp {
    /// A compensation: never in a shared statement.
    Compensate,
    /// A batch's later claim of a key an earlier one queued.
    Repeat,
    /// A racing registration had not committed when the statement began.
    ReadAgain,
    /// The operation exists and the state machine asks for a transition.
    Settle(Box<Observed>, ClaimStep),
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

/// The same key must mean the same operation; then the state machine
/// decides. A caller that refuses existing keys learns that this one is
/// taken, unless it is the live lease's own owner resuming it (its Claim's
/// answer was lost): that caller registered the key.
fn judge(claim: &ClaimCommand, observed: &Observed) -> Result<Next> {
    check_fingerprint(&observed.operation, claim)?;
    let step = claim::decide(
        &observed.operation,
        &claim.lease.owner,
        observed.db_now,
        claim.reuse,
    );
    let resumes = matches!(
        step,
        ClaimStep::Answer {
            outcome: ClaimOutcome::Acquired | ClaimOutcome::Reconcile,
            ..
        }
    );
    if claim.reuse == ReusePolicy::RejectExisting && !resumes {
        return Err(RegistryError::OperationExists {
            status: observed.operation.status,
        });
    }
    Ok(match step {
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
    })
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
        ClaimStep::Start(ExecutionKind::Reuse) => operations::reuse(&mut *db, operation, claim)
            .await?
            .map(|(reused, audit)| {
                metrics::reused(&claim.namespace);
                metrics::execution(&claim.namespace, Some(ExecutionKind::Reuse));
                tracing::info!(
                    namespace = %claim.namespace, key = %claim.operation_key,
                    owner = %claim.lease.owner, status_before = audit.status_before.as_str(),
                    token = reused.fencing_token.get(),
                    "a finished operation was claimed again under its reuse policy"
                );
                ClaimAnswer::new(ClaimOutcome::Acquired, reused, None)
            }),
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
    // A second compensation racing this one waits on the original's row and
    // then finds it linked: its new row is rolled back.
    let registered = operations::register(&mut *tx, &[claim])
        .await?
        .pop()
        .flatten();
    match registered {
        Some(operations::Registration::Inserted(registered)) if registered.linked_original => {
            let operation = fresh_first_lease(&mut tx, registered, claim).await?;
            tx.commit().await?;
            metrics::compensation(&claim.namespace);
            Ok(Registration::Registered(first_answer(claim, operation)))
        }
        Some(operations::Registration::Inserted(_)) => {
            tx.rollback().await?;
            Err(already_compensated(db, claim, original_key).await)
        }
        Some(operations::Registration::Existing(existing)) => {
            tx.rollback().await?;
            Ok(Registration::Exists(existing))
        }
        None => {
            tx.rollback().await?;
            Ok(Registration::Exists(find_registered(db, claim).await?))
        }
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
    if waited <= registration_wait_tolerance(claim.lease.ttl) {
        return Ok(registered.operation);
    }
    operations::restart_first_lease(db, &registered.operation, claim.lease.ttl)
        .await?
        .ok_or_else(|| {
            tracing::error!(key = %claim.operation_key, "a new registration changed before its lease restarted");
            RegistryError::Internal
        })
}

/// How late a registration of a lease of `ttl` may return and keep its lease.
fn registration_wait_tolerance(ttl: std::time::Duration) -> chrono::TimeDelta {
    chrono::TimeDelta::from_std(ttl)
        .map(|ttl| ttl / REGISTRATION_WAIT_SHARE)
        .unwrap_or(chrono::TimeDelta::MAX)
        .max(REGISTRATION_WAIT_TOLERANCE)
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::TimeDelta;

    use super::registration_wait_tolerance;

    #[test]
    fn a_registration_keeps_its_lease_while_its_statement_took_a_hundredth_of_it() {
        assert_eq!(
            registration_wait_tolerance(Duration::from_secs(30)),
            TimeDelta::milliseconds(300)
        );
        assert_eq!(
            registration_wait_tolerance(Duration::from_secs(1)),
            TimeDelta::milliseconds(20),
            "never less than 20 ms"
        );
        assert_eq!(
            registration_wait_tolerance(Duration::from_millis(100)),
            TimeDelta::milliseconds(20)
        );
    }
}
