//! What the server reads of the SQL door (`migrations/20261205000001_*`): the
//! door's own calls are counted by PostgreSQL, not by this process, and
//! reported with the gauges.

use sqlx::PgExecutor;

/// Calls of one SQL-door function that ended in one outcome.
#[derive(Debug, sqlx::FromRow)]
pub struct CallCount {
    /// `claim`, `complete`, `fenced_write`, or `execution` (a lease handed out).
    pub call: String,
    pub outcome: String,
    pub calls: i64,
}

/// Every count since the database was created.
#[tracing::instrument(level = "debug", name = "store.sql_door.call_counts", skip_all)]
pub async fn call_counts(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<CallCount>> {
    let _timer = super::QueryTimer::start("sql_door_call_counts");
    sqlx::query_as("SELECT call, outcome, calls FROM opreg_sql.call_counts")
        .fetch_all(db)
        .await
}
