"""Fixtures: one real opreg server (with its embedded PostgreSQL) per test
session, started from $OPREG_SERVER_BIN (default <repo>/target/debug/opreg-server)
and stopped with SIGTERM at the end; a fresh namespace per test."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
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


def _start(binary: Path, data_root: Path, attempt: int) -> Server | None:
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


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    binary = Path(os.environ.get("OPREG_SERVER_BIN") or REPO / "target" / "debug" / "opreg-server")
    if not binary.is_file():
        pytest.fail(f"no opreg-server at {binary}: build it (cargo build -p opreg-server) or set OPREG_SERVER_BIN")
    data_root = Path(tempfile.mkdtemp(prefix="opreg-pytest-"))
    # As root the embedded PostgreSQL runs as another user that must traverse this.
    data_root.chmod(0o755)
    running: Server | None = None
    try:
        for attempt in range(3):
            running = _start(binary, data_root, attempt)
            if running is not None:
                break
        if running is None:
            raise RuntimeError("could not find a free port for opreg-server")
        yield running
    finally:
        if running is not None:
            _stop(running.process)
        shutil.rmtree(data_root, ignore_errors=True)


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
def ns() -> str:
    """A namespace no other test uses."""
    return f"pytest-{uuid.uuid4().hex[:12]}"
