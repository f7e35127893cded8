#!/usr/bin/env bash
# The `opreg` CLI against a running server: each outcome and its exit code.
#
#   client/cli/tests/cli.sh ENDPOINT     (needs target/debug/opreg)
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

# The operator's verbs.
export OPREG_OPERATOR=ci
expect 0 "claim a second operation" claim d --owner a --params '{"n":1}'
expect 0 "hold it" hold d --reason "investigating"
expect 4 "holding it twice is an invalid transition" hold d --reason "again"
expect 0 "list the held ones" list --held
expect 0 "release it (the revoked lease leaves it unknown)" release d --reason "checked"
expect 0 "resolve the unknown outcome" resolve d --reason "PSP statement" success --result paid
expect 4 "resolving a succeeded operation is an invalid transition" resolve k --reason "no" success
expect 4 "requeueing a succeeded operation is an invalid transition" requeue k --reason "no"
expect 2 "an action without a reason is a usage error" hold k
expect 3 "holding an unknown key" hold missing --reason "x"
expect 0 "pull due work" due --owner worker-1
expect 0 "lookup with the audit trail and parameters" lookup d --audit --parameters
audit=$("$opreg" lookup d --audit -o json)
if echo "$audit" | grep -q '"action": "RESOLVE"'; then echo "ok   the audit trail shows the resolution"; else echo "FAIL audit: $audit"; failures=$((failures + 1)); fi

# Waiting and reuse.
expect 0 "claim a third operation with a 1 s lease" claim w --owner a --params '{"n":2}' --lease-ttl 1s
waited=$("$opreg" claim w --owner b --params '{"n":2}' --wait 20s -o json)
if echo "$waited" | grep -q '"outcome": "ACQUIRED"' && echo "$waited" | grep -q '"waited"'; then
  echo "ok   claim --wait is answered when the lease lapses"
else
  echo "FAIL claim --wait: $waited"; failures=$((failures + 1))
fi
expect 0 "lookup --wait ends with its wait" lookup w --wait 1s --changed-from in_progress
expect 2 "an unknown status is a usage error" lookup w --wait 1s --changed-from nowhere
expect 4 "reject-existing refuses a taken key" claim k --owner z --params '{"amount":100}' --reuse reject-existing
expect 0 "register a fourth operation" claim f --owner a --params '{"n":3}'
ftoken=$("$opreg" lookup f -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["lease"]["fencing_token"])')
expect 0 "it fails" complete f --token "$ftoken" failure DECLINED
again=$("$opreg" claim f --owner b --params '{"n":3}' --reuse after-failure -o json)
if echo "$again" | grep -q '"outcome": "ACQUIRED"'; then echo "ok   after-failure runs it again"; else echo "FAIL after-failure: $again"; failures=$((failures + 1)); fi

if ((failures)); then
  echo "cli: $failures check(s) failed"
  exit 1
fi
echo "cli: ok"
