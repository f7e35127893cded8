"""The worker helper, shared by the sync and asyncio clients.

A worker pulls due work from one namespace with ClaimDue (due retries, expired
leases, unknown outcomes) and runs each operation it is handed under that
operation's lease by the run-once rules: a :class:`_run.Attempt`, executed by
the client's ``_execute`` exactly as ``run_once`` executes one (renewals, loss,
fenced writes, Complete, Lookup on doubt).

:class:`WorkerBase` holds what does not depend on how the worker waits and runs
things: the handlers by kind, the ClaimDue to make, the waits, the plan for each
operation handed out, the cancellation at the end of the grace period and the
log line for each outcome. :class:`opreg.Worker` (threads) and
:class:`opreg.AsyncWorker` (tasks) do the I/O."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ._convert import Seconds, seconds
from ._gen.v1 import registry_pb2 as pb
from ._outcomes import BusinessFailure, SentButUnconfirmed, TransientError
from ._run import Attempt, Backoff, LeaseBase, due_attempt, run_spec
from .errors import LeaseLost, OperationDead, OutcomeUnknown, Unavailable

__all__ = ["NO_HANDLER", "NoHandler", "WorkerStopped", "kind_of"]

log = logging.getLogger("opreg.worker")

LeaseT = TypeVar("LeaseT", bound=LeaseBase)
T = TypeVar("T")

# handler(operation, lease): returns or raises what run_once's work does.
Handler = Callable[[pb.Operation, Any], Any]
# reconcile(operation, lease): a Reconciliation, as run_once's reconcile returns.
Reconciler = Callable[[pb.Operation, Any], Any]

# The error_class recorded for an operation whose kind has no handler.
NO_HANDLER = "NO_HANDLER"

# ClaimDue hands out at most this many operations per call.
MAX_CLAIM_DUE_LIMIT = 1000

# How long executions cancelled at the end of the grace period get to unwind
# before ``run`` returns anyway. Sync work that ignores its lease cannot be
# stopped; its lease is no longer renewed, so the operation is taken over.
UNWIND_TIMEOUT = 5.0

# What the work (or reconcile) raised when its report was recorded as such.
_RECORDED_ERRORS = (BusinessFailure, OperationDead, TransientError, SentButUnconfirmed, OutcomeUnknown)

_REPORT_NAMES = {
    pb.Success: "success",
    pb.Failure: "business failure",
    pb.RetryableError: "retryable error",
    pb.UnknownOutcome: "unknown outcome",
}


def kind_of(operation_key: str) -> str:
    """The kind a worker picks the handler by: the operation key up to its
    first ``:`` (the whole key when it has none)."""
    return operation_key.split(":", 1)[0]


class NoHandler(TransientError):
    """The work of an operation whose kind has no handler (and the worker has
    no default): recorded retryable with error_class ``NO_HANDLER``, so the
    operation comes back, e.g. to a worker that has the handler."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"no handler for kind {kind!r}", error_class=NO_HANDLER)
        self.kind = kind


class WorkerStopped(Exception):
    """The ``lost_reason`` of a lease whose work the worker cancelled when its
    grace period ran out: nothing is completed under it."""


@dataclass(frozen=True)
class Execution:
    """One operation ClaimDue handed out, planned: the attempt (run-once
    rules), and the work and reconcile callbacks in run_once's form."""

    attempt: Attempt
    kind: str
    work: Callable[[Any], Any]
    reconcile: Callable[[Any, str], Any] | None

    @property
    def where(self) -> str:
        return f"{self.attempt.spec.namespace}/{self.attempt.spec.operation_key}"


