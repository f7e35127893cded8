-- Waiting callers and the reuse of a finished key (ReusePolicy).
--
-- Waiting. A Claim or Lookup that waits for an operation to move marks its
-- row `watched` (the row stays marked) and listens, through its replica's
-- one listening session (registry/replays/follow.rs), on the channel the
-- replay cache already uses. From then on every change of the row's status,
-- token or hold, whoever makes it (a Complete, a takeover, an operator, the
-- SQL door, a hand edit), and its deletion, send one notice when they commit,
-- and the replica wakes exactly the calls waiting on that key. Rows nobody
-- waits on send nothing: the hot path pays for the WHEN clause alone.
--
-- Payload, beside those of 20261202000001 (replicas skip payloads they do not
-- know, so an older replica ignores it):
--   'c' \n namespace \n operation_key   a watched, unfinished row changed or went
-- Finished rows already send 'k' on any change (20261202000001); waiting
-- callers are woken by both.

ALTER TABLE operations ADD COLUMN watched boolean NOT NULL DEFAULT false;

COMMENT ON COLUMN operations.watched IS
    'A caller waited on this operation: every later change of the row notifies its replicas (opreg_replays, payload c)';

CREATE FUNCTION opreg_watched_operation_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(
        'opreg_replays',
        'c' || chr(10) || OLD.namespace || chr(10) || OLD.operation_key
    );
    RETURN NULL;
END
$$;

-- Finished rows notify through operations_terminal_changed already. Marking a
-- row watched (OLD.watched false) sends nothing, nor does a Renew (only the
-- lease's expiry moves; a waiting Claim reads again at that time anyway).
CREATE TRIGGER operations_watched_changed
    AFTER UPDATE ON operations
    FOR EACH ROW
    WHEN (OLD.watched AND OLD.status NOT IN ('succeeded', 'failed')
          AND (OLD.status, OLD.fencing_token, OLD.held_at)
              IS DISTINCT FROM (NEW.status, NEW.fencing_token, NEW.held_at))
    EXECUTE FUNCTION opreg_watched_operation_changed();

CREATE TRIGGER operations_watched_deleted
    AFTER DELETE ON operations
    FOR EACH ROW
    WHEN (OLD.watched AND OLD.status NOT IN ('succeeded', 'failed'))
    EXECUTE FUNCTION opreg_watched_operation_changed();

-- Reuse. A Claim with REUSE_POLICY_AFTER_FAILURE starts a FAILED or DEAD
-- operation again: its execution is of kind 'reuse', and the trail records
-- the restart with the action 'reuse'. (Replacing a constraint checks every
-- row under the table's lock: these tables are written by the hot path, so
-- this migration takes them for as long as one scan of each.)
ALTER TABLE operations
    DROP CONSTRAINT operations_execution_kind_known,
    ADD CONSTRAINT operations_execution_kind_known CHECK (
        execution_kind IN ('first', 'retry', 'takeover', 'reconcile', 'reuse')
    );

ALTER TABLE execution_history
    DROP CONSTRAINT execution_history_kind_known,
    ADD CONSTRAINT execution_history_kind_known CHECK (
        kind IN ('first', 'retry', 'takeover', 'reconcile', 'reuse')
    );

ALTER TABLE audit_entries
    DROP CONSTRAINT audit_entries_action_known,
    ADD CONSTRAINT audit_entries_action_known CHECK (
        action IN ('resolve', 'requeue', 'hold', 'release', 'reuse')
    );
