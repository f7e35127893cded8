#!/usr/bin/env bash
# The batch path's tail on a fresh server: ROUNDS closed-loop BatchClaim runs
# (32 in flight, 32 keys per call, 10 s each) against one release server with
# its own embedded PostgreSQL, then how many first leases the server restarted
# and how many registration statements it ran (from its /metrics).
#
#   bench/batch-tail.sh                                  # this tree's release server
#   bench/batch-tail.sh /tmp/opreg-server-before          # another build, for an A/B
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p opreg-server -p opreg-bench
server_bin=${1:-target/release/opreg-server}
work=$(mktemp -d /tmp/opreg-batch-tail.XXXXXX)
chmod 755 "$work" # as root, PostgreSQL runs as another user that must traverse it
port=${PORT:-50571}
metrics=127.0.0.1:$((port + 1))
OPREG_DATA_DIR="$work/data" OPREG_LISTEN_ADDR=127.0.0.1:$port OPREG_METRICS_ADDR=$metrics \
  RUST_LOG=warn "$server_bin" >"$work/server.log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 120); do curl -sf "http://$metrics/metrics" >/dev/null && break; sleep 0.5; done
for round in $(seq "${ROUNDS:-4}"); do
  printf 'round %s: ' "$round"
  target/release/opreg-bench --endpoint "http://127.0.0.1:$port" --scenario batch-claim \
    --batch 32 --concurrency 32 --duration 10s | sed -n 1,2p | tr -s '\n ' ' '; echo
done
count() {
  curl -s "http://$metrics/metrics" |
    awk -v q="$1" '$1 == "opreg_db_query_duration_seconds_count{query=\"" q "\"}" { n = $2 } END { print n + 0 }'
}
echo "first leases restarted: $(count operations_restart_first_lease)"
echo "registration statements: $(count operations_register)"
