"""The asyncio client (``grpc.aio``): the same wrappers, ``run_once`` and
worker (:class:`AsyncWorker`) as :class:`opreg.Client`, awaited.

What the two clients share lives in ``_rpc``, ``_run`` (with its decisions in
``_decide``) and ``_worker``; this module awaits the calls, sleeps with
``asyncio.sleep``, renews leases in a task, runs ``work`` in a task that is
cancelled when the lease is lost, and runs a worker's operations in tasks."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

import grpc
import grpc.aio

from . import _rpc, _run, _worker
from ._convert import Parameters, Seconds
from ._gen.v1 import registry_pb2 as pb
from ._outcomes import AGAIN, Reconciliation, Result
from ._rpc import DEFAULT_CHANNEL_OPTIONS  # noqa: F401 - opreg.aio.DEFAULT_CHANNEL_OPTIONS, as before
from .errors import OpregError, StaleFencingToken, Unavailable, from_rpc_error

__all__ = ["AsyncClient", "AsyncLease", "AsyncWorker"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class AsyncLease(_run.LeaseBase):
    """The lease handed to async ``work`` and ``reconcile``. When it is lost the
    work task is cancelled; ``lost``, ``check()`` and ``await wait(seconds)``
    serve work that shields itself from cancellation."""

    _client: AsyncClient
    _lost: asyncio.Event

    def __init__(self, client: AsyncClient, **kwargs: Any) -> None:
        super().__init__(client, asyncio.Event(), **kwargs)

    async def wait(self, timeout: float | None = None) -> bool:
        """Sleep up to ``timeout`` seconds; true as soon as the lease is lost."""
        try:
            await asyncio.wait_for(self._lost.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        return self._lost.is_set()

    async def fenced_write(
        self, resource: str, value: bytes, *, timeout: float | None = None
    ) -> pb.FencedWriteResponse:
        """FencedWrite with this lease's token. A refusal (another execution took
        over) marks the lease lost and raises :class:`LeaseLost`."""
        self.check()
        try:
            return await self._client.fenced_write(self.namespace, resource, **self._fence(value), timeout=timeout)
        except StaleFencingToken as error:
            raise self._lose(error) from error


async def _renew_forever(client: AsyncClient, lease: AsyncLease, spec: _run.RunSpec) -> None:
    renewal = _run.Renewal(lease, spec)
    while True:
        await asyncio.sleep(renewal.wait)
        if renewal.pointless:
            return
        try:
            response = await renewal.renew(client.renew)
        except Exception as error:  # noqa: BLE001 - any error but a transient one loses the lease
            if renewal.failed(error):
                return
        else:
            renewal.renewed(response)


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


async def _guarded(lease: AsyncLease, make: Callable[[], Awaitable[T]]) -> T:
    """Awaits ``make()`` in its own task, cancelled when the lease is lost
    (then LeaseLost). Cancelling run_once cancels the task too."""
    task: asyncio.Task[T] = asyncio.ensure_future(make())
    cancel = task.cancel
    lease._on_lost.append(cancel)
    try:
        if lease.lost:
            task.cancel()
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            cancelling = getattr(current, "cancelling", lambda: 0)()  # Python >= 3.11
            if lease.lost and not cancelling:
                # The work was cancelled because the lease was lost; wait for it to unwind.
                try:
                    await task
                except BaseException:  # noqa: BLE001 - its outcome no longer matters
                    pass
                raise lease._lost_error() from lease.lost_reason
            task.cancel()
            raise
    finally:
        lease._on_lost.remove(cancel)


def _method(wrapper: Callable[P, _rpc.Call[R]]) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, R]]:
    """The :class:`AsyncClient` method that awaits the call ``wrapper`` builds."""

    async def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        send = self._stub_method(wrapper(*args, **kwargs))
        try:
            return await send()  # type: ignore[no-any-return]
        except grpc.RpcError as error:
            raise from_rpc_error(error) from error

    return _rpc.as_method(method, wrapper, "AsyncClient")  # type: ignore[no-any-return]


class AsyncClient(_rpc.ClientBase[grpc.aio.Channel]):
    """asyncio opreg client over a ``grpc.aio.Channel``."""

    _channels = grpc.aio

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

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

    async def run_once(
        self,
        namespace: str,
        operation_key: str,
        parameters: Parameters | bytes,
        work: Callable[[AsyncLease], Awaitable[Any]],
        *,
        reconcile: Callable[[AsyncLease, str], Awaitable[Reconciliation] | Reconciliation] | None = None,
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
        """The asyncio form of :meth:`opreg.Client.run_once`. ``work(lease)`` is
        awaited in its own task, cancelled if the lease is lost (then
        :class:`LeaseLost` is raised and nothing is completed)."""
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
            step = run.after_claim(await self._retry(run.claim(self.claim)))
            if isinstance(step, Result):
                return step
            if isinstance(step, float):
                await asyncio.sleep(step)
                continue
            result = await self._execute(step, work, reconcile)
            if result is not AGAIN:
                return result  # type: ignore[no-any-return]

    async def _execute(
        self,
        attempt: _run.Attempt,
        work: Callable[[AsyncLease], Awaitable[Any]],
        reconcile: Callable[[AsyncLease, str], Any] | None,
        lease: AsyncLease | None = None,
    ) -> Any:
        """Runs ``attempt`` under ``lease`` (a new one unless the caller, the
        worker, built it to be able to cancel it)."""
        if lease is None:
            lease = AsyncLease(self, **attempt.lease_fields)
        renewer = asyncio.create_task(_renew_forever(self, lease, attempt.spec))
        try:  # the lease is renewed during reconcile, work and Complete
            if attempt.must_reconcile:
                assert reconcile is not None
                try:
                    attempt.reconciled(
                        await _guarded(lease, lambda: _maybe_await(reconcile(lease, attempt.remote_ref)))
                    )
                except Exception as exc:  # noqa: BLE001 - reported, then re-raised
                    attempt.reconcile_failed(lease, exc)
                lease.check()  # lost during reconcile: stop, do not run work
            if attempt.report is None:
                try:
                    attempt.worked(await _guarded(lease, lambda: _maybe_await(work(lease))))
                except Exception as exc:  # noqa: BLE001 - mapped to a report
                    attempt.work_failed(lease, exc)
            completed = await self._complete(attempt, lease)
        finally:
            renewer.cancel()
            try:
                await renewer
            except asyncio.CancelledError:
                pass
        return attempt.done(completed)

    async def _complete(self, attempt: _run.Attempt, lease: AsyncLease) -> pb.CompleteResponse:
        """Complete; when its result is in doubt, a Lookup decides."""
        # LeaseLost if the lease was lost meanwhile: then nothing is sent.
        complete: _run.Retry[Awaitable[pb.CompleteResponse]] = attempt.complete(self.complete, lease)
        try:
            return await self._retry(complete)
        except OpregError as error:
            attempt.complete_failed(lease, error)  # raises unless the report is in doubt
            try:
                looked: pb.LookupResponse | None = await self._retry(attempt.lookup(self.lookup, error))
            except OpregError:
                looked = None
            return attempt.looked_up(lease, looked, error)

    async def _retry(self, retry: _run.Retry[Awaitable[T]]) -> T:
        """Awaits ``retry``'s call until it answers (see :class:`_run.Retry`)."""
        while True:
            try:
                return await retry.call(retry.timeout())
            except Unavailable as error:
                delay = retry.failed(error)
            await asyncio.sleep(delay)


