#!/usr/bin/env python3
"""CPU per call of two or more server builds, PostgreSQL's and the server's,
alternating.

Where the full side-by-side run is too noisy to separate two builds, this
measures only what a build costs: one server at a time (its embedded
PostgreSQL, so each build runs its own migrations), opreg-bench for a few
seconds on each path, and from /proc the CPU that PostgreSQL (the postmaster,
its reaped and live children) and the server spent, divided by the calls. The
builds take turns, round after round, so a change in the machine's load falls
on each of them (in reverse order every other round). At the end, for each build after the first, the median over
the rounds of each figure's ratio to the first build's in the same round.

    python3 bench/server_cpu_ab.py /tmp/opreg-server-a /tmp/opreg-server-b
    ROUNDS=4 SECONDS_PER_PATH=8 python3 bench/server_cpu_ab.py A B

Needs target/release/opreg-bench (bench/side-by-side.sh builds it).
"""

import os
import statistics
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


def summarize(binaries, rounds):
    """Per path and build after the first: the median, over the rounds, of
    each figure's ratio to the first build's figure in the same round."""
    first = binaries[0]
    for binary in binaries[1:]:
        print(f"{binary} against {first}, median of the {len(rounds)} rounds' ratios:")
        for path in PATHS:
            ratios = [[b / a if a else float("nan")
                       for a, b in zip(round_[first][path], round_[binary][path])]
                      for round_ in rounds]
            rate, postgres, server = (statistics.median(column) for column in zip(*ratios))
            print(f"  {path}: rate {rate:.2f}×, PG {postgres:.2f}×, server {server:.2f}×")


def main():
    binaries = sys.argv[1:]
    if len(binaries) < 2:
        sys.exit(__doc__)
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    rounds = []
    for round_ in range(1, ROUNDS + 1):
        rounds.append({})
        # Every other round runs the builds in reverse, so a machine whose
        # load drifts within a round does not favour the build that runs first.
        order = list(enumerate(binaries))
        if round_ % 2 == 0:
            order.reverse()
        for index, binary in order:
            figures = measure(binary, 50700 + 10 * index)
            rounds[-1][binary] = figures
            print(f"round {round_}, {binary}: " + "; ".join(
                f"{path} {rate:,.0f}/s, PG {postgres:.0f} + server {server:.0f} µs/call"
                for path, (rate, postgres, server) in figures.items()), flush=True)
    summarize(binaries, rounds)


if __name__ == "__main__":
    main()
