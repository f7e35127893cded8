"""The run-once decision core (``opreg._run``) without a server: the rows of
client/PROTOCOL.md's decision table that the conformance scenarios reach only
in part (Complete's refusals, the Lookup that settles a Complete in doubt,
Renew's refusals, what follows a recorded report)."""

from __future__ import annotations

import threading
import time
from typing import Any

import grpc
import pytest

import opreg
from opreg import _run, pb

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
    return _run.Attempt(run, response or claimed(), time.monotonic())


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
        assert parameters["transport_backoff"].default == (0.1, 5.0)
        assert parameters["renew_interval"].default is None  # lease_ttl / 3
    assert spec(lease_ttl=30.0).renew_interval == 10.0
    assert _run.expiry_margin(30.0) == 3.0 and _run.expiry_margin(0.9) == pytest.approx(0.09)
    assert _run.COMPLETE_RPC_TIMEOUTS == 3


# -- what follows a recorded report ------------------------------------------------


def after(report: _run.Outcome, error: BaseException | None, status: int, **kwargs: Any) -> Any:
    options = {"retry_transient": True, "can_reconcile": False, "fencing_token": 7}
    options.update(kwargs)
    return _run.after_complete(operation(status), report, error, **options)


def test_a_transient_work_error_is_claimed_again_or_dead() -> None:
    transient = opreg.TransientError("down")
    report = _run.error_report(transient)
    assert after(report, transient, pb.OPERATION_STATUS_RETRY_SCHEDULED) is _run.AGAIN
    with pytest.raises(opreg.OperationDead):
        after(report, transient, pb.OPERATION_STATUS_DEAD)
    with pytest.raises(opreg.TransientError):
        after(report, transient, pb.OPERATION_STATUS_RETRY_SCHEDULED, retry_transient=False)


def test_an_unexpected_work_error_is_raised_and_not_claimed_again() -> None:
    bug = ZeroDivisionError("division by zero")
    report = _run.error_report(bug)
    assert isinstance(report, pb.RetryableError) and report.error_class == "ZeroDivisionError"
    for status in (pb.OPERATION_STATUS_RETRY_SCHEDULED, pb.OPERATION_STATUS_DEAD):
        with pytest.raises(ZeroDivisionError):
            after(report, bug, status, can_reconcile=True)


def test_sent_but_unconfirmed_reconciles_or_is_outcome_unknown() -> None:
    unconfirmed = opreg.SentButUnconfirmed("remote-1")
    report = _run.error_report(unconfirmed)
    assert isinstance(report, pb.UnknownOutcome) and report.remote_ref == "remote-1"
    assert after(report, unconfirmed, pb.OPERATION_STATUS_UNKNOWN, can_reconcile=True) is _run.AGAIN
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
    assert a.done(pb.CompleteResponse(operation=operation(pb.OPERATION_STATUS_RETRY_SCHEDULED))) is _run.AGAIN


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


# -- Complete's refusals -------------------------------------------------------------


@pytest.mark.parametrize("cls", [opreg.StaleFencingToken, opreg.LeaseNotHeld])
def test_complete_refused_as_not_our_lease_is_lease_lost(cls: type[opreg.OpregError]) -> None:
    a = attempt()
    lease = lease_of(a)
    with pytest.raises(opreg.LeaseLost):
        a.complete_failed(lease, error(cls))
    assert lease.lost


@pytest.mark.parametrize(
    "cls",
    [
        opreg.AlreadyCompleted,
        opreg.InvalidArgument,
        opreg.OperationNotFound,
        opreg.ParameterConflict,
        opreg.OriginalOutcomeUnknown,
        opreg.NothingToCompensate,
        opreg.AlreadyCompensated,
    ],
)
def test_complete_refused_definitively_raises_the_typed_error(cls: type[opreg.OpregError]) -> None:
    a = attempt()
    lease = lease_of(a)
    with pytest.raises(cls):
        a.complete_failed(lease, error(cls))
    assert not lease.lost


