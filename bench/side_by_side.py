#!/usr/bin/env python3
"""Raw single-row SQL against opreg's API on one PostgreSQL, in one run: the
machine's CPU per operation for each process beside throughput and latency.

Started by bench/side-by-side.sh, which builds the binaries and installs ghz.
For every path it runs the raw SQL through pgbench and the same work through
opreg, and reads from /proc what each process spent while it ran:

- PostgreSQL: the postmaster with its reaped children (cutime, cstime) plus
  every live child of the postmaster (backends, WAL writer, checkpointer);
- opreg-server: the server process, every thread;
- the load generator (pgbench, opreg-bench, ghz): its own rusage.

The machine cost of a path is (PostgreSQL + server CPU per operation) over the
raw SQL's PostgreSQL CPU per operation. The load generator shares the cores, so
throughput is reported but is not the cost.
"""

import argparse
import glob
import json
import os
import resource
import signal
import subprocess
import sys
import time
import urllib.request

TICKS = os.sysconf("SC_CLK_TCK")

RAW_SCHEMA = """
CREATE SEQUENCE raw_tokens;
CREATE SEQUENCE raw_keys;
CREATE TABLE raw_operations (
    namespace text, operation_key text, digest bytea NOT NULL, status text NOT NULL,
    fencing_token bigint NOT NULL, lease_expires_at timestamptz, result bytea,
    PRIMARY KEY (namespace, operation_key));
INSERT INTO raw_operations VALUES ('ns', 'done', '\\x01', 'succeeded', nextval('raw_tokens'), NULL, 'done');
"""

RAW_SCRIPTS = {
    "new-key": """
INSERT INTO raw_operations VALUES ('ns', 'k' || nextval('raw_keys'), '\\x01', 'in_progress',
    nextval('raw_tokens'), clock_timestamp() + interval '30 seconds', NULL)
ON CONFLICT DO NOTHING RETURNING fencing_token;
""",
    "replay": """
INSERT INTO raw_operations VALUES ('ns', 'done', '\\x01', 'in_progress',
    nextval('raw_tokens'), clock_timestamp() + interval '30 seconds', NULL)
ON CONFLICT DO NOTHING RETURNING fencing_token;
SELECT status, result, digest FROM raw_operations WHERE namespace = 'ns' AND operation_key = 'done';
""",
    "lifecycle": """
INSERT INTO raw_operations VALUES ('ns', 'c' || nextval('raw_keys'), '\\x01', 'in_progress',
    nextval('raw_tokens'), clock_timestamp() + interval '30 seconds', NULL)
ON CONFLICT DO NOTHING RETURNING operation_key AS key, fencing_token AS token \\gset
UPDATE raw_operations SET status = 'succeeded', result = 'done', lease_expires_at = NULL
 WHERE namespace = 'ns' AND operation_key = :key AND fencing_token = :token AND status = 'in_progress'
RETURNING fencing_token;
""",
}


def stat_fields(pid):
    """The fields of /proc/PID/stat after the command name (state first)."""
    with open(f"/proc/{pid}/stat") as stat:
        text = stat.read()
    return text[text.rindex(")") + 2 :].split()


def own_seconds(fields):
    return (int(fields[11]) + int(fields[12])) / TICKS


def postmaster_children(postmaster):
    """The state and /proc stat fields of each child of the postmaster."""
    children = []
    for path in glob.glob("/proc/[0-9]*/stat"):
        pid = path.split("/")[2]
        try:
            child = stat_fields(pid)
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        if child[1] == str(postmaster):
            children.append(child)
    return children


def postgres_seconds(postmaster):
    """The postmaster, its reaped children and every live child."""
    fields = stat_fields(postmaster)
    total = own_seconds(fields) + (int(fields[13]) + int(fields[14])) / TICKS
    return total + sum(own_seconds(child) for child in postmaster_children(postmaster))


