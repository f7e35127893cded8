"""W3C trace context: with opentelemetry-api installed, every call carries the
caller's current context as ``traceparent`` (and ``tracestate``); the fault
proxy logs the traceparent it received (``# Claim traceparent=...``).
opentelemetry-sdk (for making spans) is in requirements-test.txt; for users
the api is the optional ``otel`` extra."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from conformance_support import FaultProxy
from conftest import Server
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

import opreg

PARAMS = {"amount": 100, "scenario": "tracing"}
# Not the global provider: the test leaves no global state behind.
tracer = TracerProvider().get_tracer("opreg-tests")


def traceparents(log: str, method: str) -> list[str]:
    prefix = f"# {method} traceparent="
    return [line.strip().removeprefix(prefix) for line in log.splitlines() if line.strip().startswith(prefix)]


def test_a_claim_carries_the_callers_traceparent(server: Server, tmp_path: Path) -> None:
    proxy = FaultProxy(server.address, [], tmp_path, expect_calls=["Claim:ACQUIRED", "Claim:ACQUIRED"])
    try:
        with opreg.Client.connect(proxy.address) as client:
            with tracer.start_as_current_span("checkout") as span:
                trace_id = span.get_span_context().trace_id
                client.claim("conformance", f"tracing-{uuid.uuid4().hex[:12]}", owner="o", parameters=PARAMS)
            client.claim("conformance", f"untraced-{uuid.uuid4().hex[:12]}", owner="o", parameters=PARAMS)
    finally:
        finished = proxy.finish()
    log = finished.log
    assert finished.calls_problem() is None, f"{finished.calls_problem()}\n{log}"
    # Only the call made inside the span carries one.
    assert len(traceparents(log, "Claim")) == 1, log
    assert traceparents(log, "Claim")[0].startswith(f"00-{trace_id:032x}-"), log


def test_run_once_and_its_renewals_carry_it_with_the_asyncio_client(server: Server, tmp_path: Path) -> None:
    proxy = FaultProxy(server.address, [], tmp_path)

    async def work(lease: opreg.AsyncLease) -> bytes:
        await asyncio.sleep(0.6)  # a renewal of a 1.2 s lease (every 0.4 s)
        return b"done"

    async def main() -> int:
        async with opreg.AsyncClient.connect(proxy.address) as client:
            with tracer.start_as_current_span("checkout") as span:
                await client.run_once("conformance", f"tracing-{uuid.uuid4().hex[:12]}", PARAMS, work, lease_ttl=1.2)
                return span.get_span_context().trace_id

    try:
        trace_id = asyncio.run(main())
    finally:
        log = proxy.finish().log
    want = f"00-{trace_id:032x}-"
    for method in ("Claim", "Renew", "Complete"):
        seen = traceparents(log, method)
        assert seen and all(t.startswith(want) for t in seen), f"{method}:\n{log}"


def test_the_sync_renewal_thread_carries_it(server: Server, tmp_path: Path) -> None:
    proxy = FaultProxy(server.address, [], tmp_path)
    try:
        with opreg.Client.connect(proxy.address) as client:
            with tracer.start_as_current_span("checkout") as span:
                trace_id = span.get_span_context().trace_id
                client.run_once(
                    "conformance",
                    f"tracing-{uuid.uuid4().hex[:12]}",
                    PARAMS,
                    lambda lease: lease.wait(0.6) or b"done",
                    lease_ttl=1.2,
                )
    finally:
        log = proxy.finish().log
    renewals = traceparents(log, "Renew")
    assert renewals and all(t.startswith(f"00-{trace_id:032x}-") for t in renewals), log


def test_no_current_span_no_traceparent() -> None:
    assert not trace.get_current_span().get_span_context().is_valid
    client = opreg.Client.connect("127.0.0.1:1")
    try:
        assert client._call_metadata() is None
        with tracer.start_as_current_span("x"):
            metadata = dict(client._call_metadata() or ())
        assert metadata["traceparent"].startswith("00-")
    finally:
        client.close()
