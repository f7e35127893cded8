"""The run-once helper, shared by the sync and asyncio clients: the values work
and reconcile return or raise, the lease handed to them, the pure mapping
between those and the registry's messages, and the protocol's decisions
(:class:`RunOnce`, :class:`Attempt`, :class:`Renewal`, :class:`Retry`).

The clients only do the I/O: they make the calls these objects describe
(blocking or awaited), sleep the waits they compute (``time.sleep`` or
``asyncio.sleep``) and run the renewals (a thread or a task)."""

from __future__ import annotations

import datetime
import os
import random
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Protocol, TypeVar

from ._convert import Seconds, from_duration, seconds, to_duration
from ._gen.v1 import registry_pb2 as pb
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
    OutcomeNotRecorded,
    OutcomeUnknown,
    ParameterConflict,
    ReconcileRequired,
    StaleFencingToken,
    Unavailable,
    is_transient,
)

__all__ = [
    "Result",
    "BusinessError",
    "BusinessFailure",
    "TransientError",
    "SentButUnconfirmed",
    "Reconciliation",
]


@dataclass(frozen=True)
class Result:
    """A recorded success. ``replayed`` is true when it was recorded by an
    earlier execution (Claim answered REPLAYED) and ``work`` did not run."""

    value: bytes
    result_ref: str = ""
    replayed: bool = False
    operation: pb.Operation = field(default_factory=pb.Operation, repr=False, compare=False)


