-- The SQL door's Claim, Complete and FencedWrite, and the namespace boundary
-- that keeps a database role to the namespaces it was granted.
--
--   BEGIN;
--   SELECT outcome, fencing_token
--     FROM opreg_sql.claim('payments', 'debit:order-42', '{"account": "A", "amount": 30}', 'api-1');
--   UPDATE accounts SET balance = balance - 30 WHERE id = 'A';
--   SELECT status FROM opreg_sql.complete('payments', 'debit:order-42', 17, 'SUCCESS', result => '\x6f6b');
--   COMMIT;
--
-- These functions are the registry's state machine written in PL/pgSQL, one
-- guarded statement per transition as in server/src/store/operations/, so
-- that a caller in any language claims and completes inside its own
-- transaction. tests/sql_door_parity.rs holds them to the server: it drives
-- both doors from the same stored states and compares the answers and the
-- rows they leave.
--
-- Refusals are SQLSTATEs with the contract's ErrorReason name as the message
-- DETAIL and its metadata (ErrorMetadataKey names) in the HINT:
--   22023 INVALID_ARGUMENT        23505 PARAMETER_CONFLICT
--   55000 STALE_FENCING_TOKEN, ALREADY_COMPLETED
--   P0002 OPERATION_NOT_FOUND     42501 PERMISSION_DENIED
--   55P03 OPERATION_BUSY (the row kept changing under the call; try again)
--
-- The door's functions are SECURITY DEFINER: a caller's role needs EXECUTE on
-- them and a row in opreg_sql.namespace_grants, never a privilege on the
-- tables, so it cannot write a row past the state machine. Their search path
-- is fixed to the schema that holds the registry's tables, then pg_temp, so
-- that no caller's temporary table can stand in for one of the registry's.
-- PostgreSQL resolves a function or an operator by its best match across the
-- whole path: no role the door serves may create objects in that schema
-- (PostgreSQL 15's default for public; the migration warns otherwise).
SELECT set_config('search_path',
                  quote_ident(n.nspname) || ', pg_temp', true)
FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.oid = 'operations'::regclass;

DO $$
BEGIN
    IF has_schema_privilege('public', (SELECT relnamespace FROM pg_class WHERE oid = 'operations'::regclass),
                            'CREATE') THEN
        RAISE WARNING 'every role may create objects in the schema of opreg''s tables; revoke CREATE on it '
                      'from PUBLIC before granting the SQL door to a role (client/SQL_DOOR.md)';
    END IF;
END
$$;

-- Who may use which namespace through the SQL door: a role (or any member of
-- it) and a namespace, or '*' for every namespace. The registry's own role
-- (the owner of these functions) and superusers reach every namespace, as the
-- owner of a table passes its row-level policies. Managed by
-- opreg_sql.grant_namespace and opreg_sql.revoke_namespace.
CREATE TABLE opreg_sql.namespace_grants (
    -- By oid: a dropped role's grants do not pass to a new role of its name,
    -- and a renamed role keeps them.
    grantee   regrole     NOT NULL,
    namespace text        NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT namespace_grants_pkey PRIMARY KEY (grantee, namespace),
    CONSTRAINT namespace_grants_namespace_not_empty CHECK (namespace <> '')
);

COMMENT ON TABLE opreg_sql.namespace_grants IS
    'The namespaces each role may use through the SQL door (''*'': all); see opreg_sql.grant_namespace';

-- The door's calls by outcome, for the server's metrics
-- (opreg_sql_door_calls_total{call, outcome}, read through
-- opreg_sql.call_counts). Each count is a sequence: nextval takes no lock a
-- caller could queue on and no rollback undoes it, so a refused call (a
-- conflict aborts the caller's statement) counts as the server's counters
-- count it. Door-wide, not per namespace: what each namespace holds is in
-- the gauges, which read the tables.
DO $$
DECLARE
    counter text;
BEGIN
    FOREACH counter IN ARRAY ARRAY[
        'claim__acquired', 'claim__replayed', 'claim__in_progress', 'claim__retry_later',
        'claim__reconcile', 'claim__dead', 'claim__held', 'claim__conflict',
        'execution__first', 'execution__retry', 'execution__takeover', 'execution__reconcile',
        'execution__resume',
        'complete__success', 'complete__failure', 'complete__retryable', 'complete__unknown',
        'complete__repeated', 'complete__stale_fencing_token', 'complete__already_completed',
        'fenced_write__written', 'fenced_write__stale_fencing_token'
    ] LOOP
        EXECUTE format('CREATE SEQUENCE opreg_sql.%I AS bigint', 'calls__' || counter);
    END LOOP;
END
$$;

-- A plain SQL function: no PL/pgSQL frame of its own.
CREATE FUNCTION opreg_sql.count_call(call text, outcome text) RETURNS bigint
LANGUAGE sql VOLATILE
RETURN nextval(('opreg_sql.calls__' || call || '__' || lower(outcome))::regclass);

CREATE VIEW opreg_sql.call_counts AS
    SELECT split_part(sequencename, '__', 2) AS call, split_part(sequencename, '__', 3) AS outcome,
           coalesce(last_value, 0) AS calls
    FROM pg_sequences
    WHERE schemaname = 'opreg_sql' AND sequencename LIKE 'calls\_\_%';

COMMENT ON VIEW opreg_sql.call_counts IS
    'The SQL door''s calls by function and outcome since the database was created';

-- The role the door answers to: the session's SET ROLE if any, else the role
-- it logged in as. Inside a SECURITY DEFINER function current_user is the
-- owner; the "role" setting still names the caller's role, and only a member
-- of a role can set it.
CREATE FUNCTION opreg_sql.caller() RETURNS name
LANGUAGE sql STABLE
RETURN CASE WHEN current_setting('role') = 'none' THEN session_user
            ELSE current_setting('role')::name END;

-- The helpers below run only inside the door's functions (EXECUTE is revoked
-- from PUBLIC), under their fixed search path; a SET clause of their own
-- would cost every call a configuration change.
CREATE FUNCTION opreg_sql.authorize(namespace text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    caller name := opreg_sql.caller();
BEGIN
    -- current_user is the door's owner here: its functions call this one.
    IF pg_has_role(caller, current_user, 'MEMBER') THEN
        RETURN;
    END IF;
    IF EXISTS (
        SELECT 1 FROM opreg_sql.namespace_grants AS g JOIN pg_roles AS r ON r.oid = g.grantee
        WHERE g.namespace IN (authorize.namespace, '*') AND pg_has_role(caller, r.oid, 'MEMBER')
    ) THEN
        RETURN;
    END IF;
    PERFORM opreg_sql.refuse_with('42501', 'PERMISSION_DENIED',
        format('role %s may not use namespace %s', caller, namespace),
        format('principal=%s; namespace=%s', caller, namespace));
END
$$;

-- Every refusal of the door: the SQLSTATE, the contract's reason as the
-- DETAIL, its metadata as the HINT.
CREATE FUNCTION opreg_sql.refuse_with(sqlstate text, reason text, message text, hint text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF hint IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = sqlstate, MESSAGE = message, DETAIL = reason;
    END IF;
    RAISE EXCEPTION USING ERRCODE = sqlstate, MESSAGE = message, DETAIL = reason, HINT = hint;
END
$$;

-- A refusal of one argument, as INVALID_ARGUMENT with the field's name.
CREATE FUNCTION opreg_sql.refuse(field text, violation text) RETURNS void
LANGUAGE sql VOLATILE
RETURN opreg_sql.refuse_with('22023', 'INVALID_ARGUMENT', field || ' ' || violation, 'field=' || field);

-- The identifier rule of domain/text.rs: present, within max_bytes, no
-- surrounding white space, no control characters, as Rust's char classes
-- say (Unicode White_Space; Cc), whatever the database's locale.
CREATE FUNCTION opreg_sql.check_identifier(field text, value text, max_bytes integer) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    white_space CONSTANT text :=
        E'[\\u0009-\\u000d\\u0020\\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]';
BEGIN
    IF value IS NULL OR value = '' THEN
        PERFORM opreg_sql.refuse(field, 'must not be empty');
    ELSIF octet_length(value) > max_bytes THEN
        PERFORM opreg_sql.refuse(field, format('must be at most %s bytes', max_bytes));
    ELSIF value ~ ('^' || white_space) OR value ~ (white_space || '$') THEN
        PERFORM opreg_sql.refuse(field, 'must not start or end with white space');
    ELSIF value ~ E'[\\u0001-\\u001f\\u007f-\\u009f]' THEN
        PERFORM opreg_sql.refuse(field, 'must not contain control characters');
    END IF;
END
$$;

-- Free text: within max_bytes (PostgreSQL's text holds no NUL).
CREATE FUNCTION opreg_sql.check_text(field text, value text, max_bytes integer) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF value IS NULL THEN
        PERFORM opreg_sql.refuse(field, 'must not be null');
    ELSIF octet_length(value) > max_bytes THEN
        PERFORM opreg_sql.refuse(field, format('must be at most %s bytes', max_bytes));
    END IF;
END
$$;

-- A duration as the server stores it: whole microseconds, rounded up
-- (domain/policy.rs micros_ceil).
CREATE FUNCTION opreg_sql.micros(value interval) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN ceil(extract(epoch FROM value) * 1000000)::bigint;

-- A non-negative duration of at most 100 years (requests.rs optional_duration).
CREATE FUNCTION opreg_sql.check_duration(field text, value interval, positive boolean) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF value IS NULL OR value < interval '0' OR (positive AND value = interval '0')
       OR value > interval '36500 days' THEN
        PERFORM opreg_sql.refuse(field, CASE WHEN positive THEN 'must be positive and at most 100 years'
                                             ELSE 'must be non-negative and at most 100 years' END);
    END IF;
END
$$;

-- The fingerprint's functions of 20261204000001, again, for two inputs they
-- refused with an unexpected SQLSTATE: a number closer to zero than the
-- smallest double is the 0 it rounds to (as every client's JSON parser reads
-- it) instead of PostgreSQL's 22003, and a string is escaped with chr(92)
-- rather than backslash literals, which a session with
-- standard_conforming_strings off read as escapes (42601).
CREATE OR REPLACE FUNCTION opreg_sql.canonical_string(value text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    backslash CONSTANT text := chr(92);
    escaped text := replace(replace(value, backslash, backslash || backslash), '"', backslash || '"');
    result text := '';
    c text;
BEGIN
    IF escaped !~ ('[' || chr(1) || '-' || chr(31) || ']') THEN
        RETURN '"' || escaped || '"';
    END IF;
    FOREACH c IN ARRAY regexp_split_to_array(escaped, '') LOOP
        result := result || CASE
            WHEN ascii(c) >= 32 THEN c
            WHEN c = chr(8) THEN backslash || 'b'
            WHEN c = chr(12) THEN backslash || 'f'
            WHEN c = chr(10) THEN backslash || 'n'
            WHEN c = chr(13) THEN backslash || 'r'
            WHEN c = chr(9) THEN backslash || 't'
            ELSE backslash || 'u' || lpad(to_hex(ascii(c)), 4, '0')
        END;
    END LOOP;
    RETURN '"' || result || '"';
END
$$;

CREATE OR REPLACE FUNCTION opreg_sql.canonical_json(value jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    number numeric;
BEGIN
    CASE jsonb_typeof(value)
        WHEN 'object' THEN
            RETURN '{' || coalesce((
                SELECT string_agg(
                    opreg_sql.canonical_string(name) || ':' || opreg_sql.canonical_json(member), ','
                    ORDER BY opreg_sql.utf16_sort_key(name))
                FROM jsonb_each(value) AS members(name, member)
                WHERE jsonb_typeof(member) <> 'null'
            ), '') || '}';
        WHEN 'array' THEN
            RETURN '[' || coalesce((
                SELECT string_agg(opreg_sql.canonical_json(item), ',' ORDER BY position)
                FROM jsonb_array_elements(value) WITH ORDINALITY AS items(item, position)
            ), '') || ']';
        WHEN 'string' THEN
            RETURN opreg_sql.canonical_string(value #>> '{}');
        WHEN 'number' THEN
            -- JSON numbers are doubles to every other door; PostgreSQL's are
            -- exact, and one beyond a double's range would not convert.
            number := (value #>> '{}')::numeric;
            IF abs(number) > 1.7976931348623157e308 THEN
                RAISE EXCEPTION 'a parameter is beyond the range of a double'
                    USING ERRCODE = 'invalid_parameter_value', DETAIL = 'INVALID_ARGUMENT';
            END IF;
            -- At most half the smallest double (2^-1075) from zero: zero.
            IF abs(number) <= 2.4703282292062327208828439643411068618252990130716238221279284125033775363510437593264991818081799618989828234772285886546332835517796989819938739800539093906315035659515570226392290858392449105184435931802849936536152500319370457678249219365623669863658480757001585769269903706311928279558551332927834338409351978015531246597263579574622766465272827220056374006485499977096599470454020828166226237857393450736339007967761930577506740176324673600968951340535537458516661134223766678604162159680461914467291840300530057530849048765391711386591646239524912623653881879636239373280423891018672348497668235089863388587925628302755995657524455507255189313690836254779186948667994968324049705821028513185451396213837722826145437693412532098591327667236328125e-324 THEN
                RETURN '0';
            END IF;
            RETURN opreg_sql.canonical_number(number::float8);
        WHEN 'boolean' THEN
            RETURN value::text;
        ELSE
            RETURN 'null';
    END CASE;
END
$$;

-- The parameters' bounds (the server's defaults: proto/parameters.rs
-- ParameterLimits), checked before they are canonicalised: a JSON object, at
-- most 20 levels deep (the object itself is level 1), at most 10,000 members
-- and items in all, and no larger than the canonical form may be.
CREATE FUNCTION opreg_sql.check_parameters(parameters jsonb) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF parameters IS NULL OR jsonb_typeof(parameters) <> 'object' THEN
        PERFORM opreg_sql.refuse('parameters', 'must be a JSON object');
    ELSIF octet_length(parameters::text) > 2 * 65536 THEN
        PERFORM opreg_sql.refuse('parameters', 'must be at most 65536 bytes in canonical form');
    ELSIF jsonb_path_exists(parameters,
            'strict $.**{20 to last} ? (@.type() == "object" || @.type() == "array")') THEN
        PERFORM opreg_sql.refuse('parameters', 'must be nested at most 20 deep');
    ELSIF jsonb_array_length(jsonb_path_query_array(parameters, 'strict $.**{1 to last}')) > 10000 THEN
        PERFORM opreg_sql.refuse('parameters', 'must hold at most 10000 values');
    END IF;
END
$$;

-- The answer of a Claim; outcome is the contract's ClaimOutcome name without
-- its prefix: ACQUIRED, REPLAYED, IN_PROGRESS, RETRY_LATER, RECONCILE, DEAD
-- or HELD. The lease and token are the caller's on ACQUIRED and RECONCILE;
-- retry_after says when to ask again on IN_PROGRESS, RETRY_LATER and HELD.
CREATE TYPE opreg_sql.claim_answer AS (
    outcome          text,
    fencing_token    bigint,
    lease_expires_at timestamptz,
    retry_after      interval,
    status           text,
    attempts         integer,
    result           bytea,
    result_ref       text,
    failure_code     text,
    failure_message  text,
    remote_ref       text
);

COMMENT ON TYPE opreg_sql.claim_answer IS
    'What opreg_sql.claim answers; outcome is ACQUIRED, REPLAYED, IN_PROGRESS, RETRY_LATER, RECONCILE, DEAD or HELD';

-- A Claim's answer, counted under its outcome and, for a lease handed out,
-- the execution it started (or resume: the live holder asked again).
CREATE FUNCTION opreg_sql.claim_answer_of(outcome text, o operations, retry_after interval, execution text)
RETURNS opreg_sql.claim_answer
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM opreg_sql.count_call('claim', outcome);
    IF execution IS NOT NULL THEN
        PERFORM opreg_sql.count_call('execution', execution);
    END IF;
    -- The token and the lease are the caller's only with an execution to run
    -- (ACQUIRED, RECONCILE): on any other answer they are another holder's,
    -- or spent.
    RETURN ROW(outcome,
               CASE WHEN execution IS NOT NULL THEN o.fencing_token END,
               CASE WHEN execution IS NOT NULL THEN o.lease_expires_at END,
               retry_after, upper(o.status), o.attempts,
               o.result, o.result_ref, o.failure_code, o.failure_message, o.remote_ref)::opreg_sql.claim_answer;
END
$$;

-- An operation as Lookup answers it.
CREATE FUNCTION opreg_sql.operation_of(o operations) RETURNS opreg_sql.operation
LANGUAGE sql STABLE
RETURN ROW(o.namespace, o.operation_key, upper(o.status), o.parameters_digest, o.fencing_token,
           o.attempts, o.lease_owner, o.lease_expires_at, o.result, o.result_ref,
           o.failure_code, o.failure_message, o.remote_ref, o.last_error_class,
           o.held_at IS NOT NULL, o.created_at, o.updated_at, o.completed_at)::opreg_sql.operation;

-- The guard of a transition a Claim decided on `observed` (transitions.rs
-- still_as_observed!): the locked row still holds that token and status,
-- unheld, with its lease expired or its retry due by the clock now.
CREATE FUNCTION opreg_sql.still_as_observed(locked operations, observed operations) RETURNS boolean
LANGUAGE sql VOLATILE
RETURN locked.fencing_token = observed.fencing_token AND locked.status = observed.status
   AND locked.held_at IS NULL
   AND (locked.status <> 'in_progress' OR locked.lease_expires_at <= clock_timestamp())
   AND (locked.status <> 'retry_scheduled' OR locked.next_attempt_at <= clock_timestamp());

-- PARAMETER_CONFLICT, naming the top-level fields that differ when the stored
-- parameters are known.
CREATE FUNCTION opreg_sql.refuse_conflict(o operations, requested jsonb, digest bytea) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    differing text := '';
BEGIN
    PERFORM opreg_sql.count_call('claim', 'conflict');
    IF o.parameters_canonical IS NOT NULL THEN
        SELECT coalesce(string_agg(field, ',' ORDER BY field), '') INTO differing
        FROM (
            SELECT key AS field FROM jsonb_each(o.parameters_canonical::jsonb) AS stored
            WHERE NOT (requested ? stored.key) OR requested -> stored.key IS DISTINCT FROM stored.value
            UNION
            SELECT key FROM jsonb_each(requested) AS asked
            WHERE asked.value <> 'null'::jsonb
              AND NOT (o.parameters_canonical::jsonb ? asked.key)
        ) AS fields;
    END IF;
    PERFORM opreg_sql.refuse_with('23505', 'PARAMETER_CONFLICT',
        format('operation %s in namespace %s is registered with other parameters (differing fields: %s)',
               o.operation_key, o.namespace, coalesce(nullif(differing, ''), 'none named')),
        format('storedDigest=%s; requestDigest=%s; differingFields=%s',
               encode(o.parameters_digest, 'hex'), encode(digest, 'hex'), differing));
END
$$;

CREATE FUNCTION opreg_sql.refuse_stale(presented bigint, current_token bigint) RETURNS void
LANGUAGE sql VOLATILE
RETURN opreg_sql.refuse_with('55000', 'STALE_FENCING_TOKEN',
    format('fencing token %s is not the current one (%s)', presented, current_token),
    format('presentedToken=%s; currentToken=%s', presented, current_token));

CREATE FUNCTION opreg_sql.refuse_not_found(namespace text, operation_key text) RETURNS void
LANGUAGE sql VOLATILE
RETURN opreg_sql.refuse_with('P0002', 'OPERATION_NOT_FOUND',
    format('no operation %s in namespace %s', operation_key, namespace), NULL);

-- The row kept changing under the call (every round's guarded write matched
-- nothing): try again.
CREATE FUNCTION opreg_sql.refuse_busy(namespace text, operation_key text) RETURNS void
LANGUAGE sql VOLATILE
RETURN opreg_sql.refuse_with('55P03', 'OPERATION_BUSY',
    format('operation %s in namespace %s kept changing; try again', operation_key, namespace), NULL);

-- Claim: registers the operation with its first lease, or answers from what
-- exists (domain/claim.rs decide): a replay, the lease of its live holder,
-- IN_PROGRESS, RETRY_LATER, HELD or DEAD; or starts a retry, takeover or
-- reconcile execution under a new token, or marks it DEAD when its budget is
-- spent. Inside the caller's transaction the registration is the caller's
-- until it commits: a concurrent Claim of the key, from either door, waits
-- on it and then answers from what committed.
CREATE FUNCTION opreg_sql.claim(
    namespace       text,
    operation_key   text,
    parameters      jsonb,
    owner           text,
    lease           interval DEFAULT interval '30 seconds',
    execution_id    text     DEFAULT '',
    max_attempts    integer  DEFAULT 5,
    initial_backoff interval DEFAULT interval '1 second',
    max_backoff     interval DEFAULT interval '5 minutes',
    deadline        interval DEFAULT interval '24 hours'
) RETURNS opreg_sql.claim_answer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    canonical text;
    digest    bytea;
    found_row operations;
    moved     operations;
    now_      timestamptz;
    step      text;
    lease_length interval;
BEGIN
    PERFORM opreg_sql.check_identifier('namespace', claim.namespace, 128);
    -- The boundary before any work done for the caller.
    PERFORM opreg_sql.authorize(claim.namespace);
    PERFORM opreg_sql.check_identifier('operation_key', claim.operation_key, 512);
    PERFORM opreg_sql.check_text('owner', claim.owner, 1024);
    IF claim.owner = '' THEN
        PERFORM opreg_sql.refuse('owner', 'must not be empty');
    END IF;
    PERFORM opreg_sql.check_text('execution_id', claim.execution_id, 1024);
    IF claim.lease IS NULL OR claim.lease < interval '1 second' OR claim.lease > interval '1 hour' THEN
        PERFORM opreg_sql.refuse('lease', 'must be between 1s and 1h inclusive');
    END IF;
    IF claim.max_attempts IS NULL OR claim.max_attempts < 1 THEN
        PERFORM opreg_sql.refuse('max_attempts', 'must be at least 1');
    END IF;
    PERFORM opreg_sql.check_duration('initial_backoff', claim.initial_backoff, true);
    PERFORM opreg_sql.check_duration('max_backoff', claim.max_backoff, true);
    IF claim.max_backoff < claim.initial_backoff THEN
        PERFORM opreg_sql.refuse('max_backoff', 'must not be shorter than initial_backoff');
    END IF;
    PERFORM opreg_sql.check_duration('deadline', claim.deadline, true);
    PERFORM opreg_sql.check_parameters(claim.parameters);
    -- Whole microseconds, as the server stores durations (an interval's days
    -- and months would follow the session's time zone).
    lease_length := opreg_sql.micros(claim.lease) * interval '1 microsecond';
    canonical := opreg_sql.canonical_json(claim.parameters);
    IF octet_length(canonical) > 65536 THEN
        PERFORM opreg_sql.refuse('parameters', 'must be at most 65536 bytes in canonical form');
    END IF;
    digest := sha256(pg_catalog.convert_to(canonical, 'UTF8'::name));

    -- A guarded write that matched nothing (another caller moved the row in
    -- between) is read again and decided again, a bounded number of times.
    FOR round IN 1..5 LOOP
        SELECT * INTO found_row FROM operations AS o
        WHERE o.namespace = claim.namespace AND o.operation_key = claim.operation_key;
        IF NOT FOUND THEN
            -- ON CONFLICT waits for a racing registration to end: it inserts
            -- nothing if that one committed (read it next round), and this
            -- row if it rolled back. The first lease's token is also its
            -- first execution's.
            INSERT INTO operations (
                namespace, operation_key, status, parameters_digest, parameters_canonical,
                fencing_token, lease_owner, lease_expires_at, attempts,
                max_attempts, initial_backoff_us, max_backoff_us, deadline_at,
                created_at, updated_at, execution_token, execution_kind, execution_id,
                execution_owner, execution_started_at, execution_outcome)
            SELECT claim.namespace, claim.operation_key, 'in_progress', digest, canonical,
                   fresh.token, claim.owner,
                   fresh.now + lease_length, 1,
                   claim.max_attempts, opreg_sql.micros(claim.initial_backoff),
                   opreg_sql.micros(claim.max_backoff),
                   fresh.now + opreg_sql.micros(claim.deadline) * interval '1 microsecond',
                   fresh.now, fresh.now, fresh.token, 'first', claim.execution_id,
                   claim.owner, fresh.now, 'running'
            FROM (SELECT nextval('fencing_tokens') AS token, clock_timestamp() AS now) AS fresh
            ON CONFLICT ON CONSTRAINT operations_pkey DO NOTHING
            RETURNING * INTO moved;
            IF FOUND THEN
                -- registry/claim.rs fresh_first_lease: the insert's times were
                -- taken before any wait on a racing registration (which then
                -- rolled back); past a hundredth of the lease (at least
                -- 20 ms), the lease, the creation time and the deadline
                -- count from now (transitions.rs restart_first_lease).
                IF clock_timestamp() - moved.created_at
                   > greatest(claim.lease / 100, interval '20 milliseconds') THEN
                    WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now)
                    UPDATE operations AS o SET
                        deadline_at = o.deadline_at + (clock.now - o.created_at),
                        lease_expires_at = clock.now + lease_length,
                        created_at = clock.now,
                        updated_at = clock.now,
                        execution_started_at = clock.now
                    FROM clock
                    WHERE o.namespace = claim.namespace AND o.operation_key = claim.operation_key
                    RETURNING o.* INTO moved;
                END IF;
                RETURN opreg_sql.claim_answer_of('ACQUIRED', moved, NULL, 'first');
            END IF;
            CONTINUE;
        END IF;

        IF found_row.parameters_digest <> digest OR found_row.compensates IS NOT NULL THEN
            PERFORM opreg_sql.refuse_conflict(found_row, claim.parameters, digest);
        END IF;

        now_ := clock_timestamp();
        step := CASE
            WHEN found_row.status IN ('succeeded', 'failed') THEN 'REPLAYED'
            WHEN found_row.held_at IS NOT NULL THEN 'HELD'
            WHEN found_row.status = 'dead' THEN 'DEAD'
            WHEN found_row.status = 'unknown' THEN 'start:reconcile'
            WHEN found_row.status = 'in_progress' AND found_row.lease_expires_at > now_ THEN
                CASE WHEN found_row.lease_owner IS DISTINCT FROM claim.owner THEN 'IN_PROGRESS'
                     WHEN found_row.reconciling THEN 'RECONCILE'
                     ELSE 'ACQUIRED' END
            WHEN found_row.status = 'in_progress' AND found_row.reconciling THEN 'start:reconcile'
            WHEN found_row.status = 'retry_scheduled' AND found_row.next_attempt_at > now_ THEN 'RETRY_LATER'
            WHEN found_row.attempts >= found_row.max_attempts OR now_ > found_row.deadline_at THEN 'exhaust'
            WHEN found_row.status = 'in_progress' THEN 'start:takeover'
            ELSE 'start:retry'
        END;

        CASE step
        WHEN 'REPLAYED', 'DEAD' THEN
            RETURN opreg_sql.claim_answer_of(step, found_row, NULL, NULL);
        WHEN 'ACQUIRED', 'RECONCILE' THEN
            RETURN opreg_sql.claim_answer_of(step, found_row, NULL, 'resume');
        WHEN 'HELD' THEN
            RETURN opreg_sql.claim_answer_of(step, found_row, interval '60 seconds', NULL);
        WHEN 'IN_PROGRESS' THEN
            RETURN opreg_sql.claim_answer_of(step, found_row, found_row.lease_expires_at - now_, NULL);
        WHEN 'RETRY_LATER' THEN
            RETURN opreg_sql.claim_answer_of(step, found_row, found_row.next_attempt_at - now_, NULL);
        WHEN 'exhaust' THEN
            -- transitions.rs exhaust: the row locked by its primary key, still
            -- as observed, and due.
            WITH observed AS MATERIALIZED (
                SELECT 1
                FROM (SELECT l FROM operations AS l
                      WHERE l.namespace = claim.namespace AND l.operation_key = claim.operation_key
                      LIMIT 1
                      FOR NO KEY UPDATE) AS locked(row_now)
                WHERE opreg_sql.still_as_observed(locked.row_now, found_row)
            )
            UPDATE operations AS o SET
                status = 'dead',
                lease_owner = NULL,
                lease_expires_at = NULL,
                lease_takeover = false,
                reconciling = false,
                next_attempt_at = NULL,
                updated_at = clock_timestamp(),
                completed_at = clock_timestamp(),
                execution_outcome = CASE WHEN o.execution_outcome = 'running' THEN 'superseded'
                                         ELSE o.execution_outcome END,
                execution_finished_at = CASE WHEN o.execution_outcome = 'running' THEN clock_timestamp()
                                             ELSE o.execution_finished_at END
            FROM observed
            WHERE o.namespace = claim.namespace AND o.operation_key = claim.operation_key
            RETURNING o.* INTO moved;
            IF FOUND THEN
                RETURN opreg_sql.claim_answer_of('DEAD', moved, NULL, NULL);
            END IF;
        ELSE
            -- transitions.rs start_executions: the row locked and still as
            -- observed; a new token and lease; the execution it replaces goes
            -- to the history (superseded if it never reported), only once the
            -- row has moved.
            WITH replaced AS MATERIALIZED (
                SELECT (o).attempts AS r_attempt, (o).execution_token AS r_token,
                       (o).execution_kind AS r_kind, (o).execution_id AS r_execution_id,
                       (o).execution_owner AS r_owner, (o).execution_started_at AS r_started_at,
                       (o).execution_finished_at AS r_finished_at, (o).execution_outcome AS r_outcome,
                       (o).execution_outcome_digest AS r_digest, (o).execution_error_class AS r_class,
                       (o).execution_message AS r_message,
                       nextval('fencing_tokens') AS r_new_token, clock_timestamp() AS r_now
                FROM (SELECT l FROM operations AS l
                      WHERE l.namespace = claim.namespace AND l.operation_key = claim.operation_key
                      LIMIT 1
                      FOR NO KEY UPDATE) AS locked(o)
                WHERE opreg_sql.still_as_observed(o, found_row)
            ),
            started AS (
                UPDATE operations AS o SET
                    fencing_token = r_new_token,
                    status = 'in_progress',
                    lease_owner = claim.owner,
                    lease_expires_at = r_now + lease_length,
                    lease_takeover = (step = 'start:takeover'),
                    attempts = o.attempts + CASE WHEN step = 'start:reconcile' THEN 0 ELSE 1 END,
                    reconciling = (step = 'start:reconcile'),
                    next_attempt_at = NULL,
                    updated_at = r_now,
                    execution_token = r_new_token,
                    execution_kind = substr(step, 7),
                    execution_id = claim.execution_id,
                    execution_owner = claim.owner,
                    execution_started_at = r_now,
                    execution_finished_at = NULL,
                    execution_outcome = 'running',
                    execution_outcome_digest = NULL,
                    execution_error_class = NULL,
                    execution_message = NULL
                FROM replaced
                WHERE o.namespace = claim.namespace AND o.operation_key = claim.operation_key
                RETURNING o.*
            ),
            archived AS (
                INSERT INTO execution_history (
                    fencing_token, namespace, operation_key, attempt, kind, execution_id, owner,
                    started_at, finished_at, outcome, outcome_digest, error_class, message)
                SELECT r_token, claim.namespace, claim.operation_key, r_attempt, r_kind,
                       r_execution_id, r_owner, r_started_at,
                       CASE WHEN r_outcome = 'running' THEN r_now ELSE r_finished_at END,
                       CASE WHEN r_outcome = 'running' THEN 'superseded' ELSE r_outcome END,
                       r_digest, r_class, r_message
                FROM replaced
                WHERE r_token IS NOT NULL AND EXISTS (SELECT 1 FROM started)
            )
            SELECT * INTO moved FROM started;
            IF FOUND THEN
                RETURN opreg_sql.claim_answer_of(
                    CASE WHEN step = 'start:reconcile' THEN 'RECONCILE' ELSE 'ACQUIRED' END,
                    moved, NULL, substr(step, 7));
            END IF;
        END CASE;
    END LOOP;
    PERFORM opreg_sql.refuse_busy(claim.namespace, claim.operation_key);
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION opreg_sql.claim(text, text, jsonb, text, interval, text, integer, interval, interval, interval) IS
    'Registers the operation and hands its first lease to owner, or answers from what exists (see opreg_sql.claim_answer); 23505 PARAMETER_CONFLICT when the key holds other parameters';

-- What identifies a report, so a repeated Complete is told from a different
-- one: domain/complete.rs Report::digest, each field after its length as a
-- 64-bit big-endian number.
CREATE FUNCTION opreg_sql.length_prefixed(field bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN int8send(octet_length(field)::bigint) || field;

CREATE FUNCTION opreg_sql.report_digest(outcome text, first bytea, second bytea, third bytea)
RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN sha256(opreg_sql.length_prefixed(pg_catalog.convert_to(lower(outcome), 'UTF8'::name))
              || opreg_sql.length_prefixed(first) || opreg_sql.length_prefixed(second)
              || coalesce(opreg_sql.length_prefixed(third), ''::bytea));

-- Complete: records the holder's report under its fencing token
-- (domain/complete.rs decide). The same report again answers as before; a
-- different one from the same token is ALREADY_COMPLETED; a token that is not
-- the current lease is STALE_FENCING_TOKEN. outcome is SUCCESS (result,
-- result_ref), FAILURE (code, message), RETRYABLE (error_class, message,
-- retry_after: the next attempt after a full-jitter backoff inside the
-- budget, or after retry_after when given) or UNKNOWN (remote_ref, message).
CREATE FUNCTION opreg_sql.complete(
    namespace     text,
    operation_key text,
    fencing_token bigint,
    outcome       text,
    result        bytea    DEFAULT NULL,
    result_ref    text     DEFAULT '',
    code          text     DEFAULT '',
    message       text     DEFAULT '',
    error_class   text     DEFAULT '',
    retry_after   interval DEFAULT NULL,
    remote_ref    text     DEFAULT ''
) RETURNS opreg_sql.operation
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    report        bytea;
    found_row     operations;
    moved         operations;
    recorded      bytea;
    started       boolean;
    now_          timestamptz;
    next_status   text;
    retry_us      bigint;
    cap_us        numeric;
BEGIN
    PERFORM opreg_sql.check_identifier('namespace', complete.namespace, 128);
    PERFORM opreg_sql.authorize(complete.namespace);
    PERFORM opreg_sql.check_identifier('operation_key', complete.operation_key, 512);
    IF complete.fencing_token IS NULL OR complete.fencing_token < 1 THEN
        PERFORM opreg_sql.refuse('fencing_token', 'must be a token a Claim handed out');
    END IF;
    PERFORM opreg_sql.check_text('result_ref', complete.result_ref, 1048576);
    PERFORM opreg_sql.check_text('code', complete.code, 1024);
    PERFORM opreg_sql.check_text('message', complete.message, 65536);
    PERFORM opreg_sql.check_text('error_class', complete.error_class, 1024);
    PERFORM opreg_sql.check_text('remote_ref', complete.remote_ref, 1024);
    -- Each outcome takes its own fields; one given for another is refused,
    -- not dropped.
    IF complete.outcome IS NULL OR complete.outcome NOT IN ('SUCCESS', 'FAILURE', 'RETRYABLE', 'UNKNOWN') THEN
        PERFORM opreg_sql.refuse('outcome', 'must be SUCCESS, FAILURE, RETRYABLE or UNKNOWN');
    END IF;
    IF complete.outcome <> 'SUCCESS' AND (complete.result IS NOT NULL OR complete.result_ref <> '') THEN
        PERFORM opreg_sql.refuse('result', 'is for outcome SUCCESS only');
    END IF;
    IF complete.outcome IN ('SUCCESS', 'RETRYABLE', 'UNKNOWN') AND complete.code <> '' THEN
        PERFORM opreg_sql.refuse('code', 'is for outcome FAILURE only');
    END IF;
    IF complete.outcome = 'SUCCESS' AND complete.message <> '' THEN
        PERFORM opreg_sql.refuse('message', 'is not for outcome SUCCESS');
    END IF;
    IF complete.outcome <> 'RETRYABLE' AND (complete.error_class <> '' OR complete.retry_after IS NOT NULL) THEN
        PERFORM opreg_sql.refuse('error_class', 'and retry_after are for outcome RETRYABLE only');
    END IF;
    IF complete.outcome <> 'UNKNOWN' AND complete.remote_ref <> '' THEN
        PERFORM opreg_sql.refuse('remote_ref', 'is for outcome UNKNOWN only');
    END IF;
    IF complete.outcome = 'SUCCESS'
       AND coalesce(octet_length(complete.result), 0) + octet_length(complete.result_ref) > 1048576 THEN
        PERFORM opreg_sql.refuse('result', 'must be at most 1048576 bytes');
    END IF;
    IF complete.retry_after IS NOT NULL THEN
        PERFORM opreg_sql.check_duration('retry_after', complete.retry_after, false);
    END IF;

    report := CASE complete.outcome
        WHEN 'SUCCESS' THEN opreg_sql.report_digest('success', coalesce(complete.result, ''::bytea),
                                                    pg_catalog.convert_to(complete.result_ref, 'UTF8'::name), NULL)
        WHEN 'FAILURE' THEN opreg_sql.report_digest('failure', pg_catalog.convert_to(complete.code, 'UTF8'::name),
                                                    pg_catalog.convert_to(complete.message, 'UTF8'::name), NULL)
        -- the pushback in nanoseconds as a 128-bit big-endian number; none is all ones
        WHEN 'RETRYABLE' THEN opreg_sql.report_digest('retryable', pg_catalog.convert_to(complete.error_class, 'UTF8'::name),
            pg_catalog.convert_to(complete.message, 'UTF8'::name),
            CASE WHEN complete.retry_after IS NULL THEN decode(repeat('ff', 16), 'hex')
                 ELSE decode(repeat('00', 8), 'hex')
                      || int8send(opreg_sql.micros(complete.retry_after) * 1000) END)
        ELSE opreg_sql.report_digest('unknown', pg_catalog.convert_to(complete.remote_ref, 'UTF8'::name),
                                     pg_catalog.convert_to(complete.message, 'UTF8'::name), NULL)
    END;

    FOR round IN 1..3 LOOP
        SELECT * INTO found_row FROM operations AS o
        WHERE o.namespace = complete.namespace AND o.operation_key = complete.operation_key;
        IF NOT FOUND THEN
            PERFORM opreg_sql.refuse_not_found(complete.namespace, complete.operation_key);
        END IF;
        -- The execution this token started, current or replaced.
        IF found_row.execution_token = complete.fencing_token THEN
            started := true;
            recorded := found_row.execution_outcome_digest;
        ELSE
            SELECT true, h.outcome_digest INTO started, recorded FROM execution_history AS h
            WHERE h.fencing_token = complete.fencing_token
              AND h.namespace = complete.namespace AND h.operation_key = complete.operation_key;
            started := coalesce(started, false);
        END IF;
        IF recorded IS NOT NULL THEN
            IF recorded = report THEN
                PERFORM opreg_sql.count_call('complete', 'repeated');
                RETURN opreg_sql.operation_of(found_row);
            END IF;
            PERFORM opreg_sql.count_call('complete', 'already_completed');
            PERFORM opreg_sql.refuse_with('55000', 'ALREADY_COMPLETED',
                format('fencing token %s already reported another outcome', complete.fencing_token),
                format('fencingToken=%s', complete.fencing_token));
        END IF;
        IF NOT started OR found_row.fencing_token <> complete.fencing_token
           OR found_row.status <> 'in_progress' OR found_row.held_at IS NOT NULL THEN
            PERFORM opreg_sql.count_call('complete', 'stale_fencing_token');
            PERFORM opreg_sql.refuse_stale(complete.fencing_token, found_row.fencing_token);
        END IF;

        now_ := clock_timestamp();
        next_status := CASE complete.outcome
            WHEN 'SUCCESS' THEN 'succeeded' WHEN 'FAILURE' THEN 'failed' WHEN 'UNKNOWN' THEN 'unknown'
        END;
        retry_us := NULL;
        IF complete.outcome = 'RETRYABLE' THEN
            IF found_row.attempts >= found_row.max_attempts THEN
                next_status := 'dead';
            ELSE
                -- Downstream's pushback as given, else full jitter under
                -- min(max_backoff, initial_backoff x 2^(attempt - 1)) for
                -- this budget's attempts (domain/policy.rs backoff_cap, whose
                -- 32-bit multiplier saturates from 32 doublings on).
                cap_us := least(found_row.max_backoff_us::numeric,
                                found_row.initial_backoff_us::numeric
                                * CASE WHEN found_row.attempts - found_row.budget_attempts_base - 1 >= 32
                                       THEN 4294967295
                                       ELSE power(2::numeric, greatest(0,
                                                  found_row.attempts - found_row.budget_attempts_base - 1))
                                  END);
                retry_us := coalesce(opreg_sql.micros(complete.retry_after),
                                     floor(cap_us * random()::numeric)::bigint);
                IF now_ + retry_us * interval '1 microsecond' > found_row.deadline_at THEN
                    next_status := 'dead';
                    retry_us := NULL;
                ELSE
                    next_status := 'retry_scheduled';
                END IF;
            END IF;
        END IF;

        -- outcomes.rs record_outcomes for one report: the row locked by its
        -- primary key, the guard checked on the locked row (in the probe it
        -- would let a generic plan scan the due index, whose predicate it
        -- implies, through every lease of the namespace), then the presented
        -- token's execution finishes and the operation moves, in one row,
        -- updated by its key as the claim's transitions are.
        WITH current_lease AS MATERIALIZED (
            SELECT 1
            FROM (SELECT l.fencing_token, l.status, l.held_at, l.execution_token,
                         l.execution_outcome_digest
                  FROM operations AS l
                  WHERE l.namespace = complete.namespace AND l.operation_key = complete.operation_key
                  LIMIT 1
                  FOR UPDATE) AS locked
            WHERE locked.fencing_token = complete.fencing_token AND locked.status = 'in_progress'
              AND locked.held_at IS NULL
              AND locked.execution_token = complete.fencing_token
              AND locked.execution_outcome_digest IS NULL
        )
        UPDATE operations AS o SET
            status = next_status,
            result = CASE WHEN complete.outcome = 'SUCCESS' THEN coalesce(complete.result, ''::bytea) END,
            result_ref = CASE WHEN complete.outcome = 'SUCCESS' THEN complete.result_ref END,
            failure_code = CASE WHEN complete.outcome = 'FAILURE' THEN complete.code END,
            failure_message = CASE WHEN complete.outcome = 'FAILURE' THEN complete.message END,
            remote_ref = CASE WHEN complete.outcome = 'UNKNOWN' THEN complete.remote_ref ELSE o.remote_ref END,
            last_error_class = CASE complete.outcome WHEN 'RETRYABLE' THEN complete.error_class
                                                     WHEN 'UNKNOWN' THEN 'unknown_outcome'
                                                     ELSE o.last_error_class END,
            last_error_message = CASE WHEN complete.outcome IN ('RETRYABLE', 'UNKNOWN') THEN complete.message
                                      ELSE o.last_error_message END,
            next_attempt_at = now_ + retry_us * interval '1 microsecond',
            lease_owner = NULL,
            lease_expires_at = NULL,
            lease_takeover = false,
            reconciling = false,
            updated_at = now_,
            completed_at = CASE WHEN next_status IN ('succeeded', 'failed', 'dead') THEN now_ END,
            unknown_since = CASE WHEN next_status = 'unknown' THEN coalesce(o.unknown_since, now_) END,
            execution_outcome = CASE complete.outcome WHEN 'SUCCESS' THEN 'succeeded'
                                                      WHEN 'FAILURE' THEN 'failed'
                                                      WHEN 'RETRYABLE' THEN 'retryable'
                                                      ELSE 'unknown' END,
            execution_outcome_digest = report,
            execution_error_class = CASE complete.outcome WHEN 'FAILURE' THEN complete.code
                                                          WHEN 'RETRYABLE' THEN complete.error_class END,
            execution_message = CASE WHEN complete.outcome <> 'SUCCESS' THEN complete.message END,
            execution_finished_at = now_
        FROM current_lease
        WHERE o.namespace = complete.namespace AND o.operation_key = complete.operation_key
        RETURNING o.* INTO moved;
        IF FOUND THEN
            PERFORM opreg_sql.count_call('complete', complete.outcome);
            RETURN opreg_sql.operation_of(moved);
        END IF;
    END LOOP;
    PERFORM opreg_sql.refuse_busy(complete.namespace, complete.operation_key);
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION opreg_sql.complete(text, text, bigint, text, bytea, text, text, text, text, interval, text) IS
    'Records the report of the lease holding fencing_token (outcome SUCCESS, FAILURE, RETRYABLE or UNKNOWN) and returns the operation; 55000 STALE_FENCING_TOKEN or ALREADY_COMPLETED';

-- FencedWrite: writes a resource under the operation's current token, on the
-- operation's row lock, so it lands before a takeover or is refused after
-- it; a resource already written under a higher token refuses it
-- (registry/fencing.rs, store/resources.rs).
CREATE FUNCTION opreg_sql.fenced_write(
    namespace     text,
    resource      text,
    operation_key text,
    fencing_token bigint,
    value         bytea,
    OUT fence     bigint,
    OUT version   bigint
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    found_row operations;
BEGIN
    PERFORM opreg_sql.check_identifier('namespace', fenced_write.namespace, 128);
    PERFORM opreg_sql.authorize(fenced_write.namespace);
    PERFORM opreg_sql.check_identifier('resource', fenced_write.resource, 512);
    PERFORM opreg_sql.check_identifier('operation_key', fenced_write.operation_key, 512);
    IF fenced_write.fencing_token IS NULL OR fenced_write.fencing_token < 1 THEN
        PERFORM opreg_sql.refuse('fencing_token', 'must be a token a Claim handed out');
    END IF;
    IF fenced_write.value IS NULL OR octet_length(fenced_write.value) > 1048576 THEN
        PERFORM opreg_sql.refuse('value', 'must be present and at most 1048576 bytes');
    END IF;

    SELECT * INTO found_row FROM operations AS o
    WHERE o.namespace = fenced_write.namespace AND o.operation_key = fenced_write.operation_key
    FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM opreg_sql.refuse_not_found(fenced_write.namespace, fenced_write.operation_key);
    END IF;
    IF found_row.fencing_token <> fenced_write.fencing_token OR found_row.status <> 'in_progress'
       OR found_row.held_at IS NOT NULL THEN
        PERFORM opreg_sql.count_call('fenced_write', 'stale_fencing_token');
        PERFORM opreg_sql.refuse_stale(fenced_write.fencing_token, found_row.fencing_token);
    END IF;
    INSERT INTO resources AS r (namespace, resource, value, fence, version, operation_key, updated_at)
    VALUES (fenced_write.namespace, fenced_write.resource, fenced_write.value,
            fenced_write.fencing_token, 1, fenced_write.operation_key, clock_timestamp())
    ON CONFLICT ON CONSTRAINT resources_pkey DO UPDATE SET
        value = EXCLUDED.value,
        fence = EXCLUDED.fence,
        version = r.version + 1,
        operation_key = EXCLUDED.operation_key,
        updated_at = clock_timestamp()
    WHERE r.fence <= EXCLUDED.fence
    RETURNING r.fence, r.version INTO fence, version;
    IF NOT FOUND THEN
        PERFORM opreg_sql.count_call('fenced_write', 'stale_fencing_token');
        PERFORM opreg_sql.refuse_stale(fenced_write.fencing_token,
            (SELECT r.fence FROM resources AS r
             WHERE r.namespace = fenced_write.namespace AND r.resource = fenced_write.resource));
    END IF;
    PERFORM opreg_sql.count_call('fenced_write', 'written');
END
$$;

COMMENT ON FUNCTION opreg_sql.fenced_write(text, text, text, bigint, bytea) IS
    'Writes value to resource under the operation''s current fencing token; 55000 STALE_FENCING_TOKEN when the token is superseded or the resource holds a higher fence';

-- Lookup answers to the namespace boundary too, and reads as its owner.
CREATE OR REPLACE FUNCTION opreg_sql.lookup(namespace text, operation_key text) RETURNS opreg_sql.operation
LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    found_row operations;
BEGIN
    PERFORM opreg_sql.check_identifier('namespace', lookup.namespace, 128);
    PERFORM opreg_sql.authorize(lookup.namespace);
    PERFORM opreg_sql.check_identifier('operation_key', lookup.operation_key, 512);
    SELECT * INTO found_row FROM operations AS o
    WHERE o.namespace = lookup.namespace AND o.operation_key = lookup.operation_key;
    IF NOT FOUND THEN
        PERFORM opreg_sql.refuse_not_found(lookup.namespace, lookup.operation_key);
    END IF;
    RETURN opreg_sql.operation_of(found_row);
END
$$;

-- Lets a role (and its members) use the SQL door in a namespace ('*': all):
-- the row in namespace_grants, and EXECUTE on the door's functions.
CREATE FUNCTION opreg_sql.grant_namespace(grantee regrole, namespace text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM opreg_sql.check_identifier('namespace', grant_namespace.namespace, 128);
    INSERT INTO opreg_sql.namespace_grants AS g (grantee, namespace)
    VALUES (grant_namespace.grantee, grant_namespace.namespace)
    ON CONFLICT ON CONSTRAINT namespace_grants_pkey DO NOTHING;
    EXECUTE format('GRANT USAGE ON SCHEMA opreg_sql TO %s', grant_namespace.grantee);
    EXECUTE format('GRANT EXECUTE ON FUNCTION opreg_sql.claim(text, text, jsonb, text, interval, text, integer, interval, interval, interval), '
                   'opreg_sql.complete(text, text, bigint, text, bytea, text, text, text, text, interval, text), '
                   'opreg_sql.fenced_write(text, text, text, bigint, bytea), opreg_sql.lookup(text, text), '
                   'opreg_sql.parameters_digest(jsonb), opreg_sql.canonical_json(jsonb) TO %s',
                   grant_namespace.grantee);
END
$$;

COMMENT ON FUNCTION opreg_sql.grant_namespace(regrole, text) IS
    'Lets grantee (and its members) claim, complete, write and look up operations of namespace (''*'': every namespace) through the SQL door';

-- Takes a namespace back; the role keeps EXECUTE, which reaches nothing
-- without a grant.
CREATE FUNCTION opreg_sql.revoke_namespace(grantee regrole, namespace text) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
    DELETE FROM opreg_sql.namespace_grants AS g
    WHERE g.grantee = revoke_namespace.grantee AND g.namespace = revoke_namespace.namespace;
    RETURN FOUND;
END
$$;

-- Only the registry's own role runs the door for others, or changes grants;
-- a role reaches the door's functions through grant_namespace, and the
-- functions of later migrations start out the same way.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA opreg_sql FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA opreg_sql REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
