"""The decisions of the run-once protocol (client/PROTOCOL.md), without I/O:
whether an error is transient, how long to wait before a retry, and what a
Claim answer, a failed Complete, a failed Renew and a Complete in doubt each
lead to; then the report for what work returned and what follows once it is
recorded. ``_run`` and the clients make the calls, sleep, renew and draw the
jitter: it is an argument here (``random``, uniform in [0, 1)), so each
decision is a function of its inputs.

Every client has these decisions under the same names, each tested against one
table of vectors, client/testdata/decisions.json (tests/test_decisions.py).
Times are seconds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ._convert import from_duration, to_duration
from ._gen.v1 import registry_pb2 as pb
from ._outcomes import (
    AGAIN,
    BusinessError,
    BusinessFailure,
    Outcome,
    Reconciliation,
    Result,
    SentButUnconfirmed,
    TransientError,
)
from .errors import (
    AlreadyCompleted,
    CompensationError,
    DeadlineExceeded,
    InvalidArgument,
    LeaseLost,
    LeaseNotHeld,
    NotFound,
    OperationDead,
    OperationHeld,
    OpregError,
    OutcomeUnknown,
    ParameterConflict,
    StaleFencingToken,
    is_transient,
)

# The decisions of client/testdata/decisions.json, one per section.
__all__ = [
    "is_transient",
    "retry_delay",
    "decide_claim_answer",
    "decide_complete_error",
    "decide_renew_failure",
    "decide_call_in_doubt",
]

# The transport backoff, (initial, max): full jitter over min(max, initial · 2ⁿ).
BACKOFF = (0.1, 5.0)

# Every Claim asks the server to hold it for the rest of the overall deadline,
# at most this long, while the answer would be IN_PROGRESS or RETRY_LATER: the
# server answers as soon as the operation moves.
MAX_CLAIM_WAIT = 30.0

# Against a server that does not wait (its answers carry no ``waited``), an
# IN_PROGRESS operation is claimed again at least this often: the holder may
# finish before its lease ends.
POLL_INTERVAL = 1.0

# Past this many doublings every backoff is at its maximum (and 2ⁿ would no
# longer fit a float).
_MAX_DOUBLINGS = 64


# -- transient errors --------------------------------------------------------------


def retry_info_of(error: BaseException) -> float | None:
    """The delay of the ``RetryInfo`` the server sent with ``error``, if any."""
    return error.retry_delay if isinstance(error, OpregError) else None


def retry_delay(
    attempt: int, retry_info: float | None, random: float, *, backoff: tuple[float, float] = BACKOFF
) -> float:
    """The wait before retrying a call that failed transiently for the
    ``attempt``-th time (from 0): full jitter over the backoff, but at least
    the server's ``RetryInfo`` delay stretched by up to a tenth, so that
    callers told the same delay do not return together."""
    initial, maximum = backoff
    wait = random * min(maximum, initial * 2.0 ** min(attempt, _MAX_DOUBLINGS))
    if retry_info is None:
        return wait
    return max(wait, retry_info + random * retry_info / 10)


# -- Claim -----------------------------------------------------------------------


def server_wait(remaining: float, *, max_wait: float = MAX_CLAIM_WAIT) -> float:
    """The ``wait`` a Claim asks for with ``remaining`` seconds left before the
    overall deadline: waiting past it would only delay the answer (and none
    once it passed)."""
    return max(min(remaining, max_wait), 0.0)


@dataclass(frozen=True)
class Execute:
    """Claim answered ACQUIRED, or RECONCILE (``reconcile``): act under its lease."""

    reconcile: bool


def decide_claim_answer(
    response: pb.ClaimResponse, remaining: float, random: float, *, poll_interval: float = POLL_INTERVAL
) -> Result | float | Execute:
    """The Claim table of PROTOCOL.md: return the :class:`Result` (REPLAYED),
    sleep that many seconds and claim again (IN_PROGRESS / RETRY_LATER: none
    when the server waited, the poll wait when it did not), or
    :class:`Execute` (ACQUIRED / RECONCILE). Raises the recorded
    :class:`BusinessFailure`, :class:`OperationDead`, :class:`OperationHeld`,
    or :class:`DeadlineExceeded` when the wait would end at or past the
    overall deadline (``remaining`` seconds away): sleeping into the deadline
    would only delay the answer."""
    outcome, operation = response.outcome, response.operation
    if outcome == pb.CLAIM_OUTCOME_REPLAYED:
        return replayed_result(operation)
    if outcome == pb.CLAIM_OUTCOME_DEAD:
        raise dead(operation)
    if outcome == pb.CLAIM_OUTCOME_HELD:
        # Not waited out like IN_PROGRESS: an operator froze the operation,
        # and the caller must learn that rather than time out on it.
        raise held(response)
    if outcome in (pb.CLAIM_OUTCOME_IN_PROGRESS, pb.CLAIM_OUTCOME_RETRY_LATER):
        # A server that waited held the call until the operation moved or the
        # wait ended: claim again at once, with a new wait.
        wait = 0.0 if response.HasField("waited") else _poll_wait(response, random, poll_interval)
        if wait >= remaining:
            raise DeadlineExceeded(
                f"{operation.namespace}/{operation.operation_key}: deadline exceeded waiting after "
                f"{pb.ClaimOutcome.Name(outcome)} (next claim in {wait:.3f}s)",
                last_outcome=outcome,
                operation=operation,
            )
        return wait
    if outcome in (pb.CLAIM_OUTCOME_ACQUIRED, pb.CLAIM_OUTCOME_RECONCILE):
        if not response.HasField("lease"):
            raise OpregError(f"Claim answered {pb.ClaimOutcome.Name(outcome)} without a lease")
        return Execute(reconcile=outcome == pb.CLAIM_OUTCOME_RECONCILE)
    raise OpregError(f"unexpected claim outcome {outcome}")


def _poll_wait(response: pb.ClaimResponse, random: float, poll_interval: float) -> float:
    """How long to wait before claiming again after IN_PROGRESS / RETRY_LATER
    from a server that does not wait.

    RETRY_LATER: the retry is due after ``retry_after``. IN_PROGRESS: the holder
    may finish before its lease ends, so poll at least every ``poll_interval``.
    A little jitter spreads callers that were told the same time.
    """
    after = from_duration(response.retry_after) if response.HasField("retry_after") else poll_interval
    if response.outcome == pb.CLAIM_OUTCOME_IN_PROGRESS:
        after = min(after, poll_interval)
    after = max(after, 0.0)
    return after + 0.005 + random * min(0.2 * after, 1.0)


def replayed_result(operation: pb.Operation) -> Result:
    """The answer to a REPLAYED claim: the stored result, or the stored failure raised."""
    if operation.status == pb.OPERATION_STATUS_SUCCEEDED:
        return Result(operation.result, operation.result_ref, replayed=True, operation=operation)
    if operation.status == pb.OPERATION_STATUS_FAILED:
        raise BusinessFailure(operation.failure.code, operation.failure.message, replayed=True, operation=operation)
    raise OpregError(f"REPLAYED with status {pb.OperationStatus.Name(operation.status)}")


def held(response: pb.ClaimResponse) -> OperationHeld:
    operation = response.operation
    retry_after = from_duration(response.retry_after) if response.HasField("retry_after") else None
    since = f" since {operation.held_at.ToJsonString()}" if operation.HasField("held_at") else ""
    return OperationHeld(
        f"{operation.namespace}/{operation.operation_key} is held by an operator{since}"
        + (f"; claim again after {retry_after:.3f}s or ask the operator" if retry_after is not None else ""),
        retry_after=retry_after,
        operation=operation,
    )


def dead(operation: pb.Operation) -> OperationDead:
    return OperationDead(
        f"{operation.namespace}/{operation.operation_key} is DEAD after {operation.attempts} attempt(s)"
        + (
            f"; last error {operation.last_error_class}: {operation.last_error_message}"
            if operation.last_error_class
            else ""
        ),
        operation=operation,
    )


# -- the work returns ----------------------------------------------------------------


def success_report(value: Any) -> pb.Success:
    """The Complete(success) for what ``work`` returned: bytes, or (bytes, result_ref), or None."""
    if value is None:
        return pb.Success()
    if isinstance(value, tuple) and len(value) == 2:
        result, result_ref = value
        if not isinstance(result_ref, str):
            raise TypeError(f"result_ref must be str, not {type(result_ref).__name__}")
        return pb.Success(result=_bytes(result), result_ref=result_ref)
    return pb.Success(result=_bytes(value))


def _bytes(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"work must return bytes, (bytes, result_ref) or None, not {type(value).__name__}")


def is_lease_loss(error: BaseException) -> bool:
    return isinstance(error, (LeaseLost, StaleFencingToken))


def error_report(error: BaseException) -> Outcome:
    """The Complete report for an exception raised by ``work``."""
    if isinstance(error, BusinessError):
        return pb.Failure(code=error.code, message=error.message)
    if isinstance(error, TransientError):
        report = pb.RetryableError(error_class=error.error_class, message=error.message)
        if error.retry_after is not None:
            report.retry_after.CopyFrom(to_duration(error.retry_after))
        return report
    if isinstance(error, SentButUnconfirmed):
        return pb.UnknownOutcome(remote_ref=error.remote_ref, message=error.message)
    return pb.RetryableError(error_class=type(error).__name__, message=str(error))


def reconcile_report(reconciliation: Any) -> Outcome | None:
    """The Complete report for a reconciliation; ``None`` for not_applied."""
    if not isinstance(reconciliation, Reconciliation):
        raise TypeError(
            "reconcile must return Reconciliation.succeeded(...), .failed(...) or .not_applied(), "
            f"not {type(reconciliation).__name__}"
        )
    if reconciliation.kind == "succeeded":
        return pb.Success(result=reconciliation.result, result_ref=reconciliation.result_ref)
    if reconciliation.kind == "failed":
        return pb.Failure(code=reconciliation.code, message=reconciliation.message)
    if reconciliation.kind == "not_applied":
        return None
    raise ValueError(f"unknown reconciliation {reconciliation.kind!r}")


def reconcile_error_report(error: BaseException, remote_ref: str) -> pb.UnknownOutcome:
    """A reconcile callback that failed leaves the outcome unknown."""
    return pb.UnknownOutcome(remote_ref=remote_ref, message=f"reconcile failed: {type(error).__name__}: {error}")


def after_complete(
    operation: pb.Operation,
    report: Outcome,
    error: BaseException | None,
    *,
    retry_transient: bool,
    can_reconcile: bool,
    fencing_token: int | None = None,
) -> Any:
    """What ``run_once`` does once Complete recorded ``report`` (client/PROTOCOL.md,
    "The work returns"): return a Result, return AGAIN (claim again), or raise.

    - success: the Result; failure: :class:`BusinessFailure` (``replayed`` false);
    - a :class:`TransientError` (retryable): :class:`OperationDead` when the
      report spent the budget, else claim again (the queue's backoff governs;
      with ``retry_transient`` false it is re-raised instead);
    - sent but unconfirmed (unknown): with a reconcile callback claim again,
      which answers RECONCILE; without one :class:`OutcomeUnknown`;
    - any other exception (recorded retryable): re-raised, never claimed again.
    """
    status = operation.status
    if isinstance(report, pb.Success):
        if status != pb.OPERATION_STATUS_SUCCEEDED:
            raise OpregError(f"Complete(success) answered status {pb.OperationStatus.Name(status)}")
        return Result(operation.result, operation.result_ref, replayed=False, operation=operation)
    if isinstance(report, pb.Failure):
        failure = BusinessFailure(
            operation.failure.code or report.code,
            operation.failure.message or report.message,
            replayed=False,
            operation=operation,
        )
        raise failure from error
    if isinstance(report, pb.UnknownOutcome):
        if retry_transient and can_reconcile:
            return AGAIN
        raise OutcomeUnknown(
            f"{operation.namespace}/{operation.operation_key}: the outcome of execution {fencing_token} is unknown "
            f"(remote_ref={report.remote_ref!r}, recorded as {pb.OperationStatus.Name(status)}) "
            "and no reconcile callback was given to find out what happened",
            remote_ref=report.remote_ref,
            fencing_token=fencing_token,
            operation=operation,
        ) from error
    if error is None:
        raise OpregError(f"unexpected report {type(report).__name__}")
    if not isinstance(error, TransientError):
        raise error  # an unexpected error: the caller's to see; the queue keeps the retry
    if status == pb.OPERATION_STATUS_DEAD:
        raise dead(operation) from error
    if retry_transient:
        return AGAIN
    raise error


# -- Complete --------------------------------------------------------------------


# Complete's refusals that say the lease is not ours.
COMPLETE_LEASE_LOST: tuple[type[OpregError], ...] = (StaleFencingToken, LeaseNotHeld)

# Complete's refusals that settle the matter; any other error, or Complete's
# time running out, leaves the report in doubt.
COMPLETE_DEFINITIVE: tuple[type[OpregError], ...] = (
    AlreadyCompleted,
    InvalidArgument,
    NotFound,
    ParameterConflict,
    CompensationError,
)


def decide_complete_error(error: BaseException) -> Literal["lease_lost", "raise", "in_doubt"]:
    """The Complete table of PROTOCOL.md, for the error Complete failed with
    after its retries: ``lease_lost`` for STALE_FENCING_TOKEN and
    LEASE_NOT_HELD (another execution holds the operation, or no lease is
    ours: the same remedy); ``raise`` for a definitive refusal
    (ALREADY_COMPLETED, INVALID_ARGUMENT, OPERATION_NOT_FOUND,
    PARAMETER_CONFLICT, the compensation reasons: nothing to settle);
    ``in_doubt`` for anything else, or Complete's time running out: a Lookup
    decides (:func:`decide_call_in_doubt`)."""
    if isinstance(error, COMPLETE_LEASE_LOST):
        return "lease_lost"
    if isinstance(error, COMPLETE_DEFINITIVE):
        return "raise"
    return "in_doubt"


# The execution outcome each report is recorded as.
RECORDED_AS = {
    pb.Success: pb.EXECUTION_OUTCOME_SUCCEEDED,
    pb.Failure: pb.EXECUTION_OUTCOME_FAILED,
    pb.RetryableError: pb.EXECUTION_OUTCOME_RETRYABLE,
    pb.UnknownOutcome: pb.EXECUTION_OUTCOME_UNKNOWN,
}


def own_execution(lookup: pb.LookupResponse, token: int) -> pb.Execution | None:
    """The (last) execution of ``token`` in a Lookup with executions."""
    mine = [execution for execution in lookup.executions if execution.fencing_token == token]
    return mine[-1] if mine else None


def decide_call_in_doubt(
    reported: Outcome, token: int, lookup: pb.LookupResponse | None
) -> Literal["recorded", "lease_lost", "not_recorded"]:
    """The "Complete in doubt" table of PROTOCOL.md, from the Lookup of the
    operation with its executions (``None``: it failed). ``recorded`` only when
    our token's execution shows exactly the outcome we ``reported`` (success →
    SUCCEEDED, failure → FAILED, retryable → RETRYABLE, unknown → UNKNOWN):
    accepting any finished outcome would let a report we did not make pass for
    ours. ``lease_lost`` when it was SUPERSEDED (taken over) or REVOKED (an
    operator's hold or resolution); ``not_recorded`` for anything else (still
    RUNNING, another outcome, no such execution, no Lookup): the lease will
    lapse and the operation will be claimed again."""
    mine = own_execution(lookup, token) if lookup is not None else None
    if mine is None:
        return "not_recorded"
    if mine.outcome in (pb.EXECUTION_OUTCOME_SUPERSEDED, pb.EXECUTION_OUTCOME_REVOKED):
        return "lease_lost"
    if mine.outcome == RECORDED_AS.get(type(reported)):
        return "recorded"
    return "not_recorded"


# -- the lease -------------------------------------------------------------------


def expiry_margin(lease_ttl: float) -> float:
    """How long before its local expiry a lease that could not be renewed is
    given up (a tenth of its TTL): the local clock and the server's may differ,
    and work needs time to notice."""
    return lease_ttl / 10


def decide_renew_failure(
    error: BaseException,
    attempt: int,
    trusted_left: float,
    random: float,
    *,
    backoff: tuple[float, float] = BACKOFF,
) -> float | None:
    """The lease table of PROTOCOL.md, for a Renew that failed with ``error``
    (the ``attempt``-th in a row, from 0) while the lease is trusted for
    ``trusted_left`` more seconds. ``None``: the lease is lost, for any error
    that is not transient (STALE_FENCING_TOKEN, LEASE_NOT_HELD,
    OPERATION_NOT_FOUND, PERMISSION_DENIED, anything: a lease that cannot be
    confirmed must not be written under) and when no trusted time is left.
    Otherwise the wait before renewing again: the backoff, never past the
    trusted time."""
    if not is_transient(error) or trusted_left <= 0:
        return None
    return min(retry_delay(attempt, retry_info_of(error), random, backoff=backoff), trusted_left)
