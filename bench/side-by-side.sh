#!/usr/bin/env bash
# Raw single-row SQL through pgbench against opreg's API through opreg-bench and
# ghz, on one PostgreSQL, in one run: each process's CPU per operation
# (PostgreSQL, opreg-server, the load generator) beside throughput and latency,
# and the machine cost against the raw SQL. The PostgreSQL is the release
# server's embedded one (durable commits); the raw SQL runs in a database of its
# own beside opreg's. bench/side_by_side.py does the measuring.
#
#   bench/side-by-side.sh                 # 32 in flight, 10 s per path
#   CONCURRENCY=16 SECONDS_PER_PATH=20 bench/side-by-side.sh
#   SERVER_BIN=/path/to/older/opreg-server bench/side-by-side.sh   # an A/B
#   JSON=target/side-by-side.json bench/side-by-side.sh             # keep the figures
#   PROFILE=target/profiles bench/side-by-side.sh   # also a flat perf profile of the server per path
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/opreg-side-by-side.XXXXXX)
chmod 755 "$work" # as root, PostgreSQL runs as another user that must traverse it
trap 'rm -rf "$work"' EXIT

pg_bin=$(dirname "$(ls /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | sort -V | tail -1)")
[[ -x "$pg_bin/pgbench" ]] || { echo "pgbench not found (Debian: postgresql-15)" >&2; exit 1; }
mkdir -p target/tools
ghz=target/tools/ghz
if [[ ! -x "$ghz" ]]; then
  GOBIN="$PWD/target/tools" go install github.com/bojand/ghz/cmd/ghz@v0.93.0
fi
cargo build --release -q -p opreg-server -p opreg-bench
[[ -z "${PROFILE:-}" ]] || mkdir -p "$PROFILE"

python3 bench/side_by_side.py --server-bin "${SERVER_BIN:-target/release/opreg-server}" \
  --bench-bin target/release/opreg-bench --ghz-bin "$ghz" --pg-bin "$pg_bin" --work "$work" \
  --port "${PORT:-50561}" --concurrency "${CONCURRENCY:-32}" --seconds "${SECONDS_PER_PATH:-10}" \
  --batch "${BATCH:-32}" ${JSON:+--json "$JSON"} \
  ${PROFILE:+--profile "$PROFILE"}
