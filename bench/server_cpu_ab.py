#!/usr/bin/env python3
"""The server's own CPU per call, for two or more builds, alternating.

Where the full side-by-side run is too noisy to separate two builds of the
server, this measures only what the server spends: one server at a time (its
embedded PostgreSQL), ghz for a few seconds replaying one completed key (every
call after the first is answered from memory) and then claiming new keys, the
server's CPU from /proc divided by the calls. The builds take turns, round
after round, so a change in the machine's load falls on each of them.

    python3 bench/server_cpu_ab.py /tmp/opreg-server-a /tmp/opreg-server-b
    ROUNDS=4 SECONDS_PER_PATH=8 python3 bench/server_cpu_ab.py A B

Needs target/release/opreg-bench and target/tools/ghz (bench/side-by-side.sh
builds and installs both).
"""

import json
import os
import subprocess
import sys
import tempfile

from side_by_side import own_seconds, stat_fields, wait_ready

SECONDS = int(os.environ.get("SECONDS_PER_PATH", "8"))
ROUNDS = int(os.environ.get("ROUNDS", "2"))
PATHS = {"replay of one key": "claim-replay.json", "new keys": "claim-new-keys.json"}


def measure(binary, port):
    work = tempfile.mkdtemp(prefix="opreg-cpu-ab-")
    os.chmod(work, 0o755)  # as root, PostgreSQL runs as another user
    environment = dict(os.environ, OPREG_DATA_DIR=os.path.join(work, "data"),
                       OPREG_LISTEN_ADDR=f"127.0.0.1:{port}",
                       OPREG_METRICS_ADDR=f"127.0.0.1:{port + 1}", RUST_LOG="warn")
    log = os.path.join(work, "server.log")
    with open(log, "w") as log_file:
        server = subprocess.Popen([binary], env=environment, stdout=log_file,
                                  stderr=subprocess.STDOUT)
    try:
        wait_ready(port + 1, log)
        subprocess.run(["target/release/opreg-bench", "--endpoint", f"http://127.0.0.1:{port}",
                        "--scenario", "replay", "--namespace", "ghz-replay", "--calls", "1",
                        "--concurrency", "1"], check=True, capture_output=True)
        figures = {}
        for path, config in PATHS.items():
            before = own_seconds(stat_fields(server.pid))
            ghz = subprocess.run([os.path.abspath("target/tools/ghz"), "--config", config,
                                  "-c", "32", "--connections", "4", "-z", f"{SECONDS}s",
                                  "--format", "json", f"127.0.0.1:{port}"],
                                 cwd="deploy/ghz", capture_output=True, text=True, check=True)
            spent = own_seconds(stat_fields(server.pid)) - before
            calls = json.loads(ghz.stdout)["count"]
            figures[path] = (calls / SECONDS, spent / calls * 1e6)
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
                f"{path} {rate:,.0f}/s, server {per_call:.0f} µs/call"
                for path, (rate, per_call) in figures.items()), flush=True)


if __name__ == "__main__":
    main()
