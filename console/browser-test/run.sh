#!/usr/bin/env bash
# The operator console in a real browser: starts opreg-server with a policy
# (alice admin, riley reader, worker worker) and an embedded PostgreSQL, seeds
# operations in every state with the CLI, then runs console.test.mjs (Debian's
# Chromium driven by playwright-core, every page checked with axe-core).
#
#   console/browser-test/run.sh SERVER_BIN CLI_BIN
#     e.g. console/browser-test/run.sh target/debug/opreg-server target/debug/opreg
#
# Screenshots go to $SCREENSHOT_DIR (default console/browser-test/screenshots).
# Installs chromium (Debian) and the npm packages (npm ci) when they are missing.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 SERVER_BIN CLI_BIN" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
server_bin="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
cli_bin="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
for bin in "$server_bin" "$cli_bin"; do
  [[ -x "$bin" ]] || { echo "not an executable: $bin" >&2; exit 2; }
done
screenshots="${SCREENSHOT_DIR:-$here/screenshots}"

scratch=$(mktemp -d)
chmod 755 "$scratch" # as root, PostgreSQL runs as another user that must traverse it
server=""
policy_rc=/usr/sbin/policy-rc.d
own_policy_rc=""
drop_policy_rc() {
  if [[ -n "$own_policy_rc" ]]; then
    rm -f "$policy_rc"
    own_policy_rc=""
  fi
}
cleanup() {
  local status=$?
  drop_policy_rc
  if [[ -n "$server" ]]; then
    kill -TERM "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    server=""
  fi
  if [[ $status -ne 0 && -f "$scratch/server.log" ]]; then
    echo "--- the server's log (last 60 lines)" >&2
    tail -n 60 "$scratch/server.log" >&2 || true
  fi
  rm -rf "$scratch"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Chromium from Debian (and PostgreSQL for the embedded database), without
# letting the packages start any service.
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
if ((${#missing[@]})); then
  # Debian's invoke-rc.d and deb-systemd-invoke ask policy-rc.d first; exit 101
  # means "do not start".
  if [[ ! -e $policy_rc ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy_rc"
    chmod 755 "$policy_rc"
    own_policy_rc=yes
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  drop_policy_rc
fi

# playwright-core and axe-core, as package-lock.json pins them.
if [[ ! -f "$here/node_modules/playwright-core/package.json" || ! -f "$here/node_modules/axe-core/axe.min.js" ]]; then
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
fi

free_port() {
  node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}
grpc_port=$(free_port)
http_port=$(free_port)
while [[ "$http_port" == "$grpc_port" ]]; do http_port=$(free_port); done

sha() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
cat >"$scratch/policy.toml" <<TOML
[[principal]]
name = "alice"
api_key_sha256 = "$(sha alice-key)"
namespaces = ["*"]
roles = ["admin"]

[[principal]]
name = "riley"
api_key_sha256 = "$(sha riley-key)"
namespaces = ["*"]
roles = ["reader"]

[[principal]]
name = "worker"
api_key_sha256 = "$(sha worker-key)"
namespaces = ["*"]
roles = ["worker"]
TOML
chmod 644 "$scratch/policy.toml"

log="$scratch/server.log"
OPREG_DATA_DIR="$scratch/data" \
  OPREG_LISTEN_ADDR="127.0.0.1:$grpc_port" \
  OPREG_METRICS_ADDR="127.0.0.1:$http_port" \
  OPREG_AUTH_FILE="$scratch/policy.toml" \
  OPREG_GAUGE_REFRESH_INTERVAL=1s \
  OPREG_CONSOLE_BULK_RATE=4 \
  "$server_bin" >"$log" 2>&1 &
server=$!
for _ in $(seq 1 300); do
  grep -q "opreg serving" "$log" && break
  kill -0 "$server" 2>/dev/null || { echo "the server exited before serving" >&2; exit 1; }
  sleep 0.2
done
grep -q "opreg serving" "$log" || { echo "the server did not serve within 60 s" >&2; exit 1; }
echo "server: gRPC 127.0.0.1:$grpc_port, HTTP 127.0.0.1:$http_port"

# Seeding over gRPC as the worker (the operator's actions are the console's).
opreg() { OPREG_API_KEY=worker-key "$cli_bin" --endpoint "http://127.0.0.1:$grpc_port" -n payments "$@"; }
token_of() { node -e 'let s = ""; process.stdin.on("data", d => s += d).on("end", () => console.log(JSON.parse(s).lease.fencing_token));'; }
claim() { # key params [claim options...]; prints the fencing token
  local key=$1 params=$2
  shift 2
  opreg claim "$key" --owner seed-worker --params "$params" -o json "$@" | token_of
}
t=$(claim pay-succeeded '{"amount":100,"currency":"EUR"}')
opreg complete pay-succeeded --token "$t" success --result '{"ledger_entry":"le-100","settled":true}' >/dev/null
t=$(claim pay-failed '{"amount":200,"currency":"EUR"}')
opreg complete pay-failed --token "$t" failure insufficient_funds --message "balance too low" >/dev/null
t=$(claim pay-unknown '{"amount":300,"currency":"EUR"}')
opreg complete pay-unknown --token "$t" unknown psp-ref-300 --message "timeout after send" >/dev/null
t=$(claim pay-unknown-2 '{"amount":301,"currency":"EUR"}')
opreg complete pay-unknown-2 --token "$t" unknown psp-ref-301 --message "connection reset" >/dev/null
t=$(claim pay-retry '{"amount":400,"currency":"EUR"}')
opreg complete pay-retry --token "$t" retryable psp_unavailable --message "503" --retry-after 1h >/dev/null
# A retry past the 24 h deadline leaves it DEAD.
t=$(claim pay-dead '{"amount":500,"currency":"EUR"}')
opreg complete pay-dead --token "$t" retryable psp_unavailable --message "503" --retry-after 48h >/dev/null
claim pay-expired '{"amount":600,"currency":"EUR"}' --lease-ttl 1s >/dev/null
claim pay-running '{"amount":700,"currency":"EUR"}' --lease-ttl 1h >/dev/null
bulk_total=40
for i in $(seq -w 1 "$bulk_total"); do
  claim "bulk-$i" "{\"batch\":7,\"item\":$((10#$i))}" --lease-ttl 1h >/dev/null
done
# A second namespace, so the overview has more than one row.
OPREG_API_KEY=worker-key "$cli_bin" --endpoint "http://127.0.0.1:$grpc_port" -n ledger \
  claim entry-1 --owner seed-worker --params '{"entry":1}' --lease-ttl 1h >/dev/null
echo "seeded: 8 operations in payments, $bulk_total under bulk-, 1 in ledger"
sleep 1.2 # pay-expired's lease runs out

mkdir -p "$screenshots"
screenshots="$(cd "$screenshots" && pwd)" # the test runs from this folder
status=0
(
  cd "$here"
  CONSOLE_URL="http://localhost:$http_port/console/" SCREENSHOT_DIR="$screenshots" BULK_TOTAL="$bulk_total" \
    node --test --test-reporter=spec console.test.mjs
) || status=$?

kill -TERM "$server"
wait "$server" || true
server=""
if pgrep -f "$scratch/data" >/dev/null; then
  echo "embedded PostgreSQL outlived the server" >&2
  status=1
fi
echo "screenshots: $screenshots"
exit "$status"