class BusinessError(Exception):
    """Raise from ``work`` for a terminal business failure (e.g. insufficient
    balance): it is recorded with Complete(failure) and replayed like a success."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


class BusinessFailure(BusinessError):
    """Raised by ``run_once`` for a recorded business failure: the one the work
    just reported (``replayed`` false) or one recorded earlier (``replayed`` true)."""

    def __init__(self, code: str, message: str = "", *, replayed: bool, operation: Any = None) -> None:
        super().__init__(code, message)
        self.replayed = replayed
        self.operation: pb.Operation | None = operation


class TransientError(Exception):
    """Raise from ``work`` for a failure worth retrying (reported as
    Complete(retryable)). ``retry_after`` is downstream pushback: the next
    attempt is due exactly then. ``error_class`` defaults to the class name."""

    def __init__(self, message: str = "", *, retry_after: Seconds | None = None, error_class: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after
        self.error_class = error_class or type(self).__name__


class SentButUnconfirmed(Exception):
    """Raise from ``work`` when the request may have taken effect (e.g. a timeout
    after it left): reported as Complete(unknown) with ``remote_ref``, and
    reconciled before anything re-executes."""

    def __init__(self, remote_ref: str = "", message: str = "") -> None:
        super().__init__(message or f"sent but unconfirmed (remote_ref={remote_ref!r})")
        self.remote_ref = remote_ref
        self.message = message


@dataclass(frozen=True)
class Reconciliation:
    """What ``reconcile(lease, remote_ref)`` found out about the unknown attempt.
    Build with :meth:`succeeded`, :meth:`failed` or :meth:`not_applied`."""

    kind: str
    result: bytes = b""
    result_ref: str = ""
    code: str = ""
    message: str = ""

    @classmethod
    def succeeded(cls, result: bytes = b"", result_ref: str = "") -> Reconciliation:
        """The attempt took effect; record this result."""
        return cls("succeeded", result=bytes(result), result_ref=result_ref)

    @classmethod
    def failed(cls, code: str, message: str = "") -> Reconciliation:
        """The attempt ended in a terminal business failure; record it."""
        return cls("failed", code=code, message=message)

    @classmethod
    def not_applied(cls) -> Reconciliation:
        """The attempt did not take effect: run ``work`` under the same lease."""
        return cls("not_applied")


Outcome = pb.Success | pb.Failure | pb.RetryableError | pb.UnknownOutcome

# Returned by an execution whose report asks for another Claim.
AGAIN = object()


class Flag(Protocol):
    """A ``threading.Event`` or an ``asyncio.Event``."""

    def is_set(self) -> bool: ...

    def set(self) -> None: ...


class LeaseBase:
    """The lease an execution holds; handed to ``work`` and ``reconcile``.

    ``lost`` turns true (and stays true) when a renewal finds that another
    execution took over, or the lease could not be renewed before it expired.
    Then stop: ``run_once`` will not Complete and raises :class:`LeaseLost`.
    """

    def __init__(
        self,
        client: Any,
        lost: Flag,
        *,
        namespace: str,
        operation_key: str,
        lease: pb.Lease,
        reconciling: bool,
        remote_ref: str,
        operation: pb.Operation,
        lease_ttl: float,
        local_expiry: float,
    ) -> None:
        self._client = client
        self._lost = lost
        self._on_lost: list[Callable[[], object]] = []  # called once, when the lease is lost
        self.namespace = namespace
        self.operation_key = operation_key
        self.owner = lease.owner
        self.fencing_token = lease.fencing_token
        self.attempt = lease.attempt
        self.takeover = lease.takeover
        self.reconciling = reconciling
        self.remote_ref = remote_ref
        self.operation = operation
        self.lease_ttl = lease_ttl
        self.expires_at: datetime.datetime = lease.expires_at.ToDatetime(tzinfo=datetime.timezone.utc)
        self._local_expiry = local_expiry  # time.monotonic() by which the lease surely ends
        self.lost_reason: BaseException | None = None

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def check(self) -> None:
        """Raise :class:`LeaseLost` if the lease was lost."""
        if self.lost:
            raise self._lost_error() from self.lost_reason

    def _mark_lost(self, reason: BaseException) -> None:
        if not self._lost.is_set():
            self.lost_reason = reason
            self._lost.set()
            for callback in self._on_lost:
                callback()

    def _lose(self, reason: BaseException) -> LeaseLost:
        """Marks the lease lost (if it was not already); the error to raise."""
        self._mark_lost(reason)
        return self._lost_error()

    def _lost_error(self) -> LeaseLost:
        return LeaseLost(
            f"lease {self.fencing_token} on {self.namespace}/{self.operation_key} was lost: {self.lost_reason}",
            fencing_token=self.fencing_token,
        )

    def _fence(self, value: bytes) -> dict[str, Any]:
        """FencedWrite's keyword arguments for this lease."""
        return {"operation_key": self.operation_key, "fencing_token": self.fencing_token, "value": value}

    def _renewed(self, lease: pb.Lease, local_expiry: float) -> None:
        self.expires_at = lease.expires_at.ToDatetime(tzinfo=datetime.timezone.utc)
        self._local_expiry = local_expiry

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.namespace!r}, {self.operation_key!r}, owner={self.owner!r}, "
            f"fencing_token={self.fencing_token}, attempt={self.attempt}, lost={self.lost})"
        )


def default_owner() -> str:
    """A fresh owner naming this process and one run."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:12]}"


class Deadline:
    def __init__(self, seconds_from_now: float) -> None:
        self.at = time.monotonic() + seconds_from_now

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def at_least(self, seconds_from_now: float) -> Deadline:
        """This deadline, or ``seconds_from_now`` if that is later."""
        later = Deadline(seconds_from_now)
        later.at = max(self.at, later.at)
        return later


class Backoff:
    """Exponential backoff with full jitter."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self.attempt = 0

    def next(self) -> float:
        delay = random.uniform(0, min(self.maximum, self.initial * (2**self.attempt)))
        self.attempt += 1
        return delay

    def reset(self) -> None:
        self.attempt = 0


def transport_wait(error: BaseException, backoff: float) -> float:
    """How long to wait before retrying after the transient ``error``: the
    ``backoff`` (already jittered), but at least the ``RetryInfo`` delay the
    server sent, stretched by up to a tenth so that callers told the same delay
    do not come back together."""
    delay = error.retry_delay if isinstance(error, OpregError) else None
    if delay is None:
        return backoff
    return max(backoff, delay + random.uniform(0, delay / 10))


