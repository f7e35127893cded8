//! Statements on `resources`, the values protected by fencing tokens.

use sqlx::PgExecutor;

use crate::domain::operation::Resource;

/// Writes the resource unless its stored fence is higher than `fencing_token`;
/// returns the stored fence and version, or `None` when the fence refused.
pub async fn write_fenced(
    db: impl PgExecutor<'_>,
    namespace: &str,
    resource: &str,
    operation_key: &str,
    fencing_token: i64,
    value: &[u8],
) -> sqlx::Result<Option<(i64, i64)>> {
    let _timer = super::QueryTimer::start("resources_write_fenced");
    sqlx::query_as(
        "INSERT INTO resources AS r (namespace, resource, value, fence, version, operation_key, updated_at)
         VALUES ($1, $2, $3, $4, 1, $5, clock_timestamp())
         ON CONFLICT (namespace, resource) DO UPDATE SET
             value = EXCLUDED.value,
             fence = EXCLUDED.fence,
             version = r.version + 1,
             operation_key = EXCLUDED.operation_key,
             updated_at = clock_timestamp()
         WHERE r.fence <= EXCLUDED.fence
         RETURNING fence, version",
    )
    .bind(namespace)
    .bind(resource)
    .bind(value)
    .bind(fencing_token)
    .bind(operation_key)
    .fetch_optional(db)
    .await
}

pub async fn find(
    db: impl PgExecutor<'_>,
    namespace: &str,
    resource: &str,
) -> sqlx::Result<Option<Resource>> {
    let _timer = super::QueryTimer::start("resources_find");
    sqlx::query_as(
        "SELECT value, fence, version, operation_key, updated_at FROM resources
         WHERE namespace = $1 AND resource = $2",
    )
    .bind(namespace)
    .bind(resource)
    .fetch_optional(db)
    .await
}