class AsyncWorker(_worker.WorkerBase[AsyncLease]):
    """The asyncio form of :class:`opreg.Worker`: each operation runs in its
    own task, and a handler's work in a task cancelled when its lease is lost.

        worker = opreg.AsyncWorker(aclient, "payments", handlers={"debit": debit}, reconcile=check_psp)
        loop.add_signal_handler(signal.SIGTERM, worker.stop)
        await worker.run()  # until stop()

    ``handler(operation, lease)`` and ``reconcile(operation, lease)`` may be
    coroutine functions or plain ones. :meth:`stop` must be called on the
    event loop's thread (elsewhere: ``loop.call_soon_threadsafe(worker.stop)``).
    Cancelling ``run`` stops at once: in-flight work is cancelled too.
    """

    _client: AsyncClient
    _wake: asyncio.Event

    @staticmethod
    def _make_wake() -> asyncio.Event:
        return asyncio.Event()

    async def run(self) -> None:
        """Pulls and runs due operations until :meth:`stop`; then lets the
        in-flight ones finish (within the grace period) and returns. Raises
        what ClaimDue raised other than UNAVAILABLE / DEADLINE_EXCEEDED."""
        self._begin()
        try:
            await self._pull()
        except asyncio.CancelledError:
            self._stop(0)
            raise
        finally:
            await self._drain()

    def stop(self, grace: Seconds | None = None) -> None:
        """Stop pulling; in-flight operations get ``grace`` seconds (default:
        the worker's) to finish. Returns at once; ``run`` returns when done."""
        self._stop(grace)
        self._wake.set()

    async def _pull(self) -> None:
        while True:
            await self._wait_until(lambda: self._stopping or self._free_slots() > 0)
            if self._stopping:
                return
            claimed_at = time.monotonic()  # the leases end at the latest lease_ttl after this
            try:
                response = await self._claim_due(self._client.claim_due, self._free_slots())
            except Unavailable as error:
                await self._sleep(self._transport_wait(error))
                continue
            self._claimed()
            for due in response.operations:
                self._start(due, claimed_at)
            if not response.operations:
                await self._sleep(self._idle_wait())

    async def _sleep(self, seconds: float) -> None:
        """Sleep, returning early when stopped."""
        await self._wait_until(lambda: self._stopping, seconds)

    async def _wait_until(self, ready: Callable[[], bool], timeout: float | None = None) -> bool:
        """Waits until ``ready()`` (re-checked whenever the worker is woken) or
        ``timeout`` seconds passed; returns ``ready()``."""
        loop = asyncio.get_running_loop()
        end = None if timeout is None else loop.time() + timeout
        while not ready():
            left = None if end is None else end - loop.time()
            if left is not None and left <= 0:
                return False
            self._wake.clear()  # no await between the check and the clear: no wake-up is missed
            try:
                await asyncio.wait_for(self._wake.wait(), left)
            except asyncio.TimeoutError:
                pass
        return True

    def _start(self, due: pb.DueOperation, claimed_at: float) -> None:
        execution = self._plan(due, claimed_at)
        if execution is None:
            return
        lease = AsyncLease(self._client, **execution.attempt.lease_fields)
        self._in_flight[lease] = asyncio.create_task(
            self._run_operation(execution, lease), name=f"opreg-worker-{lease.fencing_token}"
        )

    async def _run_operation(self, execution: _worker.Execution, lease: AsyncLease) -> None:
        try:
            await self._client._execute(execution.attempt, execution.work, execution.reconcile, lease)
        except Exception as error:  # noqa: BLE001 - logged; one operation's outcome never stops the worker
            self._finished(execution, error)
        except asyncio.CancelledError as cancelled:
            self._finished(execution, cancelled)
            raise
        else:
            self._finished(execution, None)
        finally:
            del self._in_flight[lease]
            self._wake.set()

    async def _drain(self) -> None:
        self._stopping = True
        if await self._wait_until(lambda: not self._in_flight, self.grace):
            return
        tasks = self._cancel_in_flight()  # their leases are lost: the work tasks are cancelled
        if await self._wait_until(lambda: not self._in_flight, _worker.UNWIND_TIMEOUT):
            return
        # Still unwinding (e.g. a Complete being retried): cancel the operations' tasks themselves.
        self._unwound(len(self._in_flight))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
