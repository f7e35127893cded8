"""The sync run-once helper against the real server."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import opreg
from opreg import pb

PARAMS = {"account": "A", "amount": 100}


def executions(client: opreg.Client, ns: str, key: str) -> list[tuple[int, int]]:
    """(kind, outcome) of every execution, in order."""
    return [(e.kind, e.outcome) for e in client.lookup(ns, key, include_executions=True).executions]


def test_success_then_replay(client: opreg.Client, ns: str) -> None:
    calls: list[opreg.Lease] = []

    def work(lease: opreg.Lease) -> tuple[bytes, str]:
        calls.append(lease)
        assert not lease.lost and lease.attempt == 1 and not lease.takeover
        return b"balance=900", "ledger-7"

    first = client.run_once(ns, "debit-1", PARAMS, work, execution_id="run-1")
    assert (first.value, first.result_ref, first.replayed) == (b"balance=900", "ledger-7", False)
    assert first.operation.status == pb.OPERATION_STATUS_SUCCEEDED

    second = opreg.run_once(client, ns, "debit-1", {"amount": 100.0, "account": "A"}, work)
    assert (second.value, second.result_ref, second.replayed) == (b"balance=900", "ledger-7", True)
    assert len(calls) == 1
    assert executions(client, ns, "debit-1") == [(pb.EXECUTION_KIND_FIRST, pb.EXECUTION_OUTCOME_SUCCEEDED)]


def test_digest_instead_of_parameters(client: opreg.Client, ns: str) -> None:
    first = client.run_once(ns, "k", opreg.parameters_digest(PARAMS), lambda lease: b"one")
    # The server's digest of the Struct equals the local one: this is a replay.
    second = client.run_once(ns, "k", PARAMS, lambda lease: b"two")
    assert (first.value, first.replayed, second.value, second.replayed) == (b"one", False, b"one", True)


def test_business_failure_is_recorded_and_replayed(client: opreg.Client, ns: str) -> None:
    calls = 0

    def work(lease: opreg.Lease) -> bytes:
        nonlocal calls
        calls += 1
        raise opreg.BusinessError("INSUFFICIENT_FUNDS", "balance 50 < 100")

    with pytest.raises(opreg.BusinessFailure) as first:
        client.run_once(ns, "debit-2", PARAMS, work)
    assert (first.value.code, first.value.message, first.value.replayed) == (
        "INSUFFICIENT_FUNDS",
        "balance 50 < 100",
        False,
    )
    with pytest.raises(opreg.BusinessFailure) as second:
        client.run_once(ns, "debit-2", PARAMS, work)
    assert (second.value.code, second.value.message, second.value.replayed) == (
        "INSUFFICIENT_FUNDS",
        "balance 50 < 100",
        True,
    )
    assert isinstance(second.value, opreg.BusinessError) and not isinstance(second.value, opreg.OpregError)
    assert second.value.operation.status == pb.OPERATION_STATUS_FAILED
    assert calls == 1


def test_parameter_conflict(client: opreg.Client, ns: str) -> None:
    client.run_once(ns, "order-A", PARAMS, lambda lease: b"ok")
    ran = []
    with pytest.raises(opreg.ParameterConflict) as caught:
        client.run_once(ns, "order-A", {"account": "A", "amount": 101}, lambda lease: ran.append(1))
    assert caught.value.differing_fields == ["amount"]
    assert caught.value.stored_digest == opreg.parameters_digest(PARAMS)
    assert not ran


def test_lease_lost_mid_work_stops_work_and_never_completes(client: opreg.Client, address: str, ns: str) -> None:
    """The helper's lease (1 s TTL) is renewed only every 3 s here, so it
    expires; another owner takes over; the next renewal is refused, the work is
    told to stop, and the helper raises LeaseLost without completing."""
    started = threading.Event()
    seen: dict[str, object] = {}

    def work(lease: opreg.Lease) -> bytes:
        seen["token"] = lease.fencing_token
        started.set()
        began = time.monotonic()
        seen["lost"] = lease.wait(10)  # an interruptible sleep: true once lost
        seen["noticed_after"] = time.monotonic() - began
        with pytest.raises(opreg.LeaseLost):
            lease.check()
        return b"too late"

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(
            client.run_once, ns, "slow", PARAMS, work, owner="worker-a", lease_ttl=1, renew_interval=3.0
        )
        with opreg.Client.connect(address) as other:
            assert started.wait(10)
            time.sleep(1.4)  # past the 1 s lease, well before the 3 s renewal
            taken = other.claim(ns, "slow", owner="worker-b", parameters=PARAMS, lease_ttl=30)
        assert taken.outcome == pb.CLAIM_OUTCOME_ACQUIRED and taken.lease.takeover
        with pytest.raises(opreg.LeaseLost) as caught:
            future.result(timeout=20)

    assert seen["lost"] is True and seen["noticed_after"] < 6
    assert isinstance(caught.value.__cause__, opreg.StaleFencingToken)
    assert caught.value.fencing_token == seen["token"]
    looked = client.lookup(ns, "slow", include_executions=True)
    assert looked.operation.status == pb.OPERATION_STATUS_IN_PROGRESS
    assert looked.operation.lease.owner == "worker-b"
    assert [(e.owner, e.kind, e.outcome) for e in looked.executions] == [
        ("worker-a", pb.EXECUTION_KIND_FIRST, pb.EXECUTION_OUTCOME_SUPERSEDED),
        ("worker-b", pb.EXECUTION_KIND_TAKEOVER, pb.EXECUTION_OUTCOME_RUNNING),
    ]


def test_renewals_keep_a_long_work_alive(client: opreg.Client, ns: str) -> None:
    probes: list[int] = []

    def work(lease: opreg.Lease) -> bytes:
        for _ in range(6):  # 3 s under a 2 s lease renewed every ~0.67 s
            assert not lease.wait(0.5)
            probes.append(client.claim(ns, "long", owner="someone-else", parameters=PARAMS).outcome)
        return b"done"

    result = client.run_once(ns, "long", PARAMS, work, lease_ttl=2)
    assert result.value == b"done"
    assert probes == [pb.CLAIM_OUTCOME_IN_PROGRESS] * 6


def test_takeover_of_a_crashed_worker(client: opreg.Client, ns: str) -> None:
    crashed = client.claim(ns, "payout", owner="crashed", parameters=PARAMS, lease_ttl=1)
    assert crashed.outcome == pb.CLAIM_OUTCOME_ACQUIRED  # ...and never renews or completes

    seen: list[opreg.Lease] = []

    def work(lease: opreg.Lease) -> bytes:
        seen.append(lease)
        return b"paid"

    result = client.run_once(ns, "payout", PARAMS, work, owner="rescuer", poll_interval=0.2, deadline=10)
    assert result.value == b"paid" and not result.replayed
    assert seen[0].takeover and seen[0].attempt == 2
    assert seen[0].fencing_token > crashed.lease.fencing_token
    with pytest.raises(opreg.StaleFencingToken):
        client.complete(ns, "payout", fencing_token=crashed.lease.fencing_token, outcome=opreg.Success(result=b"late"))


def test_a_concurrent_duplicate_waits_and_replays(client: opreg.Client, ns: str) -> None:
    calls = 0
    entered = threading.Event()

    def work(lease: opreg.Lease) -> bytes:
        nonlocal calls
        calls += 1
        entered.set()
        time.sleep(0.8)
        return b"once"

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(client.run_once, ns, "dup", PARAMS, work)
        assert entered.wait(10)
        second = pool.submit(client.run_once, ns, "dup", PARAMS, work, poll_interval=0.2)
        results = sorted((f.result(timeout=20) for f in (first, second)), key=lambda r: r.replayed)
    assert [(r.value, r.replayed) for r in results] == [(b"once", False), (b"once", True)]
    assert calls == 1


def test_deadline_exceeded_while_another_holds_the_lease(client: opreg.Client, ns: str) -> None:
    client.claim(ns, "held", owner="holder", parameters=PARAMS, lease_ttl=30)
    started = time.monotonic()
    with pytest.raises(opreg.DeadlineExceeded) as caught:
        client.run_once(ns, "held", PARAMS, lambda lease: b"never", deadline=1.5, poll_interval=0.3)
    assert time.monotonic() - started < 5
    assert caught.value.last_outcome == pb.CLAIM_OUTCOME_IN_PROGRESS
    assert isinstance(caught.value, TimeoutError)


def test_unknown_outcome_is_reconciled_before_anything_reexecutes(client: opreg.Client, ns: str) -> None:
    work_calls: list[int] = []
    reconciled: list[tuple[str, int, bool]] = []

    def work(lease: opreg.Lease) -> bytes:
        work_calls.append(lease.fencing_token)
        raise opreg.SentButUnconfirmed("psp-7", "timed out after sending")

    def reconcile(lease: opreg.Lease, remote_ref: str) -> opreg.Reconciliation:
        reconciled.append((remote_ref, lease.fencing_token, lease.reconciling))
        return opreg.Reconciliation.succeeded(b"paid", result_ref="psp-7")

    result = client.run_once(ns, "pay", PARAMS, work, reconcile=reconcile)
    assert (result.value, result.result_ref, result.replayed) == (b"paid", "psp-7", False)
    assert len(work_calls) == 1
    assert len(reconciled) == 1 and reconciled[0][0] == "psp-7" and reconciled[0][2] is True
    assert reconciled[0][1] > work_calls[0]
    assert executions(client, ns, "pay") == [
        (pb.EXECUTION_KIND_FIRST, pb.EXECUTION_OUTCOME_UNKNOWN),
        (pb.EXECUTION_KIND_RECONCILE, pb.EXECUTION_OUTCOME_SUCCEEDED),
    ]


def test_unknown_outcome_across_runs_not_applied_then_work(client: opreg.Client, ns: str) -> None:
    def unconfirmed(lease: opreg.Lease) -> bytes:
        raise opreg.SentButUnconfirmed("psp-9")

    with pytest.raises(opreg.OutcomeUnknown) as unknown:
        client.run_once(ns, "pay", PARAMS, unconfirmed)  # no reconcile callback: recorded, then raised
    assert unknown.value.remote_ref == "psp-9" and isinstance(unknown.value.__cause__, opreg.SentButUnconfirmed)
    assert unknown.value.operation.status == pb.OPERATION_STATUS_UNKNOWN
    looked = client.lookup(ns, "pay")
    assert looked.operation.status == pb.OPERATION_STATUS_UNKNOWN and looked.operation.remote_ref == "psp-9"

    with pytest.raises(opreg.ReconcileRequired) as required:
        client.run_once(ns, "pay", PARAMS, lambda lease: b"must not run", lease_ttl=1)
    assert required.value.remote_ref == "psp-9"
    time.sleep(1.1)  # that reconcile lease was abandoned; let it expire

    ran_under: list[opreg.Lease] = []

    def work(lease: opreg.Lease) -> bytes:
        ran_under.append(lease)
        return b"paid on the second try"

    result = client.run_once(ns, "pay", PARAMS, work, reconcile=lambda lease, ref: opreg.Reconciliation.not_applied())
    assert result.value == b"paid on the second try" and not result.replayed
    assert len(ran_under) == 1 and ran_under[0].reconciling


def test_reconciled_failure_is_a_business_failure(client: opreg.Client, ns: str) -> None:
    def work(lease: opreg.Lease) -> bytes:
        raise opreg.SentButUnconfirmed("psp-3")

    with pytest.raises(opreg.BusinessFailure) as caught:
        client.run_once(
            ns, "pay", PARAMS, work, reconcile=lambda lease, ref: opreg.Reconciliation.failed("DECLINED", "card")
        )
    assert (caught.value.code, caught.value.message, caught.value.replayed) == ("DECLINED", "card", False)


def test_transient_error_is_retried_within_the_deadline(client: opreg.Client, ns: str) -> None:
    attempts: list[int] = []

    def work(lease: opreg.Lease) -> bytes:
        attempts.append(lease.attempt)
        if len(attempts) == 1:
            raise opreg.TransientError("rate limited", retry_after=0.3)
        return b"ok"

    result = client.run_once(ns, "flaky", PARAMS, work, deadline=10)
    assert result.value == b"ok" and attempts == [1, 2]
    looked = client.lookup(ns, "flaky", include_executions=True)
    assert looked.operation.attempts == 2
    assert [(e.kind, e.outcome, e.error_class) for e in looked.executions] == [
        (pb.EXECUTION_KIND_FIRST, pb.EXECUTION_OUTCOME_RETRYABLE, "TransientError"),
        (pb.EXECUTION_KIND_RETRY, pb.EXECUTION_OUTCOME_SUCCEEDED, ""),
    ]


def test_transient_error_without_retry_is_reraised(client: opreg.Client, ns: str) -> None:
    class RateLimited(opreg.TransientError):
        pass

    with pytest.raises(RateLimited):
        client.run_once(
            ns, "flaky", PARAMS, lambda lease: (_ for _ in ()).throw(RateLimited("slow down")), retry_transient=False
        )
    looked = client.lookup(ns, "flaky")
    assert looked.operation.status == pb.OPERATION_STATUS_RETRY_SCHEDULED
    assert looked.operation.last_error_class == "RateLimited"


def test_budget_exhausted_is_dead(client: opreg.Client, ns: str) -> None:
    def work(lease: opreg.Lease) -> bytes:
        raise opreg.TransientError("still down")

    policy = opreg.retry_policy(max_attempts=1, initial_backoff=0.1, max_backoff=1, deadline=3600)
    with pytest.raises(opreg.OperationDead) as caught:
        client.run_once(ns, "doomed", PARAMS, work, retry_policy=policy)
    assert caught.value.operation.status == pb.OPERATION_STATUS_DEAD
    assert isinstance(caught.value.__cause__, opreg.TransientError)
    with pytest.raises(opreg.OperationDead):
        client.run_once(ns, "doomed", PARAMS, work)


def test_unexpected_exception_is_reported_retryable_and_reraised(client: opreg.Client, ns: str) -> None:
    def work(lease: opreg.Lease) -> bytes:
        return 1 // 0  # type: ignore[return-value]

    with pytest.raises(ZeroDivisionError):
        client.run_once(ns, "bug", PARAMS, work)
    operation = client.lookup(ns, "bug").operation
    assert operation.status == pb.OPERATION_STATUS_RETRY_SCHEDULED
    assert operation.last_error_class == "ZeroDivisionError"
    assert "division" in operation.last_error_message


def test_fenced_write_through_the_lease(client: opreg.Client, ns: str) -> None:
    def work(lease: opreg.Lease) -> bytes:
        written = lease.fenced_write("balance:A", b"900")
        assert written.fence == lease.fencing_token
        return b"ok"

    client.run_once(ns, "w", PARAMS, work)
    assert client.get_resource(ns, "balance:A").value == b"900"
