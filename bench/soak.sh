#!/usr/bin/env bash
# The soak (server/tests/soak.rs): three opreg-server replicas on one embedded
# PostgreSQL run the fault suite's recorded workload for SECONDS at half its
# peak rate (measured by a 15 s unpaced run first), one replica SIGKILLed and
# restarted every 2 minutes (replicas 1 and 2 in turn; replica 0 never) and
# PostgreSQL stopped -m immediate and restarted every 10, sampling each
# replica's RSS, open files, database connections and tokio tasks once a
# minute. It fails on a checker violation or on a resource curve that grows
# after the 5-minute warm-up. Then it copies the plot to docs/soak.svg and
# prints the table to paste into BENCHMARKS.md.
#
# It takes SECONDS plus about a minute (the unpaced run, the drain, the
# checker over the whole history), after the build: the full run about 32
# minutes. The test binary and the server are the debug build, as in CI; add
# --release to run both optimised (a longer build, a faster checker).
#
#   bench/soak.sh                 # the full half hour
#   bench/soak.sh 180             # CI's 3-minute version (a sample every 20 s)
#   bench/soak.sh 1800 --release
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-1800}
status=0
rm -f target/tmp/soak.svg target/tmp/soak.txt # no stale copy if the run fails early
OPREG_SOAK_SECONDS=$seconds cargo test "${@:2}" -p opreg-server --test soak -- --nocapture ||
  status=$?
# The plot and the table are written before the test asserts: kept on failure too.
if [[ -f target/tmp/soak.svg ]]; then
  cp target/tmp/soak.svg docs/soak.svg
  echo
  echo "### The soak ($(date +%F), ${seconds} s; plot: docs/soak.svg)"
  echo
  cat target/tmp/soak.txt
fi
exit "$status"
