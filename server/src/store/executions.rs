//! Reads of every lease issued, through the `executions` view: the current
//! execution lives on its operation's row and the ones it replaced in
//! `execution_history`. Both are written by the transitions in
//! [`super::operations`]; this module reads them.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use crate::domain::ids::{FencingToken, Namespace, OperationKey};
use crate::domain::operation::{Execution, ExecutionKind, ExecutionOutcome};

/// Every column an execution record is read from.
macro_rules! execution_columns {
    () => {
        "fencing_token, attempt, kind, execution_id, owner, started_at, \
         finished_at, outcome, outcome_digest, error_class, message"
    };
}

#[derive(Debug, sqlx::FromRow)]
struct ExecutionRow {
    fencing_token: i64,
    attempt: i32,
    #[sqlx(try_from = "String")]
    kind: ExecutionKind,
    execution_id: String,
    owner: String,
    started_at: DateTime<Utc>,
    finished_at: Option<DateTime<Utc>>,
    #[sqlx(try_from = "String")]
    outcome: ExecutionOutcome,
    outcome_digest: Option<Vec<u8>>,
    error_class: Option<String>,
    message: Option<String>,
}

impl From<ExecutionRow> for Execution {
    fn from(row: ExecutionRow) -> Self {
        Execution {
            fencing_token: FencingToken::from_stored(row.fencing_token),
            attempt: u32::try_from(row.attempt).unwrap_or(0),
            kind: row.kind,
            execution_id: row.execution_id,
            owner: row.owner,
            started_at: row.started_at,
            finished_at: row.finished_at,
            outcome: row.outcome,
            outcome_digest: row.outcome_digest,
            error_class: row.error_class,
            message: row.message,
        }
    }
}

/// The execution started under `fencing_token` for this operation, if any.
#[tracing::instrument(level = "debug", name = "store.executions.find", skip_all)]
pub async fn find(
    db: impl PgExecutor<'_>,
    namespace: &Namespace,
    operation_key: &OperationKey,
    fencing_token: FencingToken,
) -> sqlx::Result<Option<Execution>> {
    let _timer = super::QueryTimer::start("executions_find");
    let row: Option<ExecutionRow> = sqlx::query_as(concat!(
        "SELECT ",
        execution_columns!(),
        " FROM executions
         WHERE fencing_token = $3 AND namespace = $1 AND operation_key = $2"
    ))
    .bind(namespace.as_str())
    .bind(operation_key.as_str())
    .bind(fencing_token.as_i64())
    .fetch_optional(db)
    .await?;
    Ok(row.map(Execution::from))
}

/// The whole history of an operation, by attempt and then by token.
#[tracing::instrument(level = "debug", name = "store.executions.list", skip_all)]
pub async fn list(
    db: impl PgExecutor<'_>,
    namespace: &Namespace,
    operation_key: &OperationKey,
) -> sqlx::Result<Vec<Execution>> {
    let _timer = super::QueryTimer::start("executions_list");
    let rows: Vec<ExecutionRow> = sqlx::query_as(concat!(
        "SELECT ",
        execution_columns!(),
        " FROM executions
         WHERE namespace = $1 AND operation_key = $2
         ORDER BY attempt, fencing_token"
    ))
    .bind(namespace.as_str())
    .bind(operation_key.as_str())
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(Execution::from).collect())
}
