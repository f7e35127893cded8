#!/usr/bin/env bash
# The server's memory with STREAMS calls in flight at once: RSS idle, and the
# peak while opreg-bench keeps that many Claims open over CONNECTIONS HTTP/2
# connections (hyper allows 200 streams per connection by default).
#
#   bench/many-streams.sh                 # 10,000 streams over 64 connections, 10 s
#   STREAMS=2000 SCENARIO=new-keys bench/many-streams.sh
set -euo pipefail
cd "$(dirname "$0")/.."
streams=${STREAMS:-10000}
connections=${CONNECTIONS:-64}
seconds=${SECONDS_PER_PATH:-10}
scenario=${SCENARIO:-in-progress}
port=${PORT:-50591}
server_bin=${SERVER_BIN:-target/release/opreg-server}
source bench/embedded-server.sh

cargo build --release -q -p opreg-server -p opreg-bench
start_server "$port" OPREG_MAX_CONCURRENT_CALLS=$((streams * 2))
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$server/status"; }
idle=$(rss_kib)
target/release/opreg-bench --endpoint "http://127.0.0.1:$port" --scenario "$scenario" \
  --concurrency "$streams" --connections "$connections" --duration "${seconds}s" \
  --calls 100000000 --json >"$work/bench.json" &
bench=$!
peak=$idle
while kill -0 "$bench" 2>/dev/null; do
  now=$(rss_kib)
  ((now > peak)) && peak=$now
  sleep 0.2
done
wait "$bench"
python3 - "$work/bench.json" "$idle" "$peak" "$streams" "$connections" "$scenario" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
idle, peak, streams = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print(f"{streams:,} streams over {sys.argv[5]} connections ({sys.argv[6]}): "
      f"{r['operations_per_second']:,.0f} calls/s, p50 {r['latency_ms']['p50']:.1f} ms, "
      f"p99 {r['latency_ms']['p99']:.1f} ms, answers {r['answers']}")
print(f"server RSS: idle {idle / 1024:.1f} MiB, peak {peak / 1024:.1f} MiB, "
      f"{(peak - idle) / streams:.1f} KiB per stream in flight")
PY
