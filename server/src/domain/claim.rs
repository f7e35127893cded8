//! What a Claim does to an operation that already exists: a pure decision over
//! the stored row and the database clock, applied by one guarded statement.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::operation::{ExecutionKind, Operation, Status};

/// What the caller is told to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClaimOutcome {
    Acquired,
    Replayed,
    InProgress,
    RetryLater,
    Reconcile,
    Dead,
    /// An operator holds the operation.
    Held,
}

/// What a Claim may do with a key that is already registered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReusePolicy {
    /// The operation answers as its status says; a recorded result is
    /// replayed forever.
    #[default]
    Replay,
    /// As `Replay`, but a FAILED or DEAD operation starts again under a new
    /// token and a fresh budget.
    AfterFailure,
    /// Any existing key is refused: only the registering Claim proceeds.
    RejectExisting,
}

impl ClaimOutcome {
    /// IN_PROGRESS and RETRY_LATER tell the caller to ask again later; a
    /// waiting Claim holds on to them until the operation moves.
    pub fn asks_to_wait(self) -> bool {
        matches!(self, ClaimOutcome::InProgress | ClaimOutcome::RetryLater)
    }
}

/// How long a caller told HELD waits before asking again: holds last as long
/// as an investigation, so callers should not poll them tightly.
pub const HELD_RETRY_AFTER: Duration = Duration::from_secs(60);

/// The step a Claim takes on an existing operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimStep {
    /// Answer from the row as it is; nothing is written. A resume by the live
    /// holder is an answer too: same token, same lease, no new execution.
    Answer {
        outcome: ClaimOutcome,
        retry_after: Option<Duration>,
    },
    /// Issue a new token and start an execution of this kind.
    Start(ExecutionKind),
    /// The attempt would exceed the budget or the deadline: the operation dies.
    Exhaust,
}

/// Decides a Claim by `owner` at database time `now`. `reuse` matters only
/// for a FAILED or DEAD operation (`RejectExisting` is refused before any
/// decision); a SUCCEEDED one is replayed under every policy.
pub fn decide(
    operation: &Operation,
    owner: &str,
    now: DateTime<Utc>,
    reuse: ReusePolicy,
) -> ClaimStep {
    let answer = |outcome, retry_after| ClaimStep::Answer {
        outcome,
        retry_after,
    };
    let start_again = reuse == ReusePolicy::AfterFailure;
    match operation.status {
        Status::Failed if start_again => return ClaimStep::Start(ExecutionKind::Reuse),
        Status::Succeeded | Status::Failed => return answer(ClaimOutcome::Replayed, None),
        _ => {}
    }
    if operation.is_held() {
        return answer(ClaimOutcome::Held, Some(HELD_RETRY_AFTER));
    }
    match operation.status {
        Status::Succeeded | Status::Failed => answer(ClaimOutcome::Replayed, None),
        Status::Dead if start_again => ClaimStep::Start(ExecutionKind::Reuse),
        Status::Dead => answer(ClaimOutcome::Dead, None),
        Status::Unknown => ClaimStep::Start(ExecutionKind::Reconcile),
        Status::InProgress => {
            let expires_at = operation.lease_expires_at.unwrap_or(now);
            if expires_at > now {
                if operation.lease_owner.as_deref() == Some(owner) {
                    let outcome = if operation.reconciling {
                        ClaimOutcome::Reconcile
                    } else {
                        ClaimOutcome::Acquired
                    };
                    answer(outcome, None)
                } else {
                    answer(ClaimOutcome::InProgress, Some(until(now, expires_at)))
                }
            } else if operation.reconciling {
                // An unknown outcome is never forgotten: an expired reconcile
                // lease leads to another reconcile, not to an execution.
                ClaimStep::Start(ExecutionKind::Reconcile)
            } else if budget_exhausted(operation, now) {
                ClaimStep::Exhaust
            } else {
                ClaimStep::Start(ExecutionKind::Takeover)
            }
        }
        Status::RetryScheduled => {
            let due_at = operation.next_attempt_at.unwrap_or(now);
            if due_at > now {
                answer(ClaimOutcome::RetryLater, Some(until(now, due_at)))
            } else if budget_exhausted(operation, now) {
                ClaimStep::Exhaust
            } else {
                ClaimStep::Start(ExecutionKind::Retry)
            }
        }
    }
}

