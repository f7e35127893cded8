//! What a Complete records: a pure decision over the operation, the execution
//! that holds the presented token, and the database clock.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use super::ids::FencingToken;
use super::operation::{Execution, ExecutionOutcome, Operation, Status};

/// What the holder of a lease reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    Success {
        result: Vec<u8>,
        result_ref: String,
    },
    /// A terminal business failure, replayed like a success.
    Failure {
        code: String,
        message: String,
    },
    Retryable {
        error_class: String,
        message: String,
        retry_after: Option<Duration>,
    },
    /// The call may or may not have taken effect.
    Unknown {
        remote_ref: String,
        message: String,
    },
}

impl Report {
    /// Identifies the report, so a repeated Complete can be told from a different one.
    pub fn digest(&self) -> Vec<u8> {
        let mut hasher = Sha256::new();
        let mut field = |bytes: &[u8]| {
            hasher.update((bytes.len() as u64).to_be_bytes());
            hasher.update(bytes);
        };
        match self {
            Report::Success { result, result_ref } => {
                field(b"success");
                field(result);
                field(result_ref.as_bytes());
            }
            Report::Failure { code, message } => {
                field(b"failure");
                field(code.as_bytes());
                field(message.as_bytes());
            }
            Report::Retryable {
                error_class,
                message,
                retry_after,
            } => {
                field(b"retryable");
                field(error_class.as_bytes());
                field(message.as_bytes());
                field(
                    &retry_after
                        .map_or(u128::MAX, |d| d.as_nanos())
                        .to_be_bytes(),
                );
            }
            Report::Unknown {
                remote_ref,
                message,
            } => {
                field(b"unknown");
                field(remote_ref.as_bytes());
                field(message.as_bytes());
            }
        }
        hasher.finalize().to_vec()
    }

    /// The transition this report makes from a current lease when it depends on
    /// nothing stored: every report but a retryable failure, whose next state
    /// depends on the attempts and the budget.
    pub fn settled_transition(&self) -> Option<Transition> {
        match self.next_state() {
            NextState::Settled(status) => Some(Transition {
                status,
                retry_in: None,
            }),
            NextState::Retry { .. } => None,
        }
    }

    fn next_state(&self) -> NextState {
        match self {
            Report::Success { .. } => NextState::Settled(Status::Succeeded),
            Report::Failure { .. } => NextState::Settled(Status::Failed),
            Report::Unknown { .. } => NextState::Settled(Status::Unknown),
            Report::Retryable { retry_after, .. } => NextState::Retry {
                retry_after: *retry_after,
            },
        }
    }

    pub fn execution_outcome(&self) -> ExecutionOutcome {
        match self {
            Report::Success { .. } => ExecutionOutcome::Succeeded,
            Report::Failure { .. } => ExecutionOutcome::Failed,
            Report::Retryable { .. } => ExecutionOutcome::Retryable,
            Report::Unknown { .. } => ExecutionOutcome::Unknown,
        }
    }
}

/// What a report asks of the operation's next state.
enum NextState {
    Settled(Status),
    /// Another attempt, if the budget allows; `retry_after` is downstream's pushback.
    Retry {
        retry_after: Option<Duration>,
    },
}

/// The operation's next state after a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    pub status: Status,
    /// For RETRY_SCHEDULED: how long after now the next attempt is due.
    pub retry_in: Option<Duration>,
}

/// The step a Complete takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompleteStep {
    /// The same report was recorded for this token: answer as before.
    Repeat,
    /// A different report was recorded for this token.
    AlreadyCompleted,
    /// The token is not the operation's current lease, or an operator holds
    /// the operation.
    Stale {
        current: FencingToken,
    },
    Record(Transition),
}

/// Decides a Complete for `token`. `execution` is the one that token started,
/// if any; `jitter_unit` is uniform in [0, 1].
pub fn decide(
    operation: &Operation,
    execution: Option<&Execution>,
    token: FencingToken,
    report: &Report,
    now: DateTime<Utc>,
    jitter_unit: f64,
) -> CompleteStep {
    if let Some(recorded) = execution.and_then(|e| e.outcome_digest.as_deref()) {
        return if recorded == report.digest() {
            CompleteStep::Repeat
        } else {
            CompleteStep::AlreadyCompleted
        };
    }
    if execution.is_none()
        || operation.fencing_token != token
        || operation.status != Status::InProgress
        || operation.is_held()
    {
        return CompleteStep::Stale {
            current: operation.fencing_token,
        };
    }
    CompleteStep::Record(transition(operation, report, now, jitter_unit))
}

