"""The run-once protocol's decisions (``opreg._decide``) against the shared
vectors, client/testdata/decisions.json: every vector of every section is a
case of its own, and a section added to the file fails here until it is tested.

No server: an error vector becomes the failed call a server would answer (a
google.rpc.Status with an ErrorInfo of domain "opreg" and maybe a RetryInfo, in
the ``grpc-status-details-bin`` trailer), converted by the client's own
``from_rpc_error``; an answer vector becomes the protobuf message."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from conftest import REPO
from test_conformance import kind_of
from test_errors import SynthesizedRpcError, info, retry_info

import opreg
from opreg import _decide, pb

DECISIONS: dict[str, Any] = json.loads((REPO / "client" / "testdata" / "decisions.json").read_text(encoding="utf-8"))
SETTINGS: dict[str, float] = DECISIONS["settings"]
BACKOFF = (SETTINGS["backoff_initial_ms"] / 1000, SETTINGS["backoff_max_ms"] / 1000)
POLL_INTERVAL = SETTINGS["poll_interval_ms"] / 1000
MAX_CLAIM_WAIT = SETTINGS["max_claim_wait_ms"] / 1000

# What a vector that does not name it gets: the default overall deadline, and a
# draw that a decision without jitter ignores.
REMAINING_MS = 120_000
RANDOM = 0.0

# A wait matches within a millisecond.
MS = 1


def vectors(section: str) -> Any:
    return pytest.mark.parametrize("vector", DECISIONS[section], ids=[v["name"] for v in DECISIONS[section]])


def failed_call(vector: dict[str, Any]) -> opreg.OpregError:
    """The typed error of a call that failed as the error vector says."""
    details: list[Any] = []
    if "reason" in vector:
        details.append(info(vector["reason"], **vector.get("metadata", {})))
    if "retry_delay_ms" in vector:
        details.append(retry_info(vector["retry_delay_ms"] / 1000))
    code = grpc.StatusCode[vector["code"]]
    return opreg.from_rpc_error(SynthesizedRpcError(code, vector.get("message", "refused"), details))


def raised(decide: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """What ``decide()`` returned, or the error it raised."""
    try:
        return decide(), None
    except Exception as error:  # noqa: BLE001 - a decision to raise, compared with the expected kind
        return None, error


def test_every_section_is_tested() -> None:
    tested = {"transient_error", "retry_delay", "claim_answer", "complete_error", "renew_failure", "call_in_doubt"}
    assert set(DECISIONS) - {"about", "settings"} == tested
    assert all(DECISIONS[section] for section in tested)


def test_the_settings_are_the_clients_defaults() -> None:
    assert _decide.BACKOFF == BACKOFF and _decide.POLL_INTERVAL == POLL_INTERVAL
    assert _decide.MAX_CLAIM_WAIT == MAX_CLAIM_WAIT
    helpers = (opreg.Client.run_once, opreg.AsyncClient.run_once, opreg.Worker.__init__, opreg.AsyncWorker.__init__)
    for helper in helpers:
        parameters = inspect.signature(helper).parameters
        assert parameters["transport_backoff"].default == BACKOFF, helper
        assert parameters["poll_interval"].default == POLL_INTERVAL, helper


# -- transient_error ------------------------------------------------------------------


@vectors("transient_error")
def test_transient_error(vector: dict[str, Any]) -> None:
    assert _decide.is_transient(failed_call(vector["error"])) is vector["expect"]


# -- retry_delay ----------------------------------------------------------------------


@vectors("retry_delay")
def test_retry_delay(vector: dict[str, Any]) -> None:
    asked = vector.get("retry_info_ms")
    wait = _decide.retry_delay(
        vector["attempt"], None if asked is None else asked / 1000, vector["random"], backoff=BACKOFF
    )
    assert wait * 1000 == pytest.approx(vector["expect_ms"], abs=MS)


# -- claim_answer ---------------------------------------------------------------------


def claim_response(answer: dict[str, Any]) -> pb.ClaimResponse:
    response = pb.ClaimResponse(
        outcome=pb.ClaimOutcome.Value("CLAIM_OUTCOME_" + answer["outcome"]),
        operation=pb.Operation(
            namespace="ns",
            operation_key="key",
            status=pb.OperationStatus.Value("OPERATION_STATUS_" + answer["status"]),
            result=answer.get("result", "").encode(),
            remote_ref=answer.get("remote_ref", ""),
        ),
    )
    if "failure" in answer:
        response.operation.failure.CopyFrom(pb.Failure(**answer["failure"]))
    if answer.get("lease"):
        response.lease.CopyFrom(pb.Lease(owner="me", fencing_token=7, attempt=1))
    if "retry_after_ms" in answer:
        response.retry_after.FromMilliseconds(answer["retry_after_ms"])
    if "waited_ms" in answer:
        response.waited.FromMilliseconds(answer["waited_ms"])
    return response


def claim_step(step: Any, error: BaseException | None) -> dict[str, Any]:
    """The decision in the vector's terms."""
    if error is not None:
        raised_step: dict[str, Any] = {"step": "raise", "error": kind_of(error)}
        if isinstance(error, opreg.BusinessFailure):
            raised_step.update(code=error.code, replayed=error.replayed)
        return raised_step
    if isinstance(step, _decide.Execute):
        return {"step": "execute", "reconcile": step.reconcile}
    if isinstance(step, opreg.Result):
        return {"step": "return", "value": step.value.decode(), "replayed": step.replayed}
    if isinstance(step, float):
        return {"step": "wait", "wait_ms": step * 1000}
    return {"step": f"not a step: {step!r}"}


