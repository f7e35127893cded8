"""run_once and its lease: Complete after the deadline (with renewals), a
doubtful Complete settled by Lookup, reconcile under renewal, the reconcile
lease handed back without a callback, and the renewal expiry margin."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest

import opreg
from opreg import pb

PARAMS = {"account": "A", "amount": 100}


class FlakyComplete(opreg.Client):
    """Complete is not delivered (Unavailable) until ``fail_until`` (monotonic);
    with ``in_doubt``, it is delivered but the answer replaced by an INTERNAL error."""

    def __init__(self, channel: grpc.Channel, *, fail_until: float = 0.0, in_doubt: bool = False) -> None:
        super().__init__(channel)
        self.fail_until = fail_until
        self.in_doubt = in_doubt
        self.failed_completes = 0
        self.lookups = 0

    def complete(self, *args: Any, **kwargs: Any) -> pb.CompleteResponse:
        if time.monotonic() < self.fail_until:
            self.failed_completes += 1
            raise opreg.Unavailable("connection refused", code=grpc.StatusCode.UNAVAILABLE)
        response = super().complete(*args, **kwargs)
        if self.in_doubt:
            self.in_doubt = False
            raise opreg.InternalError("answer garbled", code=grpc.StatusCode.INTERNAL)
        return response

    def lookup(self, *args: Any, **kwargs: Any) -> pb.LookupResponse:
        self.lookups += 1
        return super().lookup(*args, **kwargs)


def unknown_outcome(client: opreg.Client, ns: str, key: str, remote_ref: str) -> None:
    def unconfirmed(lease: opreg.Lease) -> bytes:
        raise opreg.SentButUnconfirmed(remote_ref)

    with pytest.raises(opreg.OutcomeUnknown):
        client.run_once(ns, key, PARAMS, unconfirmed)


# -- 1. Complete past the deadline, renewed while retried ----------------------


def test_late_work_is_completed_past_the_deadline_and_renewed_meanwhile(address: str, ns: str) -> None:
    client = FlakyComplete(grpc.insecure_channel(address))
    finished = threading.Event()

    def work(lease: opreg.Lease) -> bytes:
        time.sleep(0.8)  # past the 0.5 s deadline
        client.fail_until = time.monotonic() + 2.0  # Complete fails for 2 s: twice the 1 s lease
        finished.set()
        return b"late"

    try:
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(
                client.run_once,
                ns,
                "late",
                PARAMS,
                work,
                lease_ttl=1,
                deadline=0.5,
                rpc_timeout=2,
                transport_backoff=(0.05, 0.3),
            )
            assert finished.wait(10)
            time.sleep(1.5)  # the lease would have lapsed without renewals
            with opreg.Client.connect(address) as other:
                taken = other.claim(ns, "late", owner="other", parameters=PARAMS, lease_ttl=30)
            assert taken.outcome == pb.CLAIM_OUTCOME_IN_PROGRESS
            result = future.result(timeout=20)
    finally:
        client.close()
    assert result.value == b"late" and not result.replayed
    assert client.failed_completes >= 2


def test_complete_that_cannot_be_recorded_says_so(address: str, ns: str) -> None:
    client = FlakyComplete(grpc.insecure_channel(address), fail_until=time.monotonic() + 3600)
    try:
        started = time.monotonic()
        with pytest.raises(opreg.OutcomeNotRecorded) as caught:
            client.run_once(
                ns,
                "unrecorded",
                PARAMS,
                lambda lease: b"done",
                deadline=0.5,
                rpc_timeout=0.3,
                transport_backoff=(0.02, 0.1),
            )
        elapsed = time.monotonic() - started
    finally:
        client.close()
    assert "not recorded" in str(caught.value)
    assert elapsed < 5 and client.lookups >= 1
    assert isinstance(caught.value.report, pb.Success)


# -- 5. a Complete in doubt is settled by Lookup ------------------------------


def test_complete_in_doubt_is_settled_by_lookup(address: str, ns: str) -> None:
    client = FlakyComplete(grpc.insecure_channel(address), in_doubt=True)
    try:
        result = client.run_once(ns, "doubt", PARAMS, lambda lease: b"recorded")
    finally:
        client.close()
    assert result.value == b"recorded" and not result.replayed and client.lookups == 1
    assert result.operation.status == pb.OPERATION_STATUS_SUCCEEDED


# -- 2. reconcile under the renewal machinery ---------------------------------


def test_lease_lost_during_reconcile_raises_lease_lost_and_work_never_runs(
    client: opreg.Client, address: str, ns: str
) -> None:
    unknown_outcome(client, ns, "rec-lost", "psp-1")
    started = threading.Event()
    work_calls: list[int] = []

    def reconcile(lease: opreg.Lease, remote_ref: str) -> opreg.Reconciliation:
        started.set()
        assert lease.wait(10)  # lost
        return opreg.Reconciliation.not_applied()

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(
            client.run_once,
            ns,
            "rec-lost",
            PARAMS,
            lambda lease: work_calls.append(1) or b"x",
            reconcile=reconcile,
            owner="worker-a",
            lease_ttl=1,
            renew_interval=3.0,
        )
        assert started.wait(10)
        time.sleep(1.4)
        with opreg.Client.connect(address) as other:
            taken = other.claim(ns, "rec-lost", owner="worker-b", parameters=PARAMS, lease_ttl=30)
        assert taken.outcome == pb.CLAIM_OUTCOME_RECONCILE and taken.lease.owner == "worker-b"
        with pytest.raises(opreg.LeaseLost):
            future.result(timeout=20)
    assert work_calls == []


def test_slow_reconcile_is_kept_alive_by_renewals(client: opreg.Client, ns: str) -> None:
    unknown_outcome(client, ns, "rec-slow", "psp-2")

    def reconcile(lease: opreg.Lease, remote_ref: str) -> opreg.Reconciliation:
        assert not lease.wait(2.5)  # 1 s lease
        return opreg.Reconciliation.succeeded(b"found", result_ref=remote_ref)

    result = client.run_once(ns, "rec-slow", PARAMS, lambda lease: b"never", reconcile=reconcile, lease_ttl=1)
    assert (result.value, result.result_ref) == (b"found", "psp-2")


@pytest.mark.asyncio
async def test_async_slow_reconcile_is_kept_alive_by_renewals(
    client: opreg.Client, aclient: opreg.AsyncClient, ns: str
) -> None:
    unknown_outcome(client, ns, "arec-slow", "psp-3")

    async def reconcile(lease: opreg.AsyncLease, remote_ref: str) -> opreg.Reconciliation:
        assert not await lease.wait(2.5)
        return opreg.Reconciliation.succeeded(b"found")

    async def work(lease: opreg.AsyncLease) -> bytes:
        return b"never"

    result = await aclient.run_once(ns, "arec-slow", PARAMS, work, reconcile=reconcile, lease_ttl=1)
    assert result.value == b"found"


# -- 3. without reconcile, the reconcile lease is handed back ------------------


def test_reconcile_required_hands_the_lease_back(client: opreg.Client, ns: str) -> None:
    unknown_outcome(client, ns, "handback", "psp-4")
    with pytest.raises(opreg.ReconcileRequired) as required:
        client.run_once(ns, "handback", PARAMS, lambda lease: b"must not run", lease_ttl=30)
    assert required.value.remote_ref == "psp-4"
    looked = client.lookup(ns, "handback")
    assert looked.operation.status == pb.OPERATION_STATUS_UNKNOWN
    assert looked.operation.remote_ref == "psp-4"
    assert not looked.operation.HasField("lease")


@pytest.mark.asyncio
async def test_async_reconcile_required_hands_the_lease_back(
    client: opreg.Client, aclient: opreg.AsyncClient, ns: str
) -> None:
    unknown_outcome(client, ns, "ahandback", "psp-5")

    async def work(lease: opreg.AsyncLease) -> bytes:
        return b"must not run"

    with pytest.raises(opreg.ReconcileRequired):
        await aclient.run_once(ns, "ahandback", PARAMS, work, lease_ttl=30)
    looked = await aclient.lookup(ns, "ahandback")
    assert looked.operation.status == pb.OPERATION_STATUS_UNKNOWN and looked.operation.remote_ref == "psp-5"
    assert not looked.operation.HasField("lease")


# -- 4. a lease that cannot be renewed is given up before it expires -----------


class FailingRenews(opreg.Client):
    def renew(self, *args: Any, **kwargs: Any) -> pb.RenewResponse:
        raise opreg.Unavailable("connection reset", code=grpc.StatusCode.UNAVAILABLE)


def test_unrenewable_lease_is_lost_with_a_margin_before_expiry(address: str, ns: str) -> None:
    client = FailingRenews(grpc.insecure_channel(address))
    seen: dict[str, Any] = {}

    def work(lease: opreg.Lease) -> bytes:
        began = time.monotonic()
        seen["lost"] = lease.wait(10)
        seen["after"] = time.monotonic() - began
        return b"too late"

    try:
        with pytest.raises(opreg.LeaseLost):
            client.run_once(ns, "margin", PARAMS, work, lease_ttl=3, transport_backoff=(0.02, 0.05))
    finally:
        client.close()
    assert seen["lost"] is True
    assert 2.0 < seen["after"] < 2.85  # 3 s lease, given up with a 0.3 s margin
