"""The run-once core (``opreg._run``, ``opreg._decide``) without a server: what
the shared decision vectors (tests/test_decisions.py) do not reach. What
follows a recorded report, reconciling, and how a run acts on each decision
of the table (the lease marked lost, the error raised, the time Complete gets,
the Renew backoff kept between failures)."""

from __future__ import annotations

import threading
import time
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2

import opreg
from opreg import _decide, _outcomes, _run, pb

PARAMS = {"amount": 100}


def spec(**overrides: Any) -> _run.RunSpec:
    settings: dict[str, Any] = dict(
        owner="me",
        execution_id="",
        lease_ttl=3.0,
        retry_policy=None,
        compensates="",
        renew_interval=None,
        rpc_timeout=0.5,
        poll_interval=1.0,
        retry_transient=True,
        transport_backoff=(0.1, 5.0),
    )
    settings.update(overrides)
    return _run.run_spec("ns", "key", PARAMS, **settings)


def claimed(outcome: int = pb.CLAIM_OUTCOME_ACQUIRED, token: int = 7, remote_ref: str = "") -> pb.ClaimResponse:
    return pb.ClaimResponse(
        outcome=outcome,
        lease=pb.Lease(owner="me", fencing_token=token, attempt=1),
        operation=pb.Operation(namespace="ns", operation_key="key", remote_ref=remote_ref),
    )


def attempt(*, can_reconcile: bool = True, response: pb.ClaimResponse | None = None, **overrides: Any) -> _run.Attempt:
    run = _run.RunOnce(spec(**overrides), 10, can_reconcile=can_reconcile)
    response = response or claimed()
    return _run.Attempt(run, response, time.monotonic(), reconciling=response.outcome == pb.CLAIM_OUTCOME_RECONCILE)


def lease_of(a: _run.Attempt) -> _run.LeaseBase:
    return _run.LeaseBase(None, threading.Event(), **a.lease_fields)


def error(cls: type[opreg.OpregError], code: grpc.StatusCode = grpc.StatusCode.FAILED_PRECONDITION) -> opreg.OpregError:
    return cls("refused", code=code)


def operation(status: int, **fields: Any) -> pb.Operation:
    return pb.Operation(namespace="ns", operation_key="key", status=status, **fields)


# -- the defaults ------------------------------------------------------------------


def test_the_defaults_of_the_protocol() -> None:
    import inspect

    for method in (opreg.Client.run_once, opreg.AsyncClient.run_once):
        parameters = inspect.signature(method).parameters
        assert parameters["deadline"].default == 120.0
        assert parameters["lease_ttl"].default == 30.0
        assert parameters["rpc_timeout"].default == 10.0
        assert parameters["renew_interval"].default is None  # lease_ttl / 3
    assert spec(lease_ttl=30.0).renew_interval == 10.0
    assert _decide.expiry_margin(30.0) == 3.0 and _decide.expiry_margin(0.9) == pytest.approx(0.09)
    assert _run.COMPLETE_RPC_TIMEOUTS == 3


# -- what follows a recorded report ------------------------------------------------


def after(report: _outcomes.Outcome, error: BaseException | None, status: int, **kwargs: Any) -> Any:
    options = {"retry_transient": True, "can_reconcile": False, "fencing_token": 7}
    options.update(kwargs)
    return _decide.after_complete(operation(status), report, error, **options)


def test_a_transient_work_error_is_claimed_again_or_dead() -> None:
    transient = opreg.TransientError("down")
    report = _decide.error_report(transient)
    assert after(report, transient, pb.OPERATION_STATUS_RETRY_SCHEDULED) is _outcomes.AGAIN
    with pytest.raises(opreg.OperationDead):
        after(report, transient, pb.OPERATION_STATUS_DEAD)
    with pytest.raises(opreg.TransientError):
        after(report, transient, pb.OPERATION_STATUS_RETRY_SCHEDULED, retry_transient=False)


