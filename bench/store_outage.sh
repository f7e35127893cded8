#!/usr/bin/env bash
# How fast callers hear UNAVAILABLE when PostgreSQL dies: starts a PostgreSQL
# and opreg-server (debug build) on it, claims once, stops PostgreSQL with
# `-m immediate`, then times five Lookups through the CLI and the moment
# /readyz turns 503. Run as root from the repository root, after
# `cargo build -p opreg-server -p opreg-cli --bins`.
set -euo pipefail
PG="${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin | tail -1)}"
d=$(mktemp -d); chmod 755 $d; chown postgres $d
su postgres -s /bin/bash -c "$PG/initdb -D $d/data -U opreg --auth=trust >/dev/null"
su postgres -s /bin/bash -c "$PG/pg_ctl -D $d/data -o '-p 55499 -k $d -c listen_addresses=127.0.0.1' -l $d/pg.log start >/dev/null"
sleep 1
su postgres -s /bin/bash -c "$PG/createdb -h 127.0.0.1 -p 55499 -U opreg opreg"
OPREG_DATABASE_URL=postgres://opreg@127.0.0.1:55499/opreg OPREG_LISTEN_ADDR=127.0.0.1:50161 OPREG_METRICS_ADDR=127.0.0.1:9571 \
  target/debug/opreg-server > $d/server.log 2>&1 &
srv=$!
for _ in $(seq 50); do curl -fsS http://127.0.0.1:9571/readyz >/dev/null 2>&1 && break; sleep 0.2; done
cli="target/debug/opreg --endpoint http://127.0.0.1:50161 --timeout 30s"
$cli claim k --owner w --params '{"a":1}' >/dev/null
echo "claim ok; stopping PostgreSQL -m immediate"
su postgres -s /bin/bash -c "$PG/pg_ctl -D $d/data -m immediate stop >/dev/null"
t0=$(date +%s.%N)
for i in 1 2 3 4 5; do
  s=$(date +%s.%N); code=0; $cli lookup k >/dev/null 2>$d/err || code=$?; e=$(date +%s.%N)
  printf 'call %d: exit %d after %.3f s: %s\n' $i $code $(echo "$e - $s" | bc) "$(head -c 100 $d/err)"
done
while curl -fsS http://127.0.0.1:9571/readyz >/dev/null 2>&1; do sleep 0.05; done
printf 'readyz 503 after %.3f s\n' $(echo "$(date +%s.%N) - $t0" | bc)
kill -TERM $srv; wait $srv || true
rm -rf $d
