"""The thin RPC wrappers and the typed errors, against the real server."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

import opreg
from opreg import pb


def acquire(client: opreg.Client, ns: str, key: str, owner: str = "owner-a", **kwargs: object) -> pb.ClaimResponse:
    response = client.claim(ns, key, owner=owner, parameters={"amount": 100, "account": "A"}, **kwargs)
    assert response.outcome == pb.CLAIM_OUTCOME_ACQUIRED
    return response


def test_claim_renew_write_complete_lookup(client: opreg.Client, ns: str) -> None:
    claimed = client.claim(
        ns,
        "op-1",
        owner="owner-a",
        parameters={"amount": 100, "account": "A", "note": None},
        execution_id="run-1",
        lease_ttl=5,
        retry_policy=opreg.retry_policy(max_attempts=3, initial_backoff=0.1, max_backoff=1, deadline=3600),
    )
    assert claimed.outcome == pb.CLAIM_OUTCOME_ACQUIRED
    token = claimed.lease.fencing_token
    assert token > 0 and claimed.lease.owner == "owner-a" and claimed.lease.attempt == 1
    assert claimed.operation.status == pb.OPERATION_STATUS_IN_PROGRESS
    assert claimed.operation.parameters_digest == opreg.parameters_digest({"account": "A", "amount": 100.0})

    # The live holder resumes its lease: same token, no new execution.
    resumed = client.claim(ns, "op-1", owner="owner-a", parameters={"account": "A", "amount": 100})
    assert resumed.outcome == pb.CLAIM_OUTCOME_ACQUIRED and resumed.lease.fencing_token == token
    # Anyone else is told to wait.
    other = client.claim(ns, "op-1", owner="owner-b", parameters={"account": "A", "amount": 100})
    assert other.outcome == pb.CLAIM_OUTCOME_IN_PROGRESS
    assert 0 < opreg.to_duration(other.retry_after).ToTimedelta().total_seconds() <= 5

    renewed = client.renew(ns, "op-1", owner="owner-a", fencing_token=token, lease_ttl=10)
    assert renewed.lease.fencing_token == token
    assert renewed.lease.expires_at.ToDatetime() > claimed.lease.expires_at.ToDatetime()

    written = client.fenced_write(ns, "balance:A", operation_key="op-1", fencing_token=token, value=b"900")
    assert written.fence == token and written.version == 1
    resource = client.get_resource(ns, "balance:A")
    assert (resource.value, resource.fence, resource.version, resource.operation_key) == (b"900", token, 1, "op-1")

    completed = client.complete(
        ns, "op-1", fencing_token=token, outcome=opreg.Success(result=b"balance=900", result_ref="ledger-1")
    )
    assert completed.operation.status == pb.OPERATION_STATUS_SUCCEEDED
    # Repeating the same report is safe.
    again = client.complete(
        ns, "op-1", fencing_token=token, outcome=opreg.Success(result=b"balance=900", result_ref="ledger-1")
    )
    assert again.operation.status == pb.OPERATION_STATUS_SUCCEEDED

    replay = client.claim(ns, "op-1", owner="owner-c", parameters={"account": "A", "amount": 100})
    assert replay.outcome == pb.CLAIM_OUTCOME_REPLAYED
    assert (replay.operation.result, replay.operation.result_ref) == (b"balance=900", "ledger-1")

    looked = client.lookup(ns, "op-1", include_executions=True)
    assert looked.operation.status == pb.OPERATION_STATUS_SUCCEEDED
    assert [(e.kind, e.outcome, e.execution_id, e.fencing_token) for e in looked.executions] == [
        (pb.EXECUTION_KIND_FIRST, pb.EXECUTION_OUTCOME_SUCCEEDED, "run-1", token)
    ]
    assert list(client.lookup(ns, "op-1").executions) == []


def test_batch_claim_and_batch_complete_answer_each_item_in_request_order(client: opreg.Client, ns: str) -> None:
    claimed = client.batch_claim(
        [
            {"namespace": ns, "operation_key": "a", "owner": "w1", "parameters": {"n": 1}},
            {"namespace": ns, "operation_key": "b", "owner": "w1", "parameters": {"n": 2}},
            # The first key again, for another owner while w1's lease is live.
            {"namespace": ns, "operation_key": "a", "owner": "w2", "parameters": {"n": 1}},
        ]
    )
    assert [r.claim.outcome for r in claimed.results] == [
        pb.CLAIM_OUTCOME_ACQUIRED,
        pb.CLAIM_OUTCOME_ACQUIRED,
        pb.CLAIM_OUTCOME_IN_PROGRESS,
    ]

    tokens = [r.claim.lease.fencing_token for r in claimed.results[:2]]
    completed = client.batch_complete(
        [
            {"namespace": ns, "operation_key": key, "fencing_token": token, "outcome": opreg.Success()}
            for key, token in zip(["a", "b"], tokens, strict=True)
        ]
    )
    assert [r.completed.operation.status for r in completed.results] == [pb.OPERATION_STATUS_SUCCEEDED] * 2


def test_batch_claim_answers_an_invalid_claim_with_an_error_result(client: opreg.Client, ns: str) -> None:
    results = client.batch_claim(
        [
            {"namespace": ns, "operation_key": "", "owner": "w", "parameters": {}},
            pb.ClaimRequest(namespace=ns, operation_key="valid", owner="w", parameters=opreg.to_struct({})),
        ]
    ).results
    assert [r.WhichOneof("result") for r in results] == ["error", "claim"]
    assert results[0].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] == 3
    assert results[1].claim.outcome == pb.CLAIM_OUTCOME_ACQUIRED


def test_invalid_argument_lists_field_violations(client: opreg.Client, ns: str) -> None:
    with pytest.raises(opreg.InvalidArgument) as caught:
        client.claim("", " padded", owner="", parameters={"a": 1})
    error = caught.value
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT and error.reason == "INVALID_ARGUMENT"
    fields = {v.field for v in error.field_violations}
    assert {"namespace", "operation_key", "owner"} <= fields
    assert all(v.description for v in error.field_violations)

    with pytest.raises(opreg.InvalidArgument) as caught:
        client.claim(ns, "k", owner="o", parameters_digest=b"short")
    assert [v.field for v in caught.value.field_violations] == ["parameters_digest"]

    with pytest.raises(opreg.InvalidArgument) as caught:
        client.claim(ns, "k", owner="o", parameters={"a": 1}, lease_ttl=0.5)
    assert [v.field for v in caught.value.field_violations] == ["lease_ttl"]


def test_parameters_and_digest_are_exclusive(client: opreg.Client, ns: str) -> None:
    with pytest.raises(ValueError):
        client.claim(ns, "k", owner="o")
    with pytest.raises(ValueError):
        client.claim(ns, "k", owner="o", parameters={}, parameters_digest=bytes(32))


def test_not_found(client: opreg.Client, ns: str) -> None:
    with pytest.raises(opreg.OperationNotFound) as caught:
        client.lookup(ns, "missing")
    assert isinstance(caught.value, opreg.NotFound) and caught.value.code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(opreg.ResourceNotFound):
        client.get_resource(ns, "missing")


def test_parameter_conflict_names_differing_fields(client: opreg.Client, ns: str) -> None:
    acquire(client, ns, "order-A")
    with pytest.raises(opreg.ParameterConflict) as caught:
        client.claim(ns, "order-A", owner="owner-b", parameters={"amount": 101, "account": "A", "memo": "x"})
    error = caught.value
    assert error.code == grpc.StatusCode.ALREADY_EXISTS
    assert sorted(error.differing_fields) == ["amount", "memo"]
    assert error.stored_digest == opreg.parameters_digest({"amount": 100, "account": "A"})
    assert error.request_digest == opreg.parameters_digest({"amount": 101, "account": "A", "memo": "x"})


def test_stale_token_after_takeover(client: opreg.Client, ns: str) -> None:
    old = acquire(client, ns, "op", lease_ttl=1).lease.fencing_token
    client.fenced_write(ns, "res", operation_key="op", fencing_token=old, value=b"old")
    time.sleep(1.2)
    new = acquire(client, ns, "op", owner="owner-b").lease
    assert new.takeover and new.fencing_token > old and new.attempt == 2
    client.fenced_write(ns, "res", operation_key="op", fencing_token=new.fencing_token, value=b"new")

    with pytest.raises(opreg.StaleFencingToken) as caught:
        client.fenced_write(ns, "res", operation_key="op", fencing_token=old, value=b"stale")
    assert caught.value.code == grpc.StatusCode.ABORTED
    assert caught.value.presented_token == old
    assert caught.value.current_token == new.fencing_token
    with pytest.raises(opreg.StaleFencingToken):
        client.renew(ns, "op", owner="owner-a", fencing_token=old)
    with pytest.raises(opreg.StaleFencingToken):
        client.complete(ns, "op", fencing_token=old, outcome=opreg.Success(result=b"late"))
    assert client.get_resource(ns, "res").value == b"new"


def test_lease_not_held_and_already_completed(client: opreg.Client, ns: str) -> None:
    token = acquire(client, ns, "op").lease.fencing_token
    with pytest.raises(opreg.LeaseNotHeld) as caught:
        client.renew(ns, "op", owner="intruder", fencing_token=token)
    assert caught.value.code == grpc.StatusCode.FAILED_PRECONDITION

    client.complete(ns, "op", fencing_token=token, outcome=opreg.Failure(code="INSUFFICIENT_FUNDS", message="no"))
    with pytest.raises(opreg.AlreadyCompleted) as completed:
        client.complete(ns, "op", fencing_token=token, outcome=opreg.Success(result=b"x"))
    assert completed.value.fencing_token == token


def test_compensation_errors(client: opreg.Client, ns: str) -> None:
    # Compensating a failed original: nothing to compensate.
    failed = acquire(client, ns, "failed").lease.fencing_token
    client.complete(ns, "failed", fencing_token=failed, outcome=opreg.Failure(code="DECLINED"))
    with pytest.raises(opreg.NothingToCompensate) as caught:
        client.claim(ns, "undo-failed", owner="o", parameters={"x": 1}, compensates="failed")
    assert isinstance(caught.value, opreg.CompensationError)

    # An unknown original must be reconciled first.
    unknown = acquire(client, ns, "unknown").lease.fencing_token
    client.complete(ns, "unknown", fencing_token=unknown, outcome=opreg.UnknownOutcome(remote_ref="psp-1"))
    with pytest.raises(opreg.OriginalOutcomeUnknown):
        client.claim(ns, "undo-unknown", owner="o", parameters={"x": 1}, compensates="unknown")

    # A succeeded original is compensated once.
    ok = acquire(client, ns, "ok").lease.fencing_token
    client.complete(ns, "ok", fencing_token=ok, outcome=opreg.Success(result=b"done"))
    first = client.claim(ns, "undo-ok", owner="o", parameters={"x": 1}, compensates="ok")
    assert first.outcome == pb.CLAIM_OUTCOME_ACQUIRED and first.operation.compensates == "ok"
    with pytest.raises(opreg.AlreadyCompensated) as caught_again:
        client.claim(ns, "undo-ok-2", owner="o", parameters={"x": 1}, compensates="ok")
    assert caught_again.value.compensated_by == "undo-ok"


def complete_after(client: opreg.Client, ns: str, key: str, token: int, seconds: float) -> threading.Thread:
    """The holder of ``token`` completes ``key`` with success ``seconds`` from now, on a thread."""

    def complete() -> None:
        time.sleep(seconds)
        client.complete(ns, key, fencing_token=token, outcome=opreg.Success(result=b"held"))

    thread = threading.Thread(target=complete)
    thread.start()
    return thread


def test_a_waiting_claim_is_answered_when_the_holder_completes(client: opreg.Client, ns: str) -> None:
    token = acquire(client, ns, "waited-on").lease.fencing_token
    holder = complete_after(client, ns, "waited-on", token, 0.3)
    started = time.monotonic()
    answer = client.claim(
        ns, "waited-on", owner="owner-b", parameters={"amount": 100, "account": "A"}, wait=5, timeout=15
    )
    holder.join()
    assert answer.outcome == pb.CLAIM_OUTCOME_REPLAYED and answer.operation.result == b"held"
    assert answer.HasField("waited") and 0.2 < answer.waited.ToTimedelta().total_seconds() < 5
    assert time.monotonic() - started < 5  # woken by the Complete, not at the end of the wait

    # A wait that ends answers as a fresh Claim would; without a wait nothing says it waited.
    acquire(client, ns, "still-held")
    waited = client.claim(ns, "still-held", owner="owner-b", parameters={"amount": 100, "account": "A"}, wait=0.2)
    assert waited.outcome == pb.CLAIM_OUTCOME_IN_PROGRESS and waited.HasField("waited")
    at_once = client.claim(ns, "still-held", owner="owner-b", parameters={"amount": 100, "account": "A"})
    assert at_once.outcome == pb.CLAIM_OUTCOME_IN_PROGRESS and not at_once.HasField("waited")


def test_a_waiting_lookup_is_answered_when_the_status_changes(client: opreg.Client, ns: str) -> None:
    token = acquire(client, ns, "watched").lease.fencing_token
    holder = complete_after(client, ns, "watched", token, 0.3)
    looked = client.lookup(ns, "watched", wait=5, changed_from=pb.OPERATION_STATUS_IN_PROGRESS, timeout=15)
    holder.join()
    assert looked.operation.status == pb.OPERATION_STATUS_SUCCEEDED and looked.HasField("waited")
    # Already different from changed_from: answered at once.
    moved = client.lookup(ns, "watched", wait=5, changed_from=pb.OPERATION_STATUS_IN_PROGRESS, timeout=15)
    assert moved.operation.status == pb.OPERATION_STATUS_SUCCEEDED
    assert moved.waited.ToTimedelta().total_seconds() < 1


def test_the_reuse_policies(client: opreg.Client, ns: str) -> None:
    params = {"amount": 100, "account": "A"}
    failed = acquire(client, ns, "declined").lease.fencing_token
    client.complete(ns, "declined", fencing_token=failed, outcome=opreg.Failure(code="DECLINED"))
    assert client.claim(ns, "declined", owner="owner-b", parameters=params).outcome == pb.CLAIM_OUTCOME_REPLAYED
    with pytest.raises(opreg.OperationExists) as caught:
        client.claim(ns, "declined", owner="owner-b", parameters=params, reuse=pb.REUSE_POLICY_REJECT_EXISTING)
    assert caught.value.code == grpc.StatusCode.ALREADY_EXISTS
    assert caught.value.current_status == pb.OPERATION_STATUS_FAILED

    again = client.claim(ns, "declined", owner="owner-b", parameters=params, reuse=pb.REUSE_POLICY_AFTER_FAILURE)
    assert again.outcome == pb.CLAIM_OUTCOME_ACQUIRED and again.lease.fencing_token > failed
    kinds = [e.kind for e in client.lookup(ns, "declined", include_executions=True).executions]
    assert kinds == [pb.EXECUTION_KIND_FIRST, pb.EXECUTION_KIND_REUSE]


def test_connection_refused_is_unavailable() -> None:
    from conftest import free_port

    with opreg.Client.connect(f"127.0.0.1:{free_port()}", timeout=2) as nowhere:
        with pytest.raises(opreg.Unavailable) as caught:
            nowhere.lookup("ns", "k")
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE and caught.value.reason == ""
