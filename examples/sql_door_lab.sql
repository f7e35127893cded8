-- The lab, line by line: the classic idempotency "account lab" played through
-- the SQL door (schema opreg_sql), from psql, in the caller's own
-- transactions. An account table of the lab's own, lab_accounts, holds account
-- A with 100; every debit claims its operation key first, changes the balance
-- and records the outcome in the same transaction, so the debit and the
-- registry's record commit or roll back together.
--
--   1. a debit: claim (ACQUIRED), UPDATE, complete SUCCESS, COMMIT
--   2. a concurrent caller of the same key waits on the first one's row lock,
--      then gets the stored answer (REPLAYED): the account is debited once
--   3. the replay: the same key again answers from the record, no debit
--   4. the same key with another amount: 23505 PARAMETER_CONFLICT
--   5. a business error (P0001) after the claim: ROLLBACK leaves no record
--   6. an outcome nobody knows: complete UNKNOWN, the next claim is RECONCILE
--   7. a lease that expires: another owner takes over with a higher token, and
--      the first holder's fenced write and complete are refused (55000
--      STALE_FENCING_TOKEN)
--
-- Run it with the driver, which checks every line against
-- examples/sql_door_lab.expected:
--
--   bash examples/sql_door_lab.sh "postgres://opreg@/opreg?host=/var/lib/opreg/run"
--
-- (that is the embedded PostgreSQL of an opreg-server started as root with no
-- configuration: its socket directory is <OPREG_DATA_DIR>/run, its role and
-- database are opreg), or with psql 11 or later alone, which prints the same
-- lines and step 5's ERROR on stderr:
--
--   psql -X -d "$URI" -f examples/sql_door_lab.sql
--
-- The role needs the registry's tables (the lab cleans up after earlier runs
-- with DELETE on operations and resources) and may create lab_accounts: the
-- registry's own role or a superuser. Step 2 starts a second psql with \! in
-- the background; it connects as this session does (PGHOST, PGPORT, PGUSER
-- and PGDATABASE below), or by $SQL_DOOR_LAB_DB when set (the driver sets it
-- to its argument, which may carry a password or sslmode). The lab prints no
-- fencing tokens or timestamps, only how they compare, so every run prints
-- the same lines; it can be run again on the same database.

\set ON_ERROR_STOP on
\set QUIET on
\pset tuples_only on
\pset format unaligned
\pset fieldsep ' '
SET client_min_messages = warning;

-- The second psql of step 2 connects where this session is connected.
\setenv PGHOST :HOST
\setenv PGPORT :PORT
\setenv PGUSER :USER
\setenv PGDATABASE :DBNAME
\set lab_dir `mktemp -d`
\setenv SQL_DOOR_LAB_DIR :lab_dir

-- A clean slate: the lab's account, and no operations or fenced resources of
-- the namespace from an earlier run.
DROP TABLE IF EXISTS lab_accounts;
CREATE TABLE lab_accounts (
    id      text PRIMARY KEY,
    balance bigint NOT NULL CHECK (balance >= 0)
);
INSERT INTO lab_accounts VALUES ('A', 100);
DELETE FROM operations WHERE namespace = 'sql-door-lab';
DELETE FROM resources WHERE namespace = 'sql-door-lab';

