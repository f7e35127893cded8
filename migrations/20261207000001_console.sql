-- The operator console (server/src/console): its sign-in sessions and its
-- bulk jobs. Both live in the database so that every replica behind a load
-- balancer knows them, and a sign-out or an abort counts everywhere at once.

-- One row per signed-in browser. The cookie carries a random secret; only its
-- SHA-256 is stored, so a read of this table signs no one in. The session
-- holds while the policy still gives the principal the key it signed in with
-- (its SHA-256, as the policy has it): a rotated key ends its sessions.
CREATE TABLE console_sessions (
    secret_sha256 bytea       PRIMARY KEY,
    principal     text        NOT NULL,
    key_sha256    bytea       NOT NULL,
    created_at    timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL
);
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);

-- A bulk action: one operator action applied to a selection of keys, or to
-- everything a filter of the operations page matched when it was submitted.
-- The id comes from the page that submitted it, so a resubmission after a
-- timeout finds the same job. Each operation it acts on is acted on in one
-- transaction with the job's progress, so the counts are exact and a resumed
-- job never acts twice on the same operation.
CREATE TABLE console_jobs (
    id            text        PRIMARY KEY,
    namespace     text        NOT NULL,
    action        text        NOT NULL,
    reason        text        NOT NULL,
    principal     text        NOT NULL,
    -- The operations page's filter when the job was submitted (its query
    -- string), and the keys selected on it, in order, or NULL for every
    -- operation the filter matches.
    filter        text        NOT NULL,
    keys          text[],
    state         text        NOT NULL,
    total         integer     NOT NULL,
    done          integer     NOT NULL DEFAULT 0,
    skipped       integer     NOT NULL DEFAULT 0,
    -- Where the next step starts: an index into keys, or the filter's page cursor.
    position      text,
    -- The replica running it, and until when its claim on the job holds.
    runner        text,
    runner_until  timestamptz,
    -- Why it stopped by itself (the submitter lost the right to act, a step
    -- kept failing), and who last aborted or resumed it.
    last_error    text,
    switched_by   text,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    finished_at   timestamptz,
    CONSTRAINT console_jobs_action_known CHECK (
        action IN ('hold', 'release', 'requeue', 'resolve_failure')
    ),
    CONSTRAINT console_jobs_state_known CHECK (state IN ('running', 'aborted', 'finished')),
    CONSTRAINT console_jobs_finished_at CHECK ((state = 'finished') = (finished_at IS NOT NULL))
);
CREATE INDEX console_jobs_running ON console_jobs (runner_until) WHERE state = 'running';
CREATE INDEX console_jobs_recent ON console_jobs (created_at);
