-- The operation's life after the happy path: due work pulled by workers
-- (ClaimDue), operator holds and actions with an audit trail, fresh budgets on
-- requeue, and retention that deletes finished operations.

-- Held by an operator: Claim answers HELD and ClaimDue skips the row. A hold
-- that revoked a live lease makes the operation UNKNOWN on release.
ALTER TABLE operations
    ADD COLUMN held_at            timestamptz,
    ADD COLUMN hold_revoked_lease boolean NOT NULL DEFAULT false,
    -- Attempts already spent when the current budget began (a requeue starts a
    -- fresh one): backoff grows with the attempts of this budget only.
    ADD COLUMN budget_attempts_base integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT operations_held_unfinished CHECK (
        held_at IS NULL OR status IN ('in_progress', 'retry_scheduled', 'unknown', 'dead')
    ),
    ADD CONSTRAINT operations_revoked_only_held CHECK (NOT hold_revoked_lease OR held_at IS NOT NULL);

-- An operator's revocation (hold, resolution) is its own execution outcome.
ALTER TABLE executions
    DROP CONSTRAINT executions_outcome_known,
    ADD CONSTRAINT executions_outcome_known CHECK (
        outcome IN ('running', 'succeeded', 'failed', 'retryable', 'unknown', 'superseded', 'revoked')
    );

-- When unheld work is due: a retry at its time, a lease at its expiry, an
-- unknown outcome at once (ordered by when it became unknown). One definition
-- for the index and for ClaimDue's query.
CREATE FUNCTION operation_due_at(
    status text, next_attempt_at timestamptz, lease_expires_at timestamptz, unknown_since timestamptz
) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE status
    WHEN 'retry_scheduled' THEN next_attempt_at
    WHEN 'in_progress' THEN lease_expires_at
    WHEN 'unknown' THEN unknown_since
END;

CREATE INDEX operations_due
    ON operations (namespace, operation_due_at(status, next_attempt_at, lease_expires_at, unknown_since), operation_key)
    WHERE held_at IS NULL AND status IN ('retry_scheduled', 'in_progress', 'unknown');
DROP INDEX operations_due_retries;

-- The unfinished backlog, in registration order: the operator's queue
-- (ListOperations pages by (created_at, operation_key) per status); its
-- included columns let the backlog gauges count DEAD rows from it alone.
CREATE INDEX operations_backlog_queue
    ON operations (namespace, status, created_at, operation_key)
    INCLUDE (unknown_since, held_at, lease_expires_at, next_attempt_at, compensates, attempts, reconciling)
    WHERE status IN ('in_progress', 'retry_scheduled', 'unknown', 'dead');
DROP INDEX operations_backlog;

-- Held operations, few at any time, for the backlog gauges.
CREATE INDEX operations_held
    ON operations (namespace)
    WHERE held_at IS NOT NULL;

-- Finished operations by age, per namespace: what retention deletes.
CREATE INDEX operations_finished
    ON operations (namespace, completed_at)
    WHERE status IN ('succeeded', 'failed');

-- One row per operator action, written in the action's transaction.
CREATE TABLE audit_entries (
    id            bigint      GENERATED ALWAYS AS IDENTITY,
    namespace     text        NOT NULL,
    operation_key text        NOT NULL,
    action        text        NOT NULL,
    operator      text        NOT NULL,
    reason        text        NOT NULL,
    revision      text        NOT NULL,
    principal     text        NOT NULL,
    status_before text        NOT NULL,
    status_after  text        NOT NULL,
    held_before   boolean     NOT NULL,
    held_after    boolean     NOT NULL,
    token_before  bigint      NOT NULL,
    token_after   bigint      NOT NULL,
    at            timestamptz NOT NULL,
    CONSTRAINT audit_entries_pkey PRIMARY KEY (id),
    CONSTRAINT audit_entries_operation_fkey FOREIGN KEY (namespace, operation_key)
        REFERENCES operations (namespace, operation_key) ON DELETE CASCADE,
    CONSTRAINT audit_entries_action_known CHECK (action IN ('resolve', 'requeue', 'hold', 'release'))
);

CREATE INDEX audit_entries_by_operation ON audit_entries (namespace, operation_key, id);