class WorkerBase(Generic[LeaseT]):
    """Pulls due operations from ``namespace`` and runs them, at most
    ``max_in_flight`` at a time, by the run-once rules.

    ``handlers`` maps a kind (:func:`kind_of` the key) to ``handler(operation,
    lease)``; ``default`` handles every other kind. The handler's value or
    exception is recorded as run_once records its work's: bytes (or ``(bytes,
    result_ref)``, or None) → success; :class:`BusinessError` → failure;
    :class:`TransientError` or any other exception → retryable;
    :class:`SentButUnconfirmed` → unknown. An operation whose kind has no
    handler is recorded retryable with error_class ``NO_HANDLER``.

    RECONCILE operations (the last outcome is unknown) go to ``reconcile(operation,
    lease)``, which returns a :class:`Reconciliation`; ``not_applied()`` runs the
    handler under the same lease. Without ``reconcile`` they are left alone:
    their reconcile lease expires and ClaimDue hands them out again later.

    When ClaimDue hands out nothing, the worker waits ``poll_interval`` (with
    jitter); the transient errors (:class:`Unavailable`: UNAVAILABLE,
    DEADLINE_EXCEEDED, OPERATION_BUSY) back off with jitter
    (``transport_backoff=(initial, max)``), never sooner than the server's
    RetryInfo asks; any other error ends ``run``.
    ``stop`` ends the pulling; in-flight operations get ``grace`` seconds to
    finish, then their work is cancelled (their leases marked lost, so nothing
    is completed for them), and ``run`` returns.
    """

    _wake: Any  # what run waits on and stop / a finished execution wake it with

    def __init__(
        self,
        client: Any,
        namespace: str,
        *,
        handlers: Mapping[str, Handler] | None = None,
        default: Handler | None = None,
        reconcile: Reconciler | None = None,
        owner: str | None = None,
        execution_id: str = "",
        max_in_flight: int = 8,
        lease_ttl: Seconds = 30.0,
        poll_interval: Seconds = 1.0,
        grace: Seconds = 30.0,
        renew_interval: Seconds | None = None,
        rpc_timeout: Seconds = 10.0,
        transport_backoff: tuple[float, float] = (0.1, 5.0),
    ) -> None:
        if not handlers and default is None:
            raise ValueError("give handlers by kind, a default handler, or both")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, not {max_in_flight}")
        self._client = client
        self._handlers: dict[str, Handler] = dict(handlers or {})
        self._default = default
        self._reconcile = reconcile
        # The run-once settings every operation runs with (its key filled in per operation).
        self._spec = run_spec(
            namespace,
            "",
            None,
            owner=owner,
            execution_id=execution_id,
            lease_ttl=lease_ttl,
            retry_policy=None,
            compensates="",
            renew_interval=renew_interval,
            rpc_timeout=rpc_timeout,
            poll_interval=poll_interval,
            retry_transient=False,
            transport_backoff=transport_backoff,
        )
        self.max_in_flight = max_in_flight
        self.grace = seconds(grace)
        self._backoff = Backoff(transport_backoff)
        self._in_flight: dict[LeaseT, Any] = {}  # lease → the thread or task running it
        self._stopping = False
        self._started = False
        self._wake = self._make_wake()

    @staticmethod
    def _make_wake() -> Any:
        raise NotImplementedError

    @property
    def namespace(self) -> str:
        return self._spec.namespace

    @property
    def owner(self) -> str:
        """The owner every lease of this worker is held by."""
        return self._spec.owner

    @property
    def in_flight(self) -> int:
        """How many operations are running now."""
        return len(self._in_flight)

    @property
    def stopping(self) -> bool:
        return self._stopping

    # -- what the loops of Worker and AsyncWorker ask --------------------------

    def _begin(self) -> None:
        if self._started:
            raise RuntimeError("a worker runs once; make a new one")
        self._started = True

    def _stop(self, grace: Seconds | None) -> None:
        self._stopping = True
        if grace is not None:
            self.grace = seconds(grace)

    def _free_slots(self) -> int:
        return min(self.max_in_flight - len(self._in_flight), MAX_CLAIM_DUE_LIMIT)

    def _claim_due(self, claim_due: Callable[..., T], free: int) -> T:
        """Calls ``claim_due`` (the client's method) for at most ``free`` operations."""
        spec = self._spec
        return claim_due(
            spec.namespace,
            owner=spec.owner,
            execution_id=spec.execution_id,
            lease_ttl=spec.lease_ttl,
            limit=free,
            timeout=spec.rpc_timeout,
        )

    def _claimed(self) -> None:
        self._backoff.reset()

    def _idle_wait(self) -> float:
        """How long to wait after ClaimDue handed out nothing: the poll interval,
        give or take a fifth, so that workers started together drift apart."""
        return self._spec.poll_interval * random.uniform(0.8, 1.2)

    def _transport_wait(self, error: Unavailable) -> float:
        """The backoff after a transient ClaimDue failure, at least the server's RetryInfo delay."""
        delay = self._backoff.next(error)
        log.warning("%s: ClaimDue failed (%s); again in %.3fs", self.namespace, error, delay)
        return delay

    def _plan(self, due: pb.DueOperation, claimed_at: float) -> Execution | None:
        """How to run what ClaimDue handed out; None to leave it alone."""
        key = due.operation.operation_key
        if due.outcome == pb.CLAIM_OUTCOME_RECONCILE and self._reconcile is None:
            log.warning(
                "%s/%s: the last outcome is unknown (remote_ref=%r) and this worker has no reconcile "
                "callback; left alone until its reconcile lease expires",
                self.namespace,
                key,
                due.operation.remote_ref,
            )
            return None
        if due.outcome not in (pb.CLAIM_OUTCOME_ACQUIRED, pb.CLAIM_OUTCOME_RECONCILE):
            log.error("%s/%s: ClaimDue answered %s; left alone", self.namespace, key, _outcome_name(due.outcome))
            return None
        kind = kind_of(key)
        return Execution(due_attempt(self._spec, due, claimed_at), kind, self._work(kind), self._reconciler())

    def _work(self, kind: str) -> Callable[[Any], Any]:
        """run_once's ``work(lease)`` for an operation of ``kind``."""
        handler = self._handlers.get(kind, self._default)
        if handler is None:

            def no_handler(lease: Any) -> Any:
                raise NoHandler(kind)

            return no_handler
        return lambda lease: handler(lease.operation, lease)

    def _reconciler(self) -> Callable[[Any, str], Any] | None:
        """run_once's ``reconcile(lease, remote_ref)``; the operation carries the remote_ref."""
        reconcile = self._reconcile
        if reconcile is None:
            return None
        return lambda lease, remote_ref: reconcile(lease.operation, lease)

    def _cancel_in_flight(self) -> list[Any]:
        """Cancels the work still running when the grace period ran out: each
        lease is marked lost, so its work is told (and asyncio work cancelled)
        and nothing is completed under it. Returns their threads or tasks."""
        cancelled = list(self._in_flight.items())
        if cancelled:
            log.warning(
                "%s: %d operation(s) still running after the %.1fs grace period; cancelling their work",
                self.namespace,
                len(cancelled),
                self.grace,
            )
        for lease, _ in cancelled:
            lease._mark_lost(WorkerStopped(f"the worker stopped and its {self.grace:.1f}s grace period ran out"))
        return [runner for _, runner in cancelled]

    def _unwound(self, remaining: int) -> None:
        if remaining:
            log.warning(
                "%s: %d cancelled operation(s) did not unwind within %.1fs; their leases are no longer renewed",
                self.namespace,
                remaining,
                UNWIND_TIMEOUT,
            )

    def _finished(self, execution: Execution, error: BaseException | None) -> None:
        """Logs what became of one execution (``error``: what ``_execute`` raised)."""
        attempt, where = execution.attempt, execution.where
        if attempt.recorded is not None:
            recorded = (
                f"recorded {_REPORT_NAMES.get(type(attempt.report), '?')} "
                f"(now {pb.OperationStatus.Name(attempt.recorded.status)})"
            )
            if isinstance(error, NoHandler):
                log.warning("%s: no handler for kind %r; %s", where, error.kind, recorded)
            elif isinstance(error, OperationDead):
                log.warning("%s: %s; the retry budget is exhausted, an operator decides", where, recorded)
            elif error is None or isinstance(error, _RECORDED_ERRORS):
                log.info("%s: %s", where, recorded)
            else:
                log.warning("%s: raised %s: %s; %s", where, type(error).__name__, error, recorded, exc_info=error)
        elif isinstance(error, (LeaseLost, asyncio.CancelledError)):
            log.warning("%s: %s; nothing recorded", where, str(error) or "cancelled")
        else:
            log.error("%s: the outcome was not recorded: %s", where, error, exc_info=error)


def _outcome_name(outcome: int) -> str:
    try:
        return pb.ClaimOutcome.Name(outcome)
    except ValueError:
        return str(outcome)
