-- Fencing tokens that never go back, whatever the database was restored to.
--
-- Every token comes from the sequence fencing_tokens. A database restored to
-- an earlier point (a base backup and WAL, a snapshot), or a standby promoted
-- without the primary's last commits, has the sequence as it was then, and
-- would hand out again tokens a holder or a resource outside the database has
-- already seen. So tokens are kept at or under the database clock in
-- microseconds, and the first draw after PostgreSQL starts lifts the sequence
-- to the clock: every token issued before the restart was at most the clock
-- when it was issued, which is earlier than now. ARCHITECTURE.md ("Fencing
-- tokens after a restore") states what this assumes of the clock and of the
-- rate of draws.
--
-- How a draw knows whether this PostgreSQL has lifted the sequence: two
-- sequences, fencing_token_floor_start (the start of the postmaster that last
-- lifted, in microseconds) and fencing_token_floor (what it lifted the tokens
-- to). Sequences, because they are read and set outside any transaction and
-- snapshot: a lift is seen at once by every session, whatever its isolation,
-- and a lift whose transaction rolls back still stands (as setval does). Lifts
-- are serialised by a session advisory lock held only while lifting, never
-- until the lifting transaction ends: a caller's long transaction through the
-- SQL door cannot hold up the other sessions' first draws.
--
-- Every draw, the registry's statements' and the SQL door's, goes through
-- next_fencing_token(), inlined into the statement: it compares the start
-- recorded with pg_postmaster_start_time() (a sequence read, about 3 µs) and
-- draws, or lifts first. Nothing is trusted from the session.
--
-- Expand only: the previous release keeps drawing with a bare nextval, which
-- keeps tokens increasing; tokens are safe across a restore once no replica of
-- it remains.

-- The search path of the functions below: the schema of the registry's
-- tables, then pg_temp (as the SQL door's, 20261205000001).
SELECT set_config('search_path',
                  quote_ident(n.nspname) || ', pg_temp', true)
FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.oid = 'operations'::regclass;

CREATE SEQUENCE fencing_token_floor_start AS bigint MINVALUE 0 START WITH 0;
CREATE SEQUENCE fencing_token_floor AS bigint MINVALUE 0 START WITH 0;

-- Lifts the tokens to the clock in microseconds (never down), records the
-- lift for this postmaster (the start last, so a draw that sees it sees the
-- lift), and returns the floor. Unconditional: the first draw after a start
-- calls it, and so does `opreg-server restore` (a logical restore into a
-- running server starts no postmaster). The advisory lock is re-entrant:
-- draw_fencing_token holds it already.
CREATE FUNCTION lift_fencing_tokens() RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    floor_now bigint;
BEGIN
    PERFORM pg_advisory_lock(7307761926380335431);  -- opreg's fencing-token lift
    BEGIN
        floor_now := greatest((extract(epoch FROM clock_timestamp()) * 1000000)::bigint,
                              (SELECT last_value FROM fencing_tokens));
        PERFORM setval('fencing_tokens', floor_now);
        PERFORM setval('fencing_token_floor', floor_now);
        PERFORM setval('fencing_token_floor_start',
                       (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint);
    EXCEPTION WHEN OTHERS THEN
        PERFORM pg_advisory_unlock(7307761926380335431);
        RAISE;
    END;
    PERFORM pg_advisory_unlock(7307761926380335431);
    RETURN floor_now;
END
$$;

-- A token after lifting, if no session of this postmaster has lifted yet
-- (checked again under the lock: another session may have lifted while this
-- one waited).
CREATE FUNCTION draw_fencing_token() RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pg_advisory_lock(7307761926380335431);
    BEGIN
        IF pg_sequence_last_value('fencing_token_floor_start')
           IS DISTINCT FROM (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint THEN
            PERFORM lift_fencing_tokens();
        END IF;
    EXCEPTION WHEN OTHERS THEN
        PERFORM pg_advisory_unlock(7307761926380335431);
        RAISE;
    END;
    PERFORM pg_advisory_unlock(7307761926380335431);
    RETURN nextval('fencing_tokens');
END
$$;

-- The one way to draw a token, inlined into the calling statement: nextval
-- once this postmaster's lift is recorded, else draw_fencing_token().
-- pg_sequence_last_value is NULL until the first lift.
CREATE FUNCTION next_fencing_token() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT CASE WHEN pg_sequence_last_value('fencing_token_floor_start')
                     = (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint
                THEN nextval('fencing_tokens')
                ELSE draw_fencing_token() END
$$;

-- The SQL door draws the same way: its functions are rewritten with the one
-- call replaced, everything else (SECURITY DEFINER, the fixed search path,
-- the grants) kept as pg_get_functiondef gives it back. tests/migrations.rs
-- checks that no function draws with a bare nextval.
DO $$
DECLARE
    door regprocedure;
BEGIN
    FOR door IN
        SELECT p.oid::regprocedure FROM pg_proc AS p
        WHERE p.pronamespace = 'opreg_sql'::regnamespace
          AND p.prosrc LIKE '%nextval(''fencing_tokens'')%'
    LOOP
        EXECUTE replace(pg_get_functiondef(door), 'nextval(''fencing_tokens'')', 'next_fencing_token()');
    END LOOP;
END
$$;

-- `opreg-server restore` writes one audit row per operation it made UNKNOWN.
ALTER TABLE audit_entries
    DROP CONSTRAINT audit_entries_action_known,
    ADD CONSTRAINT audit_entries_action_known CHECK (
        action IN ('resolve', 'requeue', 'hold', 'release', 'reuse', 'restore')
    ) NOT VALID;
ALTER TABLE audit_entries VALIDATE CONSTRAINT audit_entries_action_known;