def claim_wait(response: pb.ClaimResponse, poll_interval: float) -> float:
    """How long to wait before claiming again after IN_PROGRESS / RETRY_LATER.

    RETRY_LATER: the retry is due after ``retry_after``. IN_PROGRESS: the holder
    may finish before its lease ends, so poll at least every ``poll_interval``.
    A little jitter spreads callers that were told the same time.
    """
    after = from_duration(response.retry_after) if response.HasField("retry_after") else poll_interval
    if response.outcome == pb.CLAIM_OUTCOME_IN_PROGRESS:
        after = min(after, poll_interval)
    after = max(after, 0.0)
    return after + random.uniform(0.005, 0.005 + min(0.2 * after, 1.0))


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


@dataclass
class RunSpec:
    namespace: str
    operation_key: str
    parameters: Any
    parameters_digest: bytes | None
    owner: str
    execution_id: str
    lease_ttl: float
    retry_policy: pb.RetryPolicy | None
    compensates: str
    renew_interval: float
    rpc_timeout: float
    poll_interval: float
    retry_transient: bool
    backoff_initial: float
    backoff_max: float


def run_spec(
    namespace: str,
    operation_key: str,
    parameters: Any,
    *,
    owner: str | None,
    execution_id: str,
    lease_ttl: Seconds,
    retry_policy: pb.RetryPolicy | None,
    compensates: str,
    renew_interval: Seconds | None,
    rpc_timeout: Seconds,
    poll_interval: Seconds,
    retry_transient: bool,
    transport_backoff: tuple[float, float],
) -> RunSpec:
    ttl = seconds(lease_ttl)
    if isinstance(parameters, (bytes, bytearray, memoryview)):
        parameters, digest = None, bytes(parameters)
    else:
        digest = None
    return RunSpec(
        namespace=namespace,
        operation_key=operation_key,
        parameters=parameters,
        parameters_digest=digest,
        owner=owner or default_owner(),
        execution_id=execution_id,
        lease_ttl=ttl,
        retry_policy=retry_policy,
        compensates=compensates,
        renew_interval=seconds(renew_interval) if renew_interval is not None else ttl / 3,
        rpc_timeout=seconds(rpc_timeout),
        poll_interval=seconds(poll_interval),
        retry_transient=retry_transient,
        backoff_initial=transport_backoff[0],
        backoff_max=transport_backoff[1],
    )


T = TypeVar("T")


class Retry(Generic[T]):
    """One RPC retried on the transient errors (:class:`Unavailable`: UNAVAILABLE,
    DEADLINE_EXCEEDED, OPERATION_BUSY, a server's "Timeout expired") with
    exponential backoff and full jitter, never sooner than the server's
    RetryInfo asks, until ``deadline``. The clients loop: make
    ``call(timeout())`` and, after an :class:`Unavailable`, sleep ``failed(error)``."""

    def __init__(
        self,
        call: Callable[[float], T],
        deadline: Deadline,
        spec: RunSpec,
        what: str,
        cause: BaseException | None = None,
    ) -> None:
        self.call = call
        self._deadline = deadline
        self._spec = spec
        self._what = what
        self._last = cause
        self._backoff = Backoff(spec.backoff_initial, spec.backoff_max)

    def timeout(self) -> float:
        """The next attempt's timeout; raises DeadlineExceeded when no time is left."""
        remaining = self._deadline.remaining()
        if remaining <= 0:
            raise DeadlineExceeded(
                f"{self._spec.namespace}/{self._spec.operation_key}: deadline exceeded before {self._what} succeeded"
            ) from self._last
        return min(self._spec.rpc_timeout, remaining)

    def failed(self, error: Unavailable) -> float:
        """How long to sleep before the next attempt: the backoff, at least the
        server's RetryInfo delay, and never past the deadline (after which
        :meth:`timeout` raises DeadlineExceeded)."""
        self._last = error
        return min(transport_wait(error, self._backoff.next()), max(self._deadline.remaining(), 0))


