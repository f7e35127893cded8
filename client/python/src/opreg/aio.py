"""The asyncio client (``grpc.aio``): the same wrappers and ``run_once`` as
:class:`opreg.Client`, awaited."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc
import grpc.aio

from . import _convert, _run
from ._convert import Parameters, Seconds
from ._gen.v1 import registry_pb2 as pb
from ._gen.v1 import registry_pb2_grpc
from ._run import AGAIN, Backoff, Deadline, Reconciliation, Result
from .client import DEFAULT_CHANNEL_OPTIONS
from .errors import (
    DeadlineExceeded,
    LeaseNotHeld,
    NotFound,
    OpregError,
    ReconcileRequired,
    StaleFencingToken,
    Unavailable,
    from_rpc_error,
)

__all__ = ["AsyncClient", "AsyncLease"]

T = TypeVar("T")


class AsyncLease(_run.LeaseBase):
    """The lease handed to async ``work`` and ``reconcile``. When it is lost the
    work task is cancelled; ``lost``, ``check()`` and ``await wait(seconds)``
    serve work that shields itself from cancellation."""

    def __init__(self, client: AsyncClient, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._client = client
        self._lost = asyncio.Event()
        self._on_lost: list[Callable[[], object]] = []

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    async def wait(self, timeout: float | None = None) -> bool:
        """Sleep up to ``timeout`` seconds; true as soon as the lease is lost."""
        try:
            await asyncio.wait_for(self._lost.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        return self._lost.is_set()

    def _mark_lost(self, reason: BaseException) -> None:
        if not self._lost.is_set():
            self.lost_reason = reason
            self._lost.set()
            for callback in self._on_lost:
                callback()

    async def fenced_write(
        self, resource: str, value: bytes, *, timeout: float | None = None
    ) -> pb.FencedWriteResponse:
        """FencedWrite with this lease's token. A refusal (another execution took
        over) marks the lease lost and raises :class:`LeaseLost`."""
        self.check()
        try:
            return await self._client.fenced_write(
                self.namespace,
                resource,
                operation_key=self.operation_key,
                fencing_token=self.fencing_token,
                value=value,
                timeout=timeout,
            )
        except StaleFencingToken as error:
            self._mark_lost(error)
            raise self._lost_error() from error


async def _renew_forever(client: AsyncClient, lease: AsyncLease, spec: _run.RunSpec) -> None:
    backoff = Backoff(spec.backoff_initial, spec.backoff_max)
    wait = spec.renew_interval
    while True:
        await asyncio.sleep(wait)
        sent = time.monotonic()
        try:
            response = await client.renew(
                lease.namespace,
                lease.operation_key,
                owner=lease.owner,
                fencing_token=lease.fencing_token,
                lease_ttl=spec.lease_ttl,
                timeout=max(0.05, min(spec.rpc_timeout, lease._local_expiry - sent)),
            )
        except (StaleFencingToken, LeaseNotHeld, NotFound) as error:
            lease._mark_lost(error)
            return
        except OpregError as error:
            left = lease._local_expiry - time.monotonic()
            if left <= 0:
                lease._mark_lost(error)
                return
            wait = min(backoff.next(), left)
            continue
        lease._renewed(response.lease, sent + spec.lease_ttl)
        backoff.reset()
        wait = spec.renew_interval


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


class AsyncClient:
    """asyncio opreg client over a ``grpc.aio.Channel``."""

    def __init__(self, channel: grpc.aio.Channel, *, timeout: float | None = None) -> None:
        self._channel = channel
        self._stub = registry_pb2_grpc.OperationRegistryStub(channel)
        self.timeout = timeout

    @classmethod
    def connect(
        cls,
        target: str,
        *,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = DEFAULT_CHANNEL_OPTIONS,
        timeout: float | None = None,
    ) -> AsyncClient:
        """A client on a new ``grpc.aio`` channel; ``await client.close()`` it."""
        if credentials is None:
            channel = grpc.aio.insecure_channel(target, options=list(options))
        else:
            channel = grpc.aio.secure_channel(target, credentials, options=list(options))
        return cls(channel, timeout=timeout)

    @property
    def channel(self) -> grpc.aio.Channel:
        return self._channel

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, method: Callable[..., Awaitable[T]], request: Any, timeout: float | None) -> T:
        try:
            return await method(request, timeout=self.timeout if timeout is None else timeout)
        except grpc.RpcError as error:
            raise from_rpc_error(error) from error

    # -- RPCs ---------------------------------------------------------------

    async def claim(
        self,
        namespace: str,
        operation_key: str,
        *,
        owner: str,
        parameters: Parameters | None = None,
        parameters_digest: bytes | None = None,
        execution_id: str = "",
        lease_ttl: Seconds | None = None,
        retry_policy: pb.RetryPolicy | None = None,
        compensates: str = "",
        timeout: float | None = None,
    ) -> pb.ClaimResponse:
        request = _convert.claim_request(
            namespace,
            operation_key,
            owner=owner,
            parameters=parameters,
            parameters_digest=parameters_digest,
            execution_id=execution_id,
            lease_ttl=lease_ttl,
            retry_policy=retry_policy,
            compensates=compensates,
        )
        return await self._call(self._stub.Claim, request, timeout)

    async def complete(
        self,
        namespace: str,
        operation_key: str,
        *,
        fencing_token: int,
        outcome: pb.Success | pb.Failure | pb.RetryableError | pb.UnknownOutcome,
        timeout: float | None = None,
    ) -> pb.CompleteResponse:
        request = _convert.complete_request(namespace, operation_key, fencing_token, outcome)
        return await self._call(self._stub.Complete, request, timeout)

    async def lookup(
        self,
        namespace: str,
        operation_key: str,
        *,
        include_executions: bool = False,
        timeout: float | None = None,
    ) -> pb.LookupResponse:
        request = pb.LookupRequest(
            namespace=namespace, operation_key=operation_key, include_executions=include_executions
        )
        return await self._call(self._stub.Lookup, request, timeout)

    async def renew(
        self,
        namespace: str,
        operation_key: str,
        *,
        owner: str,
        fencing_token: int,
        lease_ttl: Seconds | None = None,
        timeout: float | None = None,
    ) -> pb.RenewResponse:
        request = _convert.renew_request(
            namespace, operation_key, owner=owner, fencing_token=fencing_token, lease_ttl=lease_ttl
        )
        return await self._call(self._stub.Renew, request, timeout)

    async def fenced_write(
        self,
        namespace: str,
        resource: str,
        *,
        operation_key: str,
        fencing_token: int,
        value: bytes,
        timeout: float | None = None,
    ) -> pb.FencedWriteResponse:
        request = pb.FencedWriteRequest(
            namespace=namespace,
            resource=resource,
            operation_key=operation_key,
            fencing_token=fencing_token,
            value=bytes(value),
        )
        return await self._call(self._stub.FencedWrite, request, timeout)

    async def get_resource(
        self, namespace: str, resource: str, *, timeout: float | None = None
    ) -> pb.GetResourceResponse:
        request = pb.GetResourceRequest(namespace=namespace, resource=resource)
        return await self._call(self._stub.GetResource, request, timeout)

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
        deadline: Seconds = 60.0,
        retry_policy: pb.RetryPolicy | None = None,
        compensates: str = "",
        renew_interval: Seconds | None = None,
        rpc_timeout: Seconds = 10.0,
        poll_interval: Seconds = 1.0,
        retry_transient: bool = True,
        transport_backoff: tuple[float, float] = (0.05, 2.0),
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
        overall = Deadline(_convert.seconds(deadline))
        last_error: BaseException | None = None
        while True:
            claimed_at = time.monotonic()
            response = await self._retrying(
                lambda t: self.claim(
                    spec.namespace,
                    spec.operation_key,
                    owner=spec.owner,
                    parameters=spec.parameters,
                    parameters_digest=spec.parameters_digest,
                    execution_id=spec.execution_id,
                    lease_ttl=spec.lease_ttl,
                    retry_policy=spec.retry_policy,
                    compensates=spec.compensates,
                    timeout=t,
                ),
                overall,
                spec,
                "Claim",
                cause=last_error,
            )
            outcome = response.outcome
            if outcome == pb.CLAIM_OUTCOME_REPLAYED:
                return _run.replayed_result(response.operation)
            if outcome == pb.CLAIM_OUTCOME_DEAD:
                raise _run.dead(response.operation) from last_error
            if outcome in (pb.CLAIM_OUTCOME_IN_PROGRESS, pb.CLAIM_OUTCOME_RETRY_LATER):
                wait = _run.claim_wait(response, spec.poll_interval)
                if wait >= overall.remaining():
                    raise DeadlineExceeded(
                        f"{spec.namespace}/{spec.operation_key}: deadline exceeded waiting after "
                        f"{pb.ClaimOutcome.Name(outcome)} (next claim in {wait:.3f}s)",
                        last_outcome=outcome,
                        operation=response.operation,
                    ) from last_error
                await asyncio.sleep(wait)
                continue
            if outcome in (pb.CLAIM_OUTCOME_ACQUIRED, pb.CLAIM_OUTCOME_RECONCILE):
                done, last_error = await self._execute(response, spec, overall, claimed_at, work, reconcile)
                if done is AGAIN:
                    continue
                return done
            raise OpregError(f"unexpected claim outcome {outcome}")

    async def _execute(
        self,
        response: pb.ClaimResponse,
        spec: _run.RunSpec,
        overall: Deadline,
        claimed_at: float,
        work: Callable[[AsyncLease], Awaitable[Any]],
        reconcile: Callable[[AsyncLease, str], Any] | None,
    ) -> tuple[Any, BaseException | None]:
        reconciling = response.outcome == pb.CLAIM_OUTCOME_RECONCILE
        operation = response.operation
        lease = AsyncLease(
            self,
            namespace=spec.namespace,
            operation_key=spec.operation_key,
            lease=response.lease,
            reconciling=reconciling,
            remote_ref=operation.remote_ref,
            operation=operation,
            lease_ttl=spec.lease_ttl,
            local_expiry=claimed_at + spec.lease_ttl,
        )
        if reconciling and reconcile is None:
            raise ReconcileRequired(
                f"{spec.namespace}/{spec.operation_key}: the last outcome is unknown "
                f"(remote_ref={operation.remote_ref!r}) and no reconcile callback was given",
                remote_ref=operation.remote_ref,
                operation=operation,
            )
        renewer = asyncio.create_task(_renew_forever(self, lease, spec))
        error: BaseException | None = None
        report: _run.Outcome | None = None
        try:
            if reconciling:
                assert reconcile is not None
                try:
                    reconciliation = await self._guarded(
                        lease, lambda: _maybe_await(reconcile(lease, operation.remote_ref))
                    )
                    report = _run.reconcile_report(reconciliation)
                except Exception as exc:  # noqa: BLE001 - reported, then re-raised
                    if _run.is_lease_loss(exc):
                        lease._mark_lost(exc)
                        raise lease._lost_error() from exc
                    error = exc
                    report = _run.reconcile_error_report(exc, operation.remote_ref)
            if report is None:
                try:
                    report = _run.success_report(await self._guarded(lease, lambda: _maybe_await(work(lease))))
                except Exception as exc:  # noqa: BLE001 - mapped to a report
                    if _run.is_lease_loss(exc):
                        lease._mark_lost(exc)
                        raise lease._lost_error() from exc
                    error = exc
                    report = _run.error_report(exc)
        finally:
            renewer.cancel()
            try:
                await renewer
            except asyncio.CancelledError:
                pass
        if lease.lost:
            raise lease._lost_error() from (error or lease.lost_reason)

        try:
            completed = await self._retrying(
                lambda t: self.complete(
                    spec.namespace,
                    spec.operation_key,
                    fencing_token=lease.fencing_token,
                    outcome=report,
                    timeout=t,
                ),
                overall.at_least(spec.lease_ttl),
                spec,
                "Complete",
                cause=error,
            )
        except StaleFencingToken as stale:
            lease._mark_lost(stale)
            raise lease._lost_error() from stale
        if reconciling and error is not None:
            raise error
        return (
            _run.after_complete(
                completed.operation,
                report,
                error,
                retry_transient=spec.retry_transient,
                can_reconcile=reconcile is not None,
            ),
            error,
        )

    @staticmethod
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

    async def _retrying(
        self,
        call: Callable[[float], Awaitable[T]],
        deadline: Deadline,
        spec: _run.RunSpec,
        what: str,
        *,
        cause: BaseException | None = None,
    ) -> T:
        backoff = Backoff(spec.backoff_initial, spec.backoff_max)
        last: BaseException | None = cause
        while True:
            remaining = deadline.remaining()
            if remaining <= 0:
                raise DeadlineExceeded(
                    f"{spec.namespace}/{spec.operation_key}: deadline exceeded before {what} succeeded"
                ) from last
            try:
                return await call(min(spec.rpc_timeout, remaining))
            except Unavailable as error:
                last = error
            await asyncio.sleep(min(backoff.next(), max(deadline.remaining(), 0)))
