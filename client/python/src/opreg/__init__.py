"""Typed Python client for opreg, the operation registry.

    import opreg

    with opreg.Client.connect("127.0.0.1:50051") as client:
        result = client.run_once("payments", "payout:42", {"amount": 100}, lambda lease: b"paid")

See README.md for the contract of :meth:`Client.run_once`, of the worker
(:class:`Worker`, :class:`AsyncWorker`) and of the OperationAdmin calls.
"""

from importlib.metadata import PackageNotFoundError, version

from ._convert import retry_policy, to_duration, to_struct
from ._gen.v1 import admin_pb2 as admin_pb
from ._gen.v1 import registry_pb2 as pb
from ._gen.v1.admin_pb2 import (
    HoldOperationResponse,
    ListOperationsResponse,
    ReleaseOperationResponse,
    RequeueOperationResponse,
    ResolveOperationResponse,
)
from ._gen.v1.registry_pb2 import (
    AdminAction,
    AuditEntry,
    BatchClaimResponse,
    BatchClaimResult,
    BatchCompleteResponse,
    BatchCompleteResult,
    ClaimDueResponse,
    ClaimOutcome,
    ClaimResponse,
    CompleteResponse,
    DueOperation,
    Execution,
    ExecutionKind,
    ExecutionOutcome,
    Failure,
    FencedWriteResponse,
    GetResourceResponse,
    LookupResponse,
    Operation,
    OperationStatus,
    RenewResponse,
    RetryableError,
    RetryPolicy,
    ReusePolicy,
    Success,
    UnknownOutcome,
)
from ._gen.v1.registry_pb2 import (
    Lease as LeaseMessage,
)
from ._outcomes import (
    BusinessError,
    BusinessFailure,
    Reconciliation,
    Result,
    SentButUnconfirmed,
    TransientError,
)
from ._worker import NO_HANDLER, NoHandler, WorkerStopped, kind_of
from .aio import AsyncClient, AsyncLease, AsyncWorker
from .client import Client, Lease, Worker
from .digest import canonical_json, parameters_digest
from .errors import (
    ERROR_DOMAIN,
    AlreadyCompensated,
    AlreadyCompleted,
    CompensationError,
    DeadlineExceeded,
    ErrorMetadataKey,
    ErrorReason,
    FieldViolation,
    InternalError,
    InvalidArgument,
    InvalidTransition,
    LeaseLost,
    LeaseNotHeld,
    MessageTooLarge,
    NotFound,
    NothingToCompensate,
    OperationBusy,
    OperationDead,
    OperationExists,
    OperationHeld,
    OperationNotFound,
    OpregError,
    OriginalOutcomeUnknown,
    OutcomeNotRecorded,
    OutcomeUnknown,
    ParameterConflict,
    PermissionDenied,
    RateLimited,
    ReconcileRequired,
    ResourceNotFound,
    StaleFencingToken,
    TooManyWaiters,
    Unauthenticated,
    Unavailable,
    from_rpc_error,
    is_transient,
    metadata_key,
    reason_name,
)

try:
    __version__ = version("opreg")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"


def run_once(client, namespace, operation_key, parameters, work, **kwargs):  # type: ignore[no-untyped-def]
    """``client.run_once(...)``: a :class:`Result` for a :class:`Client`, an
    awaitable of one for an :class:`AsyncClient`."""
    return client.run_once(namespace, operation_key, parameters, work, **kwargs)


__all__ = [
    "pb",
    "admin_pb",
    "Client",
    "AsyncClient",
    "Lease",
    "AsyncLease",
    "Worker",
    "AsyncWorker",
    "kind_of",
    "NO_HANDLER",
    "NoHandler",
    "WorkerStopped",
    "run_once",
    "Result",
    "Reconciliation",
    "BusinessError",
    "BusinessFailure",
    "TransientError",
    "SentButUnconfirmed",
    "canonical_json",
    "parameters_digest",
    "retry_policy",
    "to_duration",
    "to_struct",
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
    "ReconcileRequired",
    "OutcomeNotRecorded",
    "OutcomeUnknown",
    "ErrorReason",
    "ErrorMetadataKey",
    "reason_name",
    "metadata_key",
    "is_transient",
    "from_rpc_error",
    "__version__",
    "AdminAction",
    "AuditEntry",
    "BatchClaimResponse",
    "BatchClaimResult",
    "BatchCompleteResponse",
    "BatchCompleteResult",
    "ClaimDueResponse",
    "ClaimOutcome",
    "ClaimResponse",
    "CompleteResponse",
    "DueOperation",
    "Execution",
    "ExecutionKind",
    "ExecutionOutcome",
    "Failure",
    "FencedWriteResponse",
    "GetResourceResponse",
    "HoldOperationResponse",
    "LeaseMessage",
    "ListOperationsResponse",
    "LookupResponse",
    "Operation",
    "OperationStatus",
    "ReleaseOperationResponse",
    "RenewResponse",
    "RequeueOperationResponse",
    "ResolveOperationResponse",
    "RetryableError",
    "RetryPolicy",
    "ReusePolicy",
    "Success",
    "UnknownOutcome",
]
