"""The parts of the run-once helper shared by the sync and asyncio clients:
the values work and reconcile return or raise, the lease handed to them, and
the pure mapping between those and the registry's messages."""

from __future__ import annotations

import datetime
import os
import random
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ._convert import Seconds, from_duration, seconds, to_duration
from ._gen.v1 import registry_pb2 as pb
from .errors import LeaseLost, OperationDead, OpregError, StaleFencingToken

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


class LeaseBase:
    """The lease an execution holds; handed to ``work`` and ``reconcile``.

    ``lost`` turns true (and stays true) when a renewal finds that another
    execution took over, or the lease could not be renewed before it expired.
    Then stop: ``run_once`` will not Complete and raises :class:`LeaseLost`.
    """

    def __init__(
        self,
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
        raise NotImplementedError

    def check(self) -> None:
        """Raise :class:`LeaseLost` if the lease was lost."""
        if self.lost:
            raise self._lost_error() from self.lost_reason

    def _lost_error(self) -> LeaseLost:
        return LeaseLost(
            f"lease {self.fencing_token} on {self.namespace}/{self.operation_key} was lost: {self.lost_reason}",
            fencing_token=self.fencing_token,
        )

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
        later = Deadline(0)
        later.at = max(self.at, time.monotonic() + seconds_from_now)
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
) -> Any:
    """What ``run_once`` does once Complete recorded ``report``: return a Result,
    return AGAIN (claim again), or raise."""
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
    if status == pb.OPERATION_STATUS_DEAD:
        raise dead(operation) from error
    if error is None:
        raise OpregError(f"unexpected report {type(report).__name__}")
    if retry_transient and isinstance(error, TransientError):
        return AGAIN
    if retry_transient and can_reconcile and isinstance(error, SentButUnconfirmed):
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
