"""The error vocabulary of proto/opreg/v1/errors.proto, matched exhaustively:
every ErrorReason has an error class, every ErrorMetadataKey a property that
reads it, and the client's source names reasons and keys only through the
enums. A reason or key added to the contract fails here until it is handled."""

from __future__ import annotations

import ast
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from test_errors import SynthesizedRpcError

import opreg
from opreg import errors
from opreg._gen.v1 import errors_pb2

SRC = Path(opreg.__file__).resolve().parent

REASONS = [v for v in errors_pb2.ErrorReason.values() if v != errors_pb2.ERROR_REASON_UNSPECIFIED]
KEYS = [v for v in errors_pb2.ErrorMetadataKey.values() if v != errors_pb2.ERROR_METADATA_KEY_UNSPECIFIED]

# The gRPC code each reason travels with (the comments of errors.proto).
CODES = {
    "INVALID_ARGUMENT": grpc.StatusCode.INVALID_ARGUMENT,
    "MESSAGE_TOO_LARGE": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "PARAMETER_CONFLICT": grpc.StatusCode.ALREADY_EXISTS,
    "STALE_FENCING_TOKEN": grpc.StatusCode.ABORTED,
    "ALREADY_COMPLETED": grpc.StatusCode.FAILED_PRECONDITION,
    "LEASE_NOT_HELD": grpc.StatusCode.FAILED_PRECONDITION,
    "ORIGINAL_OUTCOME_UNKNOWN": grpc.StatusCode.FAILED_PRECONDITION,
    "NOTHING_TO_COMPENSATE": grpc.StatusCode.FAILED_PRECONDITION,
    "ALREADY_COMPENSATED": grpc.StatusCode.FAILED_PRECONDITION,
    "INVALID_TRANSITION": grpc.StatusCode.FAILED_PRECONDITION,
    "UNAUTHENTICATED": grpc.StatusCode.UNAUTHENTICATED,
    "PERMISSION_DENIED": grpc.StatusCode.PERMISSION_DENIED,
    "OPERATION_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "RESOURCE_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "STORE_UNAVAILABLE": grpc.StatusCode.UNAVAILABLE,
    "OPERATION_BUSY": grpc.StatusCode.UNAVAILABLE,
    "OVERLOADED": grpc.StatusCode.UNAVAILABLE,
    "RATE_LIMITED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "DEADLINE_EXCEEDED": grpc.StatusCode.DEADLINE_EXCEEDED,
    "INTERNAL": grpc.StatusCode.INTERNAL,
    "OPERATION_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
    "TOO_MANY_WAITERS": grpc.StatusCode.RESOURCE_EXHAUSTED,
}

TRANSIENT = {
    "STORE_UNAVAILABLE",
    "OPERATION_BUSY",
    "OVERLOADED",
    "RATE_LIMITED",
    "DEADLINE_EXCEEDED",
    "TOO_MANY_WAITERS",
}

# A value for each metadata key and what the property reading it returns.
SAMPLES: dict[str, tuple[str, object]] = {
    "limit": ("589824", 589824),
    "storedDigest": ("00ff", b"\x00\xff"),
    "requestDigest": ("ff00", b"\xff\x00"),
    "differingFields": ("amount,account", ["amount", "account"]),
    "differingFieldsTruncated": ("true", True),
    "conflictingField": ("compensates", "compensates"),
    "presentedToken": ("7", 7),
    "currentToken": ("9", 9),
    "fencingToken": ("4", 4),
    "compensatedBy": ("refund:1", "refund:1"),
    "currentStatus": ("OPERATION_STATUS_DEAD", opreg.pb.OPERATION_STATUS_DEAD),
    "held": ("true", True),
    "principal": ("alice", "alice"),
    "namespace": ("payments", "payments"),
    "role": ("worker", "worker"),
    "callsPerSecond": ("5", 5),
}


def test_every_reason_has_an_error_class() -> None:
    missing = [errors_pb2.ErrorReason.Name(v) for v in REASONS if v not in errors.CLASS_BY_REASON]
    assert not missing, f"ErrorReason values without an error class in opreg.errors.CLASS_BY_REASON: {missing}"
    assert errors_pb2.ERROR_REASON_UNSPECIFIED not in errors.CLASS_BY_REASON


def test_every_reason_is_in_the_code_table_of_this_test() -> None:
    assert sorted(CODES) == sorted(opreg.reason_name(v) for v in REASONS)