class RunOnce:
    """The decisions of one ``run_once`` call. The client loops: make the Claim
    that :meth:`claim` describes, then do what :meth:`after_claim` says."""

    def __init__(self, spec: RunSpec, deadline: Seconds, *, can_reconcile: bool) -> None:
        self.spec = spec
        self.overall = Deadline(seconds(deadline))
        self.can_reconcile = can_reconcile
        self.last_error: BaseException | None = None  # what the last execution raised, if it asked to claim again
        self._claimed_at = 0.0

    def claim(self, claim: Callable[..., T]) -> Retry[T]:
        """The Claim to make with ``claim`` (the client's method), retried within the deadline."""
        spec = self.spec
        self._claimed_at = time.monotonic()
        return Retry(
            lambda timeout: claim(
                spec.namespace,
                spec.operation_key,
                owner=spec.owner,
                parameters=spec.parameters,
                parameters_digest=spec.parameters_digest,
                execution_id=spec.execution_id,
                lease_ttl=spec.lease_ttl,
                retry_policy=spec.retry_policy,
                compensates=spec.compensates,
                timeout=timeout,
            ),
            self.overall,
            spec,
            "Claim",
            self.last_error,
        )

    def after_claim(self, response: pb.ClaimResponse) -> Result | float | Attempt:
        """What to do with Claim's answer: return a :class:`Result` (REPLAYED),
        sleep that many seconds and claim again (IN_PROGRESS / RETRY_LATER), or
        run an :class:`Attempt` under the lease (ACQUIRED / RECONCILE). Raises
        the recorded failure, OperationDead, OperationHeld, DeadlineExceeded or
        ReconcileRequired."""
        spec, outcome = self.spec, response.outcome
        if outcome == pb.CLAIM_OUTCOME_REPLAYED:
            return replayed_result(response.operation)
        if outcome == pb.CLAIM_OUTCOME_DEAD:
            raise dead(response.operation) from self.last_error
        if outcome == pb.CLAIM_OUTCOME_HELD:
            # Not waited out like IN_PROGRESS: an operator froze the operation,
            # and the caller must learn that rather than time out on it.
            raise held(response) from self.last_error
        if outcome in (pb.CLAIM_OUTCOME_IN_PROGRESS, pb.CLAIM_OUTCOME_RETRY_LATER):
            wait = claim_wait(response, spec.poll_interval)
            if wait >= self.overall.remaining():
                raise DeadlineExceeded(
                    f"{spec.namespace}/{spec.operation_key}: deadline exceeded waiting after "
                    f"{pb.ClaimOutcome.Name(outcome)} (next claim in {wait:.3f}s)",
                    last_outcome=outcome,
                    operation=response.operation,
                ) from self.last_error
            return wait
        if outcome in (pb.CLAIM_OUTCOME_ACQUIRED, pb.CLAIM_OUTCOME_RECONCILE):
            return Attempt(self, response, self._claimed_at)
        raise OpregError(f"unexpected claim outcome {outcome}")


