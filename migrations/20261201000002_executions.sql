-- Executions: the history of every lease issued for an operation (first
-- attempt, retry, takeover, reconcile), keyed by its unique fencing token.
CREATE TABLE executions (
    fencing_token  bigint      NOT NULL,
    namespace      text        NOT NULL,
    operation_key  text        NOT NULL,
    attempt        integer     NOT NULL,
    kind           text        NOT NULL,
    execution_id   text        NOT NULL,
    owner          text        NOT NULL,
    started_at     timestamptz NOT NULL,
    finished_at    timestamptz,
    outcome        text        NOT NULL DEFAULT 'running',
    -- Digest of the outcome the holder reported; present once it reported, so a
    -- repeated Complete is answered from here.
    outcome_digest bytea,
    error_class    text,
    message        text,
    CONSTRAINT executions_pkey PRIMARY KEY (fencing_token),
    CONSTRAINT executions_operation_fkey FOREIGN KEY (namespace, operation_key)
        REFERENCES operations (namespace, operation_key) ON DELETE CASCADE,
    CONSTRAINT executions_kind_known CHECK (kind IN ('first', 'retry', 'takeover', 'reconcile')),
    CONSTRAINT executions_outcome_known CHECK (
        outcome IN ('running', 'succeeded', 'failed', 'retryable', 'unknown', 'superseded')
    )
);

CREATE INDEX executions_by_operation
    ON executions (namespace, operation_key, attempt, fencing_token);
