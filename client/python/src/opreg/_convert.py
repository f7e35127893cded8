"""Conversions between Python values and the contract's messages (the request
messages themselves are built in ``_rpc``)."""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import duration_pb2, struct_pb2

from ._gen.v1 import registry_pb2 as pb

Seconds = float | int | datetime.timedelta | duration_pb2.Duration
Parameters = Mapping[str, Any] | struct_pb2.Struct


def seconds(value: Seconds) -> float:
    if isinstance(value, duration_pb2.Duration):
        return value.seconds + value.nanos / 1e9
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    return float(value)


def to_duration(value: Seconds) -> duration_pb2.Duration:
    """A ``google.protobuf.Duration`` from seconds, a ``timedelta`` or a Duration."""
    if isinstance(value, duration_pb2.Duration):
        return value
    if isinstance(value, datetime.timedelta):
        duration = duration_pb2.Duration()
        duration.FromTimedelta(value)
        return duration
    number = float(value)
    if math.isnan(number) or math.isinf(number) or number < 0:
        raise ValueError(f"a duration must be finite and not negative, not {value!r}")
    nanos_total = round(number * 1e9)
    return duration_pb2.Duration(seconds=nanos_total // 1_000_000_000, nanos=nanos_total % 1_000_000_000)


def from_duration(duration: duration_pb2.Duration) -> float:
    return duration.seconds + duration.nanos / 1e9


def to_struct(parameters: Parameters) -> struct_pb2.Struct:
    """A ``google.protobuf.Struct`` from a mapping of JSON values.

    Numbers become doubles (as in JSON); ``None`` becomes ``null`` (which the
    server's canonical form drops from objects).
    """
    if isinstance(parameters, struct_pb2.Struct):
        return parameters
    if not isinstance(parameters, Mapping):
        raise TypeError(f"parameters must be a mapping or a Struct, not {type(parameters).__name__}")
    struct = struct_pb2.Struct()
    for name, value in parameters.items():
        if not isinstance(name, str):
            raise TypeError(f"parameter names must be str, not {type(name).__name__}")
        struct.fields[name].CopyFrom(_to_value(value))
    return struct


def _to_value(value: Any) -> struct_pb2.Value:
    if isinstance(value, struct_pb2.Value):
        return value
    out = struct_pb2.Value()
    if value is None:
        out.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, (int, float)):
        try:
            out.number_value = float(value)
        except OverflowError:
            raise ValueError(f"{value} is beyond the range of a JSON number (IEEE double)") from None
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, (Mapping, struct_pb2.Struct)):
        out.struct_value.CopyFrom(to_struct(value))
    elif isinstance(value, struct_pb2.ListValue):
        out.list_value.CopyFrom(value)
    elif isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        out.list_value.values.extend(_to_value(item) for item in value)
    else:
        raise TypeError(f"{type(value).__name__} is not a JSON value")
    return out


def retry_policy(
    *,
    max_attempts: int,
    initial_backoff: Seconds,
    max_backoff: Seconds,
    deadline: Seconds,
) -> pb.RetryPolicy:
    """A ``RetryPolicy`` message. The server takes a policy whole (every field
    is required); leave ``retry_policy`` unset for the server's defaults."""
    policy = pb.RetryPolicy(max_attempts=max_attempts)
    policy.initial_backoff.CopyFrom(to_duration(initial_backoff))
    policy.max_backoff.CopyFrom(to_duration(max_backoff))
    policy.deadline.CopyFrom(to_duration(deadline))
    return policy
