"""What the sync and asyncio clients share around the RPCs: the channel and the
stubs (:class:`ClientBase`), and one function per RPC wrapper (OperationRegistry
and OperationAdmin alike).

Each wrapper function here has the wrapper's signature and docstring and builds
its request message; it returns a :class:`Call`. ``opreg.client`` and
``opreg.aio`` turn each function into a method (:func:`as_method`) that makes
the call, blocking or awaited, and maps a failed call to an ``OpregError``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import grpc

from ._convert import Parameters, Seconds, to_duration, to_struct
from ._gen.v1 import admin_pb2 as admin_pb
from ._gen.v1 import admin_pb2_grpc, registry_pb2_grpc
from ._gen.v1 import registry_pb2 as pb

__all__ = ["DEFAULT_CHANNEL_OPTIONS", "ClientBase", "Call", "as_method", "REGISTRY", "ADMIN"]

# W3C trace context (traceparent, tracestate) from the caller's OpenTelemetry
# context, when opentelemetry-api is installed (the `otel` extra).
_inject: Callable[[dict[str, str]], None] | None
try:
    from opentelemetry.propagate import inject as _otel_inject
except ImportError:
    _inject = None
else:
    _inject = _otel_inject

R = TypeVar("R")
ChannelT = TypeVar("ChannelT")
C = TypeVar("C", bound="ClientBase[Any]")

# The services a Call is made on (their names in the contract).
REGISTRY = "OperationRegistry"
ADMIN = "OperationAdmin"

# Reconnect quickly after the server comes back (gRPC's default backoff grows to 120 s).
DEFAULT_CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
)


class ClientBase(Generic[ChannelT]):
    """A client's channel, stubs and default timeout. ``_channels`` is the module
    that makes the channels of :meth:`connect`: ``grpc`` or ``grpc.aio``."""

    _channels: Any

    def __init__(self, channel: ChannelT, *, timeout: float | None = None, api_key: str | None = None) -> None:
        self._channel = channel
        # Sent with every call rather than as call credentials, which gRPC
        # refuses on a plaintext channel (a loopback server with a policy).
        self._metadata = (("authorization", f"Bearer {api_key}"),) if api_key else None
        # One channel for both services: OperationAdmin is a separate service so
        # that access to it can be granted apart, not a separate endpoint.
        self._stubs: dict[str, Any] = {
            REGISTRY: registry_pb2_grpc.OperationRegistryStub(channel),  # type: ignore[no-untyped-call]
            ADMIN: admin_pb2_grpc.OperationAdminStub(channel),  # type: ignore[no-untyped-call]
        }
        self.timeout = timeout

    @classmethod
    def connect(
        cls: type[C],
        target: str,
        *,
        tls: bool = False,
        ca_certificate: bytes | None = None,
        client_certificate: bytes | None = None,
        client_key: bytes | None = None,
        tls_server_name: str | None = None,
        api_key: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = DEFAULT_CHANNEL_OPTIONS,
        timeout: float | None = None,
    ) -> C:
        """A client on a new channel to ``target`` (``host:port``). Plaintext
        unless ``tls`` is set or TLS material is given: ``ca_certificate`` (PEM;
        default: the system's roots), ``client_certificate`` and ``client_key``
        (PEM, for mutual TLS), ``tls_server_name`` (when the server's
        certificate names another host). ``api_key`` is sent as
        ``authorization: Bearer <key>`` on every call. ``credentials`` replaces
        all TLS settings. Close it with :meth:`close` (awaited for an
        :class:`opreg.AsyncClient`)."""
        options = list(options)
        if (client_certificate is None) != (client_key is None):
            raise ValueError("give client_certificate and client_key together")
        if credentials is None and (tls or ca_certificate or client_certificate or tls_server_name):
            credentials = grpc.ssl_channel_credentials(
                root_certificates=ca_certificate,
                private_key=client_key,
                certificate_chain=client_certificate,
            )
        if tls_server_name:
            options.append(("grpc.ssl_target_name_override", tls_server_name))
        if credentials is None:
            channel = cls._channels.insecure_channel(target, options=options)
        else:
            channel = cls._channels.secure_channel(target, credentials, options=options)
        return cls(channel, timeout=timeout, api_key=api_key)

    @property
    def channel(self) -> ChannelT:
        return self._channel

    def _stub_method(self, call: Call[Any]) -> Callable[..., Any]:
        """The stub's method for ``call``, bound to its request, timeout (the
        call's own, else the client's) and metadata (the API key, and the trace
        context of the caller's current OpenTelemetry context)."""
        method = getattr(self._stubs[call.service], call.method)
        timeout = self.timeout if call.timeout is None else call.timeout
        metadata = self._call_metadata()
        return lambda: method(call.request, timeout=timeout, metadata=metadata)

    def _call_metadata(self) -> tuple[tuple[str, str], ...] | None:
        """The metadata of a call made now: the API key, and ``traceparent`` /
        ``tracestate`` injected by OpenTelemetry's propagators (when
        opentelemetry-api is installed and a span is current)."""
        if _inject is None:
            return self._metadata
        carrier: dict[str, str] = {}
        _inject(carrier)
        if not carrier:
            return self._metadata
        return (*(self._metadata or ()), *carrier.items())


@dataclass(frozen=True)
class Call(Generic[R]):
    """One RPC to make: the stub's method (e.g. ``"Claim"``), the request, the
    caller's timeout (``None``: the client's) and the service (:data:`REGISTRY`
    or :data:`ADMIN`). ``R`` is the response type."""

    method: str
    request: Any
    timeout: float | None
    service: str = REGISTRY


def as_method(method: Callable[..., Any], wrapper: Callable[..., Call[Any]], owner: str) -> Any:
    """``method`` (which makes the call ``wrapper`` builds), named, documented
    and with the signature of ``wrapper``: ``self`` first, returning the response."""
    signature = inspect.signature(wrapper)
    response = str(signature.return_annotation).removeprefix("Call[").removesuffix("]")
    self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    method.__name__ = wrapper.__name__
    method.__qualname__ = f"{owner}.{wrapper.__name__}"
    method.__doc__ = wrapper.__doc__
    method.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[self_parameter, *signature.parameters.values()], return_annotation=response
    )
    return method


