//! Retention: finished operations past their namespace's retention are
//! deleted with their executions and audit rows (the foreign keys cascade),
//! in short batches.

use std::time::Duration;

use sqlx::PgExecutor;

use crate::domain::ids::Namespace;
use crate::domain::policy::micros_ceil;
use crate::store::QueryTimer;

/// Namespaces that have finished operations, read by skipping through the
/// finished index one namespace at a time (a loose index scan), never by
/// scanning the rows.
pub async fn namespaces_with_finished(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<Namespace>> {
    let _timer = QueryTimer::start("operations_namespaces_with_finished");
    let rows: Vec<(String,)> = sqlx::query_as(
        "WITH RECURSIVE spaces AS (
             (SELECT namespace FROM operations
              WHERE status IN ('succeeded', 'failed')
              ORDER BY namespace LIMIT 1)
             UNION ALL
             SELECT (SELECT o.namespace FROM operations AS o
                     WHERE o.status IN ('succeeded', 'failed') AND o.namespace > spaces.namespace
                     ORDER BY o.namespace LIMIT 1)
             FROM spaces WHERE spaces.namespace IS NOT NULL
         )
         SELECT namespace FROM spaces WHERE namespace IS NOT NULL",
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(namespace,)| Namespace::from_stored(namespace))
        .collect())
}

/// Deletes up to `limit` finished operations of `namespace` completed more than
/// `retention` ago, oldest first. An original whose compensation is still
/// unfinished is kept; rows locked by a caller are skipped. Returns how many went.
pub async fn purge_finished(
    db: impl PgExecutor<'_>,
    namespace: &Namespace,
    retention: Duration,
    limit: u32,
) -> sqlx::Result<u64> {
    let _timer = QueryTimer::start("operations_purge_finished");
    let deleted = sqlx::query(
        "WITH doomed AS (
             SELECT o.namespace, o.operation_key FROM operations AS o
             WHERE o.namespace = $1 AND o.status IN ('succeeded', 'failed')
               AND o.completed_at < clock_timestamp() - $2::bigint * interval '1 microsecond'
               AND NOT EXISTS (
                   SELECT 1 FROM operations AS compensation
                   WHERE compensation.namespace = o.namespace
                     AND compensation.operation_key = o.compensated_by
                     AND compensation.status NOT IN ('succeeded', 'failed'))
             ORDER BY o.completed_at
             LIMIT $3
             FOR UPDATE OF o SKIP LOCKED
         )
         DELETE FROM operations AS gone USING doomed
         WHERE gone.namespace = doomed.namespace AND gone.operation_key = doomed.operation_key",
    )
    .bind(namespace.as_str())
    .bind(micros_ceil(retention))
    .bind(i64::from(limit))
    .execute(db)
    .await?;
    Ok(deleted.rows_affected())
}

/// How far past `retention` the oldest finished operation of `namespace` is
/// (zero when none is): how far retention lags behind.
pub async fn oldest_finished_age(
    db: impl PgExecutor<'_>,
    namespace: &Namespace,
    retention: Duration,
) -> sqlx::Result<f64> {
    let _timer = QueryTimer::start("operations_oldest_finished_age");
    let (lag,): (Option<f64>,) = sqlx::query_as(
        "SELECT GREATEST(0, EXTRACT(EPOCH FROM
                    clock_timestamp() - $2::bigint * interval '1 microsecond' - min(completed_at)))::float8
         FROM operations
         WHERE namespace = $1 AND status IN ('succeeded', 'failed')",
    )
    .bind(namespace.as_str())
    .bind(micros_ceil(retention))
    .fetch_one(db)
    .await?;
    Ok(lag.unwrap_or(0.0))
}
