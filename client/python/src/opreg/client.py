"""The synchronous client: a thin typed wrapper per RPC, and ``run_once``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import grpc

from . import _convert, _run
from ._convert import Parameters, Seconds
from ._gen.v1 import registry_pb2 as pb
from ._gen.v1 import registry_pb2_grpc
from ._run import AGAIN, Backoff, Deadline, Reconciliation, Result
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

__all__ = ["Client", "Lease", "DEFAULT_CHANNEL_OPTIONS"]

T = TypeVar("T")

# Reconnect quickly after the server comes back (gRPC's default backoff grows to 120 s).
DEFAULT_CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
)


class Lease(_run.LeaseBase):
    """The lease handed to sync ``work`` and ``reconcile``: poll ``lost``, call
    ``check()``, or sleep with ``wait(seconds)`` (returns early, true, when lost)."""

    def __init__(self, client: Client, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._client = client
        self._lost = threading.Event()

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep up to ``timeout`` seconds; true as soon as the lease is lost."""
        return self._lost.wait(timeout)

    def _mark_lost(self, reason: BaseException) -> None:
        if not self._lost.is_set():
            self.lost_reason = reason
            self._lost.set()

    def fenced_write(self, resource: str, value: bytes, *, timeout: float | None = None) -> pb.FencedWriteResponse:
        """FencedWrite with this lease's token. A refusal (another execution took
        over) marks the lease lost and raises :class:`LeaseLost`."""
        self.check()
        try:
            return self._client.fenced_write(
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


class _Renewer(threading.Thread):
    """Renews the lease every ``interval`` until stopped; marks it lost when a
    renewal is refused, or when it cannot be renewed before it expires."""

    def __init__(self, client: Client, lease: Lease, spec: _run.RunSpec) -> None:
        super().__init__(daemon=True, name=f"opreg-renew-{lease.fencing_token}")
        self._client = client
        self._lease = lease
        self._spec = spec
        self._stopped = threading.Event()

    def run(self) -> None:
        lease, spec = self._lease, self._spec
        backoff = Backoff(spec.backoff_initial, spec.backoff_max)
        wait = spec.renew_interval
        while not self._stopped.wait(wait):
            sent = time.monotonic()
            try:
                response = self._client.renew(
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

    def stop(self) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join()


class Client:
    """Synchronous opreg client over a ``grpc.Channel``.

    Every method raises a subclass of :class:`opreg.OpregError` for a failed
    call. ``timeout`` (seconds) bounds each call; ``None``: no bound.
    """

    def __init__(self, channel: grpc.Channel, *, timeout: float | None = None) -> None:
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
    ) -> Client:
        """A client on a new channel to ``target`` (``host:port``); plaintext
        unless ``credentials`` are given. Close it with :meth:`close`."""
        if credentials is None:
            channel = grpc.insecure_channel(target, options=list(options))
        else:
            channel = grpc.secure_channel(target, credentials, options=list(options))
        return cls(channel, timeout=timeout)

    @property
    def channel(self) -> grpc.Channel:
        return self._channel

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: Callable[..., T], request: Any, timeout: float | None) -> T:
        try:
            return method(request, timeout=self.timeout if timeout is None else timeout)
        except grpc.RpcError as error:
            raise from_rpc_error(error) from error

    # -- RPCs ---------------------------------------------------------------

    def claim(
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
        """Registers an operation or says what to do about it. Give exactly one
        of ``parameters`` (a mapping of JSON values, or a Struct) and
        ``parameters_digest`` (16–64 bytes, e.g. :func:`opreg.parameters_digest`)."""
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
        return self._call(self._stub.Claim, request, timeout)

    def complete(
        self,
        namespace: str,
        operation_key: str,
        *,
        fencing_token: int,
        outcome: pb.Success | pb.Failure | pb.RetryableError | pb.UnknownOutcome,
        timeout: float | None = None,
    ) -> pb.CompleteResponse:
        """Records the outcome of the execution holding ``fencing_token``.
        Repeating the same report is safe."""
        request = _convert.complete_request(namespace, operation_key, fencing_token, outcome)
        return self._call(self._stub.Complete, request, timeout)

    def lookup(
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
        return self._call(self._stub.Lookup, request, timeout)

    def renew(
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
        return self._call(self._stub.Renew, request, timeout)

    def fenced_write(
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
        return self._call(self._stub.FencedWrite, request, timeout)

    def get_resource(self, namespace: str, resource: str, *, timeout: float | None = None) -> pb.GetResourceResponse:
        request = pb.GetResourceRequest(namespace=namespace, resource=resource)
        return self._call(self._stub.GetResource, request, timeout)

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
        deadline: Seconds = 60.0,
        retry_policy: pb.RetryPolicy | None = None,
        compensates: str = "",
        renew_interval: Seconds | None = None,
        rpc_timeout: Seconds = 10.0,
        poll_interval: Seconds = 1.0,
        retry_transient: bool = True,
        transport_backoff: tuple[float, float] = (0.05, 2.0),
    ) -> Result:
        """Runs ``work(lease)`` at most once per recorded outcome of the operation.

        See the package README for the full contract. In short: REPLAYED returns
        the stored :class:`Result` (``replayed=True``) or raises the stored
        :class:`BusinessFailure`; IN_PROGRESS / RETRY_LATER wait and claim again
        within ``deadline`` seconds (else :class:`DeadlineExceeded`); DEAD raises
        :class:`OperationDead`; RECONCILE calls ``reconcile(lease, remote_ref)``.
        ``work`` returns bytes (or ``(bytes, result_ref)``, or None) or raises
        :class:`BusinessError` / :class:`TransientError` / :class:`SentButUnconfirmed`;
        any other exception is reported retryable and re-raised. While it runs the
        lease is renewed every ``renew_interval`` (default ``lease_ttl / 3``); if
        it is lost, ``lease.lost`` turns true and :class:`LeaseLost` is raised
        without Complete. With ``retry_transient`` (default) a recorded
        TransientError, or a SentButUnconfirmed when ``reconcile`` is given, is
        followed by another Claim within the deadline; otherwise it is re-raised.
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
        overall = Deadline(_convert.seconds(deadline))
        last_error: BaseException | None = None
        while True:
            claimed_at = time.monotonic()
            response = self._retrying(
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
                time.sleep(wait)
                continue
            if outcome in (pb.CLAIM_OUTCOME_ACQUIRED, pb.CLAIM_OUTCOME_RECONCILE):
                done, last_error = self._execute(response, spec, overall, claimed_at, work, reconcile)
                if done is AGAIN:
                    continue
                return done
            raise OpregError(f"unexpected claim outcome {outcome}")

    def _execute(
        self,
        response: pb.ClaimResponse,
        spec: _run.RunSpec,
        overall: Deadline,
        claimed_at: float,
        work: Callable[[Lease], Any],
        reconcile: Callable[[Lease, str], Reconciliation] | None,
    ) -> tuple[Any, BaseException | None]:
        reconciling = response.outcome == pb.CLAIM_OUTCOME_RECONCILE
        operation = response.operation
        lease = Lease(
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
        renewer = _Renewer(self, lease, spec)
        renewer.start()
        error: BaseException | None = None
        report: _run.Outcome | None = None
        try:
            if reconciling:
                assert reconcile is not None
                try:
                    report = _run.reconcile_report(reconcile(lease, operation.remote_ref))
                except Exception as exc:  # noqa: BLE001 - reported, then re-raised
                    if _run.is_lease_loss(exc):
                        lease._mark_lost(exc)
                        raise lease._lost_error() from exc
                    error = exc
                    report = _run.reconcile_error_report(exc, operation.remote_ref)
            if report is None:
                try:
                    report = _run.success_report(work(lease))
                except Exception as exc:  # noqa: BLE001 - mapped to a report
                    if _run.is_lease_loss(exc):
                        lease._mark_lost(exc)
                        raise lease._lost_error() from exc
                    error = exc
                    report = _run.error_report(exc)
        finally:
            renewer.stop()
        if lease.lost:
            raise lease._lost_error() from (error or lease.lost_reason)

        # The answer to a Complete may be lost; the same report with the same
        # token is idempotent. Keep trying at least until the lease would expire.
        try:
            completed = self._retrying(
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

    def _retrying(
        self,
        call: Callable[[float], T],
        deadline: Deadline,
        spec: _run.RunSpec,
        what: str,
        *,
        cause: BaseException | None = None,
    ) -> T:
        """Retries ``call(timeout)`` on UNAVAILABLE / DEADLINE_EXCEEDED with
        exponential backoff and full jitter until ``deadline``."""
        backoff = Backoff(spec.backoff_initial, spec.backoff_max)
        last: BaseException | None = cause
        while True:
            remaining = deadline.remaining()
            if remaining <= 0:
                raise DeadlineExceeded(
                    f"{spec.namespace}/{spec.operation_key}: deadline exceeded before {what} succeeded"
                ) from last
            try:
                return call(min(spec.rpc_timeout, remaining))
            except Unavailable as error:
                last = error
            time.sleep(min(backoff.next(), max(deadline.remaining(), 0)))
