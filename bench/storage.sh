#!/usr/bin/env bash
# What one finished operation costs in storage and WAL, for the capacity model
# of deploy/citus/README.md: OPERATIONS Claim + Complete pairs (opreg-bench's
# batch-lifecycle, 32 keys a call: the rows a unary Claim + Complete leaves,
# written faster; a small parameter document, a short result) on a fresh embedded
# PostgreSQL, then VACUUM ANALYZE and each table's bytes per operation (heap,
# TOAST and indexes) and the WAL written per operation.
#
#   bench/storage.sh                       # 200,000 operations, the debug build
#   OPERATIONS=1000000 SERVER_BIN=target/release/opreg-server bench/storage.sh
set -euo pipefail
cd "$(dirname "$0")/.."
operations=${OPERATIONS:-200000}
port=${PORT:-50581}
server_bin=${SERVER_BIN:-target/debug/opreg-server}
bench=${BENCH_BIN:-target/debug/opreg-bench}
source bench/embedded-server.sh
start_server "$port"

wal_before=$(psql -c "SELECT pg_current_wal_lsn()")
"$bench" --endpoint "http://127.0.0.1:$port" --scenario batch-lifecycle --batch 32 \
  --namespace storage --calls "$((operations / 32))" --concurrency 8 | sed -n 1p
wal_after=$(psql -c "SELECT pg_current_wal_lsn()")
finished=$(psql -c "SELECT count(*) FROM operations WHERE status = 'succeeded'")
echo "finished operations: $finished"
sizes() { # label
  psql -F ' | ' -c "
    SELECT '$1', c.relname,
           round(pg_relation_size(c.oid)::numeric / $finished, 1),
           round(coalesce(pg_total_relation_size(c.reltoastrelid), 0)::numeric / $finished, 1),
           round(pg_indexes_size(c.oid)::numeric / $finished, 1),
           round(pg_total_relation_size(c.oid)::numeric / $finished, 1)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'public' AND c.relkind = 'r' AND pg_total_relation_size(c.oid) > 8192 * 4
    ORDER BY 6 DESC"
}
echo "state | table | heap B/op | toast B/op | indexes B/op | total B/op"
# As written: each row was inserted and then updated (never HOT), so the heap
# holds the free space of the dead versions, which later inserts reuse.
psql -c "VACUUM ANALYZE"
sizes "as written, vacuumed"
# The live rows alone: the floor a long-running table approaches.
psql -c "VACUUM FULL ANALYZE"
sizes "compacted (VACUUM FULL)"
psql -c "SELECT 'WAL bytes per operation (Claim + Complete): '
           || round(pg_wal_lsn_diff('$wal_after', '$wal_before') / $finished)"