# -- the RPC wrappers ---------------------------------------------------------


def claim(
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
    wait: Seconds | None = None,
    reuse: pb.ReusePolicy = pb.REUSE_POLICY_UNSPECIFIED,
    timeout: float | None = None,
) -> Call[pb.ClaimResponse]:
    """Registers an operation or says what to do about it. Give exactly one
    of ``parameters`` (a mapping of JSON values, or a Struct) and
    ``parameters_digest`` (16–64 bytes, e.g. :func:`opreg.parameters_digest`).
    ``wait``: hold the call while the answer would be IN_PROGRESS or
    RETRY_LATER, until the operation moves or the wait ends (capped by the
    server and the call's ``timeout``, so give the call that much more time);
    a server that waits says how long in the answer's ``waited``. ``reuse``:
    what an existing key allows (``REUSE_POLICY_REPLAY``, the default;
    ``REUSE_POLICY_AFTER_FAILURE``; ``REUSE_POLICY_REJECT_EXISTING``, refused
    with :class:`opreg.OperationExists`)."""
    if (parameters is None) == (parameters_digest is None):
        raise ValueError("give exactly one of parameters and parameters_digest")
    request = pb.ClaimRequest(
        namespace=namespace,
        operation_key=operation_key,
        owner=owner,
        execution_id=execution_id,
        compensates=compensates,
        reuse=reuse,
    )
    if parameters is not None:
        request.parameters.CopyFrom(to_struct(parameters))
    else:
        request.parameters_digest = bytes(parameters_digest)  # type: ignore[arg-type]
    if lease_ttl is not None:
        request.lease_ttl.CopyFrom(to_duration(lease_ttl))
    if retry_policy is not None:
        request.retry_policy.CopyFrom(retry_policy)
    if wait is not None:
        request.wait.CopyFrom(to_duration(wait))
    return Call("Claim", request, timeout)


def complete(
    namespace: str,
    operation_key: str,
    *,
    fencing_token: int,
    outcome: pb.Success | pb.Failure | pb.RetryableError | pb.UnknownOutcome,
    timeout: float | None = None,
) -> Call[pb.CompleteResponse]:
    """Records the outcome of the execution holding ``fencing_token``.
    Repeating the same report is safe."""
    request = pb.CompleteRequest(namespace=namespace, operation_key=operation_key, fencing_token=fencing_token)
    if isinstance(outcome, pb.Success):
        request.success.CopyFrom(outcome)
    elif isinstance(outcome, pb.Failure):
        request.failure.CopyFrom(outcome)
    elif isinstance(outcome, pb.RetryableError):
        request.retryable.CopyFrom(outcome)
    elif isinstance(outcome, pb.UnknownOutcome):
        request.unknown.CopyFrom(outcome)
    else:
        raise TypeError(
            "outcome must be a Success, Failure, RetryableError or UnknownOutcome message, "
            f"not {type(outcome).__name__}"
        )
    return Call("Complete", request, timeout)


