"""parameters_digest / canonical_json against the shared vectors, and against
the server's own canonicalisation."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
from google.protobuf import struct_pb2

import opreg
from opreg.digest import format_number

VECTORS = json.loads(
    (Path(__file__).resolve().parents[2] / "testdata" / "parameter_digests.json").read_text(encoding="utf-8")
)


def test_vectors_are_present() -> None:
    assert len(VECTORS) >= 16


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_shared_vector(vector: dict[str, str]) -> None:
    value = json.loads(vector["input"])
    assert opreg.canonical_json(value) == vector["canonical"]
    assert opreg.parameters_digest(value).hex() == vector["sha256"]
    assert hashlib.sha256(vector["canonical"].encode("utf-8")).hexdigest() == vector["sha256"]


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_struct_input_gives_the_same_digest(vector: dict[str, str]) -> None:
    value = json.loads(vector["input"])
    assert opreg.parameters_digest(opreg.to_struct(value)).hex() == vector["sha256"]


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (0, "0"),
        (-0.0, "0"),
        (100.0, "100"),
        (100, "100"),
        (-1.5, "-1.5"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (123e20, "1.23e+22"),
        (1e-7, "1e-7"),
        (1.5e-7, "1.5e-7"),
        (0.000001, "0.000001"),
        (0.0000015, "0.0000015"),
        (0.1, "0.1"),
        (0.30000000000000004, "0.30000000000000004"),
        (2**53, "9007199254740992"),
        (2**53 + 1, "9007199254740992"),
        (123456789012345678901, "123456789012345680000"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (999999999999999900000.0, "999999999999999900000"),
        (1e16, "10000000000000000"),
        (12345.678, "12345.678"),
    ],
)
def test_numbers_print_like_ecmascript(number: float, text: str) -> None:
    assert format_number(number) == text


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 10**400, {"a": [math.nan]}, "\ud800"])
def test_invalid_values_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        opreg.canonical_json(bad)


@pytest.mark.parametrize("bad", [{1: "a"}, b"bytes", {"a": object()}])
def test_non_json_values_are_type_errors(bad: object) -> None:
    with pytest.raises(TypeError):
        opreg.canonical_json(bad)


def test_bools_are_not_numbers() -> None:
    assert opreg.canonical_json({"t": True, "f": False, "one": 1}) == '{"f":false,"one":1,"t":true}'


def test_struct_nulls_are_dropped_like_python_none() -> None:
    struct = struct_pb2.Struct()
    struct.update({"a": None, "b": {"c": None, "d": [None]}})
    assert opreg.canonical_json(struct) == '{"b":{"d":[null]}}'


def test_server_computes_the_same_digest(client: opreg.Client, ns: str) -> None:
    """Every vector sent as a Struct is stored under the digest computed here;
    and a caller-computed digest matches parameters sent as a Struct."""
    for index, vector in enumerate(VECTORS):
        value = json.loads(vector["input"])
        key = f"vector-{index}"
        claimed = client.claim(ns, key, owner="digest-test", parameters=value)
        assert claimed.outcome == opreg.ClaimOutcome.Value("CLAIM_OUTCOME_ACQUIRED")
        assert claimed.operation.parameters_digest.hex() == vector["sha256"], vector["name"]
        again = client.claim(ns, key, owner="digest-test", parameters_digest=opreg.parameters_digest(value))
        assert again.lease.fencing_token == claimed.lease.fencing_token, vector["name"]
