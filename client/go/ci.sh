#!/usr/bin/env bash
# CI for the Go client (client/go): gofmt, go vet, staticcheck, go.mod tidy, the generated
# code up to date with proto/ (scripts/check-generated.sh installs the pinned
# protoc-gen-go and protoc-gen-go-grpc into .bin/; buf comes from npm), the
# version (opreg.Version = the repository's VERSION), then `go test -race`
# against a real server: the tests start $OPREG_SERVER_BIN (default
# <repo>/target/debug/opreg-server, which must already be built, e.g. by
# .ci/run's cargo steps) once, with an embedded PostgreSQL in a temporary
# directory, and the conformance scenarios run through $OPREG_FAULT_PROXY_BIN
# (default <repo>/target/debug/opreg-fault-proxy). Extra arguments go to
# `go test` (e.g. ./ci.sh -run TestConformance -v). With OPREG_CI_LINT_ONLY
# set it stops before the tests but for the decision table's (`.ci/run quick`).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"

step() { printf '\n== go client: %s\n' "$*"; }
started=$SECONDS

export OPREG_SERVER_BIN="${OPREG_SERVER_BIN:-$repo/target/debug/opreg-server}"
export OPREG_FAULT_PROXY_BIN="${OPREG_FAULT_PROXY_BIN:-$repo/target/debug/opreg-fault-proxy}"
for binary in "$OPREG_SERVER_BIN" "$OPREG_FAULT_PROXY_BIN"; do
  if [[ -z "${OPREG_CI_LINT_ONLY:-}" && ! -x "$binary" ]]; then
    echo "not found: $binary (cargo build -p opreg-server -p opreg-conformance, or set OPREG_SERVER_BIN / OPREG_FAULT_PROXY_BIN)" >&2
    exit 1
  fi
done

step "$(go version)"

step "gofmt"
unformatted="$(gofmt -l .)"
if [[ -n "$unformatted" ]]; then
  echo "not gofmt'ed:" >&2
  echo "$unformatted" >&2
  exit 1
fi
echo "gofmt: ok"

step "go vet"
go vet ./...
echo "go vet: ok"

step "staticcheck (scripts/tools.sh pins it)"
# shellcheck source=scripts/tools.sh
source scripts/tools.sh
staticcheck ./...
echo "staticcheck: ok"

step "go.mod and go.sum are tidy"
go mod tidy -diff
echo "go.mod: tidy"

step "generated code matches proto/ (scripts/check-generated.sh)"
bash scripts/check-generated.sh

step "version: opreg.Version = $repo/VERSION"
want="$(tr -d '[:space:]' <"$repo/VERSION")"
if ! grep -q "^const Version = \"$want\"$" version.go; then
  echo "version.go does not say const Version = \"$want\"" >&2
  exit 1
fi
echo "version: $want"

step "go build ./cmd/interop"
go build -o /dev/null ./cmd/interop
echo "cmd/interop: builds"

if [[ -n "${OPREG_CI_LINT_ONLY:-}" ]]; then
  step "the decision table (client/testdata/decisions.json), no server"
  # No server binary: TestMain then starts none, and only the table runs.
  OPREG_SERVER_BIN=/nonexistent OPREG_REQUIRE_SERVER= go test -count=1 -run TestDecisions .
  echo "go client: lint only (OPREG_CI_LINT_ONLY): ok ($((SECONDS - started)) s)"
  exit 0
fi

step "go test -race (server: $OPREG_SERVER_BIN)"
# The conformance scenarios mostly wait on timers: four at a time.
OPREG_REQUIRE_SERVER=1 go test -race -count=1 -parallel 4 -timeout 10m "$@" ./...

echo
echo "go client: ok ($((SECONDS - started)) s)"
