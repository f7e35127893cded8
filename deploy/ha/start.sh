#!/usr/bin/env bash
# Highly available PostgreSQL on one machine, for trying opreg's failover by
# hand and for CI: etcd, two Patroni nodes (a primary and a synchronous
# standby, synchronous_mode: true) and HAProxy in front, which routes to
# whichever node Patroni's REST API calls the primary (GET /primary).
#
#   deploy/ha/start.sh DIR        # starts everything; prints the opreg database URL
#   deploy/ha/stop.sh DIR         # stops everything started here
#
# Ports: HAProxy 5440 (point OPREG_DATABASE_URL here), PostgreSQL 5441/5442,
# Patroni REST 8008/8009, etcd 2379/2380. Needs Debian's patroni, etcd-server,
# haproxy and PostgreSQL 15 server binaries. PostgreSQL refuses root, so as root
# Patroni runs as the postgres user.
set -euo pipefail
dir="$(mkdir -p "${1:?usage: start.sh DIR}" && cd "$1" && pwd)"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pg_bin="${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin | tail -1)}"
as_postgres() { if [[ $(id -u) -eq 0 ]]; then su postgres -s /bin/bash -c "$*"; else bash -c "$*"; fi; }

chmod 755 "$dir"
[[ $(id -u) -eq 0 ]] && chown postgres "$dir"

as_postgres "etcd --name ha --data-dir '$dir/etcd' \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster ha=http://127.0.0.1:2380 >'$dir/etcd.log' 2>&1 & echo \$! >'$dir/etcd.pid'"
for _ in $(seq 100); do curl -fsS http://127.0.0.1:2379/health >/dev/null 2>&1 && break; sleep 0.1; done

for node in 1 2; do
  mkdir -p "$dir/node$node"
  sed -e "s|@NODE@|$node|g" -e "s|@DIR@|$dir|g" -e "s|@PG_BIN@|$pg_bin|g" \
    -e "s|@PG_PORT@|$((5440 + node))|g" -e "s|@REST_PORT@|$((8007 + node))|g" \
    "$here/patroni.yml" >"$dir/node$node/patroni.yml"
  [[ $(id -u) -eq 0 ]] && chown -R postgres "$dir/node$node"
  as_postgres "patroni '$dir/node$node/patroni.yml' >'$dir/node$node/patroni.log' 2>&1 & echo \$! >'$dir/node$node/patroni.pid'"
  # The first node bootstraps the cluster; the second clones it once it leads.
  for _ in $(seq 300); do
    curl -fsS "http://127.0.0.1:$((8007 + node))/health" >/dev/null 2>&1 && break
    sleep 0.2
  done
done

sed -e "s|@DIR@|$dir|g" "$here/haproxy.cfg" >"$dir/haproxy.cfg"
haproxy -D -f "$dir/haproxy.cfg" -p "$dir/haproxy.pid"

# Ready when the standby is synchronous and HAProxy reaches the primary.
for _ in $(seq 300); do
  if curl -fsS http://127.0.0.1:8008/cluster 2>/dev/null | grep -q '"sync_standby"' &&
    "$pg_bin/psql" -h 127.0.0.1 -p 5440 -U postgres -d postgres -Atc 'SELECT 1' >/dev/null 2>&1; then
    "$pg_bin/psql" -h 127.0.0.1 -p 5440 -U postgres -d postgres -Atc \
      "SELECT 1 FROM pg_database WHERE datname = 'opreg'" | grep -q 1 ||
      "$pg_bin/psql" -h 127.0.0.1 -p 5440 -U postgres -d postgres -qc 'CREATE DATABASE opreg'
    echo "postgres://postgres@127.0.0.1:5440/opreg"
    exit 0
  fi
  sleep 0.2
done
echo "the HA cluster did not become ready; logs in $dir" >&2
exit 1
