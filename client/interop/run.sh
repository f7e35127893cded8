#!/usr/bin/env bash
# The five clients interoperate against one running server. In turn, Rust
# (the CLI), Python, TypeScript, Go and Java each record an operation with the
# same parameters as a Struct (interop:<language>, result from-<language>),
# after replaying every operation recorded before theirs by a digest computed
# locally; at the end the Rust CLI replays the other four by Struct. A replay
# that executed, or answered another result, fails the run.
#
#   client/interop/run.sh ENDPOINT
#
# Needs target/debug/opreg (cargo build -p opreg-cli), the Python client
# installed in client/python/.venv, the TypeScript client built in
# client/typescript/dist, Go, and the Java client built in client/java/target
# (their ci.sh scripts do each).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
endpoint="$1"
namespace="interop-$(date +%s%N)"
params='{"order":"A-1","amount":100,"memo":null,"tags":["x",null],"payee":{"a":1,"b":2}}'
opreg() { "$repo/target/debug/opreg" --endpoint "$endpoint" --namespace "$namespace" "$@"; }

token=$(opreg claim interop:rust --owner rust --params "$params" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["lease"]["fencing_token"])')
opreg complete interop:rust --token "$token" success --result from-rust >/dev/null
echo "rust: recorded interop:rust"

address="${endpoint#http://}"
(cd "$here" && "$repo/client/python/.venv/bin/python" interop.py "$address" "$namespace" rust)
node "$here/interop.mjs" "$address" "$namespace" rust python
(cd "$repo/client/go" && go run ./cmd/interop "$address" "$namespace" rust python ts)
java_classes="$repo/client/java/target"
java -cp "$java_classes/classes:$java_classes/test-classes:$(cat "$java_classes/classpath.txt")" \
  dev.opreg.interop.Interop "$address" "$namespace" rust python ts go

for key in interop:python interop:ts interop:go interop:java; do
  answer=$(opreg claim "$key" --owner rust --params "$params" -o json)
  echo "$answer" | python3 -c '
import json, sys
answer = json.load(sys.stdin)
key, expected = sys.argv[1], "from-" + sys.argv[1].split(":")[1]
assert answer["outcome"] == "REPLAYED", answer
assert answer["operation"]["result"] == expected, answer
' "$key"
done
echo "rust: replayed interop:python, interop:ts, interop:go and interop:java by Struct"
echo "interop: ok"
