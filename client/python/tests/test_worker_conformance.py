"""The worker conformance scenarios (client/testdata/worker_scenarios.json,
format in client/PROTOCOL.md, "Worker scenarios") against the real server
through opreg-fault-proxy, for ``opreg.Worker`` and ``opreg.AsyncWorker``.
Every scenario in the file runs; a new one needs no new test code.

Per scenario: a namespace ``conformance-python-<random>`` of its own and the
key ``payout:<name>-python-<random>``; ``before`` made directly against the
server; the proxy started with the scenario's faults and ``expect.calls``;
the worker run through the proxy with the scenario's settings, handlers and
reconcile callback, and stopped with ``stop()`` as soon as the proxy's log
holds ``stop_after``; then the proxy's verdict on the calls, the operation's
status and last error class (a direct Lookup), how many times the work began
and what the reconcile callback saw are compared with ``expect``."""

from __future__ import annotations

import asyncio
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conformance_support import (
    FaultProxy,
    ProxyExit,
    Run,
    Scenario,
    before,
    expected_differences,
    failure_message,
    load_scenarios,
    looked_up,
    next_action,
    plain_outcome,
    reconciliation,
)
from conftest import REPO, Server

import opreg
from opreg import pb

SCENARIO_FILE = REPO / "client" / "testdata" / "worker_scenarios.json"
DEFAULT_HANDLER = "*"  # the kind in ``handlers`` that stands for the worker's default handler
BEFORE_LEASE_TTL = 30.0
SLOW_WORK = 0.5
HANG_LIMIT = 10.0  # ``hang`` waits for its lease to be lost at most this long
LOG_POLL_INTERVAL = 0.02
STOP_LINE_TIMEOUT = 10.0
# How long past its grace a stopped worker may take to return: the 5 s it
# gives cancelled work to unwind, and a second.
RETURN_SLACK = 6.0


class WorkerScenario(Scenario):
    """A worker scenario: the worker's settings besides the shared ones."""

    @property
    def grace(self) -> float:
        return self.seconds("grace")

    @property
    def stop_after(self) -> str:
        return str(self.raw["stop_after"])

    @property
    def return_timeout(self) -> float:
        """How long ``run`` may take to return after the stop."""
        return self.grace + RETURN_SLACK

    def worker_options(self, work: Callable[..., Any], reconcile: Callable[..., Any] | None) -> dict[str, Any]:
        """The worker's keyword arguments: ``work`` as the handler of each kind
        in ``handlers`` (``*``: as the default handler), and the settings."""
        kinds = list(self.setting("handlers"))
        return {
            "handlers": {kind: work for kind in kinds if kind != DEFAULT_HANDLER},
            "default": work if DEFAULT_HANDLER in kinds else None,
            "reconcile": reconcile,
            "lease_ttl": self.lease_ttl,
            "poll_interval": self.seconds("poll_interval"),
            "grace": self.grace,
            "rpc_timeout": self.call_timeout,
        }


ALL = load_scenarios(SCENARIO_FILE, WorkerScenario)


@dataclass
class WorkerRun(Run):
    """What the worker did (``error``: what its ``run`` raised), and what went
    wrong driving it: a stop line never logged, a ``run`` that did not return."""

    problems: list[str] = field(default_factory=list)


# -- the handlers and the reconcile callback -----------------------------------------


def sync_callbacks(scenario: WorkerScenario, run: WorkerRun) -> tuple[Callable[..., Any], Callable[..., Any] | None]:
    def work(operation: pb.Operation, lease: opreg.Lease) -> bytes:
        action = next_action(scenario, run)
        if action == "slow":
            time.sleep(SLOW_WORK)
            return b"done"
        if action == "hang":
            lease.wait(HANG_LIMIT)  # until the lease is reported lost (the grace ran out, say)
            return b"done"
        return plain_outcome(action)

    verdict = scenario.raw.get("reconcile")
    if verdict is None:
        return work, None

    def reconcile(operation: pb.Operation, lease: opreg.Lease) -> opreg.Reconciliation:
        run.reconcile_saw.append(operation.remote_ref)
        if verdict == "hang":
            lease.wait(HANG_LIMIT)
            return reconciliation("succeeded")
        return reconciliation(verdict)

    return work, reconcile


def async_callbacks(scenario: WorkerScenario, run: WorkerRun) -> tuple[Callable[..., Any], Callable[..., Any] | None]:
    async def work(operation: pb.Operation, lease: opreg.AsyncLease) -> bytes:
        action = next_action(scenario, run)
        if action == "slow":
            await asyncio.sleep(SLOW_WORK)
            return b"done"
        if action == "hang":
            await lease.wait(HANG_LIMIT)  # until the lease is reported lost (the task is cancelled then)
            return b"done"
        return plain_outcome(action)

    verdict = scenario.raw.get("reconcile")
    if verdict is None:
        return work, None

    async def reconcile(operation: pb.Operation, lease: opreg.AsyncLease) -> opreg.Reconciliation:
        run.reconcile_saw.append(operation.remote_ref)
        if verdict == "hang":
            await lease.wait(HANG_LIMIT)
            return reconciliation("succeeded")
        return reconciliation(verdict)

    return work, reconcile