@pytest.mark.parametrize(
    "refusal",
    [
        opreg.InternalError("boom", code=grpc.StatusCode.INTERNAL),
        opreg.PermissionDenied("no", code=grpc.StatusCode.PERMISSION_DENIED),
        opreg.MessageTooLarge("big", code=grpc.StatusCode.RESOURCE_EXHAUSTED),
        opreg.DeadlineExceeded("Complete's own time ran out"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_any_other_complete_error_is_in_doubt(refusal: opreg.OpregError) -> None:
    a = attempt()
    a.complete_failed(lease_of(a), refusal)  # returns: a Lookup decides
    assert a.in_doubt(refusal)


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


REPORTS: list[tuple[Any, int]] = [
    (b"done", pb.EXECUTION_OUTCOME_SUCCEEDED),
    (opreg.BusinessError("insufficient_funds"), pb.EXECUTION_OUTCOME_FAILED),
    (opreg.TransientError("down"), pb.EXECUTION_OUTCOME_RETRYABLE),
    (opreg.SentButUnconfirmed("remote-1"), pb.EXECUTION_OUTCOME_UNKNOWN),
]
OUTCOMES = [
    pb.EXECUTION_OUTCOME_SUCCEEDED,
    pb.EXECUTION_OUTCOME_FAILED,
    pb.EXECUTION_OUTCOME_RETRYABLE,
    pb.EXECUTION_OUTCOME_UNKNOWN,
    pb.EXECUTION_OUTCOME_RUNNING,
]


def reported(value: Any) -> _run.Attempt:
    a = attempt()
    if isinstance(value, BaseException):
        a.work_failed(lease_of(a), value)  # type: ignore[arg-type]
    else:
        a.worked(value)
    return a


@pytest.mark.parametrize("report,recorded_as", REPORTS, ids=lambda v: type(v).__name__)
def test_only_exactly_the_outcome_we_reported_counts(report: Any, recorded_as: int) -> None:
    cause = opreg.Unavailable("answer lost", code=grpc.StatusCode.UNAVAILABLE)
    for seen in OUTCOMES:
        a = reported(report)
        lease = lease_of(a)
        if seen == recorded_as:
            answer = a.looked_up(lease, looked(7, seen), cause)
            assert answer.operation.operation_key == "key"
        else:
            with pytest.raises(opreg.OutcomeNotRecorded):
                a.looked_up(lease, looked(7, seen), cause)
        assert not lease.lost


@pytest.mark.parametrize("ended", [pb.EXECUTION_OUTCOME_SUPERSEDED, pb.EXECUTION_OUTCOME_REVOKED])
def test_superseded_or_revoked_is_lease_lost_and_no_execution_or_no_lookup_not_recorded(ended: int) -> None:
    cause = opreg.Unavailable("answer lost", code=grpc.StatusCode.UNAVAILABLE)
    a = reported(b"done")
    lease = lease_of(a)
    with pytest.raises(opreg.LeaseLost):
        a.looked_up(lease, looked(7, ended), cause)
    assert lease.lost
    with pytest.raises(opreg.OutcomeNotRecorded, match="no execution"):
        reported(b"done").looked_up(lease, looked(6, pb.EXECUTION_OUTCOME_SUCCEEDED), cause)
    with pytest.raises(opreg.OutcomeNotRecorded, match="Lookup failed"):
        reported(b"done").looked_up(lease, None, cause)


# -- Renew's refusals ------------------------------------------------------------------


@pytest.mark.parametrize(
    "refusal",
    [
        opreg.StaleFencingToken("stale", code=grpc.StatusCode.ABORTED),
        opreg.LeaseNotHeld("not held", code=grpc.StatusCode.FAILED_PRECONDITION),
        opreg.OperationNotFound("gone", code=grpc.StatusCode.NOT_FOUND),
        opreg.PermissionDenied("no", code=grpc.StatusCode.PERMISSION_DENIED),
        opreg.InvalidArgument("bad", code=grpc.StatusCode.INVALID_ARGUMENT),
        opreg.InternalError("boom", code=grpc.StatusCode.INTERNAL),
        opreg.MessageTooLarge("big", code=grpc.StatusCode.RESOURCE_EXHAUSTED),
        opreg.OpregError("cancelled", code=grpc.StatusCode.CANCELLED),
    ],
    ids=lambda e: type(e).__name__ + (f"-{e.code.name}" if e.code else ""),
)
def test_any_non_transient_renew_error_loses_the_lease(refusal: opreg.OpregError) -> None:
    a = attempt()
    lease = lease_of(a)
    renewal = _run.Renewal(lease, a.spec)
    assert renewal.failed(refusal) is True
    assert lease.lost and lease.lost_reason is refusal


@pytest.mark.parametrize(
    "transient",
    [
        opreg.Unavailable("down", code=grpc.StatusCode.UNAVAILABLE),
        opreg.Unavailable("timeout", code=grpc.StatusCode.DEADLINE_EXCEEDED),
        opreg.Unavailable("Timeout expired", code=grpc.StatusCode.CANCELLED),
        opreg.OperationBusy("busy", code=grpc.StatusCode.UNAVAILABLE),
        opreg.RateLimited("slow down", code=grpc.StatusCode.RESOURCE_EXHAUSTED),
    ],
    ids=lambda e: type(e).__name__ + f"-{e.code.name}",
)
def test_a_transient_renew_error_is_retried_before_the_local_expiry(transient: opreg.OpregError) -> None:
    a = attempt(lease_ttl=3.0)
    lease = lease_of(a)
    renewal = _run.Renewal(lease, a.spec)
    assert renewal.failed(transient) is False and not lease.lost
    assert 0 <= renewal.wait <= 3.0 - 0.3


def test_the_local_expiry_is_measured_from_the_claims_send() -> None:
    sent = time.monotonic() - 2.8  # the Claim was sent 2.8 s ago; its answer came late
    run = _run.RunOnce(spec(lease_ttl=3.0), 10, can_reconcile=False)
    a = _run.Attempt(run, claimed(), sent)
    lease = lease_of(a)
    renewal = _run.Renewal(lease, a.spec)
    # 3 s - 0.3 s margin after the send has passed: a transient error now loses the lease.
    assert renewal.failed(opreg.Unavailable("down", code=grpc.StatusCode.UNAVAILABLE)) is True
    assert lease.lost