class Attempt:
    """One execution under the lease Claim (or ClaimDue) handed out (ACQUIRED
    or RECONCILE).

    The client builds its lease from ``lease_fields`` and renews it; if
    ``reconciling`` it calls ``reconcile(lease, remote_ref)`` and reports the
    value to :meth:`reconciled` or the exception to :meth:`reconcile_failed`;
    then, while ``report`` is None, it calls ``work(lease)`` and reports to
    :meth:`worked` or :meth:`work_failed`. It makes the Complete that
    :meth:`complete` describes and returns what :meth:`done` returns.
    """

    def __init__(self, run: RunOnce, response: pb.ClaimResponse | pb.DueOperation, claimed_at: float) -> None:
        spec, operation = run.spec, response.operation
        self.run = run
        self.spec = spec
        self.reconciling = response.outcome == pb.CLAIM_OUTCOME_RECONCILE
        self.remote_ref = operation.remote_ref
        self.lease_fields: dict[str, Any] = dict(
            namespace=spec.namespace,
            operation_key=spec.operation_key,
            lease=response.lease,
            reconciling=self.reconciling,
            remote_ref=operation.remote_ref,
            operation=operation,
            lease_ttl=spec.lease_ttl,
            local_expiry=claimed_at + spec.lease_ttl,
        )
        self.report: Outcome | None = None
        self.error: BaseException | None = None  # what work or reconcile raised
        # Raised once the report is recorded, whatever it was: ReconcileRequired,
        # or what the reconcile callback raised.
        self.raise_after: BaseException | None = None
        self.recorded: pb.Operation | None = None  # the operation once Complete recorded the report
        if self.reconciling and not run.can_reconcile:
            # Hand the reconcile lease back at once (Complete(unknown), same
            # remote_ref) rather than sit on it until it lapses; then raise.
            self.error = self.raise_after = ReconcileRequired(
                f"{spec.namespace}/{spec.operation_key}: the last outcome is unknown "
                f"(remote_ref={operation.remote_ref!r}) and no reconcile callback was given",
                remote_ref=operation.remote_ref,
                operation=operation,
            )
            self.report = pb.UnknownOutcome(
                remote_ref=operation.remote_ref, message="reconcile required: no reconcile callback"
            )

    @property
    def must_reconcile(self) -> bool:
        """True when the client must call ``reconcile`` before anything else."""
        return self.reconciling and self.report is None

    def reconciled(self, reconciliation: Any) -> None:
        self.report = reconcile_report(reconciliation)

    def reconcile_failed(self, lease: LeaseBase, error: Exception) -> None:
        """A failed reconcile leaves the outcome unknown (then it is re-raised)."""
        self._failed(lease, error, reconcile_error_report(error, self.remote_ref))
        self.raise_after = error

    def worked(self, value: Any) -> None:
        self.report = success_report(value)

    def work_failed(self, lease: LeaseBase, error: Exception) -> None:
        self._failed(lease, error, error_report(error))

    def _failed(self, lease: LeaseBase, error: Exception, report: Outcome) -> None:
        if is_lease_loss(error):
            raise lease._lose(error) from error
        self.error = error
        self.report = report

    def complete(self, complete: Callable[..., T], lease: LeaseBase) -> Retry[T]:
        """The Complete to make with ``complete`` (the client's method); raises
        LeaseLost if the lease was lost meanwhile (nothing is reported under a
        lease that is not ours). The answer to a Complete may be lost; the same
        report with the same token is idempotent, so it is retried (while the
        lease is still renewed) for the rest of the overall deadline and at
        least COMPLETE_RPC_TIMEOUTS call timeouts, even past the deadline:
        finished work must be reported."""
        if lease.lost:
            raise lease._lost_error() from (self.error or lease.lost_reason)
        spec, report = self.spec, self.report
        return Retry(
            lambda timeout: complete(
                spec.namespace,
                spec.operation_key,
                fencing_token=lease.fencing_token,
                outcome=report,
                timeout=timeout,
            ),
            self.run.overall.at_least(COMPLETE_RPC_TIMEOUTS * spec.rpc_timeout),
            spec,
            "Complete",
            self.error,
        )

    def complete_failed(self, lease: LeaseBase, error: OpregError) -> None:
        """Complete (retried for its own time) failed with ``error``. Raises
        LeaseLost for STALE_FENCING_TOKEN and LEASE_NOT_HELD (another execution
        holds the operation, or no lease is ours), re-raises a definitive
        refusal (ALREADY_COMPLETED, INVALID_ARGUMENT, OPERATION_NOT_FOUND,
        PARAMETER_CONFLICT, the compensation reasons); returns when the report
        is in doubt (anything else, or Complete's time ran out): then
        :meth:`lookup` decides."""
        if isinstance(error, COMPLETE_LEASE_LOST):
            raise lease._lose(error) from error
        if isinstance(error, COMPLETE_DEFINITIVE):
            raise error

    def in_doubt(self, error: BaseException) -> bool:
        """True when Complete's ``error`` leaves open whether the report was
        recorded (then :meth:`lookup` decides); false for a definitive refusal."""
        return not isinstance(error, (*COMPLETE_LEASE_LOST, *COMPLETE_DEFINITIVE))

    def lookup(self, lookup: Callable[..., T], cause: BaseException) -> Retry[T]:
        """The Lookup (with executions) to make when Complete's result is in doubt."""
        spec = self.spec
        return Retry(
            lambda timeout: lookup(spec.namespace, spec.operation_key, include_executions=True, timeout=timeout),
            Deadline(COMPLETE_RPC_TIMEOUTS * spec.rpc_timeout),
            spec,
            "Lookup after Complete",
            cause,
        )

    def looked_up(
        self, lease: LeaseBase, response: pb.LookupResponse | None, cause: BaseException
    ) -> pb.CompleteResponse:
        """Decides from the execution record of our token whether the report
        was recorded: only exactly the outcome we reported counts (success →
        SUCCEEDED, failure → FAILED, retryable → RETRYABLE, unknown → UNKNOWN),
        then Complete's answer (to hand to :meth:`done`); SUPERSEDED (taken
        over) or REVOKED (by an operator) raises LeaseLost; anything else (RUNNING, another outcome, no such execution,
        the Lookup failed) raises :class:`OutcomeNotRecorded`."""
        spec, report = self.spec, self.report
        executions = response.executions if response is not None else []
        mine = [e for e in executions if e.fencing_token == lease.fencing_token]
        if mine and mine[-1].outcome in (pb.EXECUTION_OUTCOME_SUPERSEDED, pb.EXECUTION_OUTCOME_REVOKED):
            raise lease._lose(cause) from cause
        if mine and mine[-1].outcome == RECORDED_AS.get(type(report)):
            assert response is not None
            return pb.CompleteResponse(operation=response.operation)
        if mine:
            seen = pb.ExecutionOutcome.Name(mine[-1].outcome)
        else:
            seen = "no execution" if response is not None else "Lookup failed"
        raise OutcomeNotRecorded(
            f"{spec.namespace}/{spec.operation_key}: the outcome of execution {lease.fencing_token} "
            f"({type(report).__name__}) was not recorded: Complete failed ({cause}) and Lookup shows {seen}",
            fencing_token=lease.fencing_token,
            report=report,
        ) from cause

    def done(self, completed: pb.CompleteResponse) -> Any:
        """What ``run_once`` does once Complete recorded the report: return a
        Result, return AGAIN (claim again), or raise."""
        self.recorded = completed.operation
        if self.raise_after is not None:
            raise self.raise_after
        assert self.report is not None
        self.run.last_error = self.error
        return after_complete(
            completed.operation,
            self.report,
            self.error,
            retry_transient=self.spec.retry_transient,
            can_reconcile=self.run.can_reconcile,
            fencing_token=self.lease_fields["lease"].fencing_token,
        )


