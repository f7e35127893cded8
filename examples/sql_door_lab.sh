#!/usr/bin/env bash
# Runs the SQL door's account lab (examples/sql_door_lab.sql) with psql and
# checks its lines against examples/sql_door_lab.expected; a difference fails
# with the diff.
#
#   bash examples/sql_door_lab.sh CONNINFO
#
# CONNINFO is a libpq connection URI or keyword string for the registry's
# database, as its own role or a superuser, e.g.
#   "postgres://opreg@/opreg?host=/var/lib/opreg/run"      (the embedded PostgreSQL, as root)
#   "host=/tmp/pg port=5432 user=opreg dbname=opreg"
# The lab can be run again on the same database: it recreates its table and
# deletes its namespace's operations first.
set -euo pipefail

if (($# != 1)); then
  echo "usage: $0 CONNINFO   (a libpq URI or keyword string, e.g. postgres://opreg@/opreg?host=/var/lib/opreg/run)" >&2
  exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Step 2's second psql connects by the same string (it may hold a password).
export SQL_DOOR_LAB_DB="$1"
status=0
psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$1" -f "$here/sql_door_lab.sql" \
  >"$work/lab.out" 2>"$work/lab.err" || status=$?
if ((status != 0)); then
  cat "$work/lab.out"
  echo "sql_door_lab: psql exited with status $status:" >&2
  cat "$work/lab.err" >&2
  exit 1
fi
if ! diff -u "$here/sql_door_lab.expected" "$work/lab.out"; then
  echo "sql_door_lab: the lab's lines differ from examples/sql_door_lab.expected (diff above); psql's stderr:" >&2
  cat "$work/lab.err" >&2
  exit 1
fi
cat "$work/lab.out"
echo "sql door lab: ok"
