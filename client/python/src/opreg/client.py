"""The synchronous client: a thin typed wrapper per RPC, ``run_once``, and the
:class:`Worker`.

What the two clients share lives in ``_rpc`` (the wrappers' signatures and
requests), ``_run`` (the run-once protocol, with its decisions in ``_decide``)
and ``_worker`` (the worker's decisions); this module makes the calls, sleeps
with ``time.sleep``, renews leases in a thread and runs a worker's operations
on threads."""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

import grpc

from . import _rpc, _run, _worker
from ._convert import Parameters, Seconds
from ._gen.v1 import registry_pb2 as pb
from ._outcomes import AGAIN, Reconciliation, Result
from ._rpc import DEFAULT_CHANNEL_OPTIONS
from .errors import OpregError, StaleFencingToken, Unavailable, from_rpc_error

__all__ = ["Client", "Lease", "Worker", "DEFAULT_CHANNEL_OPTIONS"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class Lease(_run.LeaseBase):
    """The lease handed to sync ``work`` and ``reconcile``: poll ``lost``, call
    ``check()``, or sleep with ``wait(seconds)`` (returns early, true, when lost)."""

    _client: Client
    _lost: threading.Event

    def __init__(self, client: Client, **kwargs: Any) -> None:
        super().__init__(client, threading.Event(), **kwargs)

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep up to ``timeout`` seconds; true as soon as the lease is lost."""
        return self._lost.wait(timeout)

    def fenced_write(self, resource: str, value: bytes, *, timeout: float | None = None) -> pb.FencedWriteResponse:
        """FencedWrite with this lease's token. A refusal (another execution took
        over) marks the lease lost and raises :class:`LeaseLost`."""
        self.check()
        try:
            return self._client.fenced_write(self.namespace, resource, **self._fence(value), timeout=timeout)
        except StaleFencingToken as error:
            raise self._lose(error) from error


class _Renewer(threading.Thread):
    """Renews the lease every ``interval`` until stopped; marks it lost when a
    renewal is refused, or when it cannot be renewed before it expires."""

    def __init__(self, client: Client, lease: Lease, spec: _run.RunSpec) -> None:
        super().__init__(daemon=True, name=f"opreg-renew-{lease.fencing_token}")
        self._client = client
        self._renewal = _run.Renewal(lease, spec)
        self._stopped = threading.Event()
        self._context = contextvars.copy_context()  # the caller's (its trace context, say)

    def run(self) -> None:
        self._context.run(self._renew)

    def _renew(self) -> None:
        renewal = self._renewal
        while not self._stopped.wait(renewal.wait) and not renewal.pointless:
            try:
                response = renewal.renew(self._client.renew)
            except Exception as error:  # noqa: BLE001 - any error but a transient one loses the lease
                if renewal.failed(error):
                    return
            else:
                renewal.renewed(response)

    def stop(self) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join()


def _method(wrapper: Callable[P, _rpc.Call[R]]) -> Callable[Concatenate[Client, P], R]:
    """The :class:`Client` method that makes the call ``wrapper`` builds."""

    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> R:
        send = self._stub_method(wrapper(*args, **kwargs))
        try:
            return send()  # type: ignore[no-any-return]
        except grpc.RpcError as error:
            raise from_rpc_error(error) from error

    return _rpc.as_method(method, wrapper, "Client")  # type: ignore[no-any-return]


class Client(_rpc.ClientBase[grpc.Channel]):
    """Synchronous opreg client over a ``grpc.Channel``.

    Every method raises a subclass of :class:`opreg.OpregError` for a failed
    call. ``timeout`` (seconds) bounds each call; ``None``: no bound.
    """

    _channels = grpc

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- RPCs (see _rpc) ------------------------------------------------------

    claim = _method(_rpc.claim)
    complete = _method(_rpc.complete)
    lookup = _method(_rpc.lookup)
    renew = _method(_rpc.renew)
    fenced_write = _method(_rpc.fenced_write)
    get_resource = _method(_rpc.get_resource)
    claim_due = _method(_rpc.claim_due)
    batch_claim = _method(_rpc.batch_claim)
    batch_complete = _method(_rpc.batch_complete)

    # -- OperationAdmin RPCs (see _rpc) ----------------------------------------

    list_operations = _method(_rpc.list_operations)
    resolve_operation = _method(_rpc.resolve_operation)
    requeue_operation = _method(_rpc.requeue_operation)
    hold_operation = _method(_rpc.hold_operation)
    release_operation = _method(_rpc.release_operation)

    # -- run once -----------------------------------------------------------

    def run_once(
        self,
        namespace: str,
        operation_key: str,
        parameters: Parameters | bytes,
        work: Callable[[Lease], Any],
        *,
        reconcile: Callable[[Lease, str], Reconciliation] | None = None,
        owner: str | None = None,
        execution_id: str = "",
        lease_ttl: Seconds = 30.0,
        deadline: Seconds = 120.0,
        retry_policy: pb.RetryPolicy | None = None,
        compensates: str = "",
        renew_interval: Seconds | None = None,
        rpc_timeout: Seconds = 10.0,
        poll_interval: Seconds = 1.0,
        retry_transient: bool = True,
        transport_backoff: tuple[float, float] = (0.1, 5.0),
    ) -> Result:
        """Runs ``work(lease)`` at most once per recorded outcome of the operation,
        by the run-once protocol (client/PROTOCOL.md; the package README).

        REPLAYED returns the stored :class:`Result` (``replayed=True``) or raises
        the stored :class:`BusinessFailure`; IN_PROGRESS / RETRY_LATER wait and
        claim again within ``deadline`` seconds (default 120; else
        :class:`DeadlineExceeded`): every Claim asks the server to hold it
        until the operation moves (at most 30 s), and a server that does not
        wait is polled (``retry_after``, at least every ``poll_interval``);
        DEAD raises :class:`OperationDead`, HELD
        :class:`OperationHeld`; RECONCILE calls ``reconcile(lease, remote_ref)``
        (without it: the lease is handed back and :class:`ReconcileRequired`).
        ``work`` returns bytes (or ``(bytes, result_ref)``, or None) or raises
        :class:`BusinessError` (recorded, raised as BusinessFailure),
        :class:`TransientError` (recorded retryable, then claimed again; OperationDead
        once the budget is spent), :class:`SentButUnconfirmed` (recorded unknown;
        with ``reconcile`` claimed again and reconciled, without it
        :class:`OutcomeUnknown`); any other exception is recorded retryable and
        re-raised. While it runs the lease is renewed every ``renew_interval``
        (default ``lease_ttl / 3``); when a renewal is refused (any error that is
        not transient) or no renewal succeeded before the lease's local expiry,
        ``lease.lost`` turns true and :class:`LeaseLost` is raised without
        Complete. ``retry_transient=False`` re-raises a recorded TransientError
        instead of claiming again (and a SentButUnconfirmed is OutcomeUnknown).
        ``parameters`` may be a precomputed digest (bytes).
        """
        spec = _run.run_spec(
            namespace,
            operation_key,
            parameters,
            owner=owner,
            execution_id=execution_id,
            lease_ttl=lease_ttl,
            retry_policy=retry_policy,
            compensates=compensates,
            renew_interval=renew_interval,
            rpc_timeout=rpc_timeout,
            poll_interval=poll_interval,
            retry_transient=retry_transient,
            transport_backoff=transport_backoff,
        )
        run = _run.RunOnce(spec, deadline, can_reconcile=reconcile is not None)
        while True:
            step = run.after_claim(self._retry(run.claim(self.claim)))
            if isinstance(step, Result):
                return step
            if isinstance(step, float):
                time.sleep(step)
                continue
            result = self._execute(step, work, reconcile)
            if result is not AGAIN:
                return result  # type: ignore[no-any-return]

    def _execute(
        self,
        attempt: _run.Attempt,
        work: Callable[[Lease], Any],
        reconcile: Callable[[Lease, str], Reconciliation] | None,
        lease: Lease | None = None,
    ) -> Any:
        """Runs ``attempt`` under ``lease`` (a new one unless the caller, the
        worker, built it to be able to cancel it)."""
        if lease is None:
            lease = Lease(self, **attempt.lease_fields)
        renewer = _Renewer(self, lease, attempt.spec)
        renewer.start()
        try:  # the lease is renewed during reconcile, work and Complete
            if attempt.must_reconcile:
                assert reconcile is not None
                try:
                    attempt.reconciled(reconcile(lease, attempt.remote_ref))
                except Exception as exc:  # noqa: BLE001 - reported, then re-raised
                    attempt.reconcile_failed(lease, exc)
                lease.check()  # lost during reconcile: stop, do not run work
            if attempt.report is None:
                try:
                    attempt.worked(work(lease))
                except Exception as exc:  # noqa: BLE001 - mapped to a report
                    attempt.work_failed(lease, exc)
            completed = self._complete(attempt, lease)
        finally:
            renewer.stop()
        return attempt.done(completed)

    def _complete(self, attempt: _run.Attempt, lease: Lease) -> pb.CompleteResponse:
        """Complete; when its result is in doubt, a Lookup decides."""
        # LeaseLost if the lease was lost meanwhile: then nothing is sent.
        complete = attempt.complete(self.complete, lease)
        try:
            return self._retry(complete)
        except OpregError as error:
            attempt.complete_failed(lease, error)  # raises unless the report is in doubt
            try:
                looked: pb.LookupResponse | None = self._retry(attempt.lookup(self.lookup, error))
            except OpregError:
                looked = None
            return attempt.looked_up(lease, looked, error)

    def _retry(self, retry: _run.Retry[T]) -> T:
        """Makes ``retry``'s call until it answers (see :class:`_run.Retry`)."""
        while True:
            try:
                return retry.call(retry.timeout())
            except Unavailable as error:
                delay = retry.failed(error)
            time.sleep(delay)


