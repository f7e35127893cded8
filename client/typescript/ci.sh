#!/usr/bin/env bash
# CI for the TypeScript client (@opreg/client): a clean install from
# package-lock.json, the generated-code check, buf lint and buf breaking on
# proto/, the build, and the tests against a real opreg server.
#
# The tests start the server binary named by OPREG_SERVER_BIN (default
# <repo>/target/debug/opreg-server, which CI builds first) with an embedded
# PostgreSQL in a temporary directory, and stop it at the end.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"

step() { printf '\n== %s\n' "$*"; }

server_bin="${OPREG_SERVER_BIN:-$repo/target/debug/opreg-server}"
if [[ ! -x "$server_bin" ]]; then
  if [[ -z "${OPREG_SERVER_BIN:-}" ]] && command -v cargo >/dev/null; then
    step "building opreg-server (not found at $server_bin)"
    (cd "$repo" && cargo build -p opreg-server)
  else
    echo "opreg server binary not found at $server_bin (build it or set OPREG_SERVER_BIN)" >&2
    exit 1
  fi
fi
export OPREG_SERVER_BIN="$server_bin"

step "npm ci"
npm ci --no-audit --no-fund

step "generated code matches proto/ (npm run check:generated)"
npm run --silent check:generated

step "buf lint (workspace: $repo/buf.yaml)"
npx buf lint "$repo"
echo "buf lint: ok"

step "buf breaking against proto/baseline/opreg.binpb"
bash scripts/buf-breaking.sh

step "build"
npm run --silent build

step "tests (server: $OPREG_SERVER_BIN)"
node --test --test-concurrency=1 dist/test/*.test.js
