#!/usr/bin/env bash
# Raw single-row SQL through pgbench against opreg's API through opreg-bench and
# ghz, on one PostgreSQL, at the same concurrency, in one run; prints each pair
# and the ratio. The PostgreSQL is the release server's embedded one (durable
# commits); the raw SQL runs in a database of its own beside opreg's.
#
#   bench/side-by-side.sh                 # 32 in flight, 10 s per path
#   CONCURRENCY=16 SECONDS_PER_PATH=20 bench/side-by-side.sh
#   SERVER_BIN=/path/to/older/opreg-server bench/side-by-side.sh   # an A/B
set -euo pipefail
cd "$(dirname "$0")/.."
concurrency=${CONCURRENCY:-32}
seconds=${SECONDS_PER_PATH:-10}
port=${PORT:-50561}
server_bin=${SERVER_BIN:-target/release/opreg-server}
batch=${BATCH:-32}
work=$(mktemp -d /tmp/opreg-side-by-side.XXXXXX)
chmod 755 "$work"
server=
cleanup() {
  [[ -n "$server" ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

pg_bin=$(dirname "$(ls /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | sort -V | tail -1)")
[[ -x "$pg_bin/pgbench" ]] || { echo "pgbench not found (Debian: postgresql-15)" >&2; exit 1; }
mkdir -p target/tools
ghz=target/tools/ghz
if [[ ! -x "$ghz" ]]; then
  GOBIN="$PWD/target/tools" go install github.com/bojand/ghz/cmd/ghz@v0.93.0
fi
cargo build --release -q -p opreg-server -p opreg-bench
bench=target/release/opreg-bench

OPREG_DATA_DIR="$work/data" OPREG_LISTEN_ADDR="127.0.0.1:$port" \
  OPREG_METRICS_ADDR="127.0.0.1:$((port + 1))" RUST_LOG=warn \
  "$server_bin" >"$work/server.log" 2>&1 &
server=$!
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$((port + 1))/readyz" >/dev/null && break
  sleep 0.5
done
curl -sf "http://127.0.0.1:$((port + 1))/readyz" >/dev/null || { cat "$work/server.log"; exit 1; }
socket="$work/data/run"
psql() { "$pg_bin/psql" -h "$socket" -U opreg -qAt -v ON_ERROR_STOP=1 "$@"; }
psql -d opreg -c "CREATE DATABASE raw"
psql -d raw <<'SQL'
CREATE SEQUENCE raw_tokens;
CREATE SEQUENCE raw_keys;
CREATE TABLE raw_operations (
    namespace text, operation_key text, digest bytea NOT NULL, status text NOT NULL,
    fencing_token bigint NOT NULL, lease_expires_at timestamptz, result bytea,
    PRIMARY KEY (namespace, operation_key));
INSERT INTO raw_operations VALUES ('ns', 'done', '\x01', 'succeeded', nextval('raw_tokens'), NULL, 'done');
SQL
cat >"$work/new-key.sql" <<'SQL'
INSERT INTO raw_operations VALUES ('ns', 'k' || nextval('raw_keys'), '\x01', 'in_progress',
    nextval('raw_tokens'), clock_timestamp() + interval '30 seconds', NULL)
ON CONFLICT DO NOTHING RETURNING fencing_token;
SQL
cat >"$work/replay.sql" <<'SQL'
INSERT INTO raw_operations VALUES ('ns', 'done', '\x01', 'in_progress',
    nextval('raw_tokens'), clock_timestamp() + interval '30 seconds', NULL)
ON CONFLICT DO NOTHING RETURNING fencing_token;
SELECT status, result, digest FROM raw_operations WHERE namespace = 'ns' AND operation_key = 'done';
SQL
cat >"$work/lifecycle.sql" <<'SQL'
INSERT INTO raw_operations VALUES ('ns', 'c' || nextval('raw_keys'), '\x01', 'in_progress',
    nextval('raw_tokens'), clock_timestamp() + interval '30 seconds', NULL)
ON CONFLICT DO NOTHING RETURNING operation_key AS key, fencing_token AS token \gset
UPDATE raw_operations SET status = 'succeeded', result = 'done', lease_expires_at = NULL
 WHERE namespace = 'ns' AND operation_key = :key AND fencing_token = :token AND status = 'in_progress'
RETURNING fencing_token;
SQL

pgbench() {
  "$pg_bin/pgbench" -h "$socket" -U opreg -n -M prepared -c "$concurrency" -j 2 -T "$seconds" \
    -f "$work/$1.sql" raw 2>/dev/null | awk '/^tps/ {print $3; exit}'
}
opreg_bench() {
  "$bench" --endpoint "http://127.0.0.1:$port" --scenario "$1" --concurrency "$concurrency" \
    --duration "${seconds}s" --json "${@:2}"
}
ghz_run() {
  (cd deploy/ghz && "../../$ghz" --config "$1" -c "$concurrency" --connections 4 -z "${seconds}s" \
    --format json "127.0.0.1:$port")
}

echo "side by side: $concurrency in flight, $seconds s per path, $(nproc) cores, one PostgreSQL"
declare -A raw ours theirs
raw[new-keys]=$(pgbench new-key)
ours[new-keys]=$(opreg_bench new-keys)
theirs[new-keys]=$(ghz_run claim-new-keys.json)
raw[replay]=$(pgbench replay)
ours[replay]=$(opreg_bench replay --hit-rate 1)
"$bench" --endpoint "http://127.0.0.1:$port" --scenario replay --namespace ghz-replay \
  --calls 1 --concurrency 1 >/dev/null
theirs[replay]=$(ghz_run claim-replay.json)
raw[lifecycle]=$(pgbench lifecycle)
ours[lifecycle]=$(opreg_bench lifecycle)
theirs[lifecycle]='{}'
batch_claim=$(opreg_bench batch-claim --batch "$batch")
single=$("$bench" --endpoint "http://127.0.0.1:$port" --scenario new-keys --concurrency 1 \
  --duration "${seconds}s" --json)
half=$(python3 -c "import json,sys; print(round(json.loads(sys.argv[1])['operations_per_second'] / 2))" \
  "${ours[new-keys]}")
open_loop=$("$bench" --endpoint "http://127.0.0.1:$port" --scenario new-keys --rate "$half" \
  --concurrency 256 --duration "${seconds}s" --json)

python3 - "$concurrency" <<PY
import json, sys
rows = [
    ("new-key Claim", ${raw[new-keys]}, '''${ours[new-keys]}''', '''${theirs[new-keys]}'''),
    ("replay of a completed key", ${raw[replay]}, '''${ours[replay]}''', '''${theirs[replay]}'''),
    ("Claim + Complete", ${raw[lifecycle]}, '''${ours[lifecycle]}''', '''${theirs[lifecycle]}'''),
]
print(f"| path | raw SQL (pgbench) | opreg (opreg-bench) | ratio | opreg (ghz) |")
print("|---|---|---|---|---|")
for name, raw, ours, theirs in rows:
    ours, theirs = json.loads(ours), json.loads(theirs)
    rate = ours["operations_per_second"]
    ghz = "—"
    if theirs:
        p99 = next((d["latency"] for d in theirs.get("latencyDistribution") or [] if d["percentage"] == 99), 0)
        errors = theirs.get("errorDistribution") or {}
        kinds = "; ".join(f"{count} {kind[:60]}" for kind, count in errors.items())
        ghz = f"{theirs['rps']:,.0f}/s, p99 {p99 / 1e6:.1f} ms" + (f" (errors: {kinds})" if kinds else "")
    print(f"| {name} | {raw:,.0f}/s | {rate:,.0f}/s, p50 {ours['latency_ms']['p50']:.1f} ms, p99 {ours['latency_ms']['p99']:.1f} ms | {rate / raw:.2f} | {ghz} |")
single, open_loop = json.loads('''${single}'''), json.loads('''${open_loop}''')
batch = json.loads('''${batch_claim}''')
print()
print(f"BatchClaim of $batch new keys: {batch['operations_per_second']:,.0f} keys/s "
      f"({batch['operations_per_second'] / ${raw[new-keys]}:.2f}x raw single-row new-key SQL), "
      f"p50 {batch['latency_ms']['p50']:.1f} ms, p99 {batch['latency_ms']['p99']:.1f} ms per call")
print(f"new-key Claim, 1 in flight: {single['operations_per_second']:,.0f}/s, p50 {single['latency_ms']['p50']:.2f} ms, p99 {single['latency_ms']['p99']:.2f} ms")
print(f"new-key Claim, open loop at half the peak ({open_loop['rate']:,.0f}/s): p50 {open_loop['latency_ms']['p50']:.1f} ms, p99 {open_loop['latency_ms']['p99']:.1f} ms, max {open_loop['latency_ms']['max']:.1f} ms")
PY
