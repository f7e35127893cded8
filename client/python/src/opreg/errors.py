"""Typed errors.

Every opreg error is a gRPC status carrying one ``google.rpc.ErrorInfo`` with
domain ``"opreg"``; :func:`from_rpc_error` turns it into a subclass of
:class:`OpregError` chosen by the ErrorInfo reason (or, for transport failures
without an ErrorInfo, by the status code).

:class:`Unavailable` and its subclasses are the transient errors: the helpers
retry them (with backoff, and never sooner than a ``google.rpc.RetryInfo`` the
server sent, see :attr:`OpregError.retry_delay`); nothing else is retried.

The reasons and the metadata keys are those of ``proto/opreg/v1/errors.proto``
(:class:`ErrorReason`, :class:`ErrorMetadataKey`): a reason travels as its
enum value's name without ``ERROR_REASON_`` (:func:`reason_name`), a metadata
key as its name without ``ERROR_METADATA_KEY_`` in lowerCamelCase
(:func:`metadata_key`). Every reason maps to a class here
(:data:`CLASS_BY_REASON`) and every metadata key to the properties that read
it (:data:`METADATA_READERS`); the tests fail when the contract adds one that is
not mapped.

The run-once helper adds its own errors: :class:`DeadlineExceeded`,
:class:`OperationDead`, :class:`OperationHeld`, :class:`LeaseLost`,
:class:`OutcomeUnknown`, :class:`OutcomeNotRecorded`, :class:`ReconcileRequired`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from ._gen.v1 import errors_pb2, registry_pb2
from ._gen.v1.errors_pb2 import ErrorMetadataKey, ErrorReason

__all__ = [
    "ERROR_DOMAIN",
    "OpregError",
    "ParameterConflict",
    "OperationExists",
    "StaleFencingToken",
    "AlreadyCompleted",
    "LeaseNotHeld",
    "InvalidTransition",
    "CompensationError",
    "OriginalOutcomeUnknown",
    "NothingToCompensate",
    "AlreadyCompensated",
    "NotFound",
    "OperationNotFound",
    "ResourceNotFound",
    "InvalidArgument",
    "FieldViolation",
    "Unavailable",
    "OperationBusy",
    "MessageTooLarge",
    "RateLimited",
    "TooManyWaiters",
    "Unauthenticated",
    "PermissionDenied",
    "InternalError",
    "DeadlineExceeded",
    "OperationDead",
    "OperationHeld",
    "LeaseLost",
    "OutcomeUnknown",
    "OutcomeNotRecorded",
    "ReconcileRequired",
    "ErrorReason",
    "ErrorMetadataKey",
    "reason_name",
    "metadata_key",
    "is_transient",
    "from_rpc_error",
]

ERROR_DOMAIN = "opreg"


def reason_name(reason: ErrorReason) -> str:
    """The ``ErrorInfo.reason`` string of an :class:`ErrorReason` value
    (``ERROR_REASON_PARAMETER_CONFLICT`` travels as ``"PARAMETER_CONFLICT"``)."""
    return ErrorReason.Name(reason).removeprefix("ERROR_REASON_")


def metadata_key(key: ErrorMetadataKey) -> str:
    """The ``ErrorInfo.metadata`` key of an :class:`ErrorMetadataKey` value
    (``ERROR_METADATA_KEY_STORED_DIGEST`` travels as ``"storedDigest"``)."""
    first, *rest = ErrorMetadataKey.Name(key).removeprefix("ERROR_METADATA_KEY_").lower().split("_")
    return first + "".join(word.capitalize() for word in rest)


def _parse_reason(text: str) -> ErrorReason | None:
    """The :class:`ErrorReason` an ``ErrorInfo.reason`` names; ``None`` for one
    this client does not know (or the empty reason)."""
    if not text:
        return None
    try:
        reason = ErrorReason.Value("ERROR_REASON_" + text)
    except ValueError:
        return None
    return None if reason == errors_pb2.ERROR_REASON_UNSPECIFIED else cast(ErrorReason, reason)


# What tonic's server-side timer answers (CANCELLED) when the caller's deadline
# passes inside a server that does not answer DEADLINE_EXCEEDED itself.
SERVER_TIMEOUT_MESSAGE = "Timeout expired"


class OpregError(Exception):
    """Base of every error this package raises for a failed opreg call.

    ``code`` is the gRPC status code (``None`` for errors raised by the client
    itself), ``reason`` the ``ErrorInfo`` reason (``""`` when the status carried
    none, e.g. a connection failure), ``metadata`` the ``ErrorInfo`` metadata.
    """

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        reason: str = "",
        metadata: dict[str, str] | None = None,
        details: list[Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.metadata: dict[str, str] = dict(metadata or {})
        self.details: list[Any] = list(details or [])

    def _meta(self, key: ErrorMetadataKey, default: str = "") -> str:
        """The value of an ``ErrorInfo`` metadata key (``default`` when absent)."""
        return self.metadata.get(metadata_key(key), default)

    def __str__(self) -> str:
        label = self.reason or (self.code.name if self.code is not None else "")
        return f"{label}: {self.message}" if label else self.message

    @property
    def retry_delay(self) -> float | None:
        """Seconds the server asked the caller to wait before retrying (its
        ``google.rpc.RetryInfo``); ``None`` when it sent none. The helpers wait
        at least this long before retrying a transient error."""
        for detail in self.details:
            if isinstance(detail, error_details_pb2.RetryInfo) and detail.HasField("retry_delay"):
                delay = detail.retry_delay
                return max(float(delay.seconds + delay.nanos / 1e9), 0.0)
        return None


class ParameterConflict(OpregError):
    """``ALREADY_EXISTS``/``PARAMETER_CONFLICT``: the key is registered with
    different parameters (or a different ``compensates``). Never retry it."""

    @property
    def differing_fields(self) -> list[str]:
        """Top-level parameter names whose values differ (empty if unknown,
        e.g. when a digest was sent instead of parameters)."""
        raw = self._meta(errors_pb2.ERROR_METADATA_KEY_DIFFERING_FIELDS)
        return [name for name in raw.split(",") if name]

    @property
    def differing_fields_truncated(self) -> bool:
        """True when the server cut :attr:`differing_fields` short."""
        return self._meta(errors_pb2.ERROR_METADATA_KEY_DIFFERING_FIELDS_TRUNCATED) == "true"

    @property
    def stored_digest(self) -> bytes:
        return bytes.fromhex(self._meta(errors_pb2.ERROR_METADATA_KEY_STORED_DIGEST))

    @property
    def request_digest(self) -> bytes:
        return bytes.fromhex(self._meta(errors_pb2.ERROR_METADATA_KEY_REQUEST_DIGEST))

    @property
    def conflicting_field(self) -> str:
        """``"compensates"`` when the conflict is about ``compensates``."""
        return self._meta(errors_pb2.ERROR_METADATA_KEY_CONFLICTING_FIELD)


class OperationExists(OpregError):
    """``ALREADY_EXISTS``/``OPERATION_EXISTS``: a Claim with
    ``REUSE_POLICY_REJECT_EXISTING`` found the key already registered. Never
    retried: only the call that registered the key proceeds."""

    @property
    def current_status(self) -> int | None:
        """The existing operation's status (an ``OperationStatus`` value);
        ``None`` if the server named none this client knows."""
        return _status(self._meta(errors_pb2.ERROR_METADATA_KEY_CURRENT_STATUS))


class StaleFencingToken(OpregError):
    """``ABORTED``/``STALE_FENCING_TOKEN``: another execution took over (or the
    operation finished, or the resource's fence is higher). Stop writing."""

    @property
    def presented_token(self) -> int | None:
        return _int(self._meta(errors_pb2.ERROR_METADATA_KEY_PRESENTED_TOKEN))

    @property
    def current_token(self) -> int | None:
        return _int(self._meta(errors_pb2.ERROR_METADATA_KEY_CURRENT_TOKEN))


class AlreadyCompleted(OpregError):
    """``FAILED_PRECONDITION``/``ALREADY_COMPLETED``: a different report was
    already recorded for this token."""

    @property
    def fencing_token(self) -> int | None:
        return _int(self._meta(errors_pb2.ERROR_METADATA_KEY_FENCING_TOKEN))


class LeaseNotHeld(OpregError):
    """``FAILED_PRECONDITION``/``LEASE_NOT_HELD``: Renew by an owner that does
    not hold the current token."""


class InvalidTransition(OpregError):
    """``FAILED_PRECONDITION``/``INVALID_TRANSITION``: an OperationAdmin action
    the operation's status does not allow (e.g. requeueing an operation that is
    not DEAD, resolving one that succeeded)."""

    @property
    def current_status(self) -> int | None:
        """The operation's status when the action was refused (an
        ``OperationStatus`` value); ``None`` if the server named none this
        client knows."""
        return _status(self._meta(errors_pb2.ERROR_METADATA_KEY_CURRENT_STATUS))

    @property
    def held(self) -> bool | None:
        """Whether the operation was held; ``None`` if the server did not say."""
        return {"true": True, "false": False}.get(self._meta(errors_pb2.ERROR_METADATA_KEY_HELD))


class CompensationError(OpregError):
    """Base of the refusals of a compensating Claim."""


class OriginalOutcomeUnknown(CompensationError):
    """The original's outcome is unknown; reconcile it first."""


class NothingToCompensate(CompensationError):
    """The original did not succeed."""


class AlreadyCompensated(CompensationError):
    """The original was already compensated (by ``compensated_by``)."""

    @property
    def compensated_by(self) -> str:
        return self._meta(errors_pb2.ERROR_METADATA_KEY_COMPENSATED_BY)


class NotFound(OpregError):
    """``NOT_FOUND``: unknown operation or resource."""


class OperationNotFound(NotFound):
    pass


class ResourceNotFound(NotFound):
    pass


@dataclass(frozen=True)
class FieldViolation:
    field: str
    description: str


class InvalidArgument(OpregError):
    """``INVALID_ARGUMENT``; ``field_violations`` come from ``google.rpc.BadRequest``."""

    @property
    def field_violations(self) -> list[FieldViolation]:
        violations: list[FieldViolation] = []
        for detail in self.details:
            if isinstance(detail, error_details_pb2.BadRequest):
                violations.extend(FieldViolation(v.field, v.description) for v in detail.field_violations)
        return violations


class Unavailable(OpregError):
    """The transient errors: ``UNAVAILABLE`` (server or its database
    unreachable, connection refused, ``STORE_UNAVAILABLE``, ``OVERLOADED``) or
    a deadline that passed: ``DEADLINE_EXCEEDED`` (the call's own timeout, or
    the server stopping the work when the caller's deadline passed inside it),
    or the ``CANCELLED`` "Timeout expired" a server's own timer may answer
    instead (``code`` stays ``CANCELLED``; a CANCELLED the caller caused is
    not transient). Safe to retry for Claim (same owner), Renew, Complete (same
    report) and Lookup; :attr:`retry_delay` is the least wait the server asked
    for, if it sent a ``RetryInfo``."""


class OperationBusy(Unavailable):
    """``UNAVAILABLE``/``OPERATION_BUSY``: the operation's row is locked by
    another transaction past the server's lock timeout. Transient: retry after
    :attr:`retry_delay` (the server's ``RetryInfo``, about 0.2 s)."""


class RateLimited(Unavailable):
    """``RESOURCE_EXHAUSTED``/``RATE_LIMITED``: the namespace is past its calls
    per second on this server. Transient: retry after :attr:`retry_delay` (the
    server's ``RetryInfo``: when the next call would be admitted)."""

    @property
    def calls_per_second(self) -> int | None:
        return _int(self._meta(errors_pb2.ERROR_METADATA_KEY_CALLS_PER_SECOND))


class TooManyWaiters(Unavailable):
    """``RESOURCE_EXHAUSTED``/``TOO_MANY_WAITERS``: the replica already holds as
    many waiting calls (a Claim or Lookup with ``wait``) as it allows.
    Transient: retry after :attr:`retry_delay` (the server's ``RetryInfo``)."""

    @property
    def limit(self) -> int | None:
        """The replica's limit of waiting calls; ``None`` if the server did not say."""
        return _int(self._meta(errors_pb2.ERROR_METADATA_KEY_LIMIT))


class MessageTooLarge(OpregError):
    """``RESOURCE_EXHAUSTED``/``MESSAGE_TOO_LARGE``: the request message is
    larger than the method accepts (refused before it was read). Never
    retried: the same request is refused again."""

    @property
    def limit(self) -> int | None:
        """The largest request message (bytes) the method accepts; ``None`` if
        the server did not say."""
        return _int(self._meta(errors_pb2.ERROR_METADATA_KEY_LIMIT))


class Unauthenticated(OpregError):
    """``UNAUTHENTICATED``: the server's policy knows no such credentials. Give
    an API key (``api_key=``) or a client certificate it names. Not retried."""


class PermissionDenied(OpregError):
    """``PERMISSION_DENIED``: the principal lacks :attr:`role` in
    :attr:`namespace`. Not retried."""

    @property
    def principal(self) -> str:
        return self._meta(errors_pb2.ERROR_METADATA_KEY_PRINCIPAL)

    @property
    def namespace(self) -> str:
        return self._meta(errors_pb2.ERROR_METADATA_KEY_NAMESPACE)

    @property
    def role(self) -> str:
        """The role the call needed: ``reader``, ``worker`` or ``admin``."""
        return self._meta(errors_pb2.ERROR_METADATA_KEY_ROLE)


class InternalError(OpregError):
    """``INTERNAL``: a server fault (logged there, never described)."""


class DeadlineExceeded(OpregError, TimeoutError):
    """The overall deadline of :meth:`Client.run_once` passed: while waiting for
    another holder or a scheduled retry, or while the registry was unreachable.
    ``last_outcome`` is the last Claim outcome seen (if any); the cause is the
    last transport error or work error."""

    def __init__(self, message: str, *, last_outcome: int | None = None, operation: Any = None) -> None:
        super().__init__(message)
        self.last_outcome = last_outcome
        self.operation: registry_pb2.Operation | None = operation


class OperationDead(OpregError):
    """The operation's retry budget or deadline is exhausted; a human decides."""

    def __init__(self, message: str, *, operation: Any = None) -> None:
        super().__init__(message)
        self.operation: registry_pb2.Operation | None = operation


class OperationHeld(OpregError):
    """Claim answered HELD: an operator froze the operation while it is
    investigated (any lease it had is revoked). ``run_once`` raises this at
    once rather than wait: claim again after ``retry_after`` seconds or ask
    the operator (``operation.held_at``)."""

    def __init__(self, message: str, *, retry_after: float | None = None, operation: Any = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.operation: registry_pb2.Operation | None = operation


class LeaseLost(OpregError):
    """The lease was lost (another execution took over, or it could not be
    renewed before it expired). The helper did not, and must not, Complete."""

    def __init__(self, message: str = "the lease was lost", *, fencing_token: int | None = None) -> None:
        super().__init__(message)
        self.fencing_token = fencing_token


class OutcomeUnknown(OpregError):
    """The work reported that its request was sent but not confirmed
    (:class:`opreg.SentButUnconfirmed`); that unknown outcome is recorded
    (the operation is UNKNOWN, ``remote_ref`` kept) and, with no ``reconcile``
    callback to find out what happened, ``run_once`` cannot go on. A later
    ``run_once`` with ``reconcile`` (or an operator) settles it. The cause is
    the work's :class:`opreg.SentButUnconfirmed`."""

    def __init__(
        self, message: str, *, remote_ref: str = "", fencing_token: int | None = None, operation: Any = None
    ) -> None:
        super().__init__(message)
        self.remote_ref = remote_ref
        self.fencing_token = fencing_token
        self.operation: registry_pb2.Operation | None = operation


class OutcomeNotRecorded(OpregError):
    """The work finished but its outcome could not be recorded: Complete kept
    failing (or failed in doubt) and a Lookup found no recorded outcome for the
    execution's token. ``report`` is the outcome that was not recorded."""

    def __init__(self, message: str, *, fencing_token: int | None = None, report: Any = None) -> None:
        super().__init__(message)
        self.fencing_token = fencing_token
        self.report = report


class ReconcileRequired(OpregError):
    """The last outcome is unknown (Claim answered RECONCILE) and no
    ``reconcile`` callback was given."""

    def __init__(self, message: str, *, remote_ref: str = "", operation: Any = None) -> None:
        super().__init__(message)
        self.remote_ref = remote_ref
        self.operation: registry_pb2.Operation | None = operation


# The class of each ErrorReason (exhaustive: tests/test_error_contract.py fails
# when errors.proto adds a reason that is not here).
CLASS_BY_REASON: dict[ErrorReason, type[OpregError]] = {
    errors_pb2.ERROR_REASON_INVALID_ARGUMENT: InvalidArgument,
    errors_pb2.ERROR_REASON_MESSAGE_TOO_LARGE: MessageTooLarge,
    errors_pb2.ERROR_REASON_PARAMETER_CONFLICT: ParameterConflict,
    errors_pb2.ERROR_REASON_STALE_FENCING_TOKEN: StaleFencingToken,
    errors_pb2.ERROR_REASON_ALREADY_COMPLETED: AlreadyCompleted,
    errors_pb2.ERROR_REASON_LEASE_NOT_HELD: LeaseNotHeld,
    errors_pb2.ERROR_REASON_ORIGINAL_OUTCOME_UNKNOWN: OriginalOutcomeUnknown,
    errors_pb2.ERROR_REASON_NOTHING_TO_COMPENSATE: NothingToCompensate,
    errors_pb2.ERROR_REASON_ALREADY_COMPENSATED: AlreadyCompensated,
    errors_pb2.ERROR_REASON_INVALID_TRANSITION: InvalidTransition,
    errors_pb2.ERROR_REASON_UNAUTHENTICATED: Unauthenticated,
    errors_pb2.ERROR_REASON_PERMISSION_DENIED: PermissionDenied,
    errors_pb2.ERROR_REASON_OPERATION_NOT_FOUND: OperationNotFound,
    errors_pb2.ERROR_REASON_RESOURCE_NOT_FOUND: ResourceNotFound,
    errors_pb2.ERROR_REASON_STORE_UNAVAILABLE: Unavailable,
    errors_pb2.ERROR_REASON_OPERATION_BUSY: OperationBusy,
    errors_pb2.ERROR_REASON_OVERLOADED: Unavailable,
    errors_pb2.ERROR_REASON_RATE_LIMITED: RateLimited,
    errors_pb2.ERROR_REASON_DEADLINE_EXCEEDED: Unavailable,
    errors_pb2.ERROR_REASON_INTERNAL: InternalError,
    errors_pb2.ERROR_REASON_OPERATION_EXISTS: OperationExists,
    errors_pb2.ERROR_REASON_TOO_MANY_WAITERS: TooManyWaiters,
}

# The properties that read each ErrorMetadataKey, with the error class each is
# on (exhaustive, like CLASS_BY_REASON; a key some reasons share is read on each).
METADATA_READERS: dict[ErrorMetadataKey, tuple[tuple[type[OpregError], Any], ...]] = {  # ((class, its property), ...)
    errors_pb2.ERROR_METADATA_KEY_LIMIT: (
        (MessageTooLarge, MessageTooLarge.limit),
        (TooManyWaiters, TooManyWaiters.limit),
    ),
    errors_pb2.ERROR_METADATA_KEY_STORED_DIGEST: ((ParameterConflict, ParameterConflict.stored_digest),),
    errors_pb2.ERROR_METADATA_KEY_REQUEST_DIGEST: ((ParameterConflict, ParameterConflict.request_digest),),
    errors_pb2.ERROR_METADATA_KEY_DIFFERING_FIELDS: ((ParameterConflict, ParameterConflict.differing_fields),),
    errors_pb2.ERROR_METADATA_KEY_DIFFERING_FIELDS_TRUNCATED: (
        (ParameterConflict, ParameterConflict.differing_fields_truncated),
    ),
    errors_pb2.ERROR_METADATA_KEY_CONFLICTING_FIELD: ((ParameterConflict, ParameterConflict.conflicting_field),),
    errors_pb2.ERROR_METADATA_KEY_PRESENTED_TOKEN: ((StaleFencingToken, StaleFencingToken.presented_token),),
    errors_pb2.ERROR_METADATA_KEY_CURRENT_TOKEN: ((StaleFencingToken, StaleFencingToken.current_token),),
    errors_pb2.ERROR_METADATA_KEY_FENCING_TOKEN: ((AlreadyCompleted, AlreadyCompleted.fencing_token),),
    errors_pb2.ERROR_METADATA_KEY_COMPENSATED_BY: ((AlreadyCompensated, AlreadyCompensated.compensated_by),),
    errors_pb2.ERROR_METADATA_KEY_CURRENT_STATUS: (
        (InvalidTransition, InvalidTransition.current_status),
        (OperationExists, OperationExists.current_status),
    ),
    errors_pb2.ERROR_METADATA_KEY_HELD: ((InvalidTransition, InvalidTransition.held),),
    errors_pb2.ERROR_METADATA_KEY_PRINCIPAL: ((PermissionDenied, PermissionDenied.principal),),
    errors_pb2.ERROR_METADATA_KEY_NAMESPACE: ((PermissionDenied, PermissionDenied.namespace),),
    errors_pb2.ERROR_METADATA_KEY_ROLE: ((PermissionDenied, PermissionDenied.role),),
    errors_pb2.ERROR_METADATA_KEY_CALLS_PER_SECOND: ((RateLimited, RateLimited.calls_per_second),),
}

_BY_CODE: dict[grpc.StatusCode, type[OpregError]] = {
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: Unavailable,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.INTERNAL: InternalError,
}


def from_rpc_error(error: grpc.RpcError) -> OpregError:
    """The typed error for a failed call (``grpc.RpcError`` or ``grpc.aio.AioRpcError``)."""
    code: grpc.StatusCode | None = error.code() if hasattr(error, "code") else None
    message = (error.details() if hasattr(error, "details") else None) or str(error)
    details: list[Any] = []
    info: error_details_pb2.ErrorInfo | None = None
    try:
        status = rpc_status.from_call(error)  # type: ignore[arg-type]
    except (ValueError, TypeError, AttributeError):
        status = None
    if status is not None:
        for any_detail in status.details:
            for cls in (error_details_pb2.ErrorInfo, error_details_pb2.BadRequest, error_details_pb2.RetryInfo):
                if any_detail.Is(cls.DESCRIPTOR):
                    message_obj = cls()
                    any_detail.Unpack(message_obj)
                    details.append(message_obj)
                    if isinstance(message_obj, error_details_pb2.ErrorInfo) and info is None:
                        info = message_obj
    reason = ""
    metadata: dict[str, str] = {}
    if info is not None and info.domain == ERROR_DOMAIN:
        reason = info.reason
        metadata = dict(info.metadata)
    known = _parse_reason(reason)
    cls = CLASS_BY_REASON.get(known) if known is not None else None
    if cls is None and code is not None:
        cls = _BY_CODE.get(code)
    if cls is None and is_server_timeout(code, message):
        cls = Unavailable
    return (cls or OpregError)(message, code=code, reason=reason, metadata=metadata, details=details)


def is_transient(error: BaseException) -> bool:
    """True for the transient errors, the only ones the helpers retry:
    ``UNAVAILABLE`` (``STORE_UNAVAILABLE``, ``OPERATION_BUSY``, ``OVERLOADED``
    or the transport), ``DEADLINE_EXCEEDED``, a server's ``CANCELLED``
    "Timeout expired" and ``RESOURCE_EXHAUSTED`` with ``RATE_LIMITED`` or
    ``TOO_MANY_WAITERS`` (not ``MESSAGE_TOO_LARGE``): all of them
    :class:`Unavailable`."""
    return isinstance(error, Unavailable)


def is_server_timeout(code: grpc.StatusCode | None, message: str) -> bool:
    """True for the ``CANCELLED`` "Timeout expired" that a server's own timer
    answers when the caller's deadline passed inside it: the same as
    ``DEADLINE_EXCEEDED``, unlike a CANCELLED that the caller caused."""
    return code == grpc.StatusCode.CANCELLED and message == SERVER_TIMEOUT_MESSAGE


def _status(name: str) -> int | None:
    """The ``OperationStatus`` value a ``currentStatus`` names; ``None`` for one
    this client does not know (or none)."""
    try:
        return registry_pb2.OperationStatus.Value(name)
    except ValueError:
        return None


def _int(text: str) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None
