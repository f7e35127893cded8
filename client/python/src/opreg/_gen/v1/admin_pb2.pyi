import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from opreg._gen.v1 import registry_pb2 as _registry_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListOperationsRequest(_message.Message):
    __slots__ = ("namespace", "statuses", "expired_leases_only", "older_than", "held_only", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_LEASES_ONLY_FIELD_NUMBER: _ClassVar[int]
    OLDER_THAN_FIELD_NUMBER: _ClassVar[int]
    HELD_ONLY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    statuses: _containers.RepeatedScalarFieldContainer[_registry_pb2.OperationStatus]
    expired_leases_only: bool
    older_than: _duration_pb2.Duration
    held_only: bool
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., statuses: _Optional[_Iterable[_Union[_registry_pb2.OperationStatus, str]]] = ..., expired_leases_only: _Optional[bool] = ..., older_than: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., held_only: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListOperationsResponse(_message.Message):
    __slots__ = ("operations", "next_page_token")
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    operations: _containers.RepeatedCompositeFieldContainer[_registry_pb2.Operation]
    next_page_token: str
    def __init__(self, operations: _Optional[_Iterable[_Union[_registry_pb2.Operation, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ResolveOperationRequest(_message.Message):
    __slots__ = ("namespace", "operation_key", "operator", "reason", "success", "failure")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    operation_key: str
    operator: str
    reason: str
    success: _registry_pb2.Success
    failure: _registry_pb2.Failure
    def __init__(self, namespace: _Optional[str] = ..., operation_key: _Optional[str] = ..., operator: _Optional[str] = ..., reason: _Optional[str] = ..., success: _Optional[_Union[_registry_pb2.Success, _Mapping]] = ..., failure: _Optional[_Union[_registry_pb2.Failure, _Mapping]] = ...) -> None: ...

class RequeueOperationRequest(_message.Message):
    __slots__ = ("namespace", "operation_key", "operator", "reason", "revision", "retry_policy")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    operation_key: str
    operator: str
    reason: str
    revision: str
    retry_policy: _registry_pb2.RetryPolicy
    def __init__(self, namespace: _Optional[str] = ..., operation_key: _Optional[str] = ..., operator: _Optional[str] = ..., reason: _Optional[str] = ..., revision: _Optional[str] = ..., retry_policy: _Optional[_Union[_registry_pb2.RetryPolicy, _Mapping]] = ...) -> None: ...

class HoldOperationRequest(_message.Message):
    __slots__ = ("namespace", "operation_key", "operator", "reason")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    operation_key: str
    operator: str
    reason: str
    def __init__(self, namespace: _Optional[str] = ..., operation_key: _Optional[str] = ..., operator: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ReleaseOperationRequest(_message.Message):
    __slots__ = ("namespace", "operation_key", "operator", "reason")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    operation_key: str
    operator: str
    reason: str
    def __init__(self, namespace: _Optional[str] = ..., operation_key: _Optional[str] = ..., operator: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ResolveOperationResponse(_message.Message):
    __slots__ = ("operation", "audit")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    AUDIT_FIELD_NUMBER: _ClassVar[int]
    operation: _registry_pb2.Operation
    audit: _registry_pb2.AuditEntry
    def __init__(self, operation: _Optional[_Union[_registry_pb2.Operation, _Mapping]] = ..., audit: _Optional[_Union[_registry_pb2.AuditEntry, _Mapping]] = ...) -> None: ...

class RequeueOperationResponse(_message.Message):
    __slots__ = ("operation", "audit")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    AUDIT_FIELD_NUMBER: _ClassVar[int]
    operation: _registry_pb2.Operation
    audit: _registry_pb2.AuditEntry
    def __init__(self, operation: _Optional[_Union[_registry_pb2.Operation, _Mapping]] = ..., audit: _Optional[_Union[_registry_pb2.AuditEntry, _Mapping]] = ...) -> None: ...

class HoldOperationResponse(_message.Message):
    __slots__ = ("operation", "audit")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    AUDIT_FIELD_NUMBER: _ClassVar[int]
    operation: _registry_pb2.Operation
    audit: _registry_pb2.AuditEntry
    def __init__(self, operation: _Optional[_Union[_registry_pb2.Operation, _Mapping]] = ..., audit: _Optional[_Union[_registry_pb2.AuditEntry, _Mapping]] = ...) -> None: ...

class ReleaseOperationResponse(_message.Message):
    __slots__ = ("operation", "audit")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    AUDIT_FIELD_NUMBER: _ClassVar[int]
    operation: _registry_pb2.Operation
    audit: _registry_pb2.AuditEntry
    def __init__(self, operation: _Optional[_Union[_registry_pb2.Operation, _Mapping]] = ..., audit: _Optional[_Union[_registry_pb2.AuditEntry, _Mapping]] = ...) -> None: ...
