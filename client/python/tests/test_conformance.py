"""The run-once conformance scenarios (client/testdata/run_once_scenarios.json,
format in client/PROTOCOL.md) against the real server through opreg-fault-proxy,
for the sync and the asyncio client. Every scenario in the file runs; a new one
needs no new test code.

Per scenario: a fresh key ``<name>-python-<random>``; ``before`` made directly
against the server; the proxy started with the scenario's faults; run_once
against the proxy with the scenario's settings, work actions and reconcile
callback; then the result or error and the operation's status (a direct
Lookup) are compared with ``expect``, and the calls by the proxy itself: it is
given ``expect.calls`` (``--expect``) and its exit status is its verdict."""

from __future__ import annotations

import asyncio
import json
import os
import select
import subprocess
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, Server

import opreg
from opreg import pb

SCENARIO_FILE = REPO / "client" / "testdata" / "run_once_scenarios.json"
SCENARIOS: dict[str, Any] = json.loads(SCENARIO_FILE.read_text())
DEFAULTS: dict[str, Any] = SCENARIOS["defaults"]
NAMESPACE = "conformance"
BEFORE_OWNER = "conformance-before"
# No scenario should come near this; a helper that hangs fails instead of blocking the run.
HELPER_TIMEOUT = 60.0
PROXY_START_TIMEOUT = 10.0
PROXY_EXIT_TIMEOUT = 30.0  # a takeover waits up to 15 s for a lease to lapse


def proxy_binary() -> Path:
    return Path(os.environ.get("OPREG_FAULT_PROXY_BIN") or REPO / "target" / "debug" / "opreg-fault-proxy")


class UnexpectedWorkError(Exception):
    """What ``fail_unexpected`` raises: an error of no opreg kind."""


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


@dataclass(frozen=True)
class Scenario:
    raw: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.raw["name"])

    def setting(self, name: str) -> Any:
        return self.raw.get(name, DEFAULTS[name])

    @property
    def lease_ttl(self) -> float:
        return float(self.setting("lease_ttl_ms")) / 1000

    @property
    def deadline(self) -> float:
        return float(self.setting("deadline_ms")) / 1000

    @property
    def call_timeout(self) -> float:
        return float(self.setting("call_timeout_ms")) / 1000

    @property
    def retry_policy(self) -> pb.RetryPolicy:
        policy = self.setting("retry_policy")
        return opreg.retry_policy(
            max_attempts=int(policy["max_attempts"]),
            initial_backoff=policy["initial_backoff_ms"] / 1000,
            max_backoff=policy["max_backoff_ms"] / 1000,
            deadline=policy["deadline_ms"] / 1000,
        )

    @property
    def parameters(self) -> dict[str, Any]:
        return {"amount": 100, "scenario": self.name}

    @property
    def work(self) -> list[str]:
        return list(self.raw["work"])

    @property
    def expect(self) -> dict[str, Any]:
        return dict(self.raw["expect"])

    def run_options(self) -> dict[str, Any]:
        return {
            "lease_ttl": self.lease_ttl,
            "deadline": self.deadline,
            "rpc_timeout": self.call_timeout,
            "retry_policy": self.retry_policy,
        }


ALL = [Scenario(raw) for raw in SCENARIOS["scenarios"]]


def test_the_scenario_names_are_unique() -> None:
    names = [s.name for s in ALL]
    assert len(names) == len(set(names)) and names


# -- the fault proxy ------------------------------------------------------------


@dataclass(frozen=True)
class ProxyExit:
    """How the proxy ended: its exit status (negative: killed by that signal),
    its verdict on the calls (its last line of stdout; none without
    ``--expect``), its call log and, if it had to be killed, why."""

    status: int
    verdict: str
    log: str
    killed: str = ""

    def calls_problem(self) -> str | None:
        """None when the proxy exited 0: the calls matched ``--expect`` (or there
        was none). Anything else fails, a mismatch (3) as a crash or a kill."""
        if self.status == 0:
            return None
        verdict = self.verdict or "(no verdict line)"
        killed = f" ({self.killed})" if self.killed else ""
        return f"the proxy exited with status {self.status}, its verdict: {verdict}{killed}"