def test_an_unexpected_work_error_is_raised_and_not_claimed_again() -> None:
    bug = ZeroDivisionError("division by zero")
    report = _decide.error_report(bug)
    assert isinstance(report, pb.RetryableError) and report.error_class == "ZeroDivisionError"
    for status in (pb.OPERATION_STATUS_RETRY_SCHEDULED, pb.OPERATION_STATUS_DEAD):
        with pytest.raises(ZeroDivisionError):
            after(report, bug, status, can_reconcile=True)


def test_sent_but_unconfirmed_reconciles_or_is_outcome_unknown() -> None:
    unconfirmed = opreg.SentButUnconfirmed("remote-1")
    report = _decide.error_report(unconfirmed)
    assert isinstance(report, pb.UnknownOutcome) and report.remote_ref == "remote-1"
    assert after(report, unconfirmed, pb.OPERATION_STATUS_UNKNOWN, can_reconcile=True) is _outcomes.AGAIN
    with pytest.raises(opreg.OutcomeUnknown) as caught:
        after(report, unconfirmed, pb.OPERATION_STATUS_UNKNOWN, can_reconcile=False)
    assert caught.value.remote_ref == "remote-1" and caught.value.fencing_token == 7
    assert caught.value.__cause__ is unconfirmed
    assert isinstance(caught.value, opreg.OpregError)
    with pytest.raises(opreg.OutcomeUnknown):  # the worker: never claimed again by itself
        after(report, unconfirmed, pb.OPERATION_STATUS_UNKNOWN, can_reconcile=True, retry_transient=False)


def test_after_not_applied_a_transient_work_error_is_claimed_again() -> None:
    a = attempt(response=claimed(pb.CLAIM_OUTCOME_RECONCILE, remote_ref="remote-1"))
    lease = lease_of(a)
    assert a.must_reconcile
    a.reconciled(opreg.Reconciliation.not_applied())
    assert a.report is None  # the work runs next, under the same lease
    a.work_failed(lease, opreg.TransientError("down"))
    assert a.done(pb.CompleteResponse(operation=operation(pb.OPERATION_STATUS_RETRY_SCHEDULED))) is _outcomes.AGAIN


def test_a_failed_reconcile_is_recorded_unknown_and_raised() -> None:
    a = attempt(response=claimed(pb.CLAIM_OUTCOME_RECONCILE, remote_ref="remote-1"))
    broken = RuntimeError("the remote system is down")
    a.reconcile_failed(lease_of(a), broken)
    assert isinstance(a.report, pb.UnknownOutcome) and a.report.remote_ref == "remote-1"
    with pytest.raises(RuntimeError):
        a.done(pb.CompleteResponse(operation=operation(pb.OPERATION_STATUS_UNKNOWN)))


def test_reconcile_without_a_callback_hands_the_lease_back() -> None:
    a = attempt(can_reconcile=False, response=claimed(pb.CLAIM_OUTCOME_RECONCILE, remote_ref="remote-before"))
    assert not a.must_reconcile
    assert isinstance(a.report, pb.UnknownOutcome) and a.report.remote_ref == "remote-before"
    with pytest.raises(opreg.ReconcileRequired):
        a.done(pb.CompleteResponse(operation=operation(pb.OPERATION_STATUS_UNKNOWN)))


# -- a call retried ----------------------------------------------------------------


def test_a_retried_call_backs_off_and_never_sleeps_past_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_run.random, "random", lambda: 0.5)  # the draw the I/O layer makes
    retry = _run.Retry(lambda timeout: None, _run.Deadline(1.0), spec(), "Claim")
    down = opreg.Unavailable("down", code=grpc.StatusCode.UNAVAILABLE)
    assert [retry.failed(down), retry.failed(down)] == pytest.approx([0.05, 0.1])
    overloaded = opreg.Unavailable(
        "overloaded",
        code=grpc.StatusCode.UNAVAILABLE,
        details=[error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=2))],
    )
    assert 0.9 < retry.failed(overloaded) <= 1.0  # the RetryInfo's 2.1 s, cut at the deadline


