#!/usr/bin/env python3
"""CPU per call of two or more server builds, PostgreSQL's and the server's,
alternating.

Where the full side-by-side run is too noisy to separate two builds, this
measures only what a build costs: one server at a time (its embedded
PostgreSQL, so each build runs its own migrations), opreg-bench for a few
seconds on each path, and from /proc the CPU that PostgreSQL (the postmaster,
its reaped and live children) and the server spent, divided by the calls. The
builds take turns, round after round, so a change in the machine's load falls
on each of them.

    python3 bench/server_cpu_ab.py /tmp/opreg-server-a /tmp/opreg-server-b
    ROUNDS=4 SECONDS_PER_PATH=8 python3 bench/server_cpu_ab.py A B

Needs target/release/opreg-bench (bench/side-by-side.sh builds it).
"""

import os
import subprocess
import sys
import tempfile

from side_by_side import Machine, bench_output, wait_ready

SECONDS = int(os.environ.get("SECONDS_PER_PATH", "8"))
ROUNDS = int(os.environ.get("ROUNDS", "2"))
CONCURRENCY = os.environ.get("CONCURRENCY", "32")
PATHS = {
    "new keys": ("new-keys",),
    "claim + complete": ("lifecycle",),
    "replay": ("replay", "--hit-rate", "1"),
    "batch claim + complete of 32": ("batch-lifecycle", "--batch", "32"),
}


def measure(binary, port):
    work = tempfile.mkdtemp(prefix="opreg-cpu-ab-")
    os.chmod(work, 0o755)  # as root, PostgreSQL runs as another user
    environment = dict(os.environ, OPREG_DATA_DIR=os.path.join(work, "data"),
                       OPREG_LISTEN_ADDR=f"127.0.0.1:{port}",
                       OPREG_METRICS_ADDR=f"127.0.0.1:{port + 1}")
    log = os.path.join(work, "server.log")
    with open(log, "w") as log_file:
        server = subprocess.Popen([binary], env=environment, stdout=log_file,
                                  stderr=subprocess.STDOUT)
    try:
        wait_ready(port + 1, log)
        with open(os.path.join(work, "data", "pgdata", "postmaster.pid")) as pid_file:
            machine = Machine(int(pid_file.readline()), server.pid)
        figures = {}
        for path, scenario in PATHS.items():
            command = ["target/release/opreg-bench", "--endpoint", f"http://127.0.0.1:{port}",
                       "--scenario", *scenario, "--concurrency", CONCURRENCY,
                       "--duration", f"{SECONDS}s", "--json", "--wait-before-start"]
            measured = machine.measure(command, bench_output, prepared=True)
            figures[path] = (measured["per_second"], measured["postgres_us"],
                             measured["server_us"])
        return figures
    finally:
        server.terminate()
        server.wait()
        subprocess.run(["rm", "-rf", work])


def main():
    binaries = sys.argv[1:]
    if len(binaries) < 2:
        sys.exit(__doc__)
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    for round_ in range(1, ROUNDS + 1):
        for index, binary in enumerate(binaries):
            figures = measure(binary, 50700 + 10 * index)
            print(f"round {round_}, {binary}: " + "; ".join(
                f"{path} {rate:,.0f}/s, PG {postgres:.0f} + server {server:.0f} µs/call"
                for path, (rate, postgres, server) in figures.items()), flush=True)


if __name__ == "__main__":
    main()
