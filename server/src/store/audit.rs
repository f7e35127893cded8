//! Statements on `audit_entries`, the operator actions. Rows are written by
//! the admin transitions in [`super::operations`], in the same statement as
//! the change they describe; this module names the columns and reads them.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use crate::domain::admin::{AdminAction, AuditEntry};
use crate::domain::ids::{FencingToken, Namespace, OperationKey};
use crate::domain::operation::Status;

/// The columns of an audit row, aliased so they can share a row with an
/// operation's columns.
macro_rules! audit_columns {
    () => {
        "action AS audit_action, operator AS audit_operator, reason AS audit_reason, \
         revision AS audit_revision, principal AS audit_principal, \
         status_before AS audit_status_before, status_after AS audit_status_after, \
         held_before AS audit_held_before, held_after AS audit_held_after, \
         token_before AS audit_token_before, token_after AS audit_token_after, at AS audit_at"
    };
}
pub(crate) use audit_columns;

/// An `audit_entries` row, as [`audit_columns!`] names it.
#[derive(Debug, sqlx::FromRow)]
pub struct AuditRow {
    #[sqlx(try_from = "String")]
    audit_action: AdminAction,
    audit_operator: String,
    audit_reason: String,
    audit_revision: String,
    audit_principal: String,
    #[sqlx(try_from = "String")]
    audit_status_before: Status,
    #[sqlx(try_from = "String")]
    audit_status_after: Status,
    audit_held_before: bool,
    audit_held_after: bool,
    audit_token_before: i64,
    audit_token_after: i64,
    audit_at: DateTime<Utc>,
}

impl From<AuditRow> for AuditEntry {
    fn from(row: AuditRow) -> Self {
        AuditEntry {
            action: row.audit_action,
            operator: row.audit_operator,
            reason: row.audit_reason,
            revision: row.audit_revision,
            principal: row.audit_principal,
            status_before: row.audit_status_before,
            status_after: row.audit_status_after,
            held_before: row.audit_held_before,
            held_after: row.audit_held_after,
            token_before: FencingToken::from_stored(row.audit_token_before),
            token_after: FencingToken::from_stored(row.audit_token_after),
            at: row.audit_at,
        }
    }
}

/// Every action taken on an operation, oldest first.
#[tracing::instrument(level = "debug", name = "store.audit.list", skip_all)]
pub async fn list(
    db: impl PgExecutor<'_>,
    namespace: &Namespace,
    operation_key: &OperationKey,
) -> sqlx::Result<Vec<AuditEntry>> {
    let _timer = super::QueryTimer::start("audit_entries_list");
    let rows: Vec<AuditRow> = sqlx::query_as(concat!(
        "SELECT ",
        audit_columns!(),
        " FROM audit_entries
         WHERE namespace = $1 AND operation_key = $2
         ORDER BY id"
    ))
    .bind(namespace.as_str())
    .bind(operation_key.as_str())
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(AuditEntry::from).collect())
}
