"""The run-once conformance scenarios (client/testdata/run_once_scenarios.json,
format in client/PROTOCOL.md) against the real server through opreg-fault-proxy,
for the sync and the asyncio client. Every scenario in the file runs; a new one
needs no new test code.

Per scenario: a fresh key ``<name>-python-<random>``; ``before`` made directly
against the server; the proxy started with the scenario's faults; run_once
against the proxy with the scenario's settings, work actions and reconcile
callback, while a thread completes the ``before`` lease when
``before_complete_after_ms`` says; then, once that Complete is done, the result
or error and the operation's status (a direct Lookup) are compared with
``expect``, and the calls by the proxy itself: it is given ``expect.calls``
(``--expect``) and its exit status is its verdict."""

from __future__ import annotations

import asyncio
import time
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import pytest
from conformance_support import (
    BEFORE_OUTCOMES,
    FaultProxy,
    ProxyExit,
    Run,
    Scenario,
    UnexpectedWorkError,
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

SCENARIO_FILE = REPO / "client" / "testdata" / "run_once_scenarios.json"
NAMESPACE = "conformance"
# No scenario should come near this; a helper that hangs fails instead of blocking the run.
HELPER_TIMEOUT = 60.0


# The conformance kinds (PROTOCOL.md, "Errors and their conformance kinds").
KINDS: dict[str, type[BaseException]] = {
    "business_failure": opreg.BusinessFailure,
    "dead": opreg.OperationDead,
    "held": opreg.OperationHeld,
    "lease_lost": opreg.LeaseLost,
    "outcome_unknown": opreg.OutcomeUnknown,
    "reconcile_required": opreg.ReconcileRequired,
    "deadline_exceeded": opreg.DeadlineExceeded,
    "outcome_not_recorded": opreg.OutcomeNotRecorded,
    "work_error": UnexpectedWorkError,
}


def kind_of(error: BaseException) -> str:
    for kind, cls in KINDS.items():
        if isinstance(error, cls):
            return kind
    return f"not a conformance kind: {type(error).__module__}.{type(error).__qualname__}"


# -- the scenario's settings ----------------------------------------------------


class RunOnceScenario(Scenario):
    """A run-once scenario: run_once's settings besides the shared ones."""

    @property
    def deadline(self) -> float:
        return self.seconds("deadline")

    @property
    def before_lease_ttl(self) -> float:
        """``in_progress`` holds its lease for ``before_lease_ttl_ms`` (default
        30 s: through the scenario); the others end theirs at once."""
        if self.raw.get("before") != "in_progress":
            return self.lease_ttl
        return float(self.raw.get("before_lease_ttl_ms", 30_000)) / 1000

    @property
    def before_complete_after(self) -> float | None:
        """How long after the helper starts the ``before`` owner completes its
        lease (``before_complete_after_ms``); None: it does not."""
        after = self.raw.get("before_complete_after_ms")
        return None if after is None else float(after) / 1000

    def run_options(self) -> dict[str, Any]:
        return {
            "lease_ttl": self.lease_ttl,
            "deadline": self.deadline,
            "rpc_timeout": self.call_timeout,
            "retry_policy": self.retry_policy,
        }


ALL = load_scenarios(SCENARIO_FILE, RunOnceScenario)


# -- the work and the reconcile callback -------------------------------------------


def sync_callbacks(
    scenario: RunOnceScenario, run: Run
) -> tuple[Callable[[opreg.Lease], bytes], Callable[[opreg.Lease, str], opreg.Reconciliation] | None]:
    def work(lease: opreg.Lease) -> bytes:
        action = next_action(scenario, run)
        if action == "hang":
            lease.wait(10)  # until the lease is reported lost
            return b"done"
        if action == "hang_ignoring_lease":
            time.sleep(2 * scenario.lease_ttl)
            return b"done"
        return plain_outcome(action)

    verdict = scenario.raw.get("reconcile")
    if verdict is None:
        return work, None

    def reconcile(lease: opreg.Lease, remote_ref: str) -> opreg.Reconciliation:
        run.reconcile_saw.append(remote_ref)
        return reconciliation(verdict)

    return work, reconcile


def async_callbacks(scenario: RunOnceScenario, run: Run) -> tuple[Any, Any]:
    async def work(lease: opreg.AsyncLease) -> bytes:
        action = next_action(scenario, run)
        if action == "hang":
            await lease.wait(10)  # until the lease is reported lost (the task is cancelled then)
            return b"done"
        if action == "hang_ignoring_lease":
            # Sleeps through everything, the cancellation of a lost lease included.
            loop = asyncio.get_running_loop()
            end = loop.time() + 2 * scenario.lease_ttl
            while (left := end - loop.time()) > 0:
                try:
                    await asyncio.sleep(left)
                except asyncio.CancelledError:
                    pass
            return b"done"
        return plain_outcome(action)

    verdict = scenario.raw.get("reconcile")
    if verdict is None:
        return work, None

    async def reconcile(lease: opreg.AsyncLease, remote_ref: str) -> opreg.Reconciliation:
        run.reconcile_saw.append(remote_ref)
        return reconciliation(verdict)

    return work, reconcile


# -- the helper through the proxy ----------------------------------------------------


def run_sync(scenario: RunOnceScenario, address: str, key: str) -> Run:
    run = Run()
    work, reconcile = sync_callbacks(scenario, run)

    def call() -> opreg.Result:
        with opreg.Client.connect(address) as client:
            return client.run_once(
                NAMESPACE, key, scenario.parameters, work, reconcile=reconcile, **scenario.run_options()
            )

    pool = ThreadPoolExecutor(1)
    try:
        future = pool.submit(call)
        # Not future.result(timeout): DeadlineExceeded is a TimeoutError too.
        if not wait([future], timeout=HELPER_TIMEOUT).done:
            run.error = AssertionError(f"run_once did not return within {HELPER_TIMEOUT}s")
        elif future.exception() is not None:
            run.error = future.exception()
        else:
            run.result = future.result()
    finally:
        pool.shutdown(wait=False)
    return run


def run_async(scenario: RunOnceScenario, address: str, key: str) -> Run:
    run = Run()
    work, reconcile = async_callbacks(scenario, run)

    async def call() -> opreg.Result:
        async with opreg.AsyncClient.connect(address) as client:
            return await asyncio.wait_for(
                client.run_once(
                    NAMESPACE, key, scenario.parameters, work, reconcile=reconcile, **scenario.run_options()
                ),
                HELPER_TIMEOUT,
            )

    try:
        run.result = asyncio.run(call())
    except BaseException as error:  # noqa: BLE001 - compared with the expected kind
        run.error = error
    return run


RUNNERS: dict[str, Callable[[RunOnceScenario, str, str], Run]] = {"sync": run_sync, "asyncio": run_async}


# -- the before owner completes while the helper waits ---------------------------------


def complete_before_at(client: opreg.Client, key: str, claimed: pb.ClaimResponse, at: float) -> None:
    """At ``at`` (``time.monotonic()``), the ``before`` owner completes its
    lease with success, result ``before``, directly against the server."""
    time.sleep(max(at - time.monotonic(), 0.0))
    client.complete(NAMESPACE, key, fencing_token=claimed.lease.fencing_token, outcome=BEFORE_OUTCOMES["success"])


def completion_problems(scenario: RunOnceScenario, completion: Future[None] | None) -> list[str]:
    """How the ``before`` owner's Complete (if the scenario has one) failed:
    that fails the scenario too."""
    if completion is None:
        return []
    if (error := completion.exception()) is not None:
        return [f"the before owner's Complete, {scenario.before_complete_after}s after the start, failed: {error!r}"]
    return []


def differences(scenario: RunOnceScenario, run: Run, proxy: ProxyExit, operation: pb.Operation | None) -> list[str]:
    expect = scenario.expect
    problems: list[str] = []
    if "result" in expect:
        want = expect["result"]
        if run.result is None:
            problems.append(f"expected the result {want}, got {describe(run.error)}")
        else:
            got = {"value": run.result.value.decode(errors="replace"), "replayed": run.result.replayed}
            if got != {"value": want["value"], "replayed": want["replayed"]}:
                problems.append(f"expected the result {want}, got {got}")
    else:
        want_kind = expect["error"]
        if run.error is None:
            assert run.result is not None
            problems.append(f"expected the error {want_kind}, got the result {run.result.value!r}")
        elif kind_of(run.error) != want_kind:
            problems.append(f"expected the error {want_kind}, got {describe(run.error)}")
        elif want_kind == "business_failure":
            assert isinstance(run.error, opreg.BusinessFailure)
            got_failure = {"code": run.error.code, "replayed": run.error.replayed}
            want_failure = {"code": expect.get("code"), "replayed": expect.get("replayed", False)}
            if got_failure != want_failure:
                problems.append(f"expected the business failure {want_failure}, got {got_failure}")
    return problems + expected_differences(expect, run, proxy, operation)


def describe(error: BaseException | None) -> str:
    if error is None:
        return "no error"
    return f"{kind_of(error)}:\n" + "".join(traceback.format_exception(error)).rstrip()


@pytest.mark.parametrize("runner", sorted(RUNNERS))
@pytest.mark.parametrize("scenario", ALL, ids=[s.name for s in ALL])
def test_scenario(scenario: RunOnceScenario, runner: str, server: Server, client: opreg.Client, scratch: Path) -> None:
    key = f"{scenario.name}-python-{uuid.uuid4().hex[:12]}"
    claimed = before(client, scenario, NAMESPACE, key, lease_ttl=scenario.before_lease_ttl)
    after = scenario.before_complete_after
    assert after is None or claimed is not None, "before_complete_after_ms needs before: in_progress"
    # No ``calls`` expectation: nothing to judge (not ``[]``, which would mean no calls).
    proxy = FaultProxy(server.address, scenario.raw.get("faults", []), scratch, scenario.expect.get("calls"))
    holder = ThreadPoolExecutor(1)
    started = time.monotonic()
    completion = None if after is None else holder.submit(complete_before_at, client, key, claimed, started + after)
    try:
        run = RUNNERS[runner](scenario, proxy.address, key)
    finally:
        holder.shutdown(wait=True)  # the before owner's Complete is done before anything is judged
        finished = proxy.finish()
    took = time.monotonic() - started
    problems = completion_problems(scenario, completion)
    problems += differences(scenario, run, finished, looked_up(client, NAMESPACE, key))
    assert not problems, failure_message(
        f"scenario {scenario.name} ({runner} client, key {NAMESPACE}/{key}, {took:.2f}s)", problems, proxy, finished
    )