-- Runs a statement and answers 'ok', or the refusal's SQLSTATE and its reason
-- (the door puts the contract's ErrorReason in the DETAIL, and metadata such
-- as differingFields in the HINT). A real caller catches the same fields.
CREATE FUNCTION pg_temp.try(statement text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    state  text;
    reason text;
    hint   text;
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, reason = PG_EXCEPTION_DETAIL,
                            hint = PG_EXCEPTION_HINT;
    RETURN concat_ws(' ', state, reason, substring(hint FROM 'differingFields=[^;]*'));
END
$$;

-- Whether another backend waits on a lock this session holds, polled for up
-- to `patience` (pg_stat_activity is read once per transaction unless its
-- snapshot is cleared).
CREATE FUNCTION pg_temp.someone_waits_on_me(patience interval) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    give_up timestamptz := clock_timestamp() + patience;
BEGIN
    LOOP
        PERFORM pg_stat_clear_snapshot();
        IF EXISTS (SELECT 1 FROM pg_stat_activity AS a
                   WHERE a.wait_event_type = 'Lock'
                     AND pg_backend_pid() = ANY (pg_blocking_pids(a.pid))) THEN
            RETURN true;
        END IF;
        IF clock_timestamp() > give_up THEN
            RETURN false;
        END IF;
        PERFORM pg_sleep(0.1);
    END LOOP;
END
$$;


-- Step 1: a debit of 30 under debit:1, claimed, made and recorded in one
-- transaction. (An application debits only when the claim is ACQUIRED.)
BEGIN;
SELECT outcome, fencing_token AS token
  FROM opreg_sql.claim('sql-door-lab', 'debit:1', '{"account": "A", "amount": 30}', 'teller-1') \gset d1_
\echo step 1 claim debit:1: :d1_outcome
UPDATE lab_accounts SET balance = balance - 30 WHERE id = 'A' RETURNING balance \gset d1_
SELECT status
  FROM opreg_sql.complete('sql-door-lab', 'debit:1', :d1_token, 'SUCCESS',
                          result => convert_to(jsonb_build_object('balance', :d1_balance)::text, 'UTF8')) \gset d1_
\echo step 1 complete: :d1_status
COMMIT;
SELECT 'step 1 balance: ' || balance FROM lab_accounts WHERE id = 'A';


-- Step 2: two callers, one key. This session claims debit:2 and debits, and
-- has not committed when a second psql claims the same key: its registration
-- waits on this transaction's row. Once this one commits, the second is
-- answered from what committed, REPLAYED with the stored result, and debits
-- nothing. (Its parameters are the same, written as jsonb_build_object: the
-- door compares their canonical form.)
BEGIN;
SELECT outcome, fencing_token AS token
  FROM opreg_sql.claim('sql-door-lab', 'debit:2', '{"account": "A", "amount": 30}', 'teller-1') \gset d2_
\echo step 2 first caller claims debit:2: :d2_outcome
UPDATE lab_accounts SET balance = balance - 30 WHERE id = 'A' RETURNING balance \gset d2_

-- The second caller, in the background; its answer lands in a file once it has one.
\! (PGAPPNAME=sql-door-lab-second psql ${SQL_DOOR_LAB_DB:+"$SQL_DOOR_LAB_DB"} -X -q -A -t -F ' ' -v ON_ERROR_STOP=1 -c "SELECT outcome, convert_from(result, 'UTF8') FROM opreg_sql.claim('sql-door-lab', 'debit:2', jsonb_build_object('amount', 30, 'account', 'A'), 'teller-2')" >"$SQL_DOOR_LAB_DIR/second.part" 2>&1; mv "$SQL_DOOR_LAB_DIR/second.part" "$SQL_DOOR_LAB_DIR/second") >/dev/null 2>&1 &

SELECT pg_temp.someone_waits_on_me(interval '10 seconds') AS waits \gset
\echo step 2 second caller waits on a lock: :waits
SELECT status
  FROM opreg_sql.complete('sql-door-lab', 'debit:2', :d2_token, 'SUCCESS',
                          result => convert_to(jsonb_build_object('balance', :d2_balance)::text, 'UTF8')) \gset d2_
\echo step 2 first caller completes: :d2_status
COMMIT;

-- Waits (up to 20 s) for the second caller's answer.
\set second_answer `for i in $(seq 200); do [ -e "$SQL_DOOR_LAB_DIR/second" ] && break; sleep 0.1; done; cat "$SQL_DOOR_LAB_DIR/second"`
\echo step 2 second caller, after the commit: :second_answer
SELECT 'step 2 balance: ' || balance FROM lab_accounts WHERE id = 'A';


-- Step 3: the replay. debit:1 again, as a retry after a lost response would
-- send it: the stored result, and the balance stays.
SELECT outcome, convert_from(result, 'UTF8') AS result
  FROM opreg_sql.claim('sql-door-lab', 'debit:1', '{"account": "A", "amount": 30}', 'teller-1') \gset d3_
\echo step 3 claim debit:1 again: :d3_outcome :d3_result
SELECT 'step 3 balance: ' || balance FROM lab_accounts WHERE id = 'A';


-- Step 4: the same key with an amount of 101 is another request, refused.
SELECT 'step 4 claim debit:1 with amount 101: '
       || pg_temp.try($$SELECT opreg_sql.claim('sql-door-lab', 'debit:1',
                                               '{"account": "A", "amount": 101}', 'teller-1')$$);
SELECT 'step 4 balance: ' || balance FROM lab_accounts WHERE id = 'A';


-- Step 5: the claim is part of the transaction. debit:3 is claimed and the
-- account debited to 10, then the business refuses with P0001 (an account
-- keeps at least 20): the transaction rolls back, and with it the claim. No
-- record is left; the key is free, as if never asked.
BEGIN;
SELECT outcome FROM opreg_sql.claim('sql-door-lab', 'debit:3', '{"account": "A", "amount": 30}', 'teller-1') \gset d5_
\echo step 5 claim debit:3: :d5_outcome
UPDATE lab_accounts SET balance = balance - 30 WHERE id = 'A';
\set ON_ERROR_STOP off
DO $$
BEGIN
    IF (SELECT balance FROM lab_accounts WHERE id = 'A') < 20 THEN
        RAISE EXCEPTION 'insufficient funds' USING ERRCODE = 'P0001';
    END IF;
END
$$;
\set ON_ERROR_STOP on
\echo step 5 business error: :LAST_ERROR_SQLSTATE :LAST_ERROR_MESSAGE
ROLLBACK;
SELECT 'step 5 operationRows=' || count(*)
  FROM operations WHERE namespace = 'sql-door-lab' AND operation_key = 'debit:3';
SELECT 'step 5 lookup debit:3: ' || pg_temp.try($$SELECT opreg_sql.lookup('sql-door-lab', 'debit:3')$$);
SELECT 'step 5 balance: ' || balance FROM lab_accounts WHERE id = 'A';


-- Step 6: the unknown outcome. A payout's call to the bank times out: the
-- worker cannot say whether it happened and reports UNKNOWN with the bank's
-- reference. The next claim, by a reconciler, is RECONCILE under a new, higher
-- token, with that reference to ask the bank about.
SELECT outcome, fencing_token AS token
  FROM opreg_sql.claim('sql-door-lab', 'payout:1', '{"account": "A", "amount": 10}', 'payout-worker') \gset p1_
\echo step 6 claim payout:1: :p1_outcome
SELECT status
  FROM opreg_sql.complete('sql-door-lab', 'payout:1', :p1_token, 'UNKNOWN',
                          message => 'bank call timed out', remote_ref => 'bank-tx-7') \gset p1_
\echo step 6 complete UNKNOWN: :p1_status
SELECT outcome, fencing_token AS token, remote_ref
  FROM opreg_sql.claim('sql-door-lab', 'payout:1', '{"account": "A", "amount": 10}', 'reconciler') \gset p2_
\echo step 6 claim by the reconciler: :p2_outcome remote_ref=:p2_remote_ref
SELECT 'step 6 reconciler''s token > first token:', :p2_token > :p1_token;


-- Step 7: the lease takeover. worker-a claims transfer:1 with a 1 s lease and
-- writes the ledger under its token; its lease runs out; worker-b takes over
-- with a higher token. worker-a, back from a pause, is refused both its write
-- and its complete; worker-b's go through.
SELECT outcome, fencing_token AS token
  FROM opreg_sql.claim('sql-door-lab', 'transfer:1', '{"from": "A", "to": "B", "amount": 5}', 'worker-a',
                       lease => interval '1 second') \gset a_
\echo step 7 worker-a claims transfer:1 with a 1 s lease: :a_outcome
SELECT 'step 7 worker-a writes the ledger: version ' || version || ', fence = its token:', fence = :a_token
  FROM opreg_sql.fenced_write('sql-door-lab', 'ledger:transfer:1', 'transfer:1', :a_token, '\x61'::bytea);

-- worker-a pauses until its lease has expired.
SELECT pg_sleep_until(lease_expires_at + interval '200 milliseconds')
  FROM opreg_sql.lookup('sql-door-lab', 'transfer:1') \g /dev/null

SELECT outcome, fencing_token AS token
  FROM opreg_sql.claim('sql-door-lab', 'transfer:1', '{"from": "A", "to": "B", "amount": 5}', 'worker-b') \gset b_
\echo step 7 worker-b claims after the lease expired: :b_outcome
SELECT 'step 7 worker-b''s token > worker-a''s:', :b_token > :a_token;
SELECT 'step 7 worker-a writes again: '
       || pg_temp.try(format($$SELECT opreg_sql.fenced_write('sql-door-lab', 'ledger:transfer:1', 'transfer:1',
                                                              %s, '\x61'::bytea)$$, :a_token));
SELECT 'step 7 worker-a completes: '
       || pg_temp.try(format($$SELECT opreg_sql.complete('sql-door-lab', 'transfer:1', %s, 'SUCCESS')$$,
                             :a_token));
SELECT 'step 7 worker-b writes the ledger: version ' || version || ', fence = its token:', fence = :b_token
  FROM opreg_sql.fenced_write('sql-door-lab', 'ledger:transfer:1', 'transfer:1', :b_token, '\x62'::bytea);
SELECT 'step 7 worker-b completes: ' || status
  FROM opreg_sql.complete('sql-door-lab', 'transfer:1', :b_token, 'SUCCESS');

\! rm -rf "$SQL_DOOR_LAB_DIR"
