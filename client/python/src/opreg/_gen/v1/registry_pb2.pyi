import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReusePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REUSE_POLICY_UNSPECIFIED: _ClassVar[ReusePolicy]
    REUSE_POLICY_REPLAY: _ClassVar[ReusePolicy]
    REUSE_POLICY_AFTER_FAILURE: _ClassVar[ReusePolicy]
    REUSE_POLICY_REJECT_EXISTING: _ClassVar[ReusePolicy]

class ClaimOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLAIM_OUTCOME_UNSPECIFIED: _ClassVar[ClaimOutcome]
    CLAIM_OUTCOME_ACQUIRED: _ClassVar[ClaimOutcome]
    CLAIM_OUTCOME_REPLAYED: _ClassVar[ClaimOutcome]
    CLAIM_OUTCOME_IN_PROGRESS: _ClassVar[ClaimOutcome]
    CLAIM_OUTCOME_RETRY_LATER: _ClassVar[ClaimOutcome]
    CLAIM_OUTCOME_RECONCILE: _ClassVar[ClaimOutcome]
    CLAIM_OUTCOME_DEAD: _ClassVar[ClaimOutcome]
    CLAIM_OUTCOME_HELD: _ClassVar[ClaimOutcome]

class OperationStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPERATION_STATUS_UNSPECIFIED: _ClassVar[OperationStatus]
    OPERATION_STATUS_IN_PROGRESS: _ClassVar[OperationStatus]
    OPERATION_STATUS_SUCCEEDED: _ClassVar[OperationStatus]
    OPERATION_STATUS_FAILED: _ClassVar[OperationStatus]
    OPERATION_STATUS_RETRY_SCHEDULED: _ClassVar[OperationStatus]
    OPERATION_STATUS_UNKNOWN: _ClassVar[OperationStatus]
    OPERATION_STATUS_DEAD: _ClassVar[OperationStatus]

class ExecutionKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTION_KIND_UNSPECIFIED: _ClassVar[ExecutionKind]
    EXECUTION_KIND_FIRST: _ClassVar[ExecutionKind]
    EXECUTION_KIND_RETRY: _ClassVar[ExecutionKind]
    EXECUTION_KIND_TAKEOVER: _ClassVar[ExecutionKind]
    EXECUTION_KIND_RECONCILE: _ClassVar[ExecutionKind]
    EXECUTION_KIND_REUSE: _ClassVar[ExecutionKind]

class ExecutionOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTION_OUTCOME_UNSPECIFIED: _ClassVar[ExecutionOutcome]
    EXECUTION_OUTCOME_RUNNING: _ClassVar[ExecutionOutcome]
    EXECUTION_OUTCOME_SUCCEEDED: _ClassVar[ExecutionOutcome]
    EXECUTION_OUTCOME_FAILED: _ClassVar[ExecutionOutcome]
    EXECUTION_OUTCOME_RETRYABLE: _ClassVar[ExecutionOutcome]
    EXECUTION_OUTCOME_UNKNOWN: _ClassVar[ExecutionOutcome]
    EXECUTION_OUTCOME_SUPERSEDED: _ClassVar[ExecutionOutcome]
    EXECUTION_OUTCOME_REVOKED: _ClassVar[ExecutionOutcome]

class AdminAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ADMIN_ACTION_UNSPECIFIED: _ClassVar[AdminAction]
    ADMIN_ACTION_RESOLVE: _ClassVar[AdminAction]
    ADMIN_ACTION_REQUEUE: _ClassVar[AdminAction]
    ADMIN_ACTION_HOLD: _ClassVar[AdminAction]
    ADMIN_ACTION_RELEASE: _ClassVar[AdminAction]
    ADMIN_ACTION_REUSE: _ClassVar[AdminAction]
    ADMIN_ACTION_RESTORE: _ClassVar[AdminAction]
