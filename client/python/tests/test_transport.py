"""Transport failures: retried with backoff inside the overall deadline."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import grpc
import pytest
from conftest import free_port

import opreg
from opreg import pb

PARAMS = {"account": "A", "amount": 100}


class LateProxy:
    """A TCP forwarder to the real server that starts listening on ``port``
    only when ``start()`` is called: until then connections are refused, as if
    the server were not up yet."""

    def __init__(self, port: int, target: str) -> None:
        host, target_port = target.rsplit(":", 1)
        self.port = port
        self.target = (host, int(target_port))
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._closed = threading.Event()

    def start(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._sockets += [downstream, upstream]
            for a, b in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed.set()
        for s in [self._listener, *self._sockets]:
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass


class CountingClient(opreg.Client):
    """Counts Claim calls and the transport failures among them."""

    def __init__(self, channel: grpc.Channel) -> None:
        super().__init__(channel)
        self.claims = 0
        self.unavailable = 0

    def claim(self, *args: Any, **kwargs: Any) -> pb.ClaimResponse:
        self.claims += 1
        try:
            return super().claim(*args, **kwargs)
        except opreg.Unavailable:
            self.unavailable += 1
            raise


def connect_counting(target: str) -> CountingClient:
    return CountingClient(grpc.insecure_channel(target, options=list(opreg.client.DEFAULT_CHANNEL_OPTIONS)))


def test_claim_is_retried_until_the_server_comes_up(address: str, ns: str) -> None:
    port = free_port()
    proxy = LateProxy(port, address)
    timer = threading.Timer(1.5, proxy.start)
    client = connect_counting(f"127.0.0.1:{port}")
    calls = []
    try:
        timer.start()
        started = time.monotonic()
        result = client.run_once(ns, "late", PARAMS, lambda lease: calls.append(1) or b"ok", deadline=20)
        elapsed = time.monotonic() - started
    finally:
        timer.cancel()
        client.close()
        proxy.close()
    assert result.value == b"ok" and not result.replayed and calls == [1]
    assert elapsed >= 1.4
    assert client.unavailable >= 2 and client.claims == client.unavailable + 1


def test_deadline_exceeded_when_the_server_never_comes_up(ns: str) -> None:
    client = connect_counting(f"127.0.0.1:{free_port()}")
    started = time.monotonic()
    try:
        with pytest.raises(opreg.DeadlineExceeded) as caught:
            client.run_once(ns, "never", PARAMS, lambda lease: b"never", deadline=1.5)
    finally:
        client.close()
    elapsed = time.monotonic() - started
    assert 1.4 <= elapsed < 4
    assert isinstance(caught.value.__cause__, opreg.Unavailable)
    assert client.unavailable >= 3 and client.unavailable == client.claims


class LosingAnswers(opreg.Client):
    """Delivers the first Complete (and some Renews) to the server but reports
    the answer lost, as a dropped connection would."""

    def __init__(self, channel: grpc.Channel, *, lose_completes: int = 0, fail_renews: int = 0) -> None:
        super().__init__(channel)
        self.lose_completes = lose_completes
        self.fail_renews = fail_renews
        self.completes: list[pb.CompleteResponse] = []
        self.renews = 0

    def complete(self, *args: Any, **kwargs: Any) -> pb.CompleteResponse:
        response = super().complete(*args, **kwargs)
        self.completes.append(response)
        if self.lose_completes > 0:
            self.lose_completes -= 1
            raise opreg.Unavailable("answer lost", code=grpc.StatusCode.UNAVAILABLE)
        return response

    def renew(self, *args: Any, **kwargs: Any) -> pb.RenewResponse:
        self.renews += 1
        if self.fail_renews > 0:
            self.fail_renews -= 1
            raise opreg.Unavailable("connection reset", code=grpc.StatusCode.UNAVAILABLE)
        return super().renew(*args, **kwargs)


def test_a_complete_whose_answer_was_lost_is_retried_with_the_same_token(address: str, ns: str) -> None:
    client = LosingAnswers(grpc.insecure_channel(address), lose_completes=2)
    try:
        result = client.run_once(ns, "lost-answer", PARAMS, lambda lease: b"done")
    finally:
        client.close()
    assert result.value == b"done" and not result.replayed
    assert len(client.completes) == 3
    assert {c.operation.status for c in client.completes} == {pb.OPERATION_STATUS_SUCCEEDED}
    assert len({c.operation.lease.fencing_token for c in client.completes}) == 1


def test_failed_renewals_are_retried_before_the_lease_ends(address: str, ns: str) -> None:
    client = LosingAnswers(grpc.insecure_channel(address), fail_renews=2)

    def work(lease: opreg.Lease) -> bytes:
        assert not lease.wait(2.5)  # 2 s lease: renewals must succeed in between
        return b"kept"

    try:
        result = client.run_once(ns, "renew-flaky", PARAMS, work, lease_ttl=2, transport_backoff=(0.02, 0.05))
    finally:
        client.close()
    assert result.value == b"kept" and client.renews >= 4


def test_non_transport_errors_are_not_retried(address: str, ns: str) -> None:
    client = connect_counting(address)
    try:
        client.run_once(ns, "conflict", PARAMS, lambda lease: b"ok")
        claims_before = client.claims
        with pytest.raises(opreg.ParameterConflict):
            client.run_once(ns, "conflict", {"account": "B", "amount": 100}, lambda lease: b"ok", deadline=10)
        with pytest.raises(opreg.InvalidArgument):
            client.run_once(ns, " bad key", PARAMS, lambda lease: b"ok", deadline=10)
    finally:
        client.close()
    assert client.claims == claims_before + 2
