-- The current execution lives on its operation's row; `execution_history`
-- keeps only the executions that a later one replaced. A first Claim then
-- writes one row (no second row, no foreign-key check), and a Complete updates
-- one row. `executions` stays readable as a view over both, with the columns
-- and the rows it always had.
--
-- The current execution's attempt is the operation's `attempts`: that count
-- changes only when an execution starts (registration, start_executions).

ALTER TABLE operations
    ADD COLUMN execution_token          bigint,
    ADD COLUMN execution_kind           text,
    ADD COLUMN execution_id             text,
    ADD COLUMN execution_owner          text,
    ADD COLUMN execution_started_at     timestamptz,
    ADD COLUMN execution_finished_at    timestamptz,
    ADD COLUMN execution_outcome        text,
    -- Digest of the outcome the holder reported; present once it reported, so
    -- a repeated Complete is answered from here.
    ADD COLUMN execution_outcome_digest bytea,
    ADD COLUMN execution_error_class    text,
    ADD COLUMN execution_message        text;

-- Carrying the newest execution over changes no replayed answer, so replicas
-- that cache terminal records need no notice of it.
ALTER TABLE operations DISABLE TRIGGER operations_terminal_changed;

UPDATE operations AS o SET
    execution_token = e.fencing_token,
    execution_kind = e.kind,
    execution_id = e.execution_id,
    execution_owner = e.owner,
    execution_started_at = e.started_at,
    execution_finished_at = e.finished_at,
    execution_outcome = e.outcome,
    execution_outcome_digest = e.outcome_digest,
    execution_error_class = e.error_class,
    execution_message = e.message
FROM (
    SELECT DISTINCT ON (namespace, operation_key) *
    FROM executions
    ORDER BY namespace, operation_key, fencing_token DESC
) AS e
WHERE e.namespace = o.namespace AND e.operation_key = o.operation_key;

ALTER TABLE operations ENABLE TRIGGER operations_terminal_changed;

DELETE FROM executions AS e USING operations AS o
WHERE e.fencing_token = o.execution_token;

ALTER TABLE operations
    -- Every registration writes its first execution with the row; a row
    -- written by hand may have none, as it had no executions row before.
    ADD CONSTRAINT operations_execution_whole CHECK (
        execution_token IS NULL
        OR (execution_kind IS NOT NULL AND execution_id IS NOT NULL AND execution_owner IS NOT NULL
            AND execution_started_at IS NOT NULL AND execution_outcome IS NOT NULL)
    ),
    ADD CONSTRAINT operations_execution_kind_known CHECK (
        execution_kind IN ('first', 'retry', 'takeover', 'reconcile')
    ),
    ADD CONSTRAINT operations_execution_outcome_known CHECK (
        execution_outcome IN ('running', 'succeeded', 'failed', 'retryable', 'unknown', 'superseded', 'revoked')
    ),
    -- A lease is always the current execution's, so only an unfinished
    -- operation can have a running one.
    ADD CONSTRAINT operations_running_execution_in_progress CHECK (
        execution_outcome <> 'running' OR status = 'in_progress'
    );

ALTER TABLE executions RENAME TO execution_history;
ALTER TABLE execution_history RENAME CONSTRAINT executions_pkey TO execution_history_pkey;
ALTER TABLE execution_history RENAME CONSTRAINT executions_operation_fkey TO execution_history_operation_fkey;
ALTER TABLE execution_history RENAME CONSTRAINT executions_kind_known TO execution_history_kind_known;
ALTER TABLE execution_history RENAME CONSTRAINT executions_outcome_known TO execution_history_outcome_known;
ALTER INDEX executions_by_operation RENAME TO execution_history_by_operation;
-- A replaced execution has ended: it reported, or was superseded or revoked.
ALTER TABLE execution_history
    ADD CONSTRAINT execution_history_ended CHECK (outcome <> 'running');

-- Every execution, current or replaced, as the table had them.
CREATE VIEW executions AS
    SELECT fencing_token, namespace, operation_key, attempt, kind, execution_id, owner,
           started_at, finished_at, outcome, outcome_digest, error_class, message
    FROM execution_history
    UNION ALL
    SELECT execution_token, namespace, operation_key, attempts, execution_kind, execution_id,
           execution_owner, execution_started_at, execution_finished_at, execution_outcome,
           execution_outcome_digest, execution_error_class, execution_message
    FROM operations
    WHERE execution_token IS NOT NULL;

-- The operator's queue keeps its order without the gauges' columns: a
-- narrower entry for every unfinished operation. The gauges count DEAD rows
-- from an index of DEAD rows alone, which the hot path never writes.
CREATE INDEX operations_backlog_queue_slim
    ON operations (namespace, status, created_at, operation_key)
    WHERE status IN ('in_progress', 'retry_scheduled', 'unknown', 'dead');
DROP INDEX operations_backlog_queue;
ALTER INDEX operations_backlog_queue_slim RENAME TO operations_backlog_queue;

CREATE INDEX operations_dead
    ON operations (namespace)
    INCLUDE (compensates)
    WHERE status = 'dead' AND held_at IS NULL;