@pytest.mark.parametrize("reason", REASONS, ids=opreg.reason_name)
def test_each_reason_decodes_to_its_class(reason: int) -> None:
    name = opreg.reason_name(reason)  # type: ignore[arg-type]
    assert name == errors_pb2.ErrorReason.Name(reason).removeprefix("ERROR_REASON_")
    info = error_details_pb2.ErrorInfo(reason=name, domain=opreg.ERROR_DOMAIN)
    error = opreg.from_rpc_error(SynthesizedRpcError(CODES[name], "refused", [info]))
    assert type(error) is errors.CLASS_BY_REASON[reason]  # type: ignore[index]
    assert error.reason == name and error.code == CODES[name]
    assert opreg.is_transient(error) == (name in TRANSIENT), name


def test_transient_by_code_without_a_reason() -> None:
    # UNAVAILABLE, DEADLINE_EXCEEDED and a server's CANCELLED "Timeout expired"
    # are vectors of client/testdata/decisions.json (tests/test_decisions.py).
    for code, message, transient in [
        (grpc.StatusCode.CANCELLED, "Cancelled", False),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "received message larger than max", False),
        (grpc.StatusCode.INTERNAL, "boom", False),
    ]:
        assert opreg.is_transient(opreg.from_rpc_error(SynthesizedRpcError(code, message))) is transient, message


def test_an_unknown_reason_falls_back_to_the_code() -> None:
    info = error_details_pb2.ErrorInfo(reason="SOMETHING_NEW", domain=opreg.ERROR_DOMAIN)
    error = opreg.from_rpc_error(SynthesizedRpcError(grpc.StatusCode.UNAVAILABLE, "new", [info]))
    assert type(error) is opreg.Unavailable and error.reason == "SOMETHING_NEW"
    unspecified = error_details_pb2.ErrorInfo(reason="UNSPECIFIED", domain=opreg.ERROR_DOMAIN)
    error = opreg.from_rpc_error(SynthesizedRpcError(grpc.StatusCode.NOT_FOUND, "?", [unspecified]))
    assert type(error) is opreg.NotFound


def test_every_metadata_key_is_read() -> None:
    missing = [errors_pb2.ErrorMetadataKey.Name(v) for v in KEYS if v not in errors.METADATA_READERS]
    assert not missing, f"ErrorMetadataKey values no property reads (opreg.errors.METADATA_READERS): {missing}"
    assert sorted(SAMPLES) == sorted(opreg.metadata_key(v) for v in KEYS)  # type: ignore[arg-type]


@pytest.mark.parametrize("key", KEYS, ids=lambda v: opreg.metadata_key(v))
def test_each_metadata_key_is_read_by_its_properties(key: int) -> None:
    wire = opreg.metadata_key(key)  # type: ignore[arg-type]
    words = errors_pb2.ErrorMetadataKey.Name(key).removeprefix("ERROR_METADATA_KEY_").lower().split("_")
    assert wire == words[0] + "".join(w.title() for w in words[1:])
    readers = errors.METADATA_READERS[key]  # type: ignore[index]
    assert readers
    raw, parsed = SAMPLES[wire]
    for cls, reader in readers:
        assert reader in vars(cls).values() or any(reader in vars(base).values() for base in cls.__mro__)
        assert reader.fget(cls("x", metadata={wire: raw})) == parsed, cls
        assert reader.fget(cls("x", metadata={})) != parsed, cls  # it is this key the property reads


def test_the_metadata_key_spelling() -> None:
    assert opreg.metadata_key(errors_pb2.ERROR_METADATA_KEY_STORED_DIGEST) == "storedDigest"
    assert opreg.metadata_key(errors_pb2.ERROR_METADATA_KEY_DIFFERING_FIELDS_TRUNCATED) == "differingFieldsTruncated"
    assert opreg.metadata_key(errors_pb2.ERROR_METADATA_KEY_LIMIT) == "limit"
    assert opreg.reason_name(errors_pb2.ERROR_REASON_PARAMETER_CONFLICT) == "PARAMETER_CONFLICT"


def test_the_client_names_no_reason_or_key_but_through_the_enums() -> None:
    """No bare reason or metadata key string literal in src/opreg (outside the
    generated code): they are spelled through ErrorReason / ErrorMetadataKey."""
    reasons = {opreg.reason_name(v) for v in REASONS}  # type: ignore[arg-type]
    keys = {opreg.metadata_key(v) for v in KEYS}  # type: ignore[arg-type]
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if "_gen" in path.relative_to(SRC).parts:
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                if node.value in reasons or node.value in keys:
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}: {node.value!r}")
    assert not found, "bare reason / metadata key literals:\n" + "\n".join(found)