def lookup(
    namespace: str,
    operation_key: str,
    *,
    include_executions: bool = False,
    include_parameters: bool = False,
    include_audit: bool = False,
    wait: Seconds | None = None,
    changed_from: pb.OperationStatus = pb.OPERATION_STATUS_UNSPECIFIED,
    timeout: float | None = None,
) -> Call[pb.LookupResponse]:
    """Reads an operation and, with ``include_executions``, its execution
    history; ``include_parameters`` fills ``operation.parameters`` (when they
    were given as a Struct); ``include_audit`` adds the operator actions
    (``audit``, oldest first). ``wait``: hold the call until the status
    differs from ``changed_from`` (default: the status when the call arrives)
    or the wait ends, capped like :meth:`claim`'s; the answer's ``waited``
    says how long a server that waits held it."""
    request = pb.LookupRequest(
        namespace=namespace,
        operation_key=operation_key,
        include_executions=include_executions,
        include_parameters=include_parameters,
        include_audit=include_audit,
        changed_from=changed_from,
    )
    if wait is not None:
        request.wait.CopyFrom(to_duration(wait))
    return Call("Lookup", request, timeout)


def renew(
    namespace: str,
    operation_key: str,
    *,
    owner: str,
    fencing_token: int,
    lease_ttl: Seconds | None = None,
    timeout: float | None = None,
) -> Call[pb.RenewResponse]:
    """Extends the lease of the current holder (``owner``, ``fencing_token``)."""
    request = pb.RenewRequest(
        namespace=namespace, operation_key=operation_key, owner=owner, fencing_token=fencing_token
    )
    if lease_ttl is not None:
        request.lease_ttl.CopyFrom(to_duration(lease_ttl))
    return Call("Renew", request, timeout)


def fenced_write(
    namespace: str,
    resource: str,
    *,
    operation_key: str,
    fencing_token: int,
    value: bytes,
    timeout: float | None = None,
) -> Call[pb.FencedWriteResponse]:
    """Writes a protected resource, refusing superseded fencing tokens."""
    request = pb.FencedWriteRequest(
        namespace=namespace,
        resource=resource,
        operation_key=operation_key,
        fencing_token=fencing_token,
        value=bytes(value),
    )
    return Call("FencedWrite", request, timeout)


def get_resource(namespace: str, resource: str, *, timeout: float | None = None) -> Call[pb.GetResourceResponse]:
    """Reads a protected resource."""
    request = pb.GetResourceRequest(namespace=namespace, resource=resource)
    return Call("GetResource", request, timeout)


def claim_due(
    namespace: str,
    *,
    owner: str,
    execution_id: str = "",
    lease_ttl: Seconds | None = None,
    limit: int = 0,
    timeout: float | None = None,
) -> Call[pb.ClaimDueResponse]:
    """Hands due work in ``namespace`` to ``owner``, oldest due first: due
    retries and expired leases (ACQUIRED: execute), unknown outcomes (RECONCILE:
    check the remote system first). ``limit``: at most that many (1–1000; 0:
    the server's 100). Each ``operation`` carries its parameters."""
    request = pb.ClaimDueRequest(namespace=namespace, owner=owner, execution_id=execution_id, limit=limit)
    if lease_ttl is not None:
        request.lease_ttl.CopyFrom(to_duration(lease_ttl))
    return Call("ClaimDue", request, timeout)


def batch_claim(
    claims: Iterable[pb.ClaimRequest | Mapping[str, Any]],
    *,
    timeout: float | None = None,
) -> Call[pb.BatchClaimResponse]:
    """Up to 1,000 Claims in one call. Each claim is a ``ClaimRequest`` or a
    mapping of :meth:`claim`'s arguments (``namespace``, ``operation_key``,
    ``owner``, ``parameters``, ...). ``results`` answer them in request order,
    each with ``claim`` (what :meth:`claim` would have answered) or ``error``
    (the ``google.rpc.Status`` it would have failed with; see
    ``WhichOneof("result")``); claims of one key answer as if run one after
    another. Raises only for an empty, too long or too large batch
    (:class:`opreg.InvalidArgument`), or when the call itself fails."""
    request = pb.BatchClaimRequest(claims=[c if isinstance(c, pb.ClaimRequest) else claim(**c).request for c in claims])
    return Call("BatchClaim", request, timeout)