def due_attempt(spec: RunSpec, due: pb.DueOperation, claimed_at: float) -> Attempt:
    """The :class:`Attempt` for an operation ClaimDue handed out, run by the
    worker under the run-once rules. It is never claimed again (the worker's
    next ClaimDue does that), so it has no overall deadline of its own: Complete
    gets its COMPLETE_RPC_TIMEOUTS, a recorded TransientError is raised from
    :meth:`Attempt.done` and a SentButUnconfirmed raises OutcomeUnknown; the
    worker logs them."""
    spec = replace(spec, operation_key=due.operation.operation_key, retry_transient=False)
    return Attempt(RunOnce(spec, 0, can_reconcile=True), due, claimed_at)


# Complete (and the Lookup that settles a doubtful Complete) gets this many RPC
# timeouts of its own, past the overall deadline if need be.
COMPLETE_RPC_TIMEOUTS = 3

# Complete's refusals that say the lease is not ours (raised as LeaseLost).
COMPLETE_LEASE_LOST: tuple[type[OpregError], ...] = (StaleFencingToken, LeaseNotHeld)

# Complete's refusals that settle the matter (raised as they are); any other
# error, or Complete's time running out, leaves the report in doubt.
COMPLETE_DEFINITIVE: tuple[type[OpregError], ...] = (
    AlreadyCompleted,
    InvalidArgument,
    NotFound,
    ParameterConflict,
    CompensationError,
    LeaseLost,  # raised before Complete was sent
)