# -- Complete's refusals -------------------------------------------------------------


def test_nothing_is_completed_under_a_lost_lease() -> None:
    a = attempt()
    lease = lease_of(a)
    a.worked(b"done")
    lease._mark_lost(opreg.LeaseNotHeld("not held", code=grpc.StatusCode.FAILED_PRECONDITION))
    sent: list[object] = []
    with pytest.raises(opreg.LeaseLost):
        a.complete(lambda *args, **kwargs: sent.append(args), lease)
    assert not sent


def test_a_complete_refusal_is_acted_on() -> None:
    a = attempt()
    lease = lease_of(a)
    with pytest.raises(opreg.LeaseLost):
        a.complete_failed(lease, error(opreg.StaleFencingToken, grpc.StatusCode.ABORTED))
    assert lease.lost
    a = attempt()
    lease = lease_of(a)
    refusal = error(opreg.AlreadyCompleted)
    with pytest.raises(opreg.AlreadyCompleted) as caught:
        a.complete_failed(lease, refusal)
    assert caught.value is refusal and not lease.lost
    a = attempt()
    lease = lease_of(a)
    a.complete_failed(lease, opreg.InternalError("boom", code=grpc.StatusCode.INTERNAL))  # returns: a Lookup decides
    assert not lease.lost


@pytest.mark.parametrize(
    "refusal",
    [
        opreg.DeadlineExceeded("Complete's own time ran out"),
        opreg.MessageTooLarge("big", code=grpc.StatusCode.RESOURCE_EXHAUSTED),
    ],
    ids=lambda e: type(e).__name__,
)
def test_completes_time_running_out_or_another_error_is_in_doubt(refusal: opreg.OpregError) -> None:
    assert _decide.decide_complete_error(refusal) == "in_doubt"


def test_completes_own_time_is_three_call_timeouts_even_past_the_deadline() -> None:
    a = attempt(rpc_timeout=0.5)
    a.run.overall = _run.Deadline(-1)  # the overall deadline passed during the work
    a.worked(b"done")
    retry = a.complete(lambda *args, **kwargs: None, lease_of(a))
    assert 0.4 < retry.timeout() <= 0.5
    assert 1.4 < retry._deadline.remaining() <= 1.5


# -- the Lookup that settles a Complete in doubt ---------------------------------------


def looked(token: int, outcome: int, status: int = pb.OPERATION_STATUS_SUCCEEDED) -> pb.LookupResponse:
    return pb.LookupResponse(
        operation=operation(status, result=b"done"),
        executions=[pb.Execution(fencing_token=token, outcome=outcome)],
    )


def test_the_lookups_verdict_is_acted_on() -> None:
    cause = opreg.Unavailable("answer lost", code=grpc.StatusCode.UNAVAILABLE)
    a = attempt()
    a.worked(b"done")
    lease = lease_of(a)
    answer = a.looked_up(lease, looked(7, pb.EXECUTION_OUTCOME_SUCCEEDED), cause)
    assert answer.operation.result == b"done" and not lease.lost
    assert a.done(answer).value == b"done"
    for response, seen in [
        (looked(7, pb.EXECUTION_OUTCOME_FAILED), "EXECUTION_OUTCOME_FAILED"),
        (looked(6, pb.EXECUTION_OUTCOME_SUCCEEDED), "no execution"),
        (None, "Lookup failed"),
    ]:
        with pytest.raises(opreg.OutcomeNotRecorded, match=f"Lookup shows {seen}") as caught:
            a.looked_up(lease, response, cause)
        assert caught.value.fencing_token == 7 and isinstance(caught.value.report, pb.Success)
        assert caught.value.__cause__ is cause and not lease.lost
    with pytest.raises(opreg.LeaseLost):
        a.looked_up(lease, looked(7, pb.EXECUTION_OUTCOME_SUPERSEDED), cause)
    assert lease.lost and lease.lost_reason is cause


