-- Gauges read the unresolved backlog every few seconds: keep that read to the
-- backlog itself, never the ever-growing set of finished operations.

-- When the current unknown outcome was first reported; cleared once resolved.
ALTER TABLE operations ADD COLUMN unknown_since timestamptz;

CREATE INDEX operations_backlog
    ON operations (namespace, status)
    INCLUDE (unknown_since)
    WHERE status IN ('in_progress', 'retry_scheduled', 'unknown', 'dead');