def batch_complete(
    completions: Iterable[pb.CompleteRequest | Mapping[str, Any]],
    *,
    timeout: float | None = None,
) -> Call[pb.BatchCompleteResponse]:
    """Up to 1,000 Completes in one call, answered like :meth:`batch_claim`
    (``completed`` or ``error`` per item). Each completion is a
    ``CompleteRequest`` or a mapping of :meth:`complete`'s arguments
    (``namespace``, ``operation_key``, ``fencing_token``, ``outcome``)."""
    request = pb.BatchCompleteRequest(
        completions=[c if isinstance(c, pb.CompleteRequest) else complete(**c).request for c in completions]
    )
    return Call("BatchComplete", request, timeout)


# -- the OperationAdmin wrappers ----------------------------------------------


def list_operations(
    namespace: str,
    *,
    statuses: Iterable[pb.OperationStatus] = (),
    expired_leases_only: bool = False,
    older_than: Seconds | None = None,
    held_only: bool = False,
    page_size: int = 0,
    page_token: str = "",
    timeout: float | None = None,
) -> Call[admin_pb.ListOperationsResponse]:
    """One page of the manual queue: the unfinished operations matching every
    filter, in registration order (then key). ``statuses``: any of IN_PROGRESS,
    RETRY_SCHEDULED, UNKNOWN and DEAD (empty: all four; SUCCEEDED and FAILED
    are INVALID_ARGUMENT). Pass the answer's ``next_page_token`` (empty on the
    last page) as ``page_token``, with the same filters, for the next page."""
    request = admin_pb.ListOperationsRequest(
        namespace=namespace,
        statuses=list(statuses),
        expired_leases_only=expired_leases_only,
        held_only=held_only,
        page_size=page_size,
        page_token=page_token,
    )
    if older_than is not None:
        request.older_than.CopyFrom(to_duration(older_than))
    return Call("ListOperations", request, timeout, ADMIN)


def resolve_operation(
    namespace: str,
    operation_key: str,
    *,
    operator: str,
    reason: str,
    outcome: pb.Success | pb.Failure,
    timeout: float | None = None,
) -> Call[admin_pb.ResolveOperationResponse]:
    """Records the real outcome (a ``Success`` or a ``Failure``) of an
    UNKNOWN, reconciling or DEAD operation, found by checking the remote
    system. Any live lease is revoked."""
    request = admin_pb.ResolveOperationRequest(
        namespace=namespace, operation_key=operation_key, operator=operator, reason=reason
    )
    if isinstance(outcome, pb.Success):
        request.success.CopyFrom(outcome)
    elif isinstance(outcome, pb.Failure):
        request.failure.CopyFrom(outcome)
    else:
        raise TypeError(f"outcome must be a Success or Failure message, not {type(outcome).__name__}")
    return Call("ResolveOperation", request, timeout, ADMIN)


def requeue_operation(
    namespace: str,
    operation_key: str,
    *,
    operator: str,
    reason: str,
    revision: str = "",
    retry_policy: pb.RetryPolicy | None = None,
    timeout: float | None = None,
) -> Call[admin_pb.RequeueOperationResponse]:
    """DEAD → RETRY_SCHEDULED, due now, with a fresh retry budget
    (``retry_policy``; absent: the server default). ``revision`` says what
    changed outside opreg since the operation died."""
    request = admin_pb.RequeueOperationRequest(
        namespace=namespace, operation_key=operation_key, operator=operator, reason=reason, revision=revision
    )
    if retry_policy is not None:
        request.retry_policy.CopyFrom(retry_policy)
    return Call("RequeueOperation", request, timeout, ADMIN)


def hold_operation(
    namespace: str,
    operation_key: str,
    *,
    operator: str,
    reason: str,
    timeout: float | None = None,
) -> Call[admin_pb.HoldOperationResponse]:
    """Freezes an IN_PROGRESS, RETRY_SCHEDULED, UNKNOWN or DEAD operation:
    Claim answers HELD, ClaimDue skips it, and a live lease is revoked."""
    request = admin_pb.HoldOperationRequest(
        namespace=namespace, operation_key=operation_key, operator=operator, reason=reason
    )
    return Call("HoldOperation", request, timeout, ADMIN)


def release_operation(
    namespace: str,
    operation_key: str,
    *,
    operator: str,
    reason: str,
    timeout: float | None = None,
) -> Call[admin_pb.ReleaseOperationResponse]:
    """Ends a hold. An operation whose live lease the hold revoked becomes
    UNKNOWN; any other returns to the status it had."""
    request = admin_pb.ReleaseOperationRequest(
        namespace=namespace, operation_key=operation_key, operator=operator, reason=reason
    )
    return Call("ReleaseOperation", request, timeout, ADMIN)