REUSE_POLICY_UNSPECIFIED: ReusePolicy
REUSE_POLICY_REPLAY: ReusePolicy
REUSE_POLICY_AFTER_FAILURE: ReusePolicy
REUSE_POLICY_REJECT_EXISTING: ReusePolicy
CLAIM_OUTCOME_UNSPECIFIED: ClaimOutcome
CLAIM_OUTCOME_ACQUIRED: ClaimOutcome
CLAIM_OUTCOME_REPLAYED: ClaimOutcome
CLAIM_OUTCOME_IN_PROGRESS: ClaimOutcome
CLAIM_OUTCOME_RETRY_LATER: ClaimOutcome
CLAIM_OUTCOME_RECONCILE: ClaimOutcome
CLAIM_OUTCOME_DEAD: ClaimOutcome
CLAIM_OUTCOME_HELD: ClaimOutcome
OPERATION_STATUS_UNSPECIFIED: OperationStatus
OPERATION_STATUS_IN_PROGRESS: OperationStatus
OPERATION_STATUS_SUCCEEDED: OperationStatus
OPERATION_STATUS_FAILED: OperationStatus
OPERATION_STATUS_RETRY_SCHEDULED: OperationStatus
OPERATION_STATUS_UNKNOWN: OperationStatus
OPERATION_STATUS_DEAD: OperationStatus
EXECUTION_KIND_UNSPECIFIED: ExecutionKind
EXECUTION_KIND_FIRST: ExecutionKind
EXECUTION_KIND_RETRY: ExecutionKind
EXECUTION_KIND_TAKEOVER: ExecutionKind
EXECUTION_KIND_RECONCILE: ExecutionKind
EXECUTION_KIND_REUSE: ExecutionKind
EXECUTION_OUTCOME_UNSPECIFIED: ExecutionOutcome
EXECUTION_OUTCOME_RUNNING: ExecutionOutcome
EXECUTION_OUTCOME_SUCCEEDED: ExecutionOutcome
EXECUTION_OUTCOME_FAILED: ExecutionOutcome
EXECUTION_OUTCOME_RETRYABLE: ExecutionOutcome
EXECUTION_OUTCOME_UNKNOWN: ExecutionOutcome
EXECUTION_OUTCOME_SUPERSEDED: ExecutionOutcome
EXECUTION_OUTCOME_REVOKED: ExecutionOutcome
ADMIN_ACTION_UNSPECIFIED: AdminAction
ADMIN_ACTION_RESOLVE: AdminAction
ADMIN_ACTION_REQUEUE: AdminAction
ADMIN_ACTION_HOLD: AdminAction
ADMIN_ACTION_RELEASE: AdminAction
ADMIN_ACTION_REUSE: AdminAction
ADMIN_ACTION_RESTORE: AdminAction

class BatchClaimRequest(_message.Message):
    __slots__ = ("claims",)
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.RepeatedCompositeFieldContainer[ClaimRequest]
    def __init__(self, claims: _Optional[_Iterable[_Union[ClaimRequest, _Mapping]]] = ...) -> None: ...

class BatchClaimResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[BatchClaimResult]
    def __init__(self, results: _Optional[_Iterable[_Union[BatchClaimResult, _Mapping]]] = ...) -> None: ...