# -- the worker through the proxy ----------------------------------------------------


def polls_until_stop_line(
    scenario: WorkerScenario, proxy: FaultProxy, run: WorkerRun, returned: Callable[[], bool]
) -> Iterator[float]:
    """The waits between reads of the proxy's log until it holds the
    scenario's ``stop_after`` (the sync driver sleeps them, the asyncio one
    awaits them). A line not logged in time, or a worker that returned
    before it, is a problem; the worker is stopped all the same."""
    end = time.monotonic() + STOP_LINE_TIMEOUT
    while not proxy.logged(scenario.stop_after):
        if returned():
            run.problems.append(f"the worker's run returned before the proxy logged {scenario.stop_after!r}")
            return
        if time.monotonic() > end:
            run.problems.append(f"the proxy did not log {scenario.stop_after!r} within {STOP_LINE_TIMEOUT}s")
            return
        yield LOG_POLL_INTERVAL


def did_not_return(scenario: WorkerScenario) -> str:
    return f"the worker's run did not return within {scenario.return_timeout}s of stop()"


def run_sync(scenario: WorkerScenario, proxy: FaultProxy, namespace: str) -> WorkerRun:
    run = WorkerRun()
    work, reconcile = sync_callbacks(scenario, run)
    with opreg.Client.connect(proxy.address) as client:
        worker = opreg.Worker(client, namespace, **scenario.worker_options(work, reconcile))
        pool = ThreadPoolExecutor(1)
        try:
            running = pool.submit(worker.run)
            for delay in polls_until_stop_line(scenario, proxy, run, running.done):
                time.sleep(delay)
            worker.stop()
            if not wait([running], timeout=scenario.return_timeout).done:
                run.problems.append(did_not_return(scenario))
            else:
                run.error = running.exception()
        finally:
            pool.shutdown(wait=False)
    return run


def run_async(scenario: WorkerScenario, proxy: FaultProxy, namespace: str) -> WorkerRun:
    run = WorkerRun()
    work, reconcile = async_callbacks(scenario, run)

    async def drive() -> None:
        async with opreg.AsyncClient.connect(proxy.address) as client:
            worker = opreg.AsyncWorker(client, namespace, **scenario.worker_options(work, reconcile))
            running = asyncio.create_task(worker.run())
            for delay in polls_until_stop_line(scenario, proxy, run, running.done):
                await asyncio.sleep(delay)
            worker.stop()
            done, _ = await asyncio.wait([running], timeout=scenario.return_timeout)
            if not done:
                run.problems.append(did_not_return(scenario))
                running.cancel()  # stops at once; asyncio.run waits for it
            else:
                run.error = running.exception()

    asyncio.run(drive())
    return run


RUNNERS: dict[str, Callable[[WorkerScenario, FaultProxy, str], WorkerRun]] = {
    "sync": run_sync,
    "asyncio": run_async,
}


def differences(
    scenario: WorkerScenario, run: WorkerRun, proxy: ProxyExit, operation: pb.Operation | None
) -> list[str]:
    expect = scenario.expect
    problems = list(run.problems)
    if run.error is not None:
        problems.append("the worker's run raised:\n" + "".join(traceback.format_exception(run.error)).rstrip())
    problems += expected_differences(expect, run, proxy, operation)
    if "last_error_class" in expect:
        got = operation.last_error_class if operation is not None else "(no operation)"
        if got != expect["last_error_class"]:
            problems.append(f"expected the last error class {expect['last_error_class']!r}, the Lookup found {got!r}")
    if "work_runs" in expect and run.executions != expect["work_runs"]:
        problems.append(f"expected the work to begin {expect['work_runs']} time(s), it began {run.executions}")
    return problems


@pytest.mark.parametrize("runner", sorted(RUNNERS))
@pytest.mark.parametrize("scenario", ALL, ids=[s.name for s in ALL])
def test_scenario(scenario: WorkerScenario, runner: str, server: Server, client: opreg.Client, scratch: Path) -> None:
    suffix = uuid.uuid4().hex[:12]
    namespace = f"conformance-python-{suffix}"  # no other scenario's worker sees the operation
    key = f"payout:{scenario.name}-python-{suffix}"
    before(client, scenario, namespace, key, lease_ttl=BEFORE_LEASE_TTL)
    # No ``calls`` expectation: nothing to judge (not ``[]``, which would mean no calls).
    proxy = FaultProxy(server.address, scenario.raw.get("faults", []), scratch, scenario.expect.get("calls"))
    started = time.monotonic()
    try:
        run = RUNNERS[runner](scenario, proxy, namespace)
    finally:
        finished = proxy.finish()
    took = time.monotonic() - started
    problems = differences(scenario, run, finished, looked_up(client, namespace, key))
    assert not problems, failure_message(
        f"worker scenario {scenario.name} ({runner} worker, key {namespace}/{key}, {took:.2f}s)",
        problems,
        proxy,
        finished,
    )
