"""The error answers added with failing fast: OPERATION_BUSY and STORE_UNAVAILABLE
with a RetryInfo, DEADLINE_EXCEEDED (and the CANCELLED "Timeout expired" a
server's own timer answers), MESSAGE_TOO_LARGE.

MESSAGE_TOO_LARGE is provoked on the real server. OPERATION_BUSY needs a row
locked in the database, so its decoding is tested on a synthesized status (the
``grpc-status-details-bin`` trailer built as the server builds it), and the
helpers' waits on errors raised by a client that answers that status."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Sequence
from typing import Any

import grpc
import pytest
from conftest import retry_due_soon
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2

import opreg
from opreg import pb

PARAMS = {"account": "A", "amount": 100}
# Over the server's Claim limit (576 KiB): refused from the frame header.
TOO_LARGE = {"blob": "x" * 1_000_000}


class SynthesizedRpcError(grpc.RpcError):
    """A failed call as grpc raises it: code, details and trailing metadata
    carrying a google.rpc.Status (what ``rpc_status.from_call`` reads)."""

    def __init__(self, code: grpc.StatusCode, message: str, details: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self._code = code
        self._message = message
        self._trailers: tuple[tuple[str, bytes], ...] = ()
        if details:
            status = status_pb2.Status(code=code.value[0], message=message)
            for detail in details:
                packed = any_pb2.Any()
                packed.Pack(detail)
                status.details.append(packed)
            self._trailers = (("grpc-status-details-bin", status.SerializeToString()),)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._message

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        return self._trailers


def info(reason: str, **metadata: str) -> error_details_pb2.ErrorInfo:
    return error_details_pb2.ErrorInfo(reason=reason, domain=opreg.ERROR_DOMAIN, metadata=metadata)


def retry_info(seconds: float) -> error_details_pb2.RetryInfo:
    whole = int(seconds)
    return error_details_pb2.RetryInfo(
        retry_delay=duration_pb2.Duration(seconds=whole, nanos=round((seconds - whole) * 1e9))
    )


def busy(delay: float = 0.2) -> opreg.OpregError:
    return opreg.from_rpc_error(
        SynthesizedRpcError(
            grpc.StatusCode.UNAVAILABLE,
            "the operation is busy: another transaction holds it; retry shortly",
            [info("OPERATION_BUSY"), retry_info(delay)],
        )
    )


# -- decoding -------------------------------------------------------------------


def test_operation_busy_is_transient_with_the_servers_retry_delay() -> None:
    error = busy(0.2)
    assert type(error) is opreg.OperationBusy
    assert isinstance(error, opreg.Unavailable)  # what the helpers retry
    assert error.code == grpc.StatusCode.UNAVAILABLE and error.reason == "OPERATION_BUSY"
    assert error.retry_delay == pytest.approx(0.2)
    assert str(error).startswith("OPERATION_BUSY: the operation is busy")


def test_rate_limited_is_transient_with_the_delay_until_the_next_admitted_call() -> None:
    error = opreg.from_rpc_error(
        SynthesizedRpcError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "the namespace's limit of 5 calls per second on this server is reached",
            [info("RATE_LIMITED", callsPerSecond="5"), retry_info(0.15)],
        )
    )
    assert type(error) is opreg.RateLimited
    assert isinstance(error, opreg.Unavailable)  # what the helpers retry
    assert error.calls_per_second == 5
    assert error.retry_delay == pytest.approx(0.15)


def test_too_many_waiters_is_transient_with_the_servers_delay_and_limit() -> None:
    error = opreg.from_rpc_error(
        SynthesizedRpcError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "this replica holds 10000 waiting calls, its limit",
            [info("TOO_MANY_WAITERS", limit="10000"), retry_info(1)],
        )
    )
    assert type(error) is opreg.TooManyWaiters
    assert isinstance(error, opreg.Unavailable)  # what the helpers retry
    assert error.limit == 10000
    assert error.retry_delay == pytest.approx(1.0)


def test_operation_exists_is_not_transient_and_names_the_status() -> None:
    error = opreg.from_rpc_error(
        SynthesizedRpcError(
            grpc.StatusCode.ALREADY_EXISTS,
            "the key is registered",
            [info("OPERATION_EXISTS", currentStatus="OPERATION_STATUS_IN_PROGRESS")],
        )
    )
    assert type(error) is opreg.OperationExists and not opreg.is_transient(error)
    assert error.current_status == pb.OPERATION_STATUS_IN_PROGRESS


def test_store_unavailable_carries_its_retry_delay() -> None:
    error = opreg.from_rpc_error(
        SynthesizedRpcError(
            grpc.StatusCode.UNAVAILABLE, "the store is unavailable", [info("STORE_UNAVAILABLE"), retry_info(1)]
        )
    )
    assert type(error) is opreg.Unavailable and error.reason == "STORE_UNAVAILABLE"
    assert error.retry_delay == pytest.approx(1.0)
    overloaded = opreg.from_rpc_error(
        SynthesizedRpcError(grpc.StatusCode.UNAVAILABLE, "overloaded", [info("OVERLOADED"), retry_info(0.2)])
    )
    assert type(overloaded) is opreg.Unavailable and overloaded.retry_delay == pytest.approx(0.2)


def test_no_retry_info_no_retry_delay() -> None:
    plain = opreg.from_rpc_error(SynthesizedRpcError(grpc.StatusCode.UNAVAILABLE, "connection refused"))
    assert type(plain) is opreg.Unavailable and plain.retry_delay is None and plain.reason == ""
    assert opreg.Unavailable("answer lost", code=grpc.StatusCode.UNAVAILABLE).retry_delay is None


def test_deadline_exceeded_inside_the_server_is_transient() -> None:
    error = opreg.from_rpc_error(
        SynthesizedRpcError(
            grpc.StatusCode.DEADLINE_EXCEEDED, "the caller's deadline passed", [info("DEADLINE_EXCEEDED")]
        )
    )
    assert type(error) is opreg.Unavailable and error.reason == "DEADLINE_EXCEEDED"
    local = opreg.from_rpc_error(SynthesizedRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"))
    assert type(local) is opreg.Unavailable


def test_a_servers_timeout_expired_cancelled_is_transient_a_plain_cancelled_is_not() -> None:
    timeout = opreg.from_rpc_error(SynthesizedRpcError(grpc.StatusCode.CANCELLED, "Timeout expired"))
    assert isinstance(timeout, opreg.Unavailable)
    assert timeout.code == grpc.StatusCode.CANCELLED and timeout.reason == ""
    for message in ("Locally cancelled by application!", "Cancelled", "timeout expired", ""):
        cancelled = opreg.from_rpc_error(SynthesizedRpcError(grpc.StatusCode.CANCELLED, message))
        assert type(cancelled) is opreg.OpregError, message
        assert not isinstance(cancelled, opreg.Unavailable)


def test_message_too_large_exposes_the_limit() -> None:
    error = opreg.from_rpc_error(
        SynthesizedRpcError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "the request message is larger than the 589824 bytes this method accepts",
            [info("MESSAGE_TOO_LARGE", limit="589824")],
        )
    )
    assert type(error) is opreg.MessageTooLarge and not isinstance(error, opreg.Unavailable)
    assert error.limit == 589824 and error.retry_delay is None
    no_limit = opreg.from_rpc_error(
        SynthesizedRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "too large", [info("MESSAGE_TOO_LARGE")])
    )
    assert type(no_limit) is opreg.MessageTooLarge and no_limit.limit is None


# -- the helpers honour RetryInfo ----------------------------------------------


class BusyClaims(opreg.Client):
    """Answers the first ``busy`` Claims OPERATION_BUSY (RetryInfo ``delay``),
    then sends them; records when each Claim was made."""

    def __init__(self, channel: grpc.Channel, *, busy: int, delay: float) -> None:
        super().__init__(channel)
        self.busy, self.delay = busy, delay
        self.claims: list[float] = []

    def claim(self, *args: Any, **kwargs: Any) -> pb.ClaimResponse:
        self.claims.append(time.monotonic())
        if len(self.claims) <= self.busy:
            raise busy(self.delay)
        return super().claim(*args, **kwargs)


def test_run_once_waits_the_retry_delay_of_operation_busy(address: str, ns: str) -> None:
    client = BusyClaims(grpc.insecure_channel(address), busy=2, delay=0.3)
    try:
        # A backoff far below the delay: the waits come from the RetryInfo.
        result = client.run_once(ns, "busy", PARAMS, lambda lease: b"ok", transport_backoff=(0.001, 0.002))
    finally:
        client.close()
    assert result.value == b"ok" and len(client.claims) == 3
    gaps = [later - earlier for earlier, later in itertools.pairwise(client.claims)]
    assert all(0.3 <= gap < 1.5 for gap in gaps), gaps


class BusyRenews(opreg.Client):
    """Answers the first Renew OPERATION_BUSY (RetryInfo ``delay``)."""

    def __init__(self, channel: grpc.Channel, *, delay: float) -> None:
        super().__init__(channel)
        self.delay = delay
        self.renews: list[float] = []

    def renew(self, *args: Any, **kwargs: Any) -> pb.RenewResponse:
        self.renews.append(time.monotonic())
        if len(self.renews) == 1:
            raise busy(self.delay)
        return super().renew(*args, **kwargs)


def test_a_renewal_answered_operation_busy_is_retried_after_the_retry_delay(address: str, ns: str) -> None:
    client = BusyRenews(grpc.insecure_channel(address), delay=0.3)

    def work(lease: opreg.Lease) -> bytes:
        assert not lease.wait(0.9)
        return b"kept"

    try:
        result = client.run_once(
            ns, "busy-renew", PARAMS, work, lease_ttl=5, renew_interval=0.1, transport_backoff=(0.001, 0.002)
        )
    finally:
        client.close()
    assert result.value == b"kept" and len(client.renews) >= 3
    assert 0.3 <= client.renews[1] - client.renews[0] < 1.5


def test_a_retry_delay_past_the_deadline_ends_in_deadline_exceeded(address: str, ns: str) -> None:
    client = BusyClaims(grpc.insecure_channel(address), busy=100, delay=5)
    started = time.monotonic()
    try:
        with pytest.raises(opreg.DeadlineExceeded) as caught:
            client.run_once(
                ns, "busy-long", PARAMS, lambda lease: b"never", deadline=1, transport_backoff=(0.001, 0.002)
            )
    finally:
        client.close()
    assert time.monotonic() - started < 2.5  # the 5 s delay was cut at the deadline
    assert isinstance(caught.value.__cause__, opreg.OperationBusy)
    assert len(client.claims) == 1


class BusyAsyncClaims(opreg.AsyncClient):
    def __init__(self, channel: grpc.aio.Channel, *, busy: int, delay: float) -> None:
        super().__init__(channel)
        self.busy, self.delay = busy, delay
        self.claims: list[float] = []

    async def claim(self, *args: Any, **kwargs: Any) -> pb.ClaimResponse:
        self.claims.append(time.monotonic())
        if len(self.claims) <= self.busy:
            raise busy(self.delay)
        return await super().claim(*args, **kwargs)


@pytest.mark.asyncio
async def test_async_run_once_waits_the_retry_delay(address: str, ns: str) -> None:
    client = BusyAsyncClaims(grpc.aio.insecure_channel(address), busy=2, delay=0.3)
    try:
        result = await client.run_once(ns, "busy", PARAMS, lambda lease: b"ok", transport_backoff=(0.001, 0.002))
    finally:
        await client.close()
    assert result.value == b"ok" and len(client.claims) == 3
    gaps = [later - earlier for earlier, later in itertools.pairwise(client.claims)]
    assert all(0.3 <= gap < 1.5 for gap in gaps), gaps


class BusyClaimDue(opreg.Client):
    def __init__(self, channel: grpc.Channel, *, busy: int, delay: float) -> None:
        super().__init__(channel)
        self.busy, self.delay = busy, delay
        self.claim_dues: list[float] = []

    def claim_due(self, *args: Any, **kwargs: Any) -> pb.ClaimDueResponse:
        self.claim_dues.append(time.monotonic())
        if len(self.claim_dues) <= self.busy:
            raise busy(self.delay)
        return super().claim_due(*args, **kwargs)


def test_the_worker_waits_the_retry_delay_after_a_busy_claim_due(client: opreg.Client, address: str, ns: str) -> None:
    retry_due_soon(client, ns, "debit:busy")
    time.sleep(0.2)
    busy_client = BusyClaimDue(grpc.insecure_channel(address), busy=2, delay=0.3)
    done = threading.Event()

    def handler(operation: pb.Operation, lease: opreg.Lease) -> bytes:
        done.set()
        return b"ok"

    worker = opreg.Worker(busy_client, ns, default=handler, poll_interval=0.1, transport_backoff=(0.001, 0.002))
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        assert done.wait(10)
    finally:
        worker.stop()
        runner.join(30)
        busy_client.close()
    stamps = busy_client.claim_dues
    assert len(stamps) >= 3
    assert all(0.3 <= later - earlier < 1.5 for earlier, later in itertools.pairwise(stamps[:3]))


# -- MESSAGE_TOO_LARGE on the real server ----------------------------------------


def test_a_claim_over_the_message_limit_is_message_too_large(client: opreg.Client, ns: str) -> None:
    with pytest.raises(opreg.MessageTooLarge) as caught:
        client.claim(ns, "huge", owner="o", parameters=TOO_LARGE)
    error = caught.value
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED and error.reason == "MESSAGE_TOO_LARGE"
    assert error.limit is not None and 500_000 < error.limit < 1_000_000  # ~576 KiB
    assert str(error.limit) in error.message
    assert not isinstance(error, opreg.Unavailable) and error.retry_delay is None
    # Nothing was registered.
    with pytest.raises(opreg.OperationNotFound):
        client.lookup(ns, "huge")


class CountingClaims(opreg.Client):
    def __init__(self, channel: grpc.Channel) -> None:
        super().__init__(channel)
        self.claims = 0

    def claim(self, *args: Any, **kwargs: Any) -> pb.ClaimResponse:
        self.claims += 1
        return super().claim(*args, **kwargs)


def test_run_once_does_not_retry_message_too_large(address: str, ns: str) -> None:
    client = CountingClaims(grpc.insecure_channel(address))
    calls: list[int] = []
    started = time.monotonic()
    try:
        with pytest.raises(opreg.MessageTooLarge) as caught:
            client.run_once(ns, "huge", TOO_LARGE, lambda lease: calls.append(1) or b"never", deadline=30)
    finally:
        client.close()
    assert client.claims == 1 and calls == []
    assert caught.value.limit is not None
    assert time.monotonic() - started < 10


@pytest.mark.asyncio
async def test_async_message_too_large(aclient: opreg.AsyncClient, ns: str) -> None:
    with pytest.raises(opreg.MessageTooLarge) as caught:
        await aclient.claim(ns, "huge", owner="o", parameters=TOO_LARGE)
    assert caught.value.limit is not None and 500_000 < caught.value.limit < 1_000_000
    with pytest.raises(opreg.MessageTooLarge):
        await aclient.run_once(ns, "huge", TOO_LARGE, lambda lease: b"never", deadline=30)
    await asyncio.sleep(0)
