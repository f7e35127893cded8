//! Statements on `resources`, the values protected by fencing tokens.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use crate::domain::ids::{FencingToken, Namespace, OperationKey};
use crate::domain::operation::Resource;

#[derive(Debug, sqlx::FromRow)]
struct ResourceRow {
    value: Vec<u8>,
    fence: i64,
    version: i64,
    operation_key: String,
    updated_at: DateTime<Utc>,
}

impl From<ResourceRow> for Resource {
    fn from(row: ResourceRow) -> Self {
        Resource {
            value: row.value,
            fence: FencingToken::from_stored(row.fence),
            version: u64::try_from(row.version).unwrap_or(0),
            operation_key: OperationKey::from_stored(row.operation_key),
            updated_at: row.updated_at,
        }
    }
}

/// Writes the resource unless its stored fence is higher than `fencing_token`;
/// returns the stored fence and version, or `None` when the fence refused.
#[tracing::instrument(level = "debug", name = "store.resources.write_fenced", skip_all)]
pub async fn write_fenced(
    db: impl PgExecutor<'_>,
    namespace: &Namespace,
    resource: &str,
    operation_key: &OperationKey,
    fencing_token: FencingToken,
    value: &[u8],
) -> sqlx::Result<Option<(FencingToken, u64)>> {
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
    .bind(namespace.as_str())
    .bind(resource)
    .bind(value)
    .bind(fencing_token.as_i64())
    .bind(operation_key.as_str())
    .fetch_optional(db)
    .await
    .map(|written: Option<(i64, i64)>| {
        written.map(|(fence, version)| {
            (
                FencingToken::from_stored(fence),
                u64::try_from(version).unwrap_or(0),
            )
        })
    })
}

#[tracing::instrument(level = "debug", name = "store.resources.find", skip_all)]
pub async fn find(
    db: impl PgExecutor<'_>,
    namespace: &Namespace,
    resource: &str,
) -> sqlx::Result<Option<Resource>> {
    let _timer = super::QueryTimer::start("resources_find");
    let row: Option<ResourceRow> = sqlx::query_as(
        "SELECT value, fence, version, operation_key, updated_at FROM resources
         WHERE namespace = $1 AND resource = $2",
    )
    .bind(namespace.as_str())
    .bind(resource)
    .fetch_optional(db)
    .await?;
    Ok(row.map(Resource::from))
}

/// The resources whose last accepted write came from this operation, by
/// name, at most `limit`: the operator console's view of what it wrote.
#[tracing::instrument(level = "debug", name = "store.resources.last_written_by", skip_all)]
pub async fn last_written_by(
    db: impl PgExecutor<'_>,
    namespace: &Namespace,
    operation_key: &OperationKey,
    limit: u32,
) -> sqlx::Result<Vec<(String, Resource)>> {
    let _timer = super::QueryTimer::start("resources_last_written_by");
    let rows: Vec<NamedResourceRow> = sqlx::query_as(
        "SELECT resource, value, fence, version, operation_key, updated_at FROM resources
         WHERE namespace = $1 AND operation_key = $2
         ORDER BY resource
         LIMIT $3",
    )
    .bind(namespace.as_str())
    .bind(operation_key.as_str())
    .bind(i64::from(limit))
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| (row.resource, row.row.into()))
        .collect())
}

#[derive(Debug, sqlx::FromRow)]
struct NamedResourceRow {
    resource: String,
    #[sqlx(flatten)]
    row: ResourceRow,
}
