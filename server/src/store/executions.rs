//! Statements on `executions`, the history of every lease issued. Rows are
//! written by the transitions in [`super::operations`]; this module reads them.

use sqlx::PgExecutor;

use crate::domain::operation::Execution;

/// The execution started under `fencing_token` for this operation, if any.
pub async fn find(
    db: impl PgExecutor<'_>,
    namespace: &str,
    operation_key: &str,
    fencing_token: i64,
) -> sqlx::Result<Option<Execution>> {
    let _timer = super::QueryTimer::start("executions_find");
    sqlx::query_as(
        "SELECT * FROM executions
         WHERE fencing_token = $3 AND namespace = $1 AND operation_key = $2",
    )
    .bind(namespace)
    .bind(operation_key)
    .bind(fencing_token)
    .fetch_optional(db)
    .await
}

/// The whole history of an operation, by attempt and then by token.
pub async fn list(
    db: impl PgExecutor<'_>,
    namespace: &str,
    operation_key: &str,
) -> sqlx::Result<Vec<Execution>> {
    let _timer = super::QueryTimer::start("executions_list");
    sqlx::query_as(
        "SELECT * FROM executions
         WHERE namespace = $1 AND operation_key = $2
         ORDER BY attempt, fencing_token",
    )
    .bind(namespace)
    .bind(operation_key)
    .fetch_all(db)
    .await
}