# The execution outcome each report is recorded as.
RECORDED_AS = {
    pb.Success: pb.EXECUTION_OUTCOME_SUCCEEDED,
    pb.Failure: pb.EXECUTION_OUTCOME_FAILED,
    pb.RetryableError: pb.EXECUTION_OUTCOME_RETRYABLE,
    pb.UnknownOutcome: pb.EXECUTION_OUTCOME_UNKNOWN,
}


def expiry_margin(lease_ttl: float) -> float:
    """How long before its local expiry a lease that could not be renewed is
    given up (a tenth of its TTL): the local clock and the server's may differ,
    and work needs time to notice."""
    return lease_ttl / 10


class Renewal:
    """The renewals of one lease. The client loops until stopped or
    :attr:`pointless`: sleep ``wait``, make the Renew that :meth:`renew` makes,
    and report the answer to :meth:`renewed` or the error to :meth:`failed`
    (true: stop)."""

    def __init__(self, lease: LeaseBase, spec: RunSpec) -> None:
        self._lease = lease
        self._spec = spec
        self._backoff = Backoff(spec.backoff_initial, spec.backoff_max)
        self._sent = 0.0
        self._margin = expiry_margin(spec.lease_ttl)
        self.wait = spec.renew_interval

    @property
    def pointless(self) -> bool:
        """True once the lease is lost (e.g. a stopping worker cancelled the
        work): nothing will be completed under it, and renewing it would only
        keep the operation from the execution that takes over."""
        return self._lease.lost

    def renew(self, renew: Callable[..., T]) -> T:
        """Calls ``renew`` (the client's method) for the lease, bounded by its expiry."""
        lease, spec = self._lease, self._spec
        self._sent = time.monotonic()
        return renew(
            lease.namespace,
            lease.operation_key,
            owner=lease.owner,
            fencing_token=lease.fencing_token,
            lease_ttl=spec.lease_ttl,
            timeout=max(0.05, min(spec.rpc_timeout, lease._local_expiry - self._margin - self._sent)),
        )

    def renewed(self, response: pb.RenewResponse) -> None:
        self._lease._renewed(response.lease, self._sent + self._spec.lease_ttl)
        self._backoff.reset()
        self.wait = self._spec.renew_interval

    def failed(self, error: Exception) -> bool:
        """True when the lease is lost: the renewal was refused (any error that
        is not transient: STALE_FENCING_TOKEN, LEASE_NOT_HELD, OPERATION_NOT_FOUND,
        PERMISSION_DENIED, anything; a lease that cannot be confirmed must not be
        written under), or it could not be renewed before it expired. Otherwise
        retry after ``wait``."""
        lease = self._lease
        if not is_transient(error):
            lease._mark_lost(error)
            return True
        left = lease._local_expiry - self._margin - time.monotonic()
        if left <= 0:
            lease._mark_lost(error)
            return True
        self.wait = min(transport_wait(error, self._backoff.next()), left)
        return False
