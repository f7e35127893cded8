"""What the conformance runners share (tests/test_conformance.py for run_once,
tests/test_worker_conformance.py for the worker; formats in client/PROTOCOL.md):
the scenario files and their settings, the fault proxy, the ``before``
preparation, the work actions and reconcile verdicts that do not depend on the
helper, the direct Lookup afterwards and the failure message."""

from __future__ import annotations

import json
import os
import select
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from conftest import REPO

import opreg
from opreg import pb

BEFORE_OWNER = "conformance-before"
PROXY_START_TIMEOUT = 10.0
PROXY_EXIT_TIMEOUT = 30.0  # a takeover waits up to 15 s for a lease to lapse


def proxy_binary() -> Path:
    return Path(os.environ.get("OPREG_FAULT_PROXY_BIN") or REPO / "target" / "debug" / "opreg-fault-proxy")


class UnexpectedWorkError(Exception):
    """What ``fail_unexpected`` raises: an error of no opreg kind."""


# -- the scenario files -----------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """One scenario of a scenario file; a setting it does not override is the
    file's default."""

    raw: dict[str, Any]
    defaults: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.raw["name"])

    def setting(self, name: str) -> Any:
        return self.raw.get(name, self.defaults[name])

    def seconds(self, name: str) -> float:
        """A ``<name>_ms`` setting, in seconds."""
        return float(self.setting(f"{name}_ms")) / 1000

    @property
    def lease_ttl(self) -> float:
        return self.seconds("lease_ttl")

    @property
    def call_timeout(self) -> float:
        return self.seconds("call_timeout")

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


ScenarioT = TypeVar("ScenarioT", bound=Scenario)


def load_scenarios(path: Path, kind: type[ScenarioT]) -> list[ScenarioT]:
    """Every scenario of ``path``. Fails on an empty file or a repeated name:
    pytest would tell two scenarios of one name apart only by a suffix."""
    document = json.loads(path.read_text())
    scenarios = [kind(raw, document["defaults"]) for raw in document["scenarios"]]
    names = [s.name for s in scenarios]
    if not names or len(names) != len(set(names)):
        raise ValueError(f"{path}: the scenario names must be unique and there must be some: {names}")
    return scenarios


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

    def logged(self, line: str) -> bool:
        """Whether the call log holds ``line`` (a whole line, e.g. ``Complete:SUCCEEDED``)."""
        return line in (logged.strip() for logged in self.log().splitlines())


# -- before, directly against the server ----------------------------------------------

# What ``before`` completes its Claim with; ``in_progress`` only claims.
BEFORE_OUTCOMES: dict[str, Any] = {
    "success": opreg.Success(result=b"before"),
    "failure": opreg.Failure(code="before_failed", message="recorded before"),
    "unknown": opreg.UnknownOutcome(remote_ref="remote-before", message="recorded before"),
    "retry_due": opreg.RetryableError(
        error_class="BEFORE", message="recorded before", retry_after=opreg.to_duration(0.001)
    ),
    "in_progress": None,
}


def before(
    client: opreg.Client, scenario: Scenario, namespace: str, key: str, *, lease_ttl: float
) -> pb.ClaimResponse | None:
    """The scenario's ``before``, directly against the server: a Claim by
    ``conformance-before`` with the scenario's retry policy, then its outcome.
    Returns that Claim's answer (None without ``before``): ``in_progress``
    leaves its lease live, for the runner to complete later if the scenario
    says so."""
    action = scenario.raw.get("before")
    if action is None:
        return None
    if action not in BEFORE_OUTCOMES:
        raise AssertionError(f"unknown before action {action!r}")
    claimed = client.claim(
        namespace,
        key,
        owner=BEFORE_OWNER,
        parameters=scenario.parameters,
        lease_ttl=lease_ttl,
        retry_policy=scenario.retry_policy,
    )
    assert claimed.outcome == pb.CLAIM_OUTCOME_ACQUIRED, pb.ClaimOutcome.Name(claimed.outcome)
    if (outcome := BEFORE_OUTCOMES[action]) is not None:
        client.complete(namespace, key, fencing_token=claimed.lease.fencing_token, outcome=outcome)
    return claimed


def looked_up(client: opreg.Client, namespace: str, key: str) -> pb.Operation | None:
    """The operation by a direct Lookup; None when there is none."""
    try:
        return client.lookup(namespace, key).operation
    except opreg.OperationNotFound:
        return None


def status_of(operation: pb.Operation | None) -> str:
    """The status as the scenarios spell it (``NOT_FOUND`` when there is none)."""
    if operation is None:
        return "NOT_FOUND"
    return pb.OperationStatus.Name(operation.status).removeprefix("OPERATION_STATUS_")


# -- the work and the reconcile callback -------------------------------------------


@dataclass
class Run:
    """What the helper did: its result or error, and what the callbacks saw."""

    result: opreg.Result | None = None
    error: BaseException | None = None
    executions: int = 0  # how many times the work began
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


# -- the verdict ------------------------------------------------------------------


def expected_differences(
    expect: dict[str, Any], run: Run, proxy: ProxyExit, operation: pb.Operation | None
) -> list[str]:
    """How the checks every runner makes differ from ``expect``: the proxy's
    verdict on the calls, the status the direct Lookup found and the remote ref
    the reconcile callback saw."""
    problems: list[str] = []
    if (problem := proxy.calls_problem()) is not None:
        problems.append(problem)
    if "status" in expect and (status := status_of(operation)) != expect["status"]:
        problems.append(f"expected the status {expect['status']}, the Lookup found {status}")
    if "reconcile_saw" in expect and run.reconcile_saw != [expect["reconcile_saw"]]:
        problems.append(
            f"expected the reconcile callback to see {expect['reconcile_saw']!r}, it saw {run.reconcile_saw}"
        )
    return problems


def failure_message(heading: str, problems: Sequence[str], proxy: FaultProxy, finished: ProxyExit) -> str:
    """What a failed scenario prints: what differed, then the proxy's whole log
    (and its stderr, if it wrote any)."""
    stderr = proxy.stderr().rstrip()
    return (
        f"{heading}:\n- "
        + "\n- ".join(problems)
        + f"\n\nthe proxy's whole log:\n{finished.log.rstrip() or '(empty)'}"
        + (f"\n\nthe proxy's stderr:\n{stderr}" if stderr else "")
    )
