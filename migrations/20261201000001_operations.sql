-- Operations: one row per (namespace, operation_key). The primary key decides
-- registration races; every state transition is a guarded UPDATE of this row.

-- Fencing tokens of every lease come from this one sequence, so tokens of
-- different operations are comparable and every new lease outranks all older ones.
CREATE SEQUENCE fencing_tokens AS bigint START WITH 1;

CREATE TABLE operations (
    namespace            text        NOT NULL,
    operation_key        text        NOT NULL,
    status               text        NOT NULL,
    parameters_digest    bytea       NOT NULL,
    -- RFC 8785 text of the parameters when they were given as a Struct; kept as
    -- text (never jsonb, which would reorder keys and rewrite numbers).
    parameters_canonical text,
    compensates          text,
    compensated_by       text,
    -- The last token issued. It outlives the lease so late callers learn it.
    fencing_token        bigint      NOT NULL,
    lease_owner          text,
    lease_expires_at     timestamptz,
    lease_takeover       boolean     NOT NULL DEFAULT false,
    attempts             integer     NOT NULL,
    reconciling          boolean     NOT NULL DEFAULT false,
    max_attempts         integer     NOT NULL,
    initial_backoff_us   bigint      NOT NULL,
    max_backoff_us       bigint      NOT NULL,
    deadline_at          timestamptz NOT NULL,
    next_attempt_at      timestamptz,
    result               bytea,
    result_ref           text,
    failure_code         text,
    failure_message      text,
    remote_ref           text,
    last_error_class     text,
    last_error_message   text,
    created_at           timestamptz NOT NULL,
    updated_at           timestamptz NOT NULL,
    completed_at         timestamptz,
    CONSTRAINT operations_pkey PRIMARY KEY (namespace, operation_key),
    CONSTRAINT operations_status_known CHECK (
        status IN ('in_progress', 'succeeded', 'failed', 'retry_scheduled', 'unknown', 'dead')
    ),
    CONSTRAINT operations_lease_iff_in_progress CHECK (
        (status = 'in_progress') = (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)
    ),
    CONSTRAINT operations_reconciling_only_in_progress CHECK (
        NOT reconciling OR status = 'in_progress'
    ),
    CONSTRAINT operations_retry_has_due_time CHECK (
        (status = 'retry_scheduled') = (next_attempt_at IS NOT NULL)
    ),
    CONSTRAINT operations_budget_positive CHECK (
        max_attempts >= 1 AND initial_backoff_us > 0 AND max_backoff_us >= initial_backoff_us
    )
);

-- At most one compensating operation per original. ON CONFLICT statements name
-- the primary key as their target so a violation here is raised, not swallowed.
CREATE UNIQUE INDEX operations_one_compensation
    ON operations (namespace, compensates)
    WHERE compensates IS NOT NULL;

-- Due retries, for a retry scheduler and the backlog gauges.
CREATE INDEX operations_due_retries
    ON operations (next_attempt_at)
    WHERE status = 'retry_scheduled';
