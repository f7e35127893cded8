-- Turns the open leases of one namespace into ghz call data, for the steps
-- that ghz cannot chain itself (a Complete needs the fencing token that the
-- Claim returned). Run from deploy/ghz:
--   psql "$OPREG_DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -v ns=ghz-life -f export-leases.sql
-- Writes, in the current directory:
--   complete-data.json  one Complete (success) per open lease
--   replay-data.json    one Claim per key, same parameters (answered REPLAYED
--                       once completed)
-- ghz sends the elements of a data array round-robin, one per request.
\pset tuples_only on
\pset format unaligned

\o complete-data.json
SELECT coalesce(json_agg(json_build_object(
           'namespace', namespace,
           'operationKey', operation_key,
           'fencingToken', fencing_token::text,
           'success', json_build_object('resultRef', 'ghz:' || operation_key))
         ORDER BY operation_key), '[]')
  FROM operations
 WHERE namespace = :'ns' AND status = 'in_progress';

\o replay-data.json
SELECT coalesce(json_agg(json_build_object(
           'namespace', namespace,
           'operationKey', operation_key,
           'parameters', parameters_canonical::json,
           'owner', 'ghz-replay')
         ORDER BY operation_key), '[]')
  FROM operations
 WHERE namespace = :'ns' AND status = 'in_progress';

\o
SELECT 'exported ' || count(*) || ' open leases of namespace ' || :'ns'
  FROM operations
 WHERE namespace = :'ns' AND status = 'in_progress';