class FaultProxy:
    """opreg-fault-proxy in front of ``upstream``, judging the calls it sees
    against ``expect_calls`` when given; :meth:`finish` closes its stdin and
    waits for it to exit."""

    def __init__(
        self, upstream: str, faults: Sequence[Any], scratch: Path, expect_calls: Sequence[str] | None = None
    ) -> None:
        binary = proxy_binary()
        if not binary.is_file():
            pytest.fail(
                f"no opreg-fault-proxy at {binary}: build it (cargo build -p opreg-conformance) "
                "or set OPREG_FAULT_PROXY_BIN"
            )
        self.log_path = scratch / "calls.log"
        self.stderr_path = scratch / "proxy.stderr"
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                [
                    str(binary),
                    "--upstream",
                    f"http://{upstream}",
                    "--faults",
                    json.dumps(list(faults)),
                    "--log",
                    str(self.log_path),
                    *([] if expect_calls is None else ["--expect", json.dumps(list(expect_calls))]),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], PROXY_START_TIMEOUT)
        first = self.process.stdout.readline().decode(errors="replace").strip() if ready else ""
        if not first.startswith("listening "):
            self.process.kill()
            self.process.wait()
            pytest.fail(f"opreg-fault-proxy did not print 'listening HOST:PORT' (got {first!r}):\n{self.stderr()}")
        self.address = first.removeprefix("listening ").strip()

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def finish(self) -> ProxyExit:
        """Closes stdin; the proxy exits once the calls in flight are logged and
        judged."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        killed = ""
        try:
            self.process.wait(timeout=PROXY_EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            killed = f"it did not exit within {PROXY_EXIT_TIMEOUT}s after stdin closed: killed"
        # After "listening" it prints only its verdict, a line short enough for the
        # pipe's buffer: it cannot block on it before we read.
        rest = self.process.stdout.read().decode(errors="replace").splitlines()
        self.process.stdout.close()
        return ProxyExit(self.process.returncode, rest[-1].strip() if rest else "", self.log(), killed)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@pytest.fixture
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="opreg-conformance-") as directory:
        yield Path(directory)


# -- the work and the reconcile callback -------------------------------------------


@dataclass
class Run:
    """What the helper did: its result or error, and what the callbacks saw."""

    result: opreg.Result | None = None
    error: BaseException | None = None
    executions: int = 0
    reconcile_saw: list[str] = field(default_factory=list)


def next_action(scenario: Scenario, run: Run) -> str:
    actions = scenario.work
    action = actions[min(run.executions, len(actions) - 1)]  # the last one repeats
    run.executions += 1
    return action


def plain_outcome(action: str) -> bytes:
    """The work actions that neither wait nor depend on the client."""
    if action == "succeed":
        return b"done"
    if action == "fail_business":
        raise opreg.BusinessError("insufficient_funds", "the balance is below the amount")
    if action == "fail_transient":
        raise opreg.TransientError("the downstream service is unavailable")
    if action == "fail_unexpected":
        raise UnexpectedWorkError("a bug in the work")
    if action == "report_unknown":
        raise opreg.SentButUnconfirmed("remote-1", "timed out after the request was sent")
    raise AssertionError(f"unknown work action {action!r}")


def reconciliation(verdict: str) -> opreg.Reconciliation:
    if verdict == "succeeded":
        return opreg.Reconciliation.succeeded(b"reconciled")
    if verdict == "failed":
        return opreg.Reconciliation.failed("reconciled_failed")
    if verdict == "not_applied":
        return opreg.Reconciliation.not_applied()
    raise AssertionError(f"unknown reconcile verdict {verdict!r}")


def sync_callbacks(
    scenario: Scenario, run: Run
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


def async_callbacks(scenario: Scenario, run: Run) -> tuple[Any, Any]:
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


def run_sync(scenario: Scenario, address: str, key: str) -> Run:
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


def run_async(scenario: Scenario, address: str, key: str) -> Run:
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


RUNNERS: dict[str, Callable[[Scenario, str, str], Run]] = {"sync": run_sync, "asyncio": run_async}


def before(client: opreg.Client, scenario: Scenario, key: str) -> None:
    """The scenario's ``before``, directly against the server."""
    action = scenario.raw.get("before")
    if action is None:
        return
    claimed = client.claim(
        NAMESPACE,
        key,
        owner=BEFORE_OWNER,
        parameters=scenario.parameters,
        lease_ttl=30 if action == "in_progress" else scenario.lease_ttl,
        retry_policy=scenario.retry_policy,
    )
    assert claimed.outcome == pb.CLAIM_OUTCOME_ACQUIRED, pb.ClaimOutcome.Name(claimed.outcome)
    token = claimed.lease.fencing_token
    outcomes: dict[str, Any] = {
        "success": opreg.Success(result=b"before"),
        "failure": opreg.Failure(code="before_failed", message="recorded before"),
        "unknown": opreg.UnknownOutcome(remote_ref="remote-before", message="recorded before"),
    }
    if action == "in_progress":
        return
    if action not in outcomes:
        raise AssertionError(f"unknown before action {action!r}")
    client.complete(NAMESPACE, key, fencing_token=token, outcome=outcomes[action])


