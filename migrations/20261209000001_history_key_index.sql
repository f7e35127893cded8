-- no-transaction
-- Keys a distributed engine can enforce, part 1 of 4 (deploy/citus/README.md):
-- on Citus an operation, its replaced executions and its audit rows are
-- distributed by operation_key and colocated, and a unique key is enforced
-- only when it includes the distribution column. A replaced execution is
-- identified within its operation: the token alone was unique only because one
-- sequence drew every token. Built concurrently, so writers are not blocked
-- while it builds; 20261209000003 makes it the primary key. (One statement per
-- file: CONCURRENTLY cannot run in a transaction, and several statements of
-- one file would make one.)
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS execution_history_by_operation_key
    ON execution_history (namespace, operation_key, fencing_token);
