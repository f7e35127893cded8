"""The run-once helper, shared by the sync and asyncio clients: the lease handed
to work and reconcile, and the state of one run (:class:`RunOnce`,
:class:`Attempt`, :class:`Renewal`, :class:`Retry`), which asks the
protocol's decisions (``_decide``) what to do next, with the time left and the
jitter it draws.

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
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar

from ._convert import Seconds, from_duration, seconds
from ._decide import (
    Execute,
    after_complete,
    decide_call_in_doubt,
    decide_claim_answer,
    decide_complete_error,
    decide_renew_failure,
    error_report,
    expiry_margin,
    is_lease_loss,
    own_execution,
    reconcile_error_report,
    reconcile_report,
    retry_delay,
    retry_info_of,
    server_wait,
    success_report,
)
from ._gen.v1 import registry_pb2 as pb
from ._outcomes import Outcome, Result
from .errors import (
    DeadlineExceeded,
    LeaseLost,
    OpregError,
    OutcomeNotRecorded,
    ReconcileRequired,
    Unavailable,
)


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
    """The transport retries of one call (or of the worker's ClaimDue loop):
    counts the transient failures since the last success, and draws the jitter
    of each wait (:func:`_decide.retry_delay`)."""

    def __init__(self, settings: tuple[float, float]) -> None:
        self._settings = settings  # (initial, max) seconds
        self._attempt = 0

    def next(self, error: BaseException) -> float:
        """The wait before the next try after the transient ``error``."""
        wait = retry_delay(self._attempt, retry_info_of(error), random.random(), backoff=self._settings)
        self._attempt += 1
        return wait

    def reset(self) -> None:
        self._attempt = 0


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
    transport_backoff: tuple[float, float]  # (initial, max) seconds


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
        transport_backoff=transport_backoff,
    )


T = TypeVar("T")


class Retry(Generic[T]):
    """One RPC retried on the transient errors (:class:`Unavailable`: UNAVAILABLE,
    DEADLINE_EXCEEDED, OPERATION_BUSY, a server's "Timeout expired") with
    exponential backoff and full jitter, never sooner than the server's
    RetryInfo asks, until ``deadline``. The clients loop: make
    ``call(timeout())`` and, after an :class:`Unavailable`, sleep ``failed(error)``.

    Each attempt's timeout is the call timeout, cut at the deadline unless
    ``bounded`` is false: a Claim's server wait is cut there instead, and the
    answer given when that wait ends needs the whole call timeout after it."""

    def __init__(
        self,
        call: Callable[[float], T],
        deadline: Deadline,
        spec: RunSpec,
        what: str,
        cause: BaseException | None = None,
        *,
        bounded: bool = True,
    ) -> None:
        self.call = call
        self._deadline = deadline
        self._spec = spec
        self._what = what
        self._last = cause
        self._bounded = bounded
        self._backoff = Backoff(spec.transport_backoff)

    def timeout(self) -> float:
        """The next attempt's timeout; raises DeadlineExceeded when no time is left."""
        remaining = self._deadline.remaining()
        if remaining <= 0:
            raise DeadlineExceeded(
                f"{self._spec.namespace}/{self._spec.operation_key}: deadline exceeded before {self._what} succeeded"
            ) from self._last
        return min(self._spec.rpc_timeout, remaining) if self._bounded else self._spec.rpc_timeout

    def failed(self, error: Unavailable) -> float:
        """How long to sleep before the next attempt: the backoff, at least the
        server's RetryInfo delay, and never past the deadline (after which
        :meth:`timeout` raises DeadlineExceeded)."""
        self._last = error
        return min(self._backoff.next(error), max(self._deadline.remaining(), 0))


class RunOnce:
    """The decisions of one ``run_once`` call. The client loops: make the Claim
    that :meth:`claim` describes, then do what :meth:`after_claim` says."""

    def __init__(self, spec: RunSpec, deadline: Seconds, *, can_reconcile: bool) -> None:
        self.spec = spec
        self.overall = Deadline(seconds(deadline))
        self.can_reconcile = can_reconcile
        self.last_error: BaseException | None = None  # what the last execution raised, if it asked to claim again
        self._claimed_at = 0.0  # no later than the send of the current Claim's first attempt
        self._claim_attempts = 0  # the attempts of the current Claim so far

    def claim(self, claim: Callable[..., T]) -> Retry[T]:
        """The Claim to make with ``claim`` (the client's method), retried within
        the deadline. Every attempt asks the server to wait
        (:func:`_decide.server_wait`) and gets the call timeout on top of
        that wait."""
        spec = self.spec
        self._claimed_at = time.monotonic()
        self._claim_attempts = 0

        def attempt(timeout: float) -> T:
            self._claim_attempts += 1
            wait = server_wait(self.overall.remaining())
            return claim(
                spec.namespace,
                spec.operation_key,
                owner=spec.owner,
                parameters=spec.parameters,
                parameters_digest=spec.parameters_digest,
                execution_id=spec.execution_id,
                lease_ttl=spec.lease_ttl,
                retry_policy=spec.retry_policy,
                compensates=spec.compensates,
                wait=wait,
                timeout=timeout + wait,
            )

        return Retry(attempt, self.overall, spec, "Claim", self.last_error, bounded=False)

    def after_claim(self, response: pb.ClaimResponse) -> Result | float | Attempt:
        """What to do with Claim's answer (:func:`_decide.decide_claim_answer`):
        return a :class:`Result` (REPLAYED), sleep that many seconds (none
        after a server's wait) and claim again (IN_PROGRESS / RETRY_LATER), or
        run an :class:`Attempt` under the lease (ACQUIRED / RECONCILE). Raises
        the recorded failure, OperationDead, OperationHeld or
        DeadlineExceeded, caused by what the last execution raised if it asked
        to claim again."""
        try:
            step = decide_claim_answer(
                response, self.overall.remaining(), random.random(), poll_interval=self.spec.poll_interval
            )
        except OpregError as error:
            raise error from self.last_error
        if isinstance(step, Execute):
            return Attempt(self, response, self._lease_anchor(response), reconciling=step.reconcile)
        return step

    def _lease_anchor(self, response: pb.ClaimResponse) -> float:
        """The moment the lease Claim handed out began at the earliest, which
        its local expiry is measured from: the send of the Claim's first
        attempt, plus the server's wait when the answer came to that attempt
        (the server decided only after it). An answer to a retry adds nothing:
        an earlier, lost attempt may have been granted the lease after a
        shorter wait."""
        if self._claim_attempts == 1 and response.HasField("waited"):
            return self._claimed_at + from_duration(response.waited)
        return self._claimed_at


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

    def __init__(
        self, run: RunOnce, response: pb.ClaimResponse | pb.DueOperation, claimed_at: float, *, reconciling: bool
    ) -> None:
        spec, operation = run.spec, response.operation
        self.run = run
        self.spec = spec
        self.reconciling = reconciling
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
        lease that is not ours), before any Complete is sent. The answer to a Complete may be lost; the same
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
        """Complete (retried for its own time) failed with ``error``
        (:func:`_decide.decide_complete_error`): raises LeaseLost when the
        lease is not ours, re-raises a definitive refusal, and returns when
        the report is in doubt: then :meth:`lookup` decides."""
        decision = decide_complete_error(error)
        if decision == "lease_lost":
            raise lease._lose(error) from error
        if decision == "raise":
            raise error

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
        """Whether the report was recorded, from the Lookup (``None``: it failed;
        :func:`_decide.decide_call_in_doubt`): if so Complete's answer (to hand
        to :meth:`done`); LeaseLost when our execution was taken over or
        revoked; else :class:`OutcomeNotRecorded`."""
        spec, report = self.spec, self.report
        assert report is not None
        decision = decide_call_in_doubt(report, lease.fencing_token, response)
        if decision == "lease_lost":
            raise lease._lose(cause) from cause
        if decision == "recorded":
            assert response is not None
            return pb.CompleteResponse(operation=response.operation)
        mine = own_execution(response, lease.fencing_token) if response is not None else None
        if mine is not None:
            seen = pb.ExecutionOutcome.Name(mine.outcome)
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
    reconciling = due.outcome == pb.CLAIM_OUTCOME_RECONCILE
    return Attempt(RunOnce(spec, 0, can_reconcile=True), due, claimed_at, reconciling=reconciling)


# Complete (and the Lookup that settles a doubtful Complete) gets this many RPC
# timeouts of its own, past the overall deadline if need be.
COMPLETE_RPC_TIMEOUTS = 3


class Renewal:
    """The renewals of one lease. The client loops until stopped or
    :attr:`pointless`: sleep ``wait``, make the Renew that :meth:`renew` makes,
    and report the answer to :meth:`renewed` or the error to :meth:`failed`
    (true: stop)."""

    def __init__(self, lease: LeaseBase, spec: RunSpec) -> None:
        self._lease = lease
        self._spec = spec
        self._failures = 0  # Renews failed in a row, for the backoff
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
        self._failures = 0
        self.wait = self._spec.renew_interval

    def failed(self, error: Exception) -> bool:
        """True when the lease is lost (:func:`_decide.decide_renew_failure`):
        the renewal was refused, or it could not be renewed before its local
        expiry. Otherwise retry after ``wait``."""
        lease = self._lease
        trusted_left = lease._local_expiry - self._margin - time.monotonic()
        wait = decide_renew_failure(
            error, self._failures, trusted_left, random.random(), backoff=self._spec.transport_backoff
        )
        if wait is None:
            lease._mark_lost(error)
            return True
        self._failures += 1
        self.wait = wait
        return False