@vectors("claim_answer")
def test_claim_answer(vector: dict[str, Any]) -> None:
    response = claim_response(vector["answer"])
    remaining = vector.get("remaining_ms", REMAINING_MS) / 1000
    random = vector.get("random", RANDOM)
    step = raised(lambda: _decide.decide_claim_answer(response, remaining, random, poll_interval=POLL_INTERVAL))
    assert claim_step(*step) == pytest.approx(vector["expect"], abs=MS)


# -- complete_error -------------------------------------------------------------------


@vectors("complete_error")
def test_complete_error(vector: dict[str, Any]) -> None:
    assert _decide.decide_complete_error(failed_call(vector["error"])) == vector["expect"]


# -- renew_failure --------------------------------------------------------------------


@vectors("renew_failure")
def test_renew_failure(vector: dict[str, Any]) -> None:
    wait = _decide.decide_renew_failure(
        failed_call(vector["error"]),
        vector["attempt"],
        vector["trusted_left_ms"] / 1000,
        vector["random"],
        backoff=BACKOFF,
    )
    decided = {"lost": True} if wait is None else {"lost": False, "wait_ms": wait * 1000}
    assert decided == pytest.approx(vector["expect"], abs=MS)


# -- call_in_doubt --------------------------------------------------------------------

REPORTS: dict[str, _decide.Outcome] = {
    "success": pb.Success(result=b"done"),
    "failure": pb.Failure(code="insufficient_funds"),
    "retryable": pb.RetryableError(error_class="TransientError", message="down"),
    "unknown": pb.UnknownOutcome(remote_ref="remote-1"),
}


def lookup_response(lookup: dict[str, Any] | None) -> pb.LookupResponse | None:
    if lookup is None:
        return None
    return pb.LookupResponse(
        operation=pb.Operation(
            namespace="ns", operation_key="key", status=pb.OperationStatus.Value("OPERATION_STATUS_" + lookup["status"])
        ),
        executions=[
            pb.Execution(
                fencing_token=execution["token"],
                outcome=pb.ExecutionOutcome.Value("EXECUTION_OUTCOME_" + execution["outcome"]),
            )
            for execution in lookup["executions"]
        ],
    )


@vectors("call_in_doubt")
def test_call_in_doubt(vector: dict[str, Any]) -> None:
    decided = _decide.decide_call_in_doubt(
        REPORTS[vector["reported"]], vector["token"], lookup_response(vector["lookup"])
    )
    assert decided == vector["expect"]
