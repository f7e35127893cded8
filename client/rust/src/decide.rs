//! The decisions of the run-once protocol (`client/PROTOCOL.md`), without
//! I/O: what a Claim answer, the work's result, a Complete error, a call in
//! doubt and a failed Renew each lead to, and how long to wait before a retry.
//! [`crate::run_once`] and [`crate::worker`] make the calls, sleep and renew;
//! everything they decide is decided here. Jitter is an argument (`random`,
//! uniform in `[0, 1)`), so each decision is a function of its inputs.
//!
//! Every client has this module under the same names, and each is tested
//! against the one table of vectors, `client/testdata/decisions.json`.

use std::time::Duration;

use crate::error::Error;
use crate::outcomes::{Completed, RunError, Success, WorkError};
use crate::proto::{self as pb, ClaimOutcome, ExecutionOutcome, OperationStatus};
use pb::complete_request::Outcome;

/// How often an operation another execution holds is claimed again, at most,
/// from a server that does not wait.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The longest a Claim asks the server to hold it.
pub(crate) const MAX_SERVER_WAIT: Duration = Duration::from_secs(30);

/// How long a Claim sent with `remaining` before the overall deadline asks
/// the server to wait for an answer it can act on.
pub(crate) fn server_wait(remaining: Duration) -> Duration {
    remaining.min(MAX_SERVER_WAIT)
}

/// Transport backoff: full jitter over `min(BACKOFF_MAX, BACKOFF_INITIAL × 2ⁿ)`.
const BACKOFF_INITIAL: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// The wait before retrying a call that failed transiently for the
/// `attempt`-th time (from 0): full jitter over the backoff, but at least the
/// server's `RetryInfo` delay stretched by up to a tenth, so that callers told
/// the same delay do not return together.
pub(crate) fn retry_delay(attempt: u32, retry_info: Option<Duration>, random: f64) -> Duration {
    let ceiling = BACKOFF_INITIAL
        .saturating_mul(1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX))
        .min(BACKOFF_MAX);
    let backoff = ceiling.mul_f64(random);
    retry_info.map_or(backoff, |asked| backoff.max(stretched(asked, random)))
}

/// `wait` stretched by up to a tenth, so callers told the same time spread out.
pub(crate) fn stretched(wait: Duration, random: f64) -> Duration {
    wait + wait.mul_f64(random / 10.0)
}

/// What to do with a Claim's answer.
#[derive(Debug)]
pub(crate) enum ClaimStep {
    /// ACQUIRED, or RECONCILE (`reconcile`): act under this lease.
    Execute { lease: pb::Lease, reconcile: bool },
    /// Sleep this long, then claim again.
    Wait(Duration),
    /// The run's answer: a replayed result, or an error.
    Return(Result<Box<Completed>, RunError>),
}

/// The Claim table of PROTOCOL.md. `remaining` is the time left before the
/// overall deadline: a wait that would end at or past it answers
/// [`RunError::DeadlineExceeded`] at once, since sleeping into the deadline
/// would only delay the answer.
pub(crate) fn decide_claim_answer(
    claimed: pb::ClaimResponse,
    remaining: Duration,
    random: f64,
) -> ClaimStep {
    let outcome = claimed.outcome();
    let retry_after = claimed.retry_after.map(std_duration);
    match outcome {
        ClaimOutcome::Replayed => {
            ClaimStep::Return(replayed(claimed.operation.unwrap_or_default()).map(Box::new))
        }
        ClaimOutcome::Dead => ClaimStep::Return(Err(RunError::Dead)),
        // Not waited out: an operator froze it, and waiting would hide that.
        ClaimOutcome::Held => ClaimStep::Return(Err(RunError::Held {
            retry_after: retry_after.unwrap_or_default(),
        })),
        ClaimOutcome::InProgress | ClaimOutcome::RetryLater => {
            // The server held the call as long as it could: ask again at once.
            let wait = if claimed.waited.is_some() {
                Duration::ZERO
            } else {
                claim_wait(outcome, retry_after, random)
            };
            if wait >= remaining {
                return ClaimStep::Return(Err(RunError::DeadlineExceeded));
            }
            ClaimStep::Wait(wait)
        }
        ClaimOutcome::Acquired | ClaimOutcome::Reconcile => match claimed.lease {
            Some(lease) => ClaimStep::Execute {
                lease,
                reconcile: outcome == ClaimOutcome::Reconcile,
            },
            None => ClaimStep::Return(Err(missing("lease"))),
        },
        ClaimOutcome::Unspecified => ClaimStep::Return(Err(missing("claim outcome"))),
    }
}