fn transition(
    operation: &Operation,
    report: &Report,
    now: DateTime<Utc>,
    jitter_unit: f64,
) -> Transition {
    let settled = |status| Transition {
        status,
        retry_in: None,
    };
    match report.next_state() {
        NextState::Settled(status) => settled(status),
        NextState::Retry { retry_after } => {
            if operation.attempts >= operation.budget.max_attempts {
                return settled(Status::Dead);
            }
            let policy = operation.backoff_policy();
            // Downstream pushback is honoured as given, even past max_backoff.
            let delay = retry_after
                .unwrap_or_else(|| policy.full_jitter(operation.budget_attempts(), jitter_unit));
            let due_at = chrono::TimeDelta::from_std(delay).map_or(DateTime::<Utc>::MAX_UTC, |d| {
                now.checked_add_signed(d)
                    .unwrap_or(DateTime::<Utc>::MAX_UTC)
            });
            if due_at > operation.budget.deadline_at {
                settled(Status::Dead)
            } else {
                Transition {
                    status: Status::RetryScheduled,
                    retry_in: Some(delay),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::claim::tests::operation;
    use crate::domain::operation::ExecutionKind;
    use proptest::prelude::*;

    fn token(value: i64) -> FencingToken {
        FencingToken::from_stored(value)
    }

    fn running(value: i64) -> Execution {
        Execution {
            fencing_token: token(value),
            attempt: 1,
            kind: ExecutionKind::First,
            execution_id: String::new(),
            owner: "holder".into(),
            started_at: Utc::now(),
            finished_at: None,
            outcome: ExecutionOutcome::Running,
            outcome_digest: None,
            error_class: None,
            message: None,
        }
    }

    fn retryable(retry_after: Option<Duration>) -> Report {
        Report::Retryable {
            error_class: "timeout".into(),
            message: String::new(),
            retry_after,
        }
    }

    #[test]
    fn a_recorded_token_answers_from_its_record() {
        let now = Utc::now();
        let op = operation(Status::Succeeded, now);
        let mut execution = running(7);
        let success = Report::Success {
            result: b"ok".to_vec(),
            result_ref: String::new(),
        };
        execution.outcome_digest = Some(success.digest());
        assert_eq!(
            decide(&op, Some(&execution), token(7), &success, now, 0.5),
            CompleteStep::Repeat
        );
        let failure = Report::Failure {
            code: "x".into(),
            message: String::new(),
        };
        assert_eq!(
            decide(&op, Some(&execution), token(7), &failure, now, 0.5),
            CompleteStep::AlreadyCompleted
        );
    }

    #[test]
    fn superseded_and_foreign_tokens_are_stale() {
        let now = Utc::now();
        let op = operation(Status::InProgress, now);
        let report = retryable(None);
        assert_eq!(
            decide(&op, Some(&running(3)), token(3), &report, now, 0.5),
            CompleteStep::Stale { current: token(7) }
        );
        assert_eq!(
            decide(&op, None, token(7), &report, now, 0.5),
            CompleteStep::Stale { current: token(7) }
        );
    }

    #[test]
    fn retry_after_is_honoured_beyond_max_backoff_but_not_beyond_the_deadline() {
        let now = Utc::now();
        let op = operation(Status::InProgress, now);
        let long = Duration::from_secs(3_600);
        assert_eq!(
            decide(
                &op,
                Some(&running(7)),
                token(7),
                &retryable(Some(long)),
                now,
                0.5
            ),
            CompleteStep::Record(Transition {
                status: Status::RetryScheduled,
                retry_in: Some(long)
            })
        );
        let past_deadline = Duration::from_secs(25 * 3_600);
        assert_eq!(
            decide(
                &op,
                Some(&running(7)),
                token(7),
                &retryable(Some(past_deadline)),
                now,
                0.5
            ),
            CompleteStep::Record(Transition {
                status: Status::Dead,
                retry_in: None
            })
        );
    }

    proptest! {
        #[test]
        fn retryable_failures_schedule_within_the_cap_or_die_at_the_budget(
            attempts in 1u32..10,
            unit in 0.0f64..=1.0,
        ) {
            let now = Utc::now();
            let mut op = operation(Status::InProgress, now);
            op.attempts = attempts;
            let step = decide(&op, Some(&running(7)), token(7), &retryable(None), now, unit);
            let CompleteStep::Record(transition) = step else { panic!("{step:?}") };
            if attempts >= op.budget.max_attempts {
                prop_assert_eq!(transition.status, Status::Dead);
            } else {
                prop_assert_eq!(transition.status, Status::RetryScheduled);
                let cap = op.backoff_policy().backoff_cap(op.budget_attempts());
                prop_assert!(transition.retry_in.unwrap() <= cap);
            }
        }

        #[test]
        fn equal_reports_share_a_digest_and_different_ones_do_not(
            a in ".{0,8}", b in ".{0,8}",
        ) {
            let left = Report::Unknown { remote_ref: a.clone(), message: b.clone() };
            let right = Report::Unknown { remote_ref: format!("{a}{b}"), message: String::new() };
            prop_assert_eq!(left.digest(), left.clone().digest());
            if !b.is_empty() { prop_assert_ne!(left.digest(), right.digest()); }
        }
    }
}
