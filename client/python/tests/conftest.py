"""Fixtures: one real opreg server (with its embedded PostgreSQL) per test
session, started from $OPREG_SERVER_BIN (default <repo>/target/debug/opreg-server)
and stopped with SIGTERM at the end; a fresh namespace per test; and helpers
that put an operation into a given state."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

import opreg

REPO = Path(__file__).resolve().parents[3]
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0


@dataclass
class Server:
    address: str
    process: subprocess.Popen[bytes]
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _start(binary: Path, data_root: Path, attempt: int, extra_env: dict[str, str] | None = None) -> Server | None:
    port = free_port()
    log = data_root / f"server-{attempt}.log"
    env = dict(os.environ)
    env.pop("OPREG_DATABASE_URL", None)
    env.update(
        OPREG_DATA_DIR=str(data_root / f"pg-{attempt}"),
        OPREG_LISTEN_ADDR=f"127.0.0.1:{port}",
        OPREG_METRICS_ADDR="127.0.0.1:0",  # servers with a metrics endpoint: any free port
        OPREG_SHUTDOWN_GRACE="5s",
        NO_COLOR="1",
    )
    env.update(extra_env or {})
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(binary)], env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
        )
    started = time.monotonic()
    while time.monotonic() - started < START_TIMEOUT:
        if process.poll() is not None:
            text = log.read_text(errors="replace")
            if "in use" in text.lower():  # lost the race for the port: try another
                return None
            raise RuntimeError(f"opreg-server exited with {process.returncode}:\n{text}")
        if _accepts(port):
            return Server(f"127.0.0.1:{port}", process, log)
        time.sleep(0.05)
    _stop(process)
    raise RuntimeError(f"opreg-server did not listen within {START_TIMEOUT}s:\n{log.read_text(errors='replace')}")


def run_server(extra_env: Callable[[Path], dict[str, str]] | None = None) -> Iterator[Server]:
    """A real opreg-server over its own embedded PostgreSQL, stopped after use.
    ``extra_env`` gives more settings from the server's scratch directory."""
    binary = Path(os.environ.get("OPREG_SERVER_BIN") or REPO / "target" / "debug" / "opreg-server")
    if not binary.is_file():
        pytest.fail(f"no opreg-server at {binary}: build it (cargo build -p opreg-server) or set OPREG_SERVER_BIN")
    data_root = Path(tempfile.mkdtemp(prefix="opreg-pytest-"))
    # As root the embedded PostgreSQL runs as another user that must traverse this.
    data_root.chmod(0o755)
    settings = extra_env(data_root) if extra_env else None
    running: Server | None = None
    try:
        for attempt in range(3):
            running = _start(binary, data_root, attempt, settings)
            if running is not None:
                break
        if running is None:
            raise RuntimeError("could not find a free port for opreg-server")
        yield running
    finally:
        if running is not None:
            _stop(running.process)
        shutil.rmtree(data_root, ignore_errors=True)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    yield from run_server()


@pytest.fixture
def address(server: Server) -> str:
    return server.address


@pytest.fixture
def client(address: str) -> Iterator[opreg.Client]:
    with opreg.Client.connect(address, timeout=10) as c:
        yield c


@pytest_asyncio.fixture
async def aclient(address: str) -> AsyncIterator[opreg.AsyncClient]:
    async with opreg.AsyncClient.connect(address, timeout=10) as c:
        yield c


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A private directory (the fault proxy's log, say), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="opreg-conformance-") as directory:
        yield Path(directory)


@pytest.fixture
def ns() -> str:
    """A namespace no other test uses."""
    return f"pytest-{uuid.uuid4().hex[:12]}"


# -- operations put into a given state (the worker and admin tests) -----------

PARAMS = {"account": "A", "amount": 100}


def retry_due_soon(
    client: opreg.Client,
    ns: str,
    key: str,
    parameters: dict[str, object] = PARAMS,
    retry_policy: opreg.RetryPolicy | None = None,
) -> None:
    """RETRY_SCHEDULED, due 0.1 s from now (the first attempt's pushback)."""
    claimed = client.claim(ns, key, owner="seed", parameters=parameters, retry_policy=retry_policy)
    retryable = opreg.RetryableError(error_class="Seed", message="try again", retry_after=opreg.to_duration(0.1))
    client.complete(ns, key, fencing_token=claimed.lease.fencing_token, outcome=retryable)


def abandoned_lease(client: opreg.Client, ns: str, key: str, parameters: dict[str, object] = PARAMS) -> int:
    """IN_PROGRESS under a 1 s lease nobody renews or completes: due for a
    takeover in a second. Returns the abandoned token."""
    claimed = client.claim(ns, key, owner="crashed", parameters=parameters, lease_ttl=1)
    return claimed.lease.fencing_token


def unknown_outcome(
    client: opreg.Client, ns: str, key: str, remote_ref: str, parameters: dict[str, object] = PARAMS
) -> None:
    """UNKNOWN with ``remote_ref``: due for reconciliation at once."""
    claimed = client.claim(ns, key, owner="seed", parameters=parameters)
    client.complete(
        ns, key, fencing_token=claimed.lease.fencing_token, outcome=opreg.UnknownOutcome(remote_ref=remote_ref)
    )


def dead(client: opreg.Client, ns: str, key: str, parameters: dict[str, object] = PARAMS) -> None:
    """DEAD: a budget of one attempt, spent on a retryable error."""
    policy = opreg.retry_policy(max_attempts=1, initial_backoff=0.1, max_backoff=1, deadline=3600)
    claimed = client.claim(ns, key, owner="seed", parameters=parameters, retry_policy=policy)
    done = client.complete(
        ns, key, fencing_token=claimed.lease.fencing_token, outcome=opreg.RetryableError(error_class="Down")
    )
    assert done.operation.status == opreg.pb.OPERATION_STATUS_DEAD


def succeeded(client: opreg.Client, ns: str, key: str, parameters: dict[str, object] = PARAMS) -> None:
    claimed = client.claim(ns, key, owner="seed", parameters=parameters)
    client.complete(ns, key, fencing_token=claimed.lease.fencing_token, outcome=opreg.Success(result=b"done"))


def wait_for(condition: Callable[[], bool], timeout: float = 20.0, interval: float = 0.05) -> None:
    """Polls ``condition`` until it holds; fails the test after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"condition not met within {timeout}s")
        time.sleep(interval)