/// The wait before claiming again after IN_PROGRESS or RETRY_LATER:
/// `retry_after` (for IN_PROGRESS at most the poll interval: the holder may
/// finish before its lease ends), plus a little jitter for callers told the
/// same time.
fn claim_wait(outcome: ClaimOutcome, retry_after: Option<Duration>, random: f64) -> Duration {
    let mut after = retry_after.unwrap_or(POLL_INTERVAL);
    if outcome == ClaimOutcome::InProgress {
        after = after.min(POLL_INTERVAL);
    }
    let spread = (after / 5).min(Duration::from_secs(1));
    after + Duration::from_millis(5) + spread.mul_f64(random)
}

/// The answer to REPLAYED: the stored result, or the stored business failure.
fn replayed(operation: pb::Operation) -> Result<Completed, RunError> {
    match operation.status() {
        OperationStatus::Failed => {
            let failure = operation.failure.unwrap_or_default();
            Err(RunError::Business {
                code: failure.code,
                message: failure.message,
                replayed: true,
            })
        }
        _ => Ok(Completed {
            result: operation.result.clone(),
            result_ref: operation.result_ref.clone(),
            replayed: true,
            operation,
        }),
    }
}

/// The Complete for what the work returned, and the error to return after it
/// (an unexpected error is the caller's to see; the queue keeps the retry).
pub(crate) fn work_report(
    result: Result<Success, WorkError>,
) -> (Outcome, Option<Box<dyn std::error::Error + Send + Sync>>) {
    match result {
        Ok(success) => (success.into(), None),
        Err(WorkError::Business { code, message }) => {
            (Outcome::Failure(pb::Failure { code, message }), None)
        }
        Err(WorkError::Transient {
            message,
            retry_after,
        }) => (retryable("transient", message, retry_after), None),
        Err(WorkError::Retryable {
            error_class,
            message,
            retry_after,
        }) => (retryable(error_class, message, retry_after), None),
        Err(WorkError::SentButUnconfirmed {
            remote_ref,
            message,
        }) => (
            Outcome::Unknown(pb::UnknownOutcome {
                remote_ref,
                message,
            }),
            None,
        ),
        Err(WorkError::Other(error)) => (
            retryable("work_error", error.to_string(), None),
            Some(error),
        ),
    }
}

fn retryable(
    error_class: impl Into<String>,
    message: String,
    retry_after: Option<Duration>,
) -> Outcome {
    Outcome::Retryable(pb::RetryableError {
        error_class: error_class.into(),
        message,
        retry_after: retry_after.map(proto_duration),
    })
}

/// Whether a recorded report is followed by another Claim: a retry is the
/// queue's to schedule, and an unknown outcome is reconciled by the next
/// Claim (RECONCILE) when there is someone to ask.
pub(crate) fn claims_again(outcome: &Outcome, can_reconcile: bool) -> bool {
    match outcome {
        Outcome::Retryable(_) => true,
        Outcome::Unknown(_) => can_reconcile,
        Outcome::Success(_) | Outcome::Failure(_) => false,
    }
}

/// The operation as this run's Complete left it.
pub(crate) fn recorded(operation: pb::Operation) -> Result<Completed, RunError> {
    match operation.status() {
        OperationStatus::Succeeded => Ok(Completed {
            result: operation.result.clone(),
            result_ref: operation.result_ref.clone(),
            replayed: false,
            operation,
        }),
        OperationStatus::Failed => {
            let failure = operation.failure.unwrap_or_default();
            Err(RunError::Business {
                code: failure.code,
                message: failure.message,
                replayed: false,
            })
        }
        OperationStatus::Dead => Err(RunError::Dead),
        _ => Err(RunError::OutcomeUnknown {
            remote_ref: operation.remote_ref,
        }),
    }
}

