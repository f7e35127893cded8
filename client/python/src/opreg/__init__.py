"""Typed Python client for opreg, the operation registry.

    import opreg

    with opreg.Client.connect("127.0.0.1:50051") as client:
        result = client.run_once("payments", "payout:42", {"amount": 100}, lambda lease: b"paid")

See README.md for the contract of :meth:`Client.run_once`.
"""

from ._convert import retry_policy, to_duration, to_struct
from ._gen.v1 import registry_pb2 as pb
from ._gen.v1.registry_pb2 import (
    ClaimOutcome,
    ClaimResponse,
    CompleteResponse,
    Execution,
    ExecutionKind,
    ExecutionOutcome,
    Failure,
    FencedWriteResponse,
    GetResourceResponse,
    Lease as LeaseMessage,
    LookupResponse,
    Operation,
    OperationStatus,
    RenewResponse,
    RetryableError,
    RetryPolicy,
    Success,
    UnknownOutcome,
)
from ._run import (
    BusinessError,
    BusinessFailure,
    Reconciliation,
    Result,
    SentButUnconfirmed,
    TransientError,
)
from .aio import AsyncClient, AsyncLease
from .client import Client, Lease
from .digest import canonical_json, parameters_digest
from .errors import (
    ERROR_DOMAIN,
    AlreadyCompensated,
    AlreadyCompleted,
    CompensationError,
    DeadlineExceeded,
    FieldViolation,
    InternalError,
    InvalidArgument,
    LeaseLost,
    LeaseNotHeld,
    NothingToCompensate,
    NotFound,
    OperationDead,
    OperationNotFound,
    OpregError,
    OriginalOutcomeUnknown,
    OutcomeNotRecorded,
    ParameterConflict,
    ReconcileRequired,
    ResourceNotFound,
    StaleFencingToken,
    Unavailable,
    from_rpc_error,
)

__version__ = "0.1.0"


def run_once(client, namespace, operation_key, parameters, work, **kwargs):  # type: ignore[no-untyped-def]
    """``client.run_once(...)``: a :class:`Result` for a :class:`Client`, an
    awaitable of one for an :class:`AsyncClient`."""
    return client.run_once(namespace, operation_key, parameters, work, **kwargs)


__all__ = [
    "pb",
    "Client",
    "AsyncClient",
    "Lease",
    "AsyncLease",
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
    "StaleFencingToken",
    "AlreadyCompleted",
    "LeaseNotHeld",
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
    "InternalError",
    "DeadlineExceeded",
    "OperationDead",
    "LeaseLost",
    "ReconcileRequired",
    "OutcomeNotRecorded",
    "from_rpc_error",
    "ClaimOutcome",
    "ClaimResponse",
    "CompleteResponse",
    "Execution",
    "ExecutionKind",
    "ExecutionOutcome",
    "Failure",
    "FencedWriteResponse",
    "GetResourceResponse",
    "LeaseMessage",
    "LookupResponse",
    "Operation",
    "OperationStatus",
    "RenewResponse",
    "RetryableError",
    "RetryPolicy",
    "Success",
    "UnknownOutcome",
]
