"""The asyncio client: wrappers, typed errors and run_once's core paths."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from conftest import free_port

import opreg
from opreg import pb

PARAMS = {"account": "A", "amount": 100}


@pytest.mark.asyncio
async def test_wrappers_and_typed_errors(aclient: opreg.AsyncClient, ns: str) -> None:
    claimed = await aclient.claim(ns, "op", owner="a", parameters=PARAMS, lease_ttl=5)
    assert claimed.outcome == pb.CLAIM_OUTCOME_ACQUIRED
    token = claimed.lease.fencing_token
    await aclient.renew(ns, "op", owner="a", fencing_token=token)
    await aclient.fenced_write(ns, "res", operation_key="op", fencing_token=token, value=b"v")
    assert (await aclient.get_resource(ns, "res")).value == b"v"
    done = await aclient.complete(ns, "op", fencing_token=token, outcome=opreg.Success(result=b"r"))
    assert done.operation.status == pb.OPERATION_STATUS_SUCCEEDED
    assert len((await aclient.lookup(ns, "op", include_executions=True)).executions) == 1

    with pytest.raises(opreg.ParameterConflict) as conflict:
        await aclient.claim(ns, "op", owner="b", parameters={"account": "B", "amount": 100})
    assert conflict.value.differing_fields == ["account"]
    assert conflict.value.code == grpc.StatusCode.ALREADY_EXISTS
    with pytest.raises(opreg.InvalidArgument) as invalid:
        await aclient.claim(ns, "", owner="b", parameters=PARAMS)
    assert [v.field for v in invalid.value.field_violations] == ["operation_key"]
    with pytest.raises(opreg.StaleFencingToken) as stale:
        await aclient.renew(ns, "op", owner="a", fencing_token=token)
    assert stale.value.presented_token == token
    with pytest.raises(opreg.OperationNotFound):
        await aclient.lookup(ns, "missing")


@pytest.mark.asyncio
async def test_batch_claim_and_batch_complete(aclient: opreg.AsyncClient, ns: str) -> None:
    claimed = await aclient.batch_claim(
        [
            {"namespace": ns, "operation_key": "op", "owner": "a", "parameters": PARAMS},
            {"namespace": ns, "operation_key": "", "owner": "a", "parameters": PARAMS},
        ]
    )
    assert [r.WhichOneof("result") for r in claimed.results] == ["claim", "error"]
    token = claimed.results[0].claim.lease.fencing_token
    completed = await aclient.batch_complete(
        [{"namespace": ns, "operation_key": "op", "fencing_token": token, "outcome": opreg.Success()}]
    )
    assert completed.results[0].completed.operation.status == pb.OPERATION_STATUS_SUCCEEDED


@pytest.mark.asyncio
async def test_run_once_success_then_replay(aclient: opreg.AsyncClient, ns: str) -> None:
    calls: list[opreg.AsyncLease] = []

    async def work(lease: opreg.AsyncLease) -> tuple[bytes, str]:
        calls.append(lease)
        await asyncio.sleep(0.05)
        return b"balance=900", "ledger-1"

    first = await aclient.run_once(ns, "debit", PARAMS, work)
    second = await opreg.run_once(aclient, ns, "debit", PARAMS, work)
    assert (first.value, first.result_ref, first.replayed) == (b"balance=900", "ledger-1", False)
    assert (second.value, second.result_ref, second.replayed) == (b"balance=900", "ledger-1", True)
    assert len(calls) == 1


@pytest.mark.asyncio
async def test_run_once_concurrent_duplicates_execute_once(aclient: opreg.AsyncClient, ns: str) -> None:
    calls = 0

    async def work(lease: opreg.AsyncLease) -> bytes:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.5)
        return b"once"

    results = await asyncio.gather(*(aclient.run_once(ns, "dup", PARAMS, work, poll_interval=0.1) for _ in range(5)))
    assert calls == 1
    assert sorted(r.replayed for r in results) == [False, True, True, True, True]
    assert {r.value for r in results} == {b"once"}


@pytest.mark.asyncio
async def test_business_failure_replayed(aclient: opreg.AsyncClient, ns: str) -> None:
    async def work(lease: opreg.AsyncLease) -> bytes:
        raise opreg.BusinessError("INSUFFICIENT_FUNDS", "no")

    with pytest.raises(opreg.BusinessFailure) as first:
        await aclient.run_once(ns, "debit", PARAMS, work)
    with pytest.raises(opreg.BusinessFailure) as second:
        await aclient.run_once(ns, "debit", PARAMS, work)
    assert (first.value.code, first.value.replayed) == ("INSUFFICIENT_FUNDS", False)
    assert (second.value.code, second.value.replayed) == ("INSUFFICIENT_FUNDS", True)


@pytest.mark.asyncio
async def test_lease_lost_cancels_the_work(aclient: opreg.AsyncClient, address: str, ns: str) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def work(lease: opreg.AsyncLease) -> bytes:
        started.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return b"too late"

    run = asyncio.create_task(
        aclient.run_once(ns, "slow", PARAMS, work, owner="worker-a", lease_ttl=1, renew_interval=3.0)
    )
    async with opreg.AsyncClient.connect(address) as other:
        await asyncio.wait_for(started.wait(), 10)
        began = time.monotonic()
        await asyncio.sleep(1.4)  # the lease expires; no renewal until 3 s
        taken = await other.claim(ns, "slow", owner="worker-b", parameters=PARAMS)
    assert taken.lease.takeover
    with pytest.raises(opreg.LeaseLost):
        await asyncio.wait_for(run, 20)
    assert cancelled.is_set() and time.monotonic() - began < 6
    looked = await aclient.lookup(ns, "slow", include_executions=True)
    assert [(e.owner, e.outcome) for e in looked.executions] == [
        ("worker-a", pb.EXECUTION_OUTCOME_SUPERSEDED),
        ("worker-b", pb.EXECUTION_OUTCOME_RUNNING),
    ]


@pytest.mark.asyncio
async def test_unknown_outcome_reconciled(aclient: opreg.AsyncClient, ns: str) -> None:
    async def work(lease: opreg.AsyncLease) -> bytes:
        raise opreg.SentButUnconfirmed("psp-7")

    async def reconcile(lease: opreg.AsyncLease, remote_ref: str) -> opreg.Reconciliation:
        assert remote_ref == "psp-7" and lease.reconciling
        return opreg.Reconciliation.succeeded(b"paid")

    result = await aclient.run_once(ns, "pay", PARAMS, work, reconcile=reconcile)
    assert result.value == b"paid" and not result.replayed


@pytest.mark.asyncio
async def test_deadline_exceeded_when_unreachable(ns: str) -> None:
    async with opreg.AsyncClient.connect(f"127.0.0.1:{free_port()}") as nowhere:
        started = time.monotonic()
        with pytest.raises(opreg.DeadlineExceeded) as caught:
            await nowhere.run_once(ns, "k", PARAMS, lambda lease: b"never", deadline=1.0)
    assert time.monotonic() - started < 4
    assert isinstance(caught.value.__cause__, opreg.Unavailable)


@pytest.mark.asyncio
async def test_cancelling_run_once_cancels_the_work(aclient: opreg.AsyncClient, ns: str) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def work(lease: opreg.AsyncLease) -> bytes:
        started.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return b"x"

    run = asyncio.create_task(aclient.run_once(ns, "cancel-me", PARAMS, work))
    await asyncio.wait_for(started.wait(), 10)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert cancelled.is_set()
    # Nothing was reported: the lease is simply left to expire.
    looked = await aclient.lookup(ns, "cancel-me")
    assert looked.operation.status == pb.OPERATION_STATUS_IN_PROGRESS
