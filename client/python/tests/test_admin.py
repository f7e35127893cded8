"""The OperationAdmin calls, ClaimDue, the new Lookup flags and run_once's
OperationHeld, against the real server."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest
from conftest import PARAMS, dead, retry_due_soon, succeeded, unknown_outcome

import opreg
from opreg import pb

WHO: dict[str, Any] = {"operator": "alice", "reason": "ticket OPS-1"}


def audit(client: opreg.Client, ns: str, key: str) -> list[tuple[int, str, str, int, int, bool, bool]]:
    """(action, operator, reason, status_before, status_after, held_before, held_after) of every audit entry."""
    entries = client.lookup(ns, key, include_audit=True).audit
    return [
        (e.action, e.operator, e.reason, e.status_before, e.status_after, e.held_before, e.held_after) for e in entries
    ]


def test_hold_answers_held_then_release_restores(client: opreg.Client, ns: str) -> None:
    retry_due_soon(client, ns, "debit:1")
    held = client.hold_operation(ns, "debit:1", **WHO)
    assert held.operation.held and held.operation.HasField("held_at")
    assert held.operation.status == pb.OPERATION_STATUS_RETRY_SCHEDULED
    assert (held.audit.action, held.audit.operator, held.audit.reason) == (
        pb.ADMIN_ACTION_HOLD,
        "alice",
        "ticket OPS-1",
    )
    assert (held.audit.held_before, held.audit.held_after) == (False, True)

    time.sleep(0.2)  # the retry is due now, but held
    claimed = client.claim(ns, "debit:1", owner="worker", parameters=PARAMS)
    assert claimed.outcome == pb.CLAIM_OUTCOME_HELD == opreg.ClaimOutcome.Value("CLAIM_OUTCOME_HELD")
    assert claimed.HasField("retry_after") and not claimed.HasField("lease")
    assert list(client.claim_due(ns, owner="worker").operations) == []  # ClaimDue skips it
    assert [o.operation_key for o in client.list_operations(ns, held_only=True).operations] == ["debit:1"]

    released = client.release_operation(ns, "debit:1", operator="bob", reason="checked")
    assert not released.operation.held
    assert released.operation.status == pb.OPERATION_STATUS_RETRY_SCHEDULED
    assert released.audit.action == pb.ADMIN_ACTION_RELEASE
    assert client.claim(ns, "debit:1", owner="worker", parameters=PARAMS).outcome == pb.CLAIM_OUTCOME_ACQUIRED
    assert audit(client, ns, "debit:1") == [
        (
            pb.ADMIN_ACTION_HOLD,
            "alice",
            "ticket OPS-1",
            pb.OPERATION_STATUS_RETRY_SCHEDULED,
            pb.OPERATION_STATUS_RETRY_SCHEDULED,
            False,
            True,
        ),
        (
            pb.ADMIN_ACTION_RELEASE,
            "bob",
            "checked",
            pb.OPERATION_STATUS_RETRY_SCHEDULED,
            pb.OPERATION_STATUS_RETRY_SCHEDULED,
            True,
            False,
        ),
    ]


def test_hold_revokes_a_live_lease_and_release_makes_it_unknown(client: opreg.Client, ns: str) -> None:
    token = client.claim(ns, "debit:2", owner="holder", parameters=PARAMS, lease_ttl=30).lease.fencing_token
    held = client.hold_operation(ns, "debit:2", **WHO)
    assert held.operation.held
    with pytest.raises(opreg.StaleFencingToken):  # the hold moved the token on
        client.renew(ns, "debit:2", owner="holder", fencing_token=token)
    with pytest.raises(opreg.StaleFencingToken):
        client.complete(ns, "debit:2", fencing_token=token, outcome=opreg.Success(result=b"late"))
    executions = client.lookup(ns, "debit:2", include_executions=True).executions
    assert [e.outcome for e in executions] == [pb.EXECUTION_OUTCOME_REVOKED]

    released = client.release_operation(ns, "debit:2", **WHO)
    assert released.operation.status == pb.OPERATION_STATUS_UNKNOWN  # that execution may have taken effect
    assert not released.operation.held


def test_resolve_records_the_real_outcome(client: opreg.Client, ns: str) -> None:
    unknown_outcome(client, ns, "pay:1", "psp-1")
    resolved = client.resolve_operation(
        ns, "pay:1", operator="alice", reason="PSP says paid", outcome=opreg.Success(result=b"paid", result_ref="psp-1")
    )
    assert resolved.operation.status == pb.OPERATION_STATUS_SUCCEEDED
    assert (resolved.operation.result, resolved.operation.result_ref) == (b"paid", "psp-1")
    assert resolved.audit.action == pb.ADMIN_ACTION_RESOLVE
    assert (resolved.audit.status_before, resolved.audit.status_after) == (
        pb.OPERATION_STATUS_UNKNOWN,
        pb.OPERATION_STATUS_SUCCEEDED,
    )
    replay = client.run_once(ns, "pay:1", PARAMS, lambda lease: b"must not run")
    assert (replay.value, replay.replayed) == (b"paid", True)

    dead(client, ns, "pay:2")
    failed = client.resolve_operation(ns, "pay:2", **WHO, outcome=opreg.Failure(code="DECLINED", message="card"))
    assert failed.operation.status == pb.OPERATION_STATUS_FAILED
    with pytest.raises(opreg.BusinessFailure) as caught:
        client.run_once(ns, "pay:2", PARAMS, lambda lease: b"must not run")
    assert (caught.value.code, caught.value.replayed) == ("DECLINED", True)

    with pytest.raises(TypeError):
        client.resolve_operation(ns, "pay:1", **WHO, outcome=opreg.RetryableError())  # type: ignore[arg-type]


def test_requeue_of_a_dead_operation(client: opreg.Client, ns: str) -> None:
    dead(client, ns, "debit:3")
    policy = opreg.retry_policy(max_attempts=2, initial_backoff=0.1, max_backoff=1, deadline=3600)
    requeued = client.requeue_operation(ns, "debit:3", **WHO, revision="account unblocked", retry_policy=policy)
    assert requeued.operation.status == pb.OPERATION_STATUS_RETRY_SCHEDULED
    assert (requeued.audit.action, requeued.audit.revision) == (pb.ADMIN_ACTION_REQUEUE, "account unblocked")
    assert requeued.audit.status_before == pb.OPERATION_STATUS_DEAD

    due = client.claim_due(ns, owner="worker", lease_ttl=5)  # due now
    assert [(d.outcome, d.operation.operation_key) for d in due.operations] == [(pb.CLAIM_OUTCOME_ACQUIRED, "debit:3")]
    token = due.operations[0].lease.fencing_token
    done = client.complete(ns, "debit:3", fencing_token=token, outcome=opreg.Success(result=b"ok"))
    assert done.operation.status == pb.OPERATION_STATUS_SUCCEEDED


def test_an_action_the_status_does_not_allow_is_invalid_transition(client: opreg.Client, ns: str) -> None:
    succeeded(client, ns, "debit:4")
    with pytest.raises(opreg.InvalidTransition) as caught:
        client.requeue_operation(ns, "debit:4", **WHO)
    error = caught.value
    assert error.code == grpc.StatusCode.FAILED_PRECONDITION and error.reason == "INVALID_TRANSITION"
    assert error.current_status == pb.OPERATION_STATUS_SUCCEEDED
    assert error.held is False
    with pytest.raises(opreg.InvalidTransition):
        client.hold_operation(ns, "debit:4", **WHO)

    retry_due_soon(client, ns, "debit:5")
    client.hold_operation(ns, "debit:5", **WHO)
    with pytest.raises(opreg.InvalidTransition) as held:
        client.requeue_operation(ns, "debit:5", **WHO)
    assert held.value.current_status == pb.OPERATION_STATUS_RETRY_SCHEDULED and held.value.held is True
    assert [a[0] for a in audit(client, ns, "debit:4")] == []  # a refused action writes no audit


def test_missing_operator_or_reason_is_invalid_argument(client: opreg.Client, ns: str) -> None:
    retry_due_soon(client, ns, "debit:6")
    with pytest.raises(opreg.InvalidArgument) as caught:
        client.hold_operation(ns, "debit:6", operator="", reason="why")
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "operator" in {v.field for v in caught.value.field_violations}
    with pytest.raises(opreg.InvalidArgument) as caught:
        client.requeue_operation(ns, "debit:6", operator="alice", reason="")
    assert "reason" in {v.field for v in caught.value.field_violations}
    with pytest.raises(opreg.OperationNotFound):
        client.hold_operation(ns, "missing", **WHO)
    assert not client.lookup(ns, "debit:6").operation.held


def test_list_operations_pages_and_filters(client: opreg.Client, ns: str) -> None:
    keys = [f"debit:{i}" for i in range(4)]
    for key in keys:
        retry_due_soon(client, ns, key)
    dead(client, ns, "gone")
    succeeded(client, ns, "finished")

    pages: list[list[str]] = []
    token = ""
    while True:
        page = client.list_operations(ns, page_size=2, page_token=token)
        pages.append([o.operation_key for o in page.operations])
        token = page.next_page_token
        if not token:
            break
    assert [len(p) for p in pages] == [2, 2, 1]
    assert [k for p in pages for k in p] == [*keys, "gone"]  # registration order; never the finished one

    only_dead = client.list_operations(ns, statuses=[pb.OPERATION_STATUS_DEAD])
    assert [o.operation_key for o in only_dead.operations] == ["gone"] and only_dead.next_page_token == ""
    # The queue holds unfinished operations only: look a finished one up by key.
    with pytest.raises(opreg.InvalidArgument) as refused:
        client.list_operations(ns, statuses=[pb.OPERATION_STATUS_SUCCEEDED, pb.OPERATION_STATUS_DEAD])
    assert [v.field for v in refused.value.field_violations] == ["statuses"]
    assert list(client.list_operations(ns, older_than=3600).operations) == []
    assert list(client.list_operations(ns, expired_leases_only=True).operations) == []


def test_lookup_parameters_and_claim_due(client: opreg.Client, ns: str) -> None:
    params = {"account": "A", "amount": 100, "tags": ["x", "y"], "nested": {"k": True}}
    retry_due_soon(client, ns, "debit:7", params)
    unknown_outcome(client, ns, "debit:8", "psp-8", params)
    looked = client.lookup(ns, "debit:7")
    assert not looked.operation.HasField("parameters") and list(looked.audit) == []
    assert client.lookup(ns, "debit:7", include_parameters=True).operation.parameters == opreg.to_struct(params)

    time.sleep(0.2)
    due = client.claim_due(ns, owner="worker-1", execution_id="run-9", lease_ttl=5, limit=10)
    by_key = {d.operation.operation_key: d for d in due.operations}
    assert {k: d.outcome for k, d in by_key.items()} == {
        "debit:7": pb.CLAIM_OUTCOME_ACQUIRED,
        "debit:8": pb.CLAIM_OUTCOME_RECONCILE,
    }
    assert all(d.operation.parameters == opreg.to_struct(params) for d in due.operations)
    assert all(d.lease.owner == "worker-1" for d in due.operations)
    assert by_key["debit:7"].lease.attempt == 2 and by_key["debit:8"].operation.remote_ref == "psp-8"
    assert list(client.claim_due(ns, owner="worker-2").operations) == []  # each goes to one caller
    executions = client.lookup(ns, "debit:7", include_executions=True).executions
    assert [(e.kind, e.execution_id) for e in executions][-1] == (pb.EXECUTION_KIND_RETRY, "run-9")


def test_run_once_raises_operation_held_at_once(client: opreg.Client, ns: str) -> None:
    retry_due_soon(client, ns, "debit:9")
    client.hold_operation(ns, "debit:9", **WHO)
    ran: list[int] = []
    started = time.monotonic()
    with pytest.raises(opreg.OperationHeld) as caught:
        client.run_once(ns, "debit:9", PARAMS, lambda lease: ran.append(1) or b"never", deadline=30)
    assert time.monotonic() - started < 2  # not waited out
    assert ran == []
    assert caught.value.retry_after is not None and caught.value.retry_after > 0
    assert caught.value.operation is not None and caught.value.operation.held
    assert isinstance(caught.value, opreg.OpregError)


@pytest.mark.asyncio
async def test_async_admin_calls_and_operation_held(client: opreg.Client, aclient: opreg.AsyncClient, ns: str) -> None:
    retry_due_soon(client, ns, "debit:10")
    held = await aclient.hold_operation(ns, "debit:10", **WHO)
    assert held.operation.held
    listed = await aclient.list_operations(ns, held_only=True)
    assert [o.operation_key for o in listed.operations] == ["debit:10"]

    async def work(lease: opreg.AsyncLease) -> bytes:
        return b"never"

    with pytest.raises(opreg.OperationHeld):
        await aclient.run_once(ns, "debit:10", PARAMS, work)
    with pytest.raises(opreg.InvalidTransition):
        await aclient.requeue_operation(ns, "debit:10", **WHO)
    await aclient.release_operation(ns, "debit:10", **WHO)
    assert (await aclient.run_once(ns, "debit:10", PARAMS, work)).value == b"never"
    looked = await aclient.lookup(ns, "debit:10", include_audit=True, include_parameters=True)
    assert [e.action for e in looked.audit] == [pb.ADMIN_ACTION_HOLD, pb.ADMIN_ACTION_RELEASE]
    assert looked.operation.parameters == opreg.to_struct(PARAMS)

    dead(client, ns, "debit:11")
    requeued = await aclient.requeue_operation(ns, "debit:11", **WHO)
    assert requeued.operation.status == pb.OPERATION_STATUS_RETRY_SCHEDULED
    due = await aclient.claim_due(ns, owner="w", lease_ttl=5)
    assert [d.operation.operation_key for d in due.operations] == ["debit:11"]
    token = due.operations[0].lease.fencing_token
    await aclient.complete(ns, "debit:11", fencing_token=token, outcome=opreg.UnknownOutcome(remote_ref="psp-11"))
    resolved = await aclient.resolve_operation(ns, "debit:11", **WHO, outcome=opreg.Success(result=b"by hand"))
    assert resolved.operation.status == pb.OPERATION_STATUS_SUCCEEDED