class BatchClaimResult(_message.Message):
    __slots__ = ("claim", "error")
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    claim: ClaimResponse
    error: _status_pb2.Status
    def __init__(self, claim: _Optional[_Union[ClaimResponse, _Mapping]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ...) -> None: ...

class BatchCompleteRequest(_message.Message):
    __slots__ = ("completions",)
    COMPLETIONS_FIELD_NUMBER: _ClassVar[int]
    completions: _containers.RepeatedCompositeFieldContainer[CompleteRequest]
    def __init__(self, completions: _Optional[_Iterable[_Union[CompleteRequest, _Mapping]]] = ...) -> None: ...

class BatchCompleteResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[BatchCompleteResult]
    def __init__(self, results: _Optional[_Iterable[_Union[BatchCompleteResult, _Mapping]]] = ...) -> None: ...

class BatchCompleteResult(_message.Message):
    __slots__ = ("completed", "error")
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    completed: CompleteResponse
    error: _status_pb2.Status
    def __init__(self, completed: _Optional[_Union[CompleteResponse, _Mapping]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ...) -> None: ...

class ClaimRequest(_message.Message):
    __slots__ = ("namespace", "operation_key", "parameters", "parameters_digest", "owner", "execution_id", "lease_ttl", "retry_policy", "compensates", "wait", "reuse")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    COMPENSATES_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    REUSE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    operation_key: str
    parameters: _struct_pb2.Struct
    parameters_digest: bytes
    owner: str
    execution_id: str
    lease_ttl: _duration_pb2.Duration
    retry_policy: RetryPolicy
    compensates: str
    wait: _duration_pb2.Duration
    reuse: ReusePolicy
    def __init__(self, namespace: _Optional[str] = ..., operation_key: _Optional[str] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., parameters_digest: _Optional[bytes] = ..., owner: _Optional[str] = ..., execution_id: _Optional[str] = ..., lease_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., retry_policy: _Optional[_Union[RetryPolicy, _Mapping]] = ..., compensates: _Optional[str] = ..., wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., reuse: _Optional[_Union[ReusePolicy, str]] = ...) -> None: ...

class RetryPolicy(_message.Message):
    __slots__ = ("max_attempts", "initial_backoff", "max_backoff", "deadline")
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    max_attempts: int
    initial_backoff: _duration_pb2.Duration
    max_backoff: _duration_pb2.Duration
    deadline: _duration_pb2.Duration
    def __init__(self, max_attempts: _Optional[int] = ..., initial_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., deadline: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ClaimResponse(_message.Message):
    __slots__ = ("outcome", "lease", "operation", "retry_after", "waited")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    WAITED_FIELD_NUMBER: _ClassVar[int]
    outcome: ClaimOutcome
    lease: Lease
    operation: Operation
    retry_after: _duration_pb2.Duration
    waited: _duration_pb2.Duration
    def __init__(self, outcome: _Optional[_Union[ClaimOutcome, str]] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., operation: _Optional[_Union[Operation, _Mapping]] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., waited: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("owner", "fencing_token", "expires_at", "attempt", "takeover")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TAKEOVER_FIELD_NUMBER: _ClassVar[int]
    owner: str
    fencing_token: int
    expires_at: _timestamp_pb2.Timestamp
    attempt: int
    takeover: bool
    def __init__(self, owner: _Optional[str] = ..., fencing_token: _Optional[int] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., attempt: _Optional[int] = ..., takeover: _Optional[bool] = ...) -> None: ...

class CompleteRequest(_message.Message):
    __slots__ = ("namespace", "operation_key", "fencing_token", "success", "failure", "retryable", "unknown")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    operation_key: str
    fencing_token: int
    success: Success
    failure: Failure
    retryable: RetryableError
    unknown: UnknownOutcome
    def __init__(self, namespace: _Optional[str] = ..., operation_key: _Optional[str] = ..., fencing_token: _Optional[int] = ..., success: _Optional[_Union[Success, _Mapping]] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ..., retryable: _Optional[_Union[RetryableError, _Mapping]] = ..., unknown: _Optional[_Union[UnknownOutcome, _Mapping]] = ...) -> None: ...

class Success(_message.Message):
    __slots__ = ("result", "result_ref")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RESULT_REF_FIELD_NUMBER: _ClassVar[int]
    result: bytes
    result_ref: str
    def __init__(self, result: _Optional[bytes] = ..., result_ref: _Optional[str] = ...) -> None: ...

class Failure(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class RetryableError(_message.Message):
    __slots__ = ("error_class", "message", "retry_after")
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    error_class: str
    message: str
    retry_after: _duration_pb2.Duration
    def __init__(self, error_class: _Optional[str] = ..., message: _Optional[str] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class UnknownOutcome(_message.Message):
    __slots__ = ("remote_ref", "message")
    REMOTE_REF_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    remote_ref: str
    message: str
    def __init__(self, remote_ref: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class CompleteResponse(_message.Message):
    __slots__ = ("operation",)
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("namespace", "operation_key", "include_executions", "include_parameters", "include_audit", "wait", "changed_from")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_AUDIT_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FROM_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    operation_key: str
    include_executions: bool
    include_parameters: bool
    include_audit: bool
    wait: _duration_pb2.Duration
    changed_from: OperationStatus
    def __init__(self, namespace: _Optional[str] = ..., operation_key: _Optional[str] = ..., include_executions: _Optional[bool] = ..., include_parameters: _Optional[bool] = ..., include_audit: _Optional[bool] = ..., wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., changed_from: _Optional[_Union[OperationStatus, str]] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("operation", "executions", "audit", "waited")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    AUDIT_FIELD_NUMBER: _ClassVar[int]
    WAITED_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    executions: _containers.RepeatedCompositeFieldContainer[Execution]
    audit: _containers.RepeatedCompositeFieldContainer[AuditEntry]
    waited: _duration_pb2.Duration
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ..., executions: _Optional[_Iterable[_Union[Execution, _Mapping]]] = ..., audit: _Optional[_Iterable[_Union[AuditEntry, _Mapping]]] = ..., waited: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ClaimDueRequest(_message.Message):
    __slots__ = ("namespace", "owner", "execution_id", "lease_ttl", "limit")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    owner: str
    execution_id: str
    lease_ttl: _duration_pb2.Duration
    limit: int
    def __init__(self, namespace: _Optional[str] = ..., owner: _Optional[str] = ..., execution_id: _Optional[str] = ..., lease_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., limit: _Optional[int] = ...) -> None: ...

class ClaimDueResponse(_message.Message):
    __slots__ = ("operations",)
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    operations: _containers.RepeatedCompositeFieldContainer[DueOperation]
    def __init__(self, operations: _Optional[_Iterable[_Union[DueOperation, _Mapping]]] = ...) -> None: ...

class DueOperation(_message.Message):
    __slots__ = ("outcome", "lease", "operation")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    outcome: ClaimOutcome
    lease: Lease
    operation: Operation
    def __init__(self, outcome: _Optional[_Union[ClaimOutcome, str]] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class RenewRequest(_message.Message):
    __slots__ = ("namespace", "operation_key", "owner", "fencing_token", "lease_ttl")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    operation_key: str
    owner: str
    fencing_token: int
    lease_ttl: _duration_pb2.Duration
    def __init__(self, namespace: _Optional[str] = ..., operation_key: _Optional[str] = ..., owner: _Optional[str] = ..., fencing_token: _Optional[int] = ..., lease_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class RenewResponse(_message.Message):
    __slots__ = ("lease",)
    LEASE_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...

class FencedWriteRequest(_message.Message):
    __slots__ = ("namespace", "resource", "operation_key", "fencing_token", "value")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    resource: str
    operation_key: str
    fencing_token: int
    value: bytes
    def __init__(self, namespace: _Optional[str] = ..., resource: _Optional[str] = ..., operation_key: _Optional[str] = ..., fencing_token: _Optional[int] = ..., value: _Optional[bytes] = ...) -> None: ...

class FencedWriteResponse(_message.Message):
    __slots__ = ("fence", "version")
    FENCE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    fence: int
    version: int
    def __init__(self, fence: _Optional[int] = ..., version: _Optional[int] = ...) -> None: ...

class GetResourceRequest(_message.Message):
    __slots__ = ("namespace", "resource")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    resource: str
    def __init__(self, namespace: _Optional[str] = ..., resource: _Optional[str] = ...) -> None: ...

class GetResourceResponse(_message.Message):
    __slots__ = ("value", "fence", "version", "updated_at", "operation_key")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    value: bytes
    fence: int
    version: int
    updated_at: _timestamp_pb2.Timestamp
    operation_key: str
    def __init__(self, value: _Optional[bytes] = ..., fence: _Optional[int] = ..., version: _Optional[int] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., operation_key: _Optional[str] = ...) -> None: ...

class Operation(_message.Message):
    __slots__ = ("namespace", "operation_key", "status", "parameters_digest", "result", "result_ref", "failure", "attempts", "lease", "next_attempt_at", "remote_ref", "reconciling", "compensates", "compensated_by", "created_at", "updated_at", "completed_at", "last_error_class", "last_error_message", "held", "held_at", "parameters")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RESULT_REF_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    REMOTE_REF_FIELD_NUMBER: _ClassVar[int]
    RECONCILING_FIELD_NUMBER: _ClassVar[int]
    COMPENSATES_FIELD_NUMBER: _ClassVar[int]
    COMPENSATED_BY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    HELD_AT_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    operation_key: str
    status: OperationStatus
    parameters_digest: bytes
    result: bytes
    result_ref: str
    failure: Failure
    attempts: int
    lease: Lease
    next_attempt_at: _timestamp_pb2.Timestamp
    remote_ref: str
    reconciling: bool
    compensates: str
    compensated_by: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    completed_at: _timestamp_pb2.Timestamp
    last_error_class: str
    last_error_message: str
    held: bool
    held_at: _timestamp_pb2.Timestamp
    parameters: _struct_pb2.Struct
    def __init__(self, namespace: _Optional[str] = ..., operation_key: _Optional[str] = ..., status: _Optional[_Union[OperationStatus, str]] = ..., parameters_digest: _Optional[bytes] = ..., result: _Optional[bytes] = ..., result_ref: _Optional[str] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ..., attempts: _Optional[int] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., next_attempt_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., remote_ref: _Optional[str] = ..., reconciling: _Optional[bool] = ..., compensates: _Optional[str] = ..., compensated_by: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., completed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_error_class: _Optional[str] = ..., last_error_message: _Optional[str] = ..., held: _Optional[bool] = ..., held_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class Execution(_message.Message):
    __slots__ = ("attempt", "execution_id", "owner", "fencing_token", "started_at", "finished_at", "outcome", "error_class", "message", "kind")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    execution_id: str
    owner: str
    fencing_token: int
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    outcome: ExecutionOutcome
    error_class: str
    message: str
    kind: ExecutionKind
    def __init__(self, attempt: _Optional[int] = ..., execution_id: _Optional[str] = ..., owner: _Optional[str] = ..., fencing_token: _Optional[int] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., outcome: _Optional[_Union[ExecutionOutcome, str]] = ..., error_class: _Optional[str] = ..., message: _Optional[str] = ..., kind: _Optional[_Union[ExecutionKind, str]] = ...) -> None: ...

class AuditEntry(_message.Message):
    __slots__ = ("action", "operator", "reason", "revision", "principal", "status_before", "status_after", "token_before", "token_after", "at", "held_before", "held_after")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    STATUS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    STATUS_AFTER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_BEFORE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_AFTER_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    HELD_BEFORE_FIELD_NUMBER: _ClassVar[int]
    HELD_AFTER_FIELD_NUMBER: _ClassVar[int]
    action: AdminAction
    operator: str
    reason: str
    revision: str
    principal: str
    status_before: OperationStatus
    status_after: OperationStatus
    token_before: int
    token_after: int
    at: _timestamp_pb2.Timestamp
    held_before: bool
    held_after: bool
    def __init__(self, action: _Optional[_Union[AdminAction, str]] = ..., operator: _Optional[str] = ..., reason: _Optional[str] = ..., revision: _Optional[str] = ..., principal: _Optional[str] = ..., status_before: _Optional[_Union[OperationStatus, str]] = ..., status_after: _Optional[_Union[OperationStatus, str]] = ..., token_before: _Optional[int] = ..., token_after: _Optional[int] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., held_before: _Optional[bool] = ..., held_after: _Optional[bool] = ...) -> None: ...