def status_of(client: opreg.Client, key: str) -> str:
    try:
        operation = client.lookup(NAMESPACE, key).operation
    except opreg.OperationNotFound:
        return "NOT_FOUND"
    return pb.OperationStatus.Name(operation.status).removeprefix("OPERATION_STATUS_")


def differences(scenario: Scenario, run: Run, proxy: ProxyExit, status: str) -> list[str]:
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
    if (problem := proxy.calls_problem()) is not None:
        problems.append(problem)
    if "status" in expect and status != expect["status"]:
        problems.append(f"expected the status {expect['status']}, the Lookup found {status}")
    if "reconcile_saw" in expect and run.reconcile_saw != [expect["reconcile_saw"]]:
        problems.append(
            f"expected the reconcile callback to see {expect['reconcile_saw']!r}, it saw {run.reconcile_saw}"
        )
    return problems


def describe(error: BaseException | None) -> str:
    if error is None:
        return "no error"
    return f"{kind_of(error)}:\n" + "".join(traceback.format_exception(error)).rstrip()


@pytest.mark.parametrize("runner", sorted(RUNNERS))
@pytest.mark.parametrize("scenario", ALL, ids=[s.name for s in ALL])
def test_scenario(scenario: Scenario, runner: str, server: Server, client: opreg.Client, scratch: Path) -> None:
    key = f"{scenario.name}-python-{uuid.uuid4().hex[:12]}"
    before(client, scenario, key)
    # No ``calls`` expectation: nothing to judge (not ``[]``, which would mean no calls).
    proxy = FaultProxy(server.address, scenario.raw.get("faults", []), scratch, scenario.expect.get("calls"))
    started = time.monotonic()
    try:
        run = RUNNERS[runner](scenario, proxy.address, key)
    finally:
        finished = proxy.finish()
    took = time.monotonic() - started
    status = status_of(client, key)
    problems = differences(scenario, run, finished, status)
    assert not problems, (
        f"scenario {scenario.name} ({runner} client, key {NAMESPACE}/{key}, {took:.2f}s):\n- "
        + "\n- ".join(problems)
        + f"\n\nthe proxy's whole log:\n{finished.log.rstrip() or '(empty)'}"
        + (f"\n\nthe proxy's stderr:\n{proxy.stderr().rstrip()}" if proxy.stderr().strip() else "")
    )
