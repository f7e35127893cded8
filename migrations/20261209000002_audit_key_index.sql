-- no-transaction
-- Keys a distributed engine can enforce, part 2 of 4: an audit row within its
-- operation. Built concurrently; 20261209000003 makes it the primary key in
-- place of the identity alone, and drops the index of the same columns its
-- readers used until then.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS audit_entries_by_operation_key
    ON audit_entries (namespace, operation_key, id);
