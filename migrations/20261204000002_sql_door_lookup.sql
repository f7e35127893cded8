-- The SQL door's Lookup: "did my timed-out call commit?" from psql or from
-- inside the caller's own transaction (which then sees its own changes).
--
--   SELECT status, fencing_token, result FROM opreg_sql.lookup('payouts', 'payout:42');
--
-- Statuses carry the contract's names (OperationStatus without its prefix).
-- A key with no operation is SQLSTATE P0002 with detail OPERATION_NOT_FOUND,
-- an empty namespace or key 22023 with INVALID_ARGUMENT, as Lookup answers.

CREATE TYPE opreg_sql.operation AS (
    namespace         text,
    operation_key     text,
    status            text,
    parameters_digest bytea,
    fencing_token     bigint,
    attempts          integer,
    lease_owner       text,
    lease_expires_at  timestamptz,
    result            bytea,
    result_ref        text,
    failure_code      text,
    failure_message   text,
    remote_ref        text,
    last_error_class  text,
    held              boolean,
    created_at        timestamptz,
    updated_at        timestamptz,
    completed_at      timestamptz
);

COMMENT ON TYPE opreg_sql.operation IS
    'An operation as Lookup answers it; status is IN_PROGRESS, SUCCEEDED, FAILED, RETRY_SCHEDULED, UNKNOWN or DEAD';

-- The tables are found where the migrations created them (the search path
-- they ran with), whatever the caller's search path is.
CREATE FUNCTION opreg_sql.lookup(namespace text, operation_key text) RETURNS opreg_sql.operation
LANGUAGE plpgsql STABLE STRICT
SET search_path FROM CURRENT
AS $$
DECLARE
    answer opreg_sql.operation;
BEGIN
    IF namespace = '' OR operation_key = '' THEN
        RAISE EXCEPTION 'namespace and operation_key must not be empty'
            USING ERRCODE = 'invalid_parameter_value', DETAIL = 'INVALID_ARGUMENT';
    END IF;
    SELECT o.namespace, o.operation_key, upper(o.status), o.parameters_digest, o.fencing_token,
           o.attempts, o.lease_owner, o.lease_expires_at, o.result, o.result_ref,
           o.failure_code, o.failure_message, o.remote_ref, o.last_error_class,
           o.held_at IS NOT NULL, o.created_at, o.updated_at, o.completed_at
    INTO answer
    FROM operations AS o
    WHERE o.namespace = lookup.namespace AND o.operation_key = lookup.operation_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no operation % in namespace %', operation_key, namespace
            USING ERRCODE = 'no_data_found', DETAIL = 'OPERATION_NOT_FOUND';
    END IF;
    RETURN answer;
END
$$;

COMMENT ON FUNCTION opreg_sql.lookup(text, text) IS
    'The operation under (namespace, operation_key), as Lookup answers it; P0002 OPERATION_NOT_FOUND when there is none';
