#!/usr/bin/env bash
# The three clients interoperate against one running server: an operation
# completed through one is replayed by the others, each identifying the same
# parameters its own way (Struct, or a digest computed locally).
#
#   client/interop/run.sh ENDPOINT
#
# Needs target/debug/opreg (cargo build -p opreg-client), the Python client
# installed in client/python/.venv and the TypeScript client built in
# client/typescript/dist (their ci.sh scripts do both).
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
(cd "$here" && "$repo/client/python/.venv/bin/python" interop.py "$address" "$namespace")
node "$here/interop.mjs" "$address" "$namespace"

for key in interop:python interop:ts; do
  answer=$(opreg claim "$key" --owner rust --params "$params" -o json)
  echo "$answer" | python3 -c '
import json, sys
answer = json.load(sys.stdin)
key, expected = sys.argv[1], "from-" + sys.argv[1].split(":")[1]
assert answer["outcome"] == "REPLAYED", answer
assert answer["operation"]["result"] == expected, answer
' "$key"
done
echo "rust: replayed interop:python and interop:ts"
echo "interop: ok"