class Worker(_worker.WorkerBase[Lease]):
    """Runs the due operations of one namespace, each on its own thread, by the
    run-once rules (see :class:`opreg.AsyncWorker` for asyncio, and the README).

        worker = opreg.Worker(client, "payments", handlers={"debit": debit}, reconcile=check_psp)
        signal.signal(signal.SIGTERM, lambda *_: worker.stop())
        worker.run()  # until stop()

    ``handler(operation, lease)`` gets the Operation (with its parameters) and
    the :class:`Lease`; ``reconcile(operation, lease)`` returns a
    :class:`Reconciliation`. ``run`` blocks until :meth:`stop` (from another
    thread or a signal handler) and the in-flight operations are done; after
    the grace period their leases are marked lost (``lease.lost``,
    ``lease.wait`` returns, ``lease.check`` raises): a sync handler cannot be
    interrupted, so it should watch its lease.
    """

    _client: Client
    _wake: threading.Condition

    @staticmethod
    def _make_wake() -> threading.Condition:
        return threading.Condition()

    def run(self) -> None:
        """Pulls and runs due operations until :meth:`stop`; then lets the
        in-flight ones finish (within the grace period) and returns. Raises
        what ClaimDue raised other than UNAVAILABLE / DEADLINE_EXCEEDED."""
        self._begin()
        try:
            self._pull()
        finally:
            self._drain()

    def stop(self, grace: Seconds | None = None) -> None:
        """Stop pulling; in-flight operations get ``grace`` seconds (default:
        the worker's) to finish. Returns at once; ``run`` returns when done."""
        with self._wake:
            self._stop(grace)
            self._wake.notify_all()

    def _pull(self) -> None:
        while True:
            with self._wake:
                self._wake.wait_for(lambda: self._stopping or self._free_slots() > 0)
                if self._stopping:
                    return
                free = self._free_slots()
            claimed_at = time.monotonic()  # the leases end at the latest lease_ttl after this
            try:
                response = self._claim_due(self._client.claim_due, free)
            except Unavailable as error:
                self._sleep(self._transport_wait(error))
                continue
            self._claimed()
            for due in response.operations:
                self._start(due, claimed_at)
            if not response.operations:
                self._sleep(self._idle_wait())

    def _sleep(self, seconds: float) -> None:
        """Sleep, returning early when stopped."""
        with self._wake:
            self._wake.wait_for(lambda: self._stopping, seconds)

    def _start(self, due: pb.DueOperation, claimed_at: float) -> None:
        execution = self._plan(due, claimed_at)
        if execution is None:
            return
        lease = Lease(self._client, **execution.attempt.lease_fields)
        context = contextvars.copy_context()  # run's caller's (its trace context, say)
        thread = threading.Thread(
            target=context.run,
            args=(self._run_operation, execution, lease),
            name=f"opreg-worker-{lease.fencing_token}",
            daemon=True,
        )
        with self._wake:
            self._in_flight[lease] = thread
        thread.start()

    def _run_operation(self, execution: _worker.Execution, lease: Lease) -> None:
        error: Exception | None = None
        try:
            self._client._execute(execution.attempt, execution.work, execution.reconcile, lease)
        except Exception as exc:  # noqa: BLE001 - logged; one operation's outcome never stops the worker
            error = exc
        finally:
            self._finished(execution, error)
            with self._wake:
                del self._in_flight[lease]
                self._wake.notify_all()

    def _drain(self) -> None:
        with self._wake:
            self._stopping = True
            if self._wake.wait_for(lambda: not self._in_flight, self.grace):
                return
            self._cancel_in_flight()
            self._wake.wait_for(lambda: not self._in_flight, _worker.UNWIND_TIMEOUT)
            self._unwound(len(self._in_flight))