/// The outcome a caller sees after this process started an execution.
pub fn started_outcome(kind: ExecutionKind) -> ClaimOutcome {
    match kind {
        ExecutionKind::Reconcile => ClaimOutcome::Reconcile,
        ExecutionKind::First
        | ExecutionKind::Retry
        | ExecutionKind::Takeover
        | ExecutionKind::Reuse => ClaimOutcome::Acquired,
    }
}

/// No attempt starts once the budget's attempts ran or after its deadline.
fn budget_exhausted(operation: &Operation, now: DateTime<Utc>) -> bool {
    operation.attempts >= operation.budget.max_attempts || now > operation.budget.deadline_at
}

fn until(now: DateTime<Utc>, at: DateTime<Utc>) -> Duration {
    (at - now).to_std().unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::domain::ids::{FencingToken, Namespace, OperationKey};
    use crate::domain::operation::Budget;
    use chrono::TimeDelta;
    use proptest::prelude::*;

    pub(crate) fn operation(status: Status, now: DateTime<Utc>) -> Operation {
        let leased = status == Status::InProgress;
        Operation {
            namespace: Namespace::from_stored("ns".into()),
            operation_key: OperationKey::from_stored("key".into()),
            status,
            parameters_digest: vec![0; 32],
            parameters_canonical: None,
            compensates: None,
            compensated_by: None,
            fencing_token: FencingToken::from_stored(7),
            lease_owner: leased.then(|| "holder".into()),
            lease_expires_at: leased.then(|| now + TimeDelta::seconds(30)),
            lease_takeover: false,
            attempts: 1,
            reconciling: false,
            budget: Budget {
                max_attempts: 5,
                base_attempts: 0,
                initial_backoff: Duration::from_secs(1),
                max_backoff: Duration::from_secs(300),
                deadline_at: now + TimeDelta::hours(24),
            },
            next_attempt_at: (status == Status::RetryScheduled)
                .then(|| now + TimeDelta::seconds(5)),
            result: None,
            result_ref: None,
            failure_code: None,
            failure_message: None,
            remote_ref: None,
            last_error_class: None,
            last_error_message: None,
            held_at: None,
            hold_revoked_lease: false,
            created_at: now,
            updated_at: now,
            completed_at: None,
        }
    }

    fn status() -> impl Strategy<Value = Status> {
        prop::sample::select(Status::ALL.to_vec())
    }

    #[test]
    fn live_lease_resumes_for_its_holder_only() {
        let now = Utc::now();
        let op = operation(Status::InProgress, now);
        assert_eq!(
            decide(&op, "holder", now, ReusePolicy::Replay),
            ClaimStep::Answer {
                outcome: ClaimOutcome::Acquired,
                retry_after: None
            }
        );
        assert_eq!(
            decide(&op, "other", now, ReusePolicy::Replay),
            ClaimStep::Answer {
                outcome: ClaimOutcome::InProgress,
                retry_after: Some(Duration::from_secs(30))
            }
        );
    }

    #[test]
    fn expired_reconcile_lease_reconciles_again_without_spending_budget() {
        let now = Utc::now();
        let mut op = operation(Status::InProgress, now);
        op.reconciling = true;
        op.attempts = op.budget.max_attempts;
        op.lease_expires_at = Some(now - TimeDelta::seconds(1));
        assert_eq!(
            decide(&op, "other", now, ReusePolicy::Replay),
            ClaimStep::Start(ExecutionKind::Reconcile)
        );
    }

    #[test]
    fn takeover_past_the_budget_exhausts() {
        let now = Utc::now();
        let mut op = operation(Status::InProgress, now);
        op.lease_expires_at = Some(now);
        assert_eq!(
            decide(&op, "other", now, ReusePolicy::Replay),
            ClaimStep::Start(ExecutionKind::Takeover)
        );
        op.attempts = op.budget.max_attempts;
        assert_eq!(
            decide(&op, "other", now, ReusePolicy::Replay),
            ClaimStep::Exhaust
        );
    }

    #[test]
    fn reuse_after_failure_starts_failed_and_dead_again_never_a_success() {
        let now = Utc::now();
        let after = ReusePolicy::AfterFailure;
        let reuse = ClaimStep::Start(ExecutionKind::Reuse);
        assert_eq!(
            decide(&operation(Status::Failed, now), "x", now, after),
            reuse
        );
        assert_eq!(
            decide(&operation(Status::Dead, now), "x", now, after),
            reuse
        );
        assert_eq!(
            decide(&operation(Status::Succeeded, now), "x", now, after),
            ClaimStep::Answer {
                outcome: ClaimOutcome::Replayed,
                retry_after: None
            }
        );
        let mut held = operation(Status::Dead, now);
        held.held_at = Some(now);
        assert_eq!(
            decide(&held, "x", now, after),
            ClaimStep::Answer {
                outcome: ClaimOutcome::Held,
                retry_after: Some(HELD_RETRY_AFTER)
            },
            "an operator's hold wins over reuse"
        );
        for &status in Status::ALL {
            if !matches!(status, Status::Failed | Status::Dead) {
                let op = operation(status, now);
                assert_eq!(
                    decide(&op, "x", now, after),
                    decide(&op, "x", now, ReusePolicy::Replay),
                    "{status:?} decides alike under every policy"
                );
            }
        }
    }

    proptest! {
        #[test]
        fn decisions_respect_the_state_machine(
            status in status(),
            held: bool,
            offset_ms in -60_000i64..60_000,
            attempts in 0u32..8,
            reconciling: bool,
            same_owner: bool,
        ) {
            let now = Utc::now();
            let mut op = operation(status, now);
            op.attempts = attempts;
            op.reconciling = reconciling && status == Status::InProgress;
            let at = now + TimeDelta::milliseconds(offset_ms);
            if status == Status::InProgress { op.lease_expires_at = Some(at); }
            if status == Status::RetryScheduled { op.next_attempt_at = Some(at); }
            let owner = if same_owner { "holder" } else { "other" };
            let held = held && !matches!(status, Status::Succeeded | Status::Failed);
            if held { op.held_at = Some(now); }
            let step = decide(&op, owner, now, ReusePolicy::Replay);
            if held {
                prop_assert_eq!(step, ClaimStep::Answer { outcome: ClaimOutcome::Held, retry_after: Some(HELD_RETRY_AFTER) });
                return Ok(());
            }
            match step {
                ClaimStep::Answer { outcome: ClaimOutcome::Replayed, .. } =>
                    prop_assert!(matches!(status, Status::Succeeded | Status::Failed)),
                ClaimStep::Answer { outcome: ClaimOutcome::Dead, .. } => prop_assert_eq!(status, Status::Dead),
                ClaimStep::Answer { outcome: ClaimOutcome::InProgress, retry_after } => {
                    prop_assert!(status == Status::InProgress && at > now && !same_owner);
                    prop_assert_eq!(retry_after, Some((at - now).to_std().unwrap()));
                }
                ClaimStep::Answer { outcome: ClaimOutcome::RetryLater, .. } =>
                    prop_assert!(status == Status::RetryScheduled && at > now),
                ClaimStep::Answer { outcome: ClaimOutcome::Acquired | ClaimOutcome::Reconcile, .. } =>
                    prop_assert!(status == Status::InProgress && at > now && same_owner),
                ClaimStep::Start(ExecutionKind::Reconcile) =>
                    prop_assert!(status == Status::Unknown || (op.reconciling && at <= now)),
                ClaimStep::Start(kind) => {
                    prop_assert!(at <= now && attempts < op.budget.max_attempts && !op.reconciling);
                    prop_assert!(kind != ExecutionKind::First);
                }
                ClaimStep::Exhaust => prop_assert!(at <= now && attempts >= op.budget.max_attempts),
                ClaimStep::Answer { outcome: ClaimOutcome::Held, .. } => prop_assert!(false, "held without a hold"),
            }
        }
    }
}
