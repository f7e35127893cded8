"""The worker helper (sync and asyncio) against the real server: due retries
and takeovers run exactly once across workers, bounded concurrency, handlers
by kind, reconciliation, every outcome recorded as run_once records it, leases
lost to an operator's hold, transport back-off and graceful stop."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pytest
from conftest import PARAMS, abandoned_lease, free_port, retry_due_soon, unknown_outcome, wait_for

import opreg
from opreg import pb

FAST: dict[str, Any] = {"poll_interval": 0.1}
# Retries that do not come back while a test runs.
SLOW_RETRIES = opreg.retry_policy(max_attempts=5, initial_backoff=600, max_backoff=600, deadline=3600)


def status(client: opreg.Client, ns: str, key: str) -> int:
    return client.lookup(ns, key).operation.status


def history(client: opreg.Client, ns: str, key: str) -> list[tuple[int, int]]:
    """(kind, outcome) of every execution, in order."""
    return [(e.kind, e.outcome) for e in client.lookup(ns, key, include_executions=True).executions]


@contextmanager
def running(*workers: opreg.Worker) -> Iterator[list[Future[None]]]:
    """Runs the workers on threads; stops them on the way out and checks that
    each ``run`` returned without an error."""
    with ThreadPoolExecutor(len(workers)) as pool:
        runs = [pool.submit(worker.run) for worker in workers]
        try:
            yield runs
        finally:
            for worker in workers:
                worker.stop()
        for run in runs:
            run.result(timeout=30)


def test_kind_of() -> None:
    assert [opreg.kind_of(k) for k in ("debit:order-1", "settle:A:W:V", "cleanup", ":x")] == [
        "debit",
        "settle",
        "cleanup",
        "",
    ]


def test_a_worker_needs_a_handler(client: opreg.Client, ns: str) -> None:
    with pytest.raises(ValueError):
        opreg.Worker(client, ns)
    with pytest.raises(ValueError):
        opreg.Worker(client, ns, default=lambda operation, lease: b"", max_in_flight=0)


def test_two_workers_run_due_retries_and_takeovers_exactly_once(client: opreg.Client, address: str, ns: str) -> None:
    retries = [f"debit:retry-{i}" for i in range(6)]
    takeovers = [f"debit:takeover-{i}" for i in range(4)]
    abandoned = {key: abandoned_lease(client, ns, key) for key in takeovers}
    for key in retries:
        retry_due_soon(client, ns, key)
    calls: list[tuple[str, str, bool, int]] = []
    lock = threading.Lock()

    def debit(operation: pb.Operation, lease: opreg.Lease) -> bytes:
        assert operation.parameters == opreg.to_struct(PARAMS)
        with lock:
            calls.append((operation.operation_key, lease.owner, lease.takeover, lease.attempt))
        lease.fenced_write(f"balance:{operation.operation_key}", b"900")
        time.sleep(0.2)  # long enough that one worker alone cannot take everything at once
        return b"paid " + operation.operation_key.encode()

    with opreg.Client.connect(address) as one, opreg.Client.connect(address) as two:
        workers = [
            opreg.Worker(c, ns, handlers={"debit": debit}, max_in_flight=3, lease_ttl=5, **FAST) for c in (one, two)
        ]
        with running(*workers):
            wait_for(lambda: all(status(client, ns, k) == pb.OPERATION_STATUS_SUCCEEDED for k in retries + takeovers))

    assert Counter(key for key, *_ in calls) == {key: 1 for key in retries + takeovers}
    assert {owner for _, owner, _, _ in calls} == {w.owner for w in workers}  # both took part
    assert {key for key, _, takeover, _ in calls if takeover} == set(takeovers)
    assert {attempt for *_, attempt in calls} == {2}
    for key in retries:
        assert history(client, ns, key) == [
            (pb.EXECUTION_KIND_FIRST, pb.EXECUTION_OUTCOME_RETRYABLE),
            (pb.EXECUTION_KIND_RETRY, pb.EXECUTION_OUTCOME_SUCCEEDED),
        ]
    for key in takeovers:
        assert history(client, ns, key) == [
            (pb.EXECUTION_KIND_FIRST, pb.EXECUTION_OUTCOME_SUPERSEDED),
            (pb.EXECUTION_KIND_TAKEOVER, pb.EXECUTION_OUTCOME_SUCCEEDED),
        ]
        assert client.get_resource(ns, f"balance:{key}").fence > abandoned[key]
        assert client.lookup(ns, key).operation.result == b"paid " + key.encode()


def test_at_most_max_in_flight_at_a_time(client: opreg.Client, ns: str) -> None:
    keys = [f"debit:{i}" for i in range(5)]
    for key in keys:
        retry_due_soon(client, ns, key)
    running_now = 0
    peak = 0
    lock = threading.Lock()

    def debit(operation: pb.Operation, lease: opreg.Lease) -> bytes:
        nonlocal running_now, peak
        with lock:
            running_now += 1
            peak = max(peak, running_now)
        time.sleep(0.3)
        with lock:
            running_now -= 1
        return b"ok"

    with running(opreg.Worker(client, ns, handlers={"debit": debit}, max_in_flight=2, **FAST)):
        wait_for(lambda: all(status(client, ns, k) == pb.OPERATION_STATUS_SUCCEEDED for k in keys))
    assert peak == 2


def test_handlers_by_kind_and_the_default(client: opreg.Client, ns: str) -> None:
    for key in ("debit:1", "refund:1", "cleanup"):
        retry_due_soon(client, ns, key)
    seen: list[tuple[str, str]] = []

    def handler(name: str) -> Any:
        def handle(operation: pb.Operation, lease: opreg.Lease) -> bytes:
            seen.append((name, operation.operation_key))
            return name.encode()

        return handle

    worker = opreg.Worker(client, ns, handlers={"debit": handler("debit")}, default=handler("default"), **FAST)
    with running(worker):
        wait_for(
            lambda: all(
                status(client, ns, k) == pb.OPERATION_STATUS_SUCCEEDED for k in ("debit:1", "refund:1", "cleanup")
            )
        )
    assert sorted(seen) == [("debit", "debit:1"), ("default", "cleanup"), ("default", "refund:1")]


def test_an_operation_without_a_handler_is_recorded_no_handler(
    client: opreg.Client, ns: str, caplog: pytest.LogCaptureFixture
) -> None:
    retry_due_soon(client, ns, "refund:1", retry_policy=SLOW_RETRIES)
    ran: list[str] = []
    worker = opreg.Worker(client, ns, handlers={"debit": lambda op, lease: ran.append(op.operation_key)}, **FAST)
    with caplog.at_level(logging.INFO, logger="opreg.worker"), running(worker):
        wait_for(lambda: client.lookup(ns, "refund:1").operation.last_error_class == opreg.NO_HANDLER)
    looked = client.lookup(ns, "refund:1", include_executions=True)
    assert looked.operation.status == pb.OPERATION_STATUS_RETRY_SCHEDULED
    assert (looked.executions[-1].error_class, looked.executions[-1].outcome) == (
        "NO_HANDLER",
        pb.EXECUTION_OUTCOME_RETRYABLE,
    )
    assert "refund" in looked.executions[-1].message
    assert ran == []
    assert any("no handler for kind 'refund'" in r.getMessage() for r in caplog.records)


def test_every_outcome_is_recorded_as_run_once_records_it(client: opreg.Client, ns: str) -> None:
    keys = ["op:ok", "op:business", "op:transient", "op:bug", "op:unconfirmed"]
    for key in keys:
        retry_due_soon(client, ns, key, retry_policy=SLOW_RETRIES)

    def handle(operation: pb.Operation, lease: opreg.Lease) -> Any:
        what = operation.operation_key.split(":")[1]
        if what == "ok":
            return b"done", "ref-1"
        if what == "business":
            raise opreg.BusinessError("INSUFFICIENT_FUNDS", "balance 50")
        if what == "transient":
            raise opreg.TransientError("rate limited", retry_after=300)
        if what == "bug":
            raise KeyError("missing")
        raise opreg.SentButUnconfirmed("psp-5", "timed out")

    def reported(key: str) -> bool:
        executions = history(client, ns, key)  # the seed's, then the worker's
        return len(executions) >= 2 and executions[1][1] != pb.EXECUTION_OUTCOME_RUNNING

    with running(opreg.Worker(client, ns, default=handle, **FAST)):
        wait_for(lambda: all(reported(k) for k in keys))

    operations = {key: client.lookup(ns, key).operation for key in keys}
    assert (operations["op:ok"].status, operations["op:ok"].result, operations["op:ok"].result_ref) == (
        pb.OPERATION_STATUS_SUCCEEDED,
        b"done",
        "ref-1",
    )
    assert (operations["op:business"].status, operations["op:business"].failure.code) == (
        pb.OPERATION_STATUS_FAILED,
        "INSUFFICIENT_FUNDS",
    )
    assert (operations["op:transient"].status, operations["op:transient"].last_error_class) == (
        pb.OPERATION_STATUS_RETRY_SCHEDULED,
        "TransientError",
    )
    assert (operations["op:bug"].status, operations["op:bug"].last_error_class) == (
        pb.OPERATION_STATUS_RETRY_SCHEDULED,
        "KeyError",
    )
    # UNKNOWN, and at once due for reconciliation: this worker (without a reconcile
    # callback) may hold its reconcile lease by now, which shows as IN_PROGRESS.
    assert history(client, ns, "op:unconfirmed")[1] == (pb.EXECUTION_KIND_RETRY, pb.EXECUTION_OUTCOME_UNKNOWN)
    assert operations["op:unconfirmed"].remote_ref == "psp-5"


def test_the_worker_reconciles_an_unknown_outcome_with_its_callback(client: opreg.Client, ns: str) -> None:
    unknown_outcome(client, ns, "pay:1", "psp-1")
    unknown_outcome(client, ns, "pay:2", "psp-2")
    checked: list[tuple[str, str, bool]] = []
    ran: list[tuple[str, bool]] = []

    def reconcile(operation: pb.Operation, lease: opreg.Lease) -> opreg.Reconciliation:
        checked.append((operation.operation_key, operation.remote_ref, lease.reconciling))
        if operation.operation_key == "pay:1":
            return opreg.Reconciliation.succeeded(b"found", result_ref=operation.remote_ref)
        return opreg.Reconciliation.not_applied()

    def pay(operation: pb.Operation, lease: opreg.Lease) -> bytes:
        ran.append((operation.operation_key, lease.reconciling))
        return b"paid now"

    with running(opreg.Worker(client, ns, handlers={"pay": pay}, reconcile=reconcile, **FAST)):
        wait_for(lambda: all(status(client, ns, k) == pb.OPERATION_STATUS_SUCCEEDED for k in ("pay:1", "pay:2")))

    assert sorted(checked) == [("pay:1", "psp-1", True), ("pay:2", "psp-2", True)]
    assert ran == [("pay:2", True)]  # not applied: the handler ran under the same reconcile lease
    first = client.lookup(ns, "pay:1").operation
    assert (first.result, first.result_ref) == (b"found", "psp-1")
    assert client.lookup(ns, "pay:2").operation.result == b"paid now"
    for key in ("pay:1", "pay:2"):
        assert history(client, ns, key) == [
            (pb.EXECUTION_KIND_FIRST, pb.EXECUTION_OUTCOME_UNKNOWN),
            (pb.EXECUTION_KIND_RECONCILE, pb.EXECUTION_OUTCOME_SUCCEEDED),
        ]


def test_without_a_reconcile_callback_an_unknown_outcome_is_left_alone(
    client: opreg.Client, ns: str, caplog: pytest.LogCaptureFixture
) -> None:
    unknown_outcome(client, ns, "pay:1", "psp-1")
    ran: list[str] = []
    worker = opreg.Worker(
        client, ns, handlers={"pay": lambda op, lease: ran.append("pay") or b"x"}, lease_ttl=1, **FAST
    )
    with caplog.at_level(logging.WARNING, logger="opreg.worker"), running(worker):
        time.sleep(1.6)  # its 1 s reconcile lease expires and it is handed out again
    assert ran == []
    operation = client.lookup(ns, "pay:1").operation
    assert operation.remote_ref == "psp-1" and operation.last_error_class == "unknown_outcome"
    # Still unknown: at most under the reconcile lease the worker took and let lapse.
    assert operation.status == pb.OPERATION_STATUS_UNKNOWN or (
        operation.status == pb.OPERATION_STATUS_IN_PROGRESS and operation.reconciling
    )
    left_alone = [r for r in caplog.records if "no reconcile callback" in r.getMessage()]
    assert len(left_alone) >= 2
    kinds = {e.kind for e in client.lookup(ns, "pay:1", include_executions=True).executions[1:]}
    assert kinds == {pb.EXECUTION_KIND_RECONCILE}  # no execution ran, only reconcile leases


def test_an_operator_hold_stops_the_handler_and_nothing_is_recorded(client: opreg.Client, ns: str) -> None:
    retry_due_soon(client, ns, "debit:1")
    started = threading.Event()
    seen: dict[str, Any] = {}

    def debit(operation: pb.Operation, lease: opreg.Lease) -> bytes:
        started.set()
        began = time.monotonic()
        seen["lost"] = lease.wait(10)
        seen["after"] = time.monotonic() - began
        return b"too late"

    with running(opreg.Worker(client, ns, handlers={"debit": debit}, lease_ttl=1, **FAST)):
        assert started.wait(10)
        client.hold_operation(ns, "debit:1", operator="alice", reason="investigating")
        wait_for(lambda: "lost" in seen, 10)
    assert seen["lost"] is True and seen["after"] < 3
    operation = client.lookup(ns, "debit:1").operation
    assert operation.held and operation.status == pb.OPERATION_STATUS_IN_PROGRESS
    assert history(client, ns, "debit:1")[-1] == (pb.EXECUTION_KIND_RETRY, pb.EXECUTION_OUTCOME_REVOKED)


def test_graceful_stop_lets_in_flight_work_finish(client: opreg.Client, ns: str) -> None:
    retry_due_soon(client, ns, "debit:1")
    started = threading.Event()

    def debit(operation: pb.Operation, lease: opreg.Lease) -> bytes:
        started.set()
        assert not lease.wait(0.8)
        return b"finished"

    worker = opreg.Worker(client, ns, handlers={"debit": debit}, grace=10, **FAST)
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(worker.run)
        assert started.wait(10)
        retry_due_soon(client, ns, "debit:2")  # due after the stop: never pulled
        stopped_at = time.monotonic()
        worker.stop()
        run.result(timeout=10)
    assert 0.4 < time.monotonic() - stopped_at < 5
    assert client.lookup(ns, "debit:1").operation.result == b"finished"
    assert status(client, ns, "debit:2") == pb.OPERATION_STATUS_RETRY_SCHEDULED
    assert worker.in_flight == 0


def test_stop_cancels_the_work_after_the_grace_period(client: opreg.Client, ns: str) -> None:
    retry_due_soon(client, ns, "debit:1")
    started = threading.Event()
    seen: dict[str, Any] = {}

    def debit(operation: pb.Operation, lease: opreg.Lease) -> bytes:
        started.set()
        seen["lost"] = lease.wait(30)
        seen["reason"] = lease.lost_reason
        return b"too late"

    worker = opreg.Worker(client, ns, handlers={"debit": debit}, grace=30, **FAST)
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(worker.run)
        assert started.wait(10)
        stopped_at = time.monotonic()
        worker.stop(grace=0.3)  # overrides the worker's 30 s
        run.result(timeout=10)
    assert time.monotonic() - stopped_at < 3
    assert seen["lost"] is True and isinstance(seen["reason"], opreg.WorkerStopped)
    assert status(client, ns, "debit:1") == pb.OPERATION_STATUS_IN_PROGRESS  # nothing completed
    assert history(client, ns, "debit:1")[-1] == (pb.EXECUTION_KIND_RETRY, pb.EXECUTION_OUTCOME_RUNNING)


class CountingClaimDue(opreg.Client):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.claim_dues = 0

    def claim_due(self, *args: Any, **kwargs: Any) -> pb.ClaimDueResponse:
        self.claim_dues += 1
        return super().claim_due(*args, **kwargs)


def test_the_worker_backs_off_while_the_registry_is_unreachable(ns: str) -> None:
    nowhere = CountingClaimDue.connect(f"127.0.0.1:{free_port()}")
    worker = opreg.Worker(nowhere, ns, default=lambda op, lease: b"", transport_backoff=(0.05, 0.2))
    try:
        with ThreadPoolExecutor(1) as pool:
            run = pool.submit(worker.run)
            time.sleep(1.0)
            stopped_at = time.monotonic()
            worker.stop()
            run.result(timeout=5)
    finally:
        nowhere.close()
    assert time.monotonic() - stopped_at < 1
    assert 3 <= nowhere.claim_dues < 100  # retried, with pauses in between


def test_the_worker_polls_an_empty_queue_every_poll_interval(client: opreg.Client, ns: str) -> None:
    counting = CountingClaimDue(client.channel)
    worker = opreg.Worker(counting, ns, default=lambda op, lease: b"", poll_interval=0.2)
    with running(worker):
        time.sleep(1.0)
    assert 3 <= counting.claim_dues <= 8


def test_any_other_claim_due_error_ends_run(client: opreg.Client) -> None:
    with pytest.raises(opreg.InvalidArgument):
        opreg.Worker(client, "", default=lambda op, lease: b"").run()


# -- asyncio --------------------------------------------------------------------


@pytest.mark.asyncio
async def test_async_worker_runs_retries_takeovers_and_reconciles(
    client: opreg.Client, aclient: opreg.AsyncClient, ns: str
) -> None:
    retry_due_soon(client, ns, "debit:retry")
    abandoned_lease(client, ns, "debit:takeover")
    unknown_outcome(client, ns, "debit:unknown", "psp-1")
    calls: list[tuple[str, bool, bool]] = []

    async def debit(operation: pb.Operation, lease: opreg.AsyncLease) -> bytes:
        calls.append((operation.operation_key, lease.takeover, lease.reconciling))
        await lease.fenced_write(f"balance:{operation.operation_key}", b"900")
        await asyncio.sleep(0.05)
        return b"async"

    async def reconcile(operation: pb.Operation, lease: opreg.AsyncLease) -> opreg.Reconciliation:
        return opreg.Reconciliation.succeeded(b"found", result_ref=operation.remote_ref)

    keys = ("debit:retry", "debit:takeover", "debit:unknown")
    worker = opreg.AsyncWorker(aclient, ns, handlers={"debit": debit}, reconcile=reconcile, **FAST)
    run = asyncio.create_task(worker.run())
    try:
        for _ in range(200):
            looked = [await aclient.lookup(ns, k) for k in keys]
            if all(x.operation.status == pb.OPERATION_STATUS_SUCCEEDED for x in looked):
                break
            await asyncio.sleep(0.1)
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)
    assert sorted(calls) == [("debit:retry", False, False), ("debit:takeover", True, False)]
    assert [x.operation.result for x in looked] == [b"async", b"async", b"found"]


@pytest.mark.asyncio
async def test_async_stop_cancels_the_work_after_the_grace_period(
    client: opreg.Client, aclient: opreg.AsyncClient, ns: str
) -> None:
    retry_due_soon(client, ns, "debit:1")
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def debit(operation: pb.Operation, lease: opreg.AsyncLease) -> bytes:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return b"too late"

    worker = opreg.AsyncWorker(aclient, ns, handlers={"debit": debit}, grace=0.3, **FAST)
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    stopped_at = time.monotonic()
    worker.stop()
    await asyncio.wait_for(run, 10)
    assert time.monotonic() - stopped_at < 3
    assert cancelled.is_set()
    looked = await aclient.lookup(ns, "debit:1", include_executions=True)
    assert looked.operation.status == pb.OPERATION_STATUS_IN_PROGRESS  # nothing completed
    assert looked.executions[-1].outcome == pb.EXECUTION_OUTCOME_RUNNING


@pytest.mark.asyncio
async def test_async_graceful_stop_and_cancelling_run(
    client: opreg.Client, aclient: opreg.AsyncClient, ns: str
) -> None:
    retry_due_soon(client, ns, "debit:1")
    started: dict[str, asyncio.Event] = {"debit": asyncio.Event(), "slow": asyncio.Event()}

    async def handle(operation: pb.Operation, lease: opreg.AsyncLease) -> bytes:
        kind = opreg.kind_of(operation.operation_key)
        started[kind].set()
        await asyncio.sleep(0.5 if kind == "debit" else 30)
        return b"finished"

    graceful = opreg.AsyncWorker(aclient, ns, handlers={"debit": handle}, grace=10, **FAST)
    run = asyncio.create_task(graceful.run())
    await asyncio.wait_for(started["debit"].wait(), 10)
    graceful.stop()
    await asyncio.wait_for(run, 10)
    assert (await aclient.lookup(ns, "debit:1")).operation.result == b"finished"

    retry_due_soon(client, ns, "slow:1")  # now: the first worker would have found no handler for it
    abrupt = opreg.AsyncWorker(aclient, ns, handlers={"slow": handle}, grace=10, **FAST)
    run = asyncio.create_task(abrupt.run())
    await asyncio.wait_for(started["slow"].wait(), 10)
    run.cancel()  # stops at once: the in-flight work is cancelled, not waited for
    began = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert time.monotonic() - began < 3 and abrupt.in_flight == 0
    assert (await aclient.lookup(ns, "slow:1")).operation.status == pb.OPERATION_STATUS_IN_PROGRESS