/// What a Complete that failed, after its retries, means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CompleteError {
    /// Another execution holds the operation, or no lease is ours: only a
    /// token without a recorded report is ever called stale.
    LeaseLost,
    /// A definitive refusal: nothing to settle, the error is the answer.
    Raise,
    /// Anything else, or Complete's own time ran out: a Lookup decides.
    InDoubt,
}

/// The Complete table of PROTOCOL.md.
pub(crate) fn decide_complete_error(error: &RunError) -> CompleteError {
    match error {
        RunError::Rpc(Error::StaleFencingToken { .. } | Error::LeaseNotHeld) => {
            CompleteError::LeaseLost
        }
        RunError::Rpc(
            Error::AlreadyCompleted
            | Error::InvalidArgument { .. }
            | Error::NotFound { .. }
            | Error::ParameterConflict { .. }
            | Error::Compensation { .. },
        ) => CompleteError::Raise,
        _ => CompleteError::InDoubt,
    }
}

/// The execution outcome a Complete report is recorded as.
pub(crate) fn recorded_as(outcome: &Outcome) -> ExecutionOutcome {
    match outcome {
        Outcome::Success(_) => ExecutionOutcome::Succeeded,
        Outcome::Failure(_) => ExecutionOutcome::Failed,
        Outcome::Retryable(_) => ExecutionOutcome::Retryable,
        Outcome::Unknown(_) => ExecutionOutcome::Unknown,
    }
}

/// Whether a report whose Complete is in doubt was recorded.
#[derive(Debug)]
pub(crate) enum InDoubt {
    /// Exactly our report: as if Complete had answered this operation.
    Recorded(Box<pb::Operation>),
    /// Taken over, or revoked by an operator: no report is ours to make.
    LeaseLost,
    /// Not known to be recorded: the lease will lapse and the operation will
    /// be claimed again.
    NotRecorded,
}

/// The "Complete in doubt" table of PROTOCOL.md, from the Lookup (`None`: it
/// failed). Only exactly the outcome we reported counts: accepting any
/// finished outcome would let a report we did not make pass for ours.
pub(crate) fn decide_call_in_doubt(
    found: Option<pb::LookupResponse>,
    token: u64,
    reported: ExecutionOutcome,
) -> InDoubt {
    let Some(found) = found else {
        return InDoubt::NotRecorded;
    };
    let ours = found
        .executions
        .iter()
        .rfind(|execution| execution.fencing_token == token)
        .map(pb::Execution::outcome);
    match (ours, found.operation) {
        (Some(ExecutionOutcome::Superseded | ExecutionOutcome::Revoked), _) => InDoubt::LeaseLost,
        (Some(outcome), Some(operation)) if outcome == reported => {
            InDoubt::Recorded(Box::new(operation))
        }
        _ => InDoubt::NotRecorded,
    }
}

/// After a failed Renew.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RenewStep {
    /// A lease that cannot be confirmed must not be written under.
    Lost,
    /// Renew again after this long.
    RetryAfter(Duration),
}

/// The lease table of PROTOCOL.md: any error that is not transient loses the
/// lease, and so does a transient one with no trusted time left; otherwise
/// the renewal is retried, never past the trusted time. `error` is `None`
/// when the call timed out here.
pub(crate) fn decide_renew_failure(
    error: Option<&Error>,
    attempt: u32,
    trusted_left: Duration,
    random: f64,
) -> RenewStep {
    if error.is_some_and(|error| !error.is_transient()) || trusted_left.is_zero() {
        return RenewStep::Lost;
    }
    let asked = error.and_then(Error::retry_after);
    RenewStep::RetryAfter(retry_delay(attempt, asked, random).min(trusted_left))
}

pub(crate) fn missing(what: &str) -> RunError {
    RunError::Rpc(Error::Other(tonic::Status::internal(format!(
        "the server sent no {what}"
    ))))
}

pub(crate) fn proto_duration(duration: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(duration.subsec_nanos()).unwrap_or(0),
    }
}

pub(crate) fn std_duration(duration: prost_types::Duration) -> Duration {
    Duration::new(
        u64::try_from(duration.seconds).unwrap_or(0),
        u32::try_from(duration.nanos).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests;
