#!/usr/bin/env bash
# CI for the Java client: `mvn -B -q verify` (the stubs generated from ../../proto, every test
# against a real opreg-server and, for the conformance scenarios, opreg-fault-proxy), a summary
# line of the test counts, then the lab (examples/dev/opreg/examples/Settlement.java) and the
# interop program (examples/dev/opreg/interop/Interop.java) against a server started here.
#
#   client/java/ci.sh [extra mvn arguments]
#
# OPREG_SERVER_BIN and OPREG_FAULT_PROXY_BIN default to <repo>/target/debug/opreg-server and
# <repo>/target/debug/opreg-fault-proxy (build them first: cargo build); OPREG_CLI_BIN (default
# <repo>/target/debug/opreg) records the Rust side of the interop check, which is skipped without it.
# Needs Java 17 and Maven (Maven Central for the plugins, protoc and protoc-gen-grpc-java).
# With OPREG_CI_LINT_ONLY set it only compiles the client and its tests and runs the decision
# table's test (`.ci/run quick`).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"

step() { printf '\n== java client: %s\n' "$*"; }

export OPREG_SERVER_BIN="${OPREG_SERVER_BIN:-$repo/target/debug/opreg-server}"
export OPREG_FAULT_PROXY_BIN="${OPREG_FAULT_PROXY_BIN:-$repo/target/debug/opreg-fault-proxy}"
cli="${OPREG_CLI_BIN:-$repo/target/debug/opreg}"
for binary in "$OPREG_SERVER_BIN" "$OPREG_FAULT_PROXY_BIN"; do
  [[ -n "${OPREG_CI_LINT_ONLY:-}" || -x "$binary" ]] || { echo "no $binary: build it with cargo build, or set OPREG_SERVER_BIN / OPREG_FAULT_PROXY_BIN" >&2; exit 1; }
done

step "$(java -version 2>&1 | head -1); $(mvn -v 2>/dev/null | head -1 | sed 's/\x1b\[[0-9;]*m//g')"

if [[ -n "${OPREG_CI_LINT_ONLY:-}" ]]; then
  step "mvn -B -q test -Dtest=DecisionsTest (OPREG_CI_LINT_ONLY: compile, and the decision table only)"
  mvn -B -q -Dstyle.color=never test -Dtest=DecisionsTest -Dsurefire.failIfNoSpecifiedTests=false "$@"
  echo "java client: lint only: ok"
  exit 0
fi

step "mvn -B -q verify"
set +e
mvn -B -q -Dstyle.color=never verify "$@"
status=$?
set -e

# Surefire is quiet under -q: the counts, from its reports, in the line CI reads.
python3 - "$here/target/surefire-reports" <<'PY'
import glob, os, sys
import xml.etree.ElementTree as ET
tests = failed = skipped = 0
for path in glob.glob(os.path.join(sys.argv[1], "TEST-*.xml")):
    suite = ET.parse(path).getroot()
    tests += int(suite.get("tests", 0))
    failed += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    skipped += int(suite.get("skipped", 0))
print(f"java: {tests - failed - skipped} passed, {failed} failed, {skipped} skipped")
if tests == 0:
    print("the Java tests ran no test", file=sys.stderr)
    sys.exit(1)
PY
[[ $status -eq 0 ]] || exit $status

classpath="$here/target/classes:$here/target/test-classes:$(cat "$here/target/classpath.txt")"

step "a server for the lab and the interop program"
scratch="$(mktemp -d)"
chmod 755 "$scratch" # as root, the embedded PostgreSQL runs as another user that must traverse it
server=""
cleanup() {
  if [[ -n "$server" ]]; then
    kill -TERM "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  rm -rf "$scratch"
}
trap cleanup EXIT
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
address="127.0.0.1:$port"
env -u OPREG_DATABASE_URL OPREG_DATA_DIR="$scratch/data" OPREG_LISTEN_ADDR="$address" OPREG_METRICS_ADDR=127.0.0.1:0 \
  OPREG_SHUTDOWN_GRACE=5s NO_COLOR=1 "$OPREG_SERVER_BIN" >"$scratch/server.log" 2>&1 </dev/null &
server=$!
for _ in $(seq 1 900); do
  grep -q "opreg serving" "$scratch/server.log" && break
  kill -0 "$server" 2>/dev/null || { cat "$scratch/server.log" >&2; echo "opreg-server exited" >&2; exit 1; }
  sleep 0.1
done
grep -q "opreg serving" "$scratch/server.log" || { cat "$scratch/server.log" >&2; echo "opreg-server did not start" >&2; exit 1; }
echo "opreg-server on $address"

step "the lab: java dev.opreg.examples.Settlement $address"
java -cp "$classpath" dev.opreg.examples.Settlement "$address"

step "interop: java dev.opreg.interop.Interop $address NAMESPACE"
if [[ -x "$cli" ]]; then
  namespace="interop-java-$(date +%s%N)"
  params='{"order":"A-1","amount":100,"memo":null,"tags":["x",null],"payee":{"a":1,"b":2}}'
  opreg() { "$cli" --endpoint "http://$address" --namespace "$namespace" "$@"; }
  token=$(opreg claim interop:rust --owner rust --params "$params" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["lease"]["fencing_token"])')
  opreg complete interop:rust --token "$token" success --result from-rust >/dev/null
  echo "rust: recorded interop:rust"
  java -cp "$classpath" dev.opreg.interop.Interop "$address" "$namespace" rust
  opreg claim interop:java --owner rust --params "$params" -o json | python3 -c '
import json, sys
answer = json.load(sys.stdin)
assert answer["outcome"] == "REPLAYED", answer
assert answer["operation"]["result"] == "from-java", answer
'
  echo "rust: replayed interop:java"
else
  echo "no opreg CLI at $cli (cargo build -p opreg-client, or set OPREG_CLI_BIN): interop skipped"
fi
echo "java client: ok"
