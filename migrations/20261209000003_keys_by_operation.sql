-- Keys a distributed engine can enforce, part 3 of 4: the indexes built by
-- 20261209000001 and 20261209000002 become the primary keys. Each swap holds
-- its table's lock for a moment (no index is built here); the lock_timeout of
-- the migrating session makes it give up, rather than queue traffic behind
-- it, when a long transaction holds the table (the next start retries).
-- tests/citus_ready.rs checks every key of the schema.
LOCK TABLE execution_history, audit_entries IN ACCESS EXCLUSIVE MODE;

ALTER TABLE execution_history DROP CONSTRAINT execution_history_pkey;
ALTER TABLE execution_history
    ADD CONSTRAINT execution_history_pkey PRIMARY KEY USING INDEX execution_history_by_operation_key;

ALTER TABLE audit_entries DROP CONSTRAINT audit_entries_pkey;
ALTER TABLE audit_entries
    ADD CONSTRAINT audit_entries_pkey PRIMARY KEY USING INDEX audit_entries_by_operation_key;
DROP INDEX audit_entries_by_operation;

-- Which replica runs the maintenance: the holder of an unexpired lease row,
-- kept by renewing it every interval (store/leadership.rs). It replaces a
-- session advisory lock, which a distributed engine holds on one node only and
-- a transaction pooler does not keep.
CREATE TABLE leader_leases (
    role       text        NOT NULL,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL,
    CONSTRAINT leader_leases_pkey PRIMARY KEY (role)
);