def settled_postgres_seconds(postmaster, children_before):
    """PostgreSQL's CPU once the backends of a finished client have gone: a
    backend that is exiting counts neither as live nor yet as reaped, so its
    CPU would be missed (pgbench's 32 backends all exit at its end)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        children = postmaster_children(postmaster)
        if len(children) <= children_before and all(child[0] != "Z" for child in children):
            break
        time.sleep(0.05)
    return postgres_seconds(postmaster)


def children_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Machine:
    """The two processes under test; measures a load generator's run."""

    def __init__(self, postmaster, server):
        self.postmaster = postmaster
        self.server = server

    def snapshot(self, generator_seconds):
        return (postgres_seconds(self.postmaster), own_seconds(stat_fields(self.server)),
                generator_seconds, time.monotonic())

    def measure(self, command, operations_of, cwd=None, prepared=False, profile=None):
        """Runs `command`; returns its parsed output and each process's CPU.
        With `prepared`, the command sets up untimed first and says so on
        stderr (opreg-bench --wait-before-start): the measuring starts then.
        With `profile`, perf samples the server into that file meanwhile."""
        started = children_seconds()
        children_before = len(postmaster_children(self.postmaster))
        run = subprocess.Popen(command, cwd=cwd, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.PIPE)
        before = self.snapshot(started)
        if prepared:
            line = run.stderr.readline()
            if line.strip() != "prepared":
                sys.exit(f"{command[0]} did not prepare: {line}{run.stderr.read()}")
            before = self.snapshot(started + own_seconds(stat_fields(run.pid)))
        recorder = None
        if profile:
            recorder = subprocess.Popen(["perf", "record", "-F", "999", "-p", str(self.server),
                                         "-o", profile], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        stdout, stderr = run.communicate(input="\n")
        after = self.snapshot(children_seconds())
        # Throughput counts the wall time to the client's end; PostgreSQL's
        # CPU is read once its backends of that client are reaped.
        after = (settled_postgres_seconds(self.postmaster, children_before), *after[1:])
        if recorder:
            recorder.send_signal(signal.SIGINT)
            recorder.wait()
        if run.returncode != 0:
            sys.exit(f"{command[0]} failed ({run.returncode}):\n{stdout}\n{stderr}")
        output, operations = operations_of(stdout)
        spent = [b - a for a, b in zip(before, after)]
        return {
            "output": output,
            "operations": operations,
            "per_second": operations / spent[3],
            "postgres_us": spent[0] / operations * 1e6,
            "server_us": spent[1] / operations * 1e6,
            "generator_us": spent[2] / operations * 1e6,
        }


def flat_profile(recording, lines=15):
    """The server's hottest symbols in a perf recording, self time only."""
    report = subprocess.run(["perf", "report", "-i", recording, "--stdio", "--no-children",
                             "--sort", "dso,symbol", "--percent-limit", "0.8", "-q"],
                            capture_output=True, text=True, check=True).stdout
    rows = []
    for line in report.splitlines():
        fields = line.split()
        while fields and fields[-1] == "-":  # the empty columns perf pads with
            fields.pop()
        if fields:
            rows.append("  ".join(fields[:3]) + " " + " ".join(fields[3:]))
    return rows[:lines]


def pgbench_output(stdout):
    for line in stdout.splitlines():
        if line.startswith("number of transactions actually processed:"):
            return stdout, int(line.split(":")[1].split("/")[0])
    sys.exit(f"pgbench printed no count:\n{stdout}")


def bench_output(stdout):
    report = json.loads(stdout)
    return report, report["operations"]


def ghz_output(stdout):
    report = json.loads(stdout)
    return report, report["count"]


def wait_ready(metrics_port, log):
    for _ in range(240):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/readyz", timeout=1)
            return
        except OSError:
            time.sleep(0.5)
    sys.exit(f"the server never became ready:\n{open(log).read()}")


def pgbench_latencies(prefix):
    """Per-transaction latencies in ms from pgbench's -l logs."""
    latencies = []
    for path in glob.glob(prefix + "*"):
        with open(path) as log:
            latencies += [int(line.split()[2]) / 1000 for line in log if line.strip()]
    return sorted(latencies)


def quantile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-bin", required=True)
    parser.add_argument("--bench-bin", required=True)
    parser.add_argument("--ghz-bin", required=True)
    parser.add_argument("--pg-bin", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--port", type=int, default=50561)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--json", help="also write every figure here")
    parser.add_argument("--profile", help="sample the server with perf during each opreg-bench "
                        "path, keep the recordings in this directory and print a flat profile "
                        "of each (the sampling costs CPU: compare figures only between runs "
                        "without it)")
    args = parser.parse_args()
    work, port, metrics_port = args.work, args.port, args.port + 1
    endpoint = f"http://127.0.0.1:{port}"

    log = os.path.join(work, "server.log")
    environment = dict(os.environ, OPREG_DATA_DIR=os.path.join(work, "data"),
                       OPREG_LISTEN_ADDR=f"127.0.0.1:{port}",
                       OPREG_METRICS_ADDR=f"127.0.0.1:{metrics_port}", RUST_LOG="warn")
    with open(log, "w") as log_file:
        server = subprocess.Popen([args.server_bin], env=environment, stdout=log_file,
                                  stderr=subprocess.STDOUT)
    try:
        wait_ready(metrics_port, log)
        with open(os.path.join(work, "data", "pgdata", "postmaster.pid")) as pid_file:
            postmaster = int(pid_file.readline())
        figures = run_paths(args, Machine(postmaster, server.pid), endpoint)
    finally:
        server.terminate()
        server.wait()
    print_figures(args, figures)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=2, default=str)


