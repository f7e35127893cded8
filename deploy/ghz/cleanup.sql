-- Removes everything the ghz scenarios registered (namespaces ghz-*); executions
-- go with their operations (ON DELETE CASCADE). Never run against a database
-- whose real namespaces start with "ghz-".
--   psql "$OPREG_DATABASE_URL" -X -v ON_ERROR_STOP=1 -f cleanup.sql
BEGIN;
DELETE FROM resources WHERE namespace LIKE 'ghz-%';
DELETE FROM operations WHERE namespace LIKE 'ghz-%';
COMMIT;
