-- no-transaction
-- Keys a distributed engine can enforce, part 4 of 4: one compensation per
-- original is decided on the original's row. The registering statement sets
-- its compensated_by only while it is NULL, and a second compensation that
-- loses that race rolls back (store/operations/transitions.rs::register). A
-- unique index over (namespace, compensates) would span two operations' shards.
-- Dropped concurrently: no lock that would stop Claims.
DROP INDEX CONCURRENTLY IF EXISTS operations_one_compensation;