def run_paths(args, machine, endpoint):
    work, socket = args.work, os.path.join(args.work, "data", "run")
    psql = [os.path.join(args.pg_bin, "psql"), "-h", socket, "-U", "opreg", "-qAt",
            "-v", "ON_ERROR_STOP=1"]
    subprocess.run(psql + ["-d", "opreg", "-c", "CREATE DATABASE raw"], check=True)
    subprocess.run(psql + ["-d", "raw"], input=RAW_SCHEMA, text=True, check=True)
    for name, script in RAW_SCRIPTS.items():
        with open(os.path.join(work, f"{name}.sql"), "w") as out:
            out.write(script)

    def pgbench(name, concurrency=args.concurrency, extra=()):
        command = [os.path.join(args.pg_bin, "pgbench"), "-h", socket, "-U", "opreg", "-n",
                   "-M", "prepared", "-c", str(concurrency), "-j", str(min(2, concurrency)),
                   "-T", str(args.seconds), *extra, "-f", os.path.join(work, f"{name}.sql"), "raw"]
        return machine.measure(command, pgbench_output, cwd=work)

    profiles = {}

    def bench(scenario, *extra, concurrency=args.concurrency, profile_as=None):
        command = [args.bench_bin, "--endpoint", endpoint, "--scenario", scenario,
                   "--concurrency", str(concurrency), "--duration", f"{args.seconds}s", "--json",
                   "--wait-before-start", *extra]
        recording = None
        if args.profile and profile_as:
            recording = os.path.join(args.profile, f"{profile_as}.perf.data")
        measured = machine.measure(command, bench_output, prepared=True, profile=recording)
        if recording:
            profiles[profile_as] = flat_profile(recording)
        return measured

    def ghz(config):
        command = [os.path.abspath(args.ghz_bin), "--config", config, "-c", str(args.concurrency),
                   "--connections", "4", "-z", f"{args.seconds}s", "--format", "json",
                   f"127.0.0.1:{args.port}"]
        return machine.measure(command, ghz_output, cwd="deploy/ghz")

    batch = str(args.batch)
    figures = {"concurrency": args.concurrency, "seconds": args.seconds, "batch": args.batch,
               "cores": os.cpu_count()}
    figures["raw"] = {name: pgbench(name) for name in RAW_SCRIPTS}
    paths = {
        "new-key": ("new-keys",),
        "replay": ("replay", "--hit-rate", "1"),
        "lifecycle": ("lifecycle",),
        "batch-claim": ("batch-claim", "--batch", batch),
        "batch-lifecycle": ("batch-lifecycle", "--batch", batch),
    }
    figures["opreg"] = {name: bench(*path, profile_as=name) for name, path in paths.items()}
    figures["profiles"] = profiles
    subprocess.run([args.bench_bin, "--endpoint", endpoint, "--scenario", "replay",
                    "--namespace", "ghz-replay", "--calls", "1", "--concurrency", "1"],
                   check=True, capture_output=True)
    figures["ghz"] = {"new-key": ghz("claim-new-keys.json"), "replay": ghz("claim-replay.json")}

    prefix = os.path.join(work, "pgbench_log")
    pgbench("new-key", concurrency=1, extra=("-l", f"--log-prefix={prefix}"))
    latencies = pgbench_latencies(prefix)
    figures["single"] = {
        "raw_p50_ms": quantile(latencies, 0.5),
        "raw_p99_ms": quantile(latencies, 0.99),
        "opreg": bench("new-keys", concurrency=1),
    }
    half = round(figures["opreg"]["new-key"]["per_second"] / 2)
    figures["open_loop"] = bench("new-keys", "--rate", str(half), concurrency=256)
    return figures


