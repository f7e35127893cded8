-- Places opreg's tables on a Citus cluster (deploy/citus/README.md). Run once on
-- the coordinator, after `opreg-server migrate` created the schema there and
-- before any traffic: the tables are empty, so distributing them moves nothing.
-- Later migrations run on the coordinator as usual; Citus propagates their DDL
-- to the shards. A migration that adds a table must add it here too (and to
-- PLACEMENTS in server/tests/citus_ready.rs, which checks this file).
--
--   psql "$COORDINATOR_URL" -v ON_ERROR_STOP=1 -f deploy/citus/distribute.sql
--
-- Not run here: this machine has no Citus. What it states is what
-- server/tests/citus_ready.rs proves on plain PostgreSQL (every unique and
-- foreign key includes the distribution column; the hot path names it).

BEGIN;

-- An operation, its replaced executions and its audit rows: one shard.
SELECT create_distributed_table('operations', 'operation_key');
SELECT create_distributed_table('execution_history', 'operation_key', colocate_with => 'operations');
SELECT create_distributed_table('audit_entries', 'operation_key', colocate_with => 'operations');

-- Fenced resources by their own key: a FencedWrite touches its operation's
-- shard and its resource's (two shards, one transaction).
SELECT create_distributed_table('resources', 'resource', colocate_with => 'none');

-- Small tables every node reads: a copy on each.
SELECT create_reference_table('leader_leases');
SELECT create_reference_table('opreg_sql.namespace_grants');

-- The operator console's sessions and bulk jobs, and the migrator's ledger:
-- on the coordinator only, never joined with a distributed table.
SELECT citus_add_local_table_to_metadata('console_sessions');
SELECT citus_add_local_table_to_metadata('console_jobs');
SELECT citus_add_local_table_to_metadata('_sqlx_migrations');

COMMIT;
