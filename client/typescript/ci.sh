#!/usr/bin/env bash
# CI for the TypeScript client (@opreg/client): a clean install from
# package-lock.json, the version check, the generated-code check, ESLint, the build, the tests against a real opreg server (the
# run-once conformance scenarios through opreg-fault-proxy included), and the
# installable package: `npm pack`, installed into a fresh directory, running
# examples/quickstart.mjs against a server started here.
#
# The tests start the server binary named by OPREG_SERVER_BIN (default
# <repo>/target/debug/opreg-server, which CI builds first) with an embedded
# PostgreSQL in a temporary directory, on OS-chosen ports, and stop it at the
# end; the conformance and tracing tests start OPREG_FAULT_PROXY_BIN (default
# <repo>/target/debug/opreg-fault-proxy) in front of it. With OPREG_CI_LINT_ONLY
# set it stops after the build, which type-checks, and the decision table's test
# (`.ci/run quick`).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"

step() { printf '\n== %s\n' "$*"; }


step "version: package.json = $repo/VERSION = src/version.ts"
package_version="$(node -p 'require("./package.json").version')"
if [[ -f "$repo/VERSION" ]]; then
  repo_version="$(tr -d '[:space:]' < "$repo/VERSION")"
  if [[ "$package_version" != "$repo_version" ]]; then
    echo "package.json version $package_version is not the repository's VERSION $repo_version" >&2
    exit 1
  fi
else
  echo "warning: no $repo/VERSION; package.json says $package_version" >&2
fi
if ! grep -q "export const VERSION = \"$package_version\";" src/version.ts; then
  echo "src/version.ts does not export VERSION = \"$package_version\"" >&2
  exit 1
fi
echo "version: $package_version"

step "npm ci"
npm ci --no-audit --no-fund

step "generated code matches proto/ (npm run check:generated)"
npm run --silent check:generated

step "eslint (eslint.config.mjs)"
npm run --silent lint
echo "eslint: ok"

step "build"
npm run --silent build

if [[ -n "${OPREG_CI_LINT_ONLY:-}" ]]; then
  step "the decision table (client/testdata/decisions.json), no server"
  node --test dist/test/decisions.test.js
  echo "typescript client: lint only (OPREG_CI_LINT_ONLY): ok"
  exit 0
fi

# Exports $1, a binary the tests start: its value, else $2, built from cargo
# package $3 when it is absent and $1 was not set.
require_binary() {
  local variable=$1 default=$2 package=$3
  local path="${!variable:-$default}"
  if [[ ! -x "$path" ]]; then
    if [[ -z "${!variable:-}" ]] && command -v cargo >/dev/null; then
      step "building $package (not found at $path)"
      (cd "$repo" && cargo build -p "$package")
    else
      echo "$(basename "$default") not found at $path (cargo build -p $package, or set $variable)" >&2
      exit 1
    fi
  fi
  export "$variable=$path"
}
require_binary OPREG_SERVER_BIN "$repo/target/debug/opreg-server" opreg-server
require_binary OPREG_FAULT_PROXY_BIN "$repo/target/debug/opreg-fault-proxy" opreg-conformance

step "tests (server: $OPREG_SERVER_BIN)"
node --test --test-concurrency=1 dist/test/*.test.js

step "installable package: npm pack, npm install into a fresh directory, examples/quickstart.mjs"
work="$(mktemp -d)"
chmod 755 "$work" # as root, the embedded PostgreSQL runs as another user that must traverse it
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
tarball="$work/$(npm pack --silent --pack-destination "$work" | tail -n 1)"
echo "packed: $(basename "$tarball") ($(tar -tzf "$tarball" | wc -l) files)"
if tar -tzf "$tarball" | grep -q '^package/dist/test/'; then
  echo "the package contains dist/test/" >&2
  exit 1
fi
mkdir "$work/app"
(cd "$work/app" && npm init -y >/dev/null && npm install --no-audit --no-fund --silent "$tarball")
cp examples/quickstart.mjs "$work/app/"

free_port() { node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }
port="$(free_port)"
OPREG_DATA_DIR="$work/pg" OPREG_LISTEN_ADDR="127.0.0.1:$port" OPREG_METRICS_ADDR="127.0.0.1:0" \
  "$OPREG_SERVER_BIN" >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 600); do
  grep -q "opreg serving" "$work/server.log" && break
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "the server exited:" >&2
    cat "$work/server.log" >&2
    exit 1
  fi
  sleep 0.1
done
if ! grep -q "opreg serving" "$work/server.log"; then
  echo "the server did not serve within 60 s:" >&2
  cat "$work/server.log" >&2
  exit 1
fi
output="$(cd "$work/app" && node quickstart.mjs "127.0.0.1:$port")"
echo "$output"
if [[ "$output" != *"@opreg/client $package_version: "*"(replayed: false); again: replayed: true"* ]]; then
  echo "quickstart.mjs did not print what it should" >&2
  exit 1
fi
kill -TERM "$server_pid"
wait "$server_pid" || { echo "the server did not stop cleanly:" >&2; tail -n 20 "$work/server.log" >&2; exit 1; }
server_pid=""
echo "installable package: ok"
