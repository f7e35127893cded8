-- Every replica keeps SUCCEEDED and FAILED records in memory to answer
-- replays without a statement (server/src/registry/replays/). Such a record
-- changes only when a compensation marks it, an operator or retention deletes
-- it, or someone edits the table by hand; each of those tells every replica
-- on the channel `opreg_replays`, in the transaction that makes the change, so
-- the notice is delivered exactly when the change commits.
--
-- Payloads (namespaces and keys hold no control characters, so a newline
-- separates them):
--   'k' \n namespace \n operation_key   one record changed or went
--   'a'                                 the table was truncated: forget all
-- Replicas also send 'h' \n instance \n nanoseconds through their pools, to
-- prove that the notices reach them (registry/replays/follow.rs).

CREATE FUNCTION opreg_terminal_record_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(
        'opreg_replays',
        'k' || chr(10) || OLD.namespace || chr(10) || OLD.operation_key
    );
    RETURN NULL;
END
$$;

-- Only rows already terminal: the hot path's inserts and its updates of
-- unfinished rows evaluate the WHEN clause and nothing else.
CREATE TRIGGER operations_terminal_changed
    AFTER UPDATE OR DELETE ON operations
    FOR EACH ROW
    WHEN (OLD.status IN ('succeeded', 'failed'))
    EXECUTE FUNCTION opreg_terminal_record_changed();

CREATE FUNCTION opreg_operations_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('opreg_replays', 'a');
    RETURN NULL;
END
$$;

CREATE TRIGGER operations_truncated
    AFTER TRUNCATE ON operations
    FOR EACH STATEMENT
    EXECUTE FUNCTION opreg_operations_truncated();
