#!/usr/bin/env bash
# The `opreg` CLI against a running server: each outcome and its exit code.
#
#   client/rust/tests/cli.sh ENDPOINT     (needs target/debug/opreg)
set -uo pipefail
repo="$(cd "$(dirname "$0")/../../.." && pwd)"
export OPREG_ENDPOINT="$1" OPREG_NAMESPACE="cli-$(date +%s%N)"
opreg="$repo/target/debug/opreg"
failures=0

expect() {
  local want="$1" what="$2"
  shift 2
  "$opreg" "$@" >/dev/null 2>&1
  local got=$?
  if [[ $got -eq $want ]]; then
    echo "ok   exit $got: $what"
  else
    echo "FAIL exit $got, want $want: $what"
    failures=$((failures + 1))
  fi
}

expect 0 "claim registers" claim k --owner a --params '{"amount":100}'
token=$("$opreg" lookup k -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["lease"]["fencing_token"])')
expect 4 "different parameters conflict" claim k --owner b --params '{"amount":101}'
expect 0 "resource write under the lease" resource write account:1 --key k --token "$token" --value 900
expect 0 "complete records success" complete k --token "$token" success --result done
expect 0 "the same complete again is answered the same" complete k --token "$token" success --result done
expect 4 "a different complete for the token is refused" complete k --token "$token" failure DECLINED
expect 5 "renew after completion is stale" renew k --owner a --token "$token"
expect 3 "lookup of an unknown key" lookup missing
expect 3 "an unknown resource" resource get missing
expect 2 "invalid input" claim " padded" --owner a
expect 2 "usage error" claim
OPREG_ENDPOINT=http://127.0.0.1:9 expect 6 "nothing listens: unavailable" lookup k --timeout 2s
replay=$("$opreg" claim k --owner c --params '{"amount":100.0}' -o json)
if echo "$replay" | grep -q '"outcome": "REPLAYED"'; then echo "ok   replay shows REPLAYED"; else echo "FAIL replay: $replay"; failures=$((failures + 1)); fi

if ((failures)); then
  echo "cli: $failures check(s) failed"
  exit 1
fi
echo "cli: ok"
