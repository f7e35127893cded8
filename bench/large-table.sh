#!/usr/bin/env bash
# Throughput with many stored operations against an empty table, in one run on
# one PostgreSQL: the same opreg-bench paths before and after ROWS finished
# operations (each with its execution) are loaded and analyzed.
#
#   bench/large-table.sh                  # 10,000,000 rows, 32 in flight, 10 s per path
#   ROWS=1000000 bench/large-table.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${ROWS:-10000000}
concurrency=${CONCURRENCY:-32}
seconds=${SECONDS_PER_PATH:-10}
port=${PORT:-50571}
server_bin=${SERVER_BIN:-target/release/opreg-server}
source bench/embedded-server.sh
cargo build --release -q -p opreg-server -p opreg-bench
bench=target/release/opreg-bench
start_server "$port"

measure() { # label: one line per path
  for path in new-keys replay lifecycle; do
    "$bench" --endpoint "http://127.0.0.1:$port" --scenario "$path" --namespace "$1-$path" \
      --concurrency "$concurrency" --duration "${seconds}s" --json |
      python3 -c "import json,sys; r=json.load(sys.stdin); print('$path', round(r['operations_per_second']), r['latency_ms']['p99'])"
  done
}

echo "many stored operations: $rows rows, $concurrency in flight, $seconds s per path, $(nproc) cores"
measure empty >"$work/empty.txt"
# One finished operation (its execution on its row), copied ROWS times under other keys
# and negative tokens (the sequence hands out positive ones only).
"$bench" --endpoint "http://127.0.0.1:$port" --scenario replay --namespace bulk-template \
  --calls 1 --concurrency 1 >/dev/null
started=$(date +%s)
for ((from = 1; from <= rows; from += 1000000)); do
  to=$((from + 999999 < rows ? from + 999999 : rows))
  psql <<SQL
WITH t AS MATERIALIZED (SELECT to_jsonb(o) AS row FROM operations AS o
                        WHERE namespace = 'bulk-template' AND operation_key = 'done-0')
INSERT INTO operations
SELECT r.* FROM t CROSS JOIN generate_series($from, $to) AS g
CROSS JOIN LATERAL jsonb_populate_record(NULL::operations, t.row || jsonb_build_object(
    'namespace', 'bulk', 'operation_key', 'bulk-' || g, 'fencing_token', -g,
    'execution_token', -g)) AS r;
SQL
done
psql -c "VACUUM ANALYZE operations"
loaded=$(psql -c "SELECT count(*) FROM operations")
size=$(psql -c "SELECT pg_size_pretty(pg_total_relation_size('operations'))")
echo "loaded $loaded operations ($size with indexes) in $(( $(date +%s) - started )) s"
measure full >"$work/full.txt"
python3 - "$work/empty.txt" "$work/full.txt" <<'PY'
import sys
empty = {l.split()[0]: l.split()[1:] for l in open(sys.argv[1])}
full = {l.split()[0]: l.split()[1:] for l in open(sys.argv[2])}
print("| path | empty table | with the rows loaded | ratio |")
print("|---|---|---|---|")
for path, (rate, p99) in empty.items():
    rate2, p99b = full[path]
    print(f"| {path} | {int(rate):,}/s, p99 {float(p99):.1f} ms | {int(rate2):,}/s, p99 {float(p99b):.1f} ms | {int(rate2) / int(rate):.2f} |")
PY