def print_figures(args, figures):
    raw, ours = figures["raw"], figures["opreg"]
    print(f"side by side: {args.concurrency} in flight, {args.seconds} s per path, "
          f"{figures['cores']} cores, one PostgreSQL (fsync on)")
    print()
    print("CPU per operation, µs (PG = PostgreSQL, srv = opreg-server, gen = load generator); "
          "machine cost = (PG + srv) / raw PG")
    print()
    print("| path | raw SQL: ops/s, PG, gen | opreg: ops/s, PG, srv, gen | machine cost | "
          "throughput vs raw | opreg p50 / p99 / p99.9 ms |")
    print("|---|---|---|---|---|---|")
    rows = [
        ("new-key Claim", "new-key", "new-key"),
        ("replay of a completed key", "replay", "replay"),
        ("Claim + Complete", "lifecycle", "lifecycle"),
        (f"BatchClaim of {args.batch}, per key", "new-key", "batch-claim"),
        (f"BatchClaim + BatchComplete of {args.batch}, per key", "lifecycle", "batch-lifecycle"),
    ]
    for label, raw_name, our_name in rows:
        r, o = raw[raw_name], ours[our_name]
        latency = o["output"]["latency_ms"]
        cost = (o["postgres_us"] + o["server_us"]) / r["postgres_us"]
        print(f"| {label} | {r['per_second']:,.0f}/s, {r['postgres_us']:.0f}, {r['generator_us']:.0f} "
              f"| {o['per_second']:,.0f}/s, {o['postgres_us']:.0f}, {o['server_us']:.0f}, "
              f"{o['generator_us']:.0f} | **{cost:.2f}** | {o['per_second'] / r['per_second']:.2f} "
              f"| {latency['p50']:.1f} / {latency['p99']:.1f} / {latency['p99.9']:.1f} |")
    print()
    print("ghz through the same server (4 connections):")
    for name, run in figures["ghz"].items():
        report = run["output"]
        p99 = next((d["latency"] for d in report.get("latencyDistribution") or []
                    if d["percentage"] == 99), 0)
        errors = report.get("errorDistribution") or {}
        kinds = "; ".join(f"{count} {kind[:60]}" for kind, count in errors.items())
        print(f"- {name}: {run['per_second']:,.0f}/s, p99 {p99 / 1e6:.1f} ms; CPU µs/op: "
              f"PG {run['postgres_us']:.0f}, srv {run['server_us']:.0f}, ghz {run['generator_us']:.0f}"
              + (f" (errors: {kinds})" if kinds else ""))
    single = figures["single"]
    latency = single["opreg"]["output"]["latency_ms"]
    print()
    print(f"1 in flight, new keys: raw SQL p50 {single['raw_p50_ms']:.2f} ms, p99 "
          f"{single['raw_p99_ms']:.2f} ms; opreg p50 {latency['p50']:.2f} ms, p99 {latency['p99']:.2f} ms "
          f"(+{latency['p50'] - single['raw_p50_ms']:.2f} ms at p50)")
    loop = figures["open_loop"]
    latency = loop["output"]["latency_ms"]
    print(f"open loop at half the peak ({loop['output']['rate']:,}/s, new keys): achieved "
          f"{loop['per_second']:,.0f}/s, p50 {latency['p50']:.1f} ms, p99 {latency['p99']:.1f} ms, "
          f"p99.9 {latency['p99.9']:.1f} ms, max {latency['max']:.1f} ms")
    for path, rows in figures.get("profiles", {}).items():
        print()
        print(f"flat perf profile of opreg-server, {path} (self time, top {len(rows)}):")
        print("```")
        print("\n".join(rows))
        print("```")


if __name__ == "__main__":
    main()
