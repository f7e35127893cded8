"""Parameter digests: RFC 8785 canonical JSON hashed with SHA-256.

The rule is shared with the server and every client (see the repository README):

- object members whose value is ``null`` are dropped, at every depth; ``null``
  inside an array is kept;
- members are ordered by the UTF-16 code units of their names;
- numbers are written as ECMAScript's ``Number.prototype.toString`` writes them
  (``100.0`` -> ``100``, ``1e21`` -> ``1e+21``, ``-0`` -> ``0``); NaN and the
  infinities are invalid. Python ``int`` values are JSON numbers, i.e. IEEE
  doubles, exactly as ``JSON.parse`` would read them;
- strings escape only ``"``, ``\\`` and control characters below U+0020;
- the digest is SHA-256 over the UTF-8 bytes of that text.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import struct_pb2

__all__ = ["canonical_json", "parameters_digest", "format_number"]

_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')
_SURROGATE = re.compile("[\ud800-\udfff]")


def parameters_digest(value: Any) -> bytes:
    """SHA-256 of :func:`canonical_json` of ``value`` (32 bytes).

    Send it as ``ClaimRequest.parameters_digest``; it matches what the server
    computes from the same parameters sent as a ``Struct``.
    """
    return hashlib.sha256(canonical_json(value).encode("utf-8")).digest()


def canonical_json(value: Any) -> str:
    """The canonical JSON text of ``value``.

    Accepts ``dict`` (string keys), ``list``/``tuple``, ``str``, ``bool``,
    ``int``, ``float``, ``None`` and protobuf ``Struct``/``Value``/``ListValue``.
    Raises ``ValueError`` for NaN, infinities, integers beyond the double range
    and lone surrogates, ``TypeError`` for anything else.
    """
    out: list[str] = []
    _write(out, value)
    return "".join(out)


def _write(out: list[str], value: Any) -> None:
    if isinstance(value, struct_pb2.Value):
        value = _from_value(value)
    elif isinstance(value, struct_pb2.Struct):
        value = _from_struct(value)
    elif isinstance(value, struct_pb2.ListValue):
        value = [_from_value(v) for v in value.values]

    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, (int, float)):
        out.append(format_number(value))
    elif isinstance(value, str):
        _write_string(out, value)
    elif isinstance(value, Mapping):
        members = []
        for name, member in value.items():
            if not isinstance(name, str):
                raise TypeError(f"object member names must be str, not {type(name).__name__}")
            if member is None or (
                isinstance(member, struct_pb2.Value) and member.WhichOneof("kind") in (None, "null_value")
            ):
                continue
            members.append((name, member))
        members.sort(key=lambda m: m[0].encode("utf-16-be", "surrogatepass"))
        out.append("{")
        for index, (name, member) in enumerate(members):
            if index:
                out.append(",")
            _write_string(out, name)
            out.append(":")
            _write(out, member)
        out.append("}")
    elif isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _write(out, item)
        out.append("]")
    else:
        raise TypeError(f"{type(value).__name__} is not a JSON value")


def _write_string(out: list[str], text: str) -> None:
    if _SURROGATE.search(text):
        raise ValueError("strings must not contain lone surrogates")
    out.append('"')
    out.append(_NEEDS_ESCAPE.sub(_escape, text))
    out.append('"')


def _escape(match: re.Match[str]) -> str:
    char = match.group(0)
    return _SHORT_ESCAPES.get(char) or f"\\u{ord(char):04x}"


def format_number(number: int | float) -> str:
    """``number`` as ECMAScript's ``Number.prototype.toString`` writes it."""
    if isinstance(number, bool):
        raise TypeError("a bool is not a number")
    try:
        x = float(number)
    except OverflowError:
        raise ValueError(f"{number} is beyond the range of a JSON number (IEEE double)") from None
    if math.isnan(x) or math.isinf(x):
        raise ValueError("NaN and infinite numbers are not valid JSON")
    if x == 0:
        return "0"  # also -0
    if x < 0:
        return "-" + format_number(-x)

    # repr() gives the shortest digits that round-trip, like ECMAScript.
    # Rewrite them as digits d1..dk and n with x = 0.d1..dk * 10^n.
    mantissa, _, exponent = repr(x).partition("e")
    whole, _, fraction = mantissa.partition(".")
    if fraction == "0":
        fraction = ""
    digits = whole + fraction
    n = len(whole) + (int(exponent) if exponent else 0)
    stripped = digits.lstrip("0")
    n -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    k = len(digits)

    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    e = n - 1
    sign = "+" if e >= 0 else "-"
    head = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{head}e{sign}{abs(e)}"


def _from_struct(struct: struct_pb2.Struct) -> dict[str, Any]:
    return {name: _from_value(v) for name, v in struct.fields.items()}


def _from_value(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return None
    if kind == "bool_value":
        return value.bool_value
    if kind == "number_value":
        return value.number_value
    if kind == "string_value":
        return value.string_value
    if kind == "list_value":
        return [_from_value(v) for v in value.list_value.values]
    return _from_struct(value.struct_value)
