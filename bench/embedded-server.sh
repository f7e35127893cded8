# Sourced by the bench scripts that measure one opreg-server over its own
# embedded PostgreSQL. `start_server PORT [NAME=VALUE ...]` starts $server_bin
# with its data in $work (a scratch directory removed on exit, with the server),
# the metrics port at PORT + 1, the given variables set, and waits for /readyz;
# `psql` then runs against that PostgreSQL.
work=$(mktemp -d "/tmp/opreg-$(basename "$0" .sh).XXXXXX")
chmod 755 "$work" # as root, PostgreSQL runs as another user that must traverse it
server=
cleanup() {
  [[ -n "$server" ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
pg_bin=$(dirname "$(ls /usr/lib/postgresql/*/bin/psql 2>/dev/null | sort -V | tail -1)")

start_server() { # port [NAME=VALUE ...]
  local port=$1
  shift
  env OPREG_DATA_DIR="$work/data" OPREG_LISTEN_ADDR="127.0.0.1:$port" \
    OPREG_METRICS_ADDR="127.0.0.1:$((port + 1))" RUST_LOG=warn "$@" \
    "$server_bin" >"$work/server.log" 2>&1 &
  server=$!
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$((port + 1))/readyz" >/dev/null && return 0
    sleep 0.5
  done
  cat "$work/server.log"
  exit 1
}

psql() { "$pg_bin/psql" -h "$work/data/run" -U opreg -d opreg -qAt -v ON_ERROR_STOP=1 "$@"; }
