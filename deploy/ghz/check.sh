#!/usr/bin/env bash
# Runs every ghz configuration in this directory briefly against a running
# opreg server and fails if one no longer matches the contract: ghz refuses
# data it cannot encode, and every answer must be OK. CI runs it against the
# quick-start server.
#
#   deploy/ghz/check.sh HOST:PORT PG_SOCKET_DIR
#
# PG_SOCKET_DIR is the server's database socket directory (the embedded
# PostgreSQL logs it at start), for the lifecycle's export between steps.
# ghz comes from $GHZ, else target/tools/ghz (installed by `go install` if missing).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
host="$1"
socket_dir="$2"
total="${GHZ_TOTAL:-200}"

ghz="${GHZ:-$repo/target/tools/ghz}"
if [[ ! -x "$ghz" ]]; then
  mkdir -p "$(dirname "$ghz")"
  GOBIN="$(cd "$(dirname "$ghz")" && pwd)" go install github.com/bojand/ghz/cmd/ghz@v0.93.0
fi

# ghz resolves data files against the working directory, and the lifecycle's
# export writes there: run from a scratch copy.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here"/*.json "$here"/*.sql "$work/"
cd "$work"

# One brief, bounded run of a configuration; every answer must be OK.
run() { # config, extra ghz flags...
  local config=$1
  shift
  local report
  report=$("$ghz" --config "$config" --total "$total" --concurrency 8 --connections 2 \
    --format json "$@" "$host")
  python3 - "$config" "$report" <<'PY'
import json, sys
config, report = sys.argv[1], json.loads(sys.argv[2])
codes = report.get("statusCodeDistribution") or {}
errors = report.get("errorDistribution") or {}
if set(codes) != {"OK"} or errors:
    first = sorted(errors.items(), key=lambda e: -e[1])[:3]
    shown = "; ".join(f"{count} x {error[:300]}" for error, count in first)
    sys.exit(f"{config}: answers {codes}; errors: {shown}")
print(f"{config}: {report['count']} calls OK, {report['rps']:.0f}/s")
PY
}

# The replay path needs its key completed first, with the same parameters.
"${OPREG_BENCH_BIN:-$repo/target/debug/opreg-bench}" --endpoint "http://$host" --scenario replay \
  --namespace ghz-replay --calls 1 >/dev/null
run claim-replay.json
run claim-new-keys.json
run claim-duplicate-key.json
run lifecycle-1-claim.json
psql -h "$socket_dir" -U opreg -d opreg -X -q -v ON_ERROR_STOP=1 -v ns=ghz-life -f export-leases.sql
leases=$(python3 -c 'import json; print(len(json.load(open("complete-data.json"))))')
[[ $leases -eq $total ]] || { echo "lifecycle: $leases open leases exported, expected $total" >&2; exit 1; }
run lifecycle-2-complete.json
run lifecycle-3-replay.json
echo "ghz: every configuration matches the contract"