# -- Renew's refusals ------------------------------------------------------------------


def test_a_renewal_keeps_its_backoff_until_one_succeeds_and_a_refusal_loses_the_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_run.random, "random", lambda: 0.5)  # the draw the I/O layer makes
    a = attempt(lease_ttl=3.0)
    lease = lease_of(a)
    renewal = _run.Renewal(lease, a.spec)
    down = opreg.Unavailable("down", code=grpc.StatusCode.UNAVAILABLE)
    waits = []
    for _ in range(4):
        assert renewal.failed(down) is False and not lease.lost
        waits.append(renewal.wait)
    assert waits == pytest.approx([0.05, 0.1, 0.2, 0.4])  # the backoff doubles per failure in a row
    renewed = pb.RenewResponse(lease=pb.Lease(owner="me", fencing_token=7))
    renewal.renewed(renewal.renew(lambda *args, **kwargs: renewed))
    assert renewal.wait == a.spec.renew_interval
    assert renewal.failed(down) is False and renewal.wait == pytest.approx(0.05)  # from the start again
    refusal = opreg.StaleFencingToken("stale", code=grpc.StatusCode.ABORTED)
    assert renewal.failed(refusal) is True
    assert lease.lost and lease.lost_reason is refusal


def test_the_local_expiry_is_measured_from_the_claims_send() -> None:
    sent = time.monotonic() - 2.8  # the Claim was sent 2.8 s ago; its answer came late
    run = _run.RunOnce(spec(lease_ttl=3.0), 10, can_reconcile=False)
    a = _run.Attempt(run, claimed(), sent, reconciling=False)
    lease = lease_of(a)
    renewal = _run.Renewal(lease, a.spec)
    # 3 s - 0.3 s margin after the send has passed: a transient error now loses the lease.
    assert renewal.failed(opreg.Unavailable("down", code=grpc.StatusCode.UNAVAILABLE)) is True
    assert lease.lost


def test_the_local_expiry_adds_the_servers_wait_only_to_an_answer_to_the_first_attempt() -> None:
    run = _run.RunOnce(spec(lease_ttl=3.0), 100, can_reconcile=False)
    answer = claimed()
    answer.waited.FromMilliseconds(1500)  # the server held the Claim 1.5 s before it granted the lease
    retry = run.claim(lambda *args, **kwargs: answer)
    first = run.after_claim(retry.call(retry.timeout()))
    assert isinstance(first, _run.Attempt)
    assert first.lease_fields["local_expiry"] == pytest.approx(run._claimed_at + 1.5 + 3.0)
    retry = run.claim(lambda *args, **kwargs: answer)
    retry.call(retry.timeout())  # its answer was lost: the lease may have been granted after a shorter wait
    retried = run.after_claim(retry.call(retry.timeout()))
    assert isinstance(retried, _run.Attempt)
    assert retried.lease_fields["local_expiry"] == pytest.approx(run._claimed_at + 3.0)


# -- the Claim's server wait ------------------------------------------------------------


def first_claim(deadline: float) -> dict[str, Any]:
    """The keyword arguments of the first Claim of a run with ``deadline`` seconds."""
    sent: list[dict[str, Any]] = []
    run = _run.RunOnce(spec(rpc_timeout=0.5), deadline, can_reconcile=False)
    retry = run.claim(lambda *args, **kwargs: sent.append(kwargs))
    retry.call(retry.timeout())
    return sent[0]


def test_every_claim_asks_the_server_to_wait_and_its_answer_gets_a_call_timeout_after_the_wait() -> None:
    far = first_claim(100)
    assert far["wait"] == _decide.MAX_CLAIM_WAIT and far["timeout"] == pytest.approx(0.5 + _decide.MAX_CLAIM_WAIT)
    near = first_claim(0.2)  # the wait ends at the deadline; the answer to it may come later
    assert 0.1 < near["wait"] <= 0.2 and near["timeout"] == pytest.approx(0.5 + near["wait"])
