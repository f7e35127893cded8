//! After the database was restored from a backup (`opreg-server restore`):
//! every operation that may have moved on past the restore point becomes
//! UNKNOWN, so its next Claim is a RECONCILE lease and never a blind second
//! execution. One statement changes every such row and writes its audit row.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use super::{audit_changed, end_running_execution, supersede_lease};
use crate::domain::admin::{Actor, AdminAction};
use crate::domain::operation::Status;
use crate::store::QueryTimer;

/// The operations one namespace had in one status (and hold) before the
/// restore made them UNKNOWN.
#[derive(Debug, sqlx::FromRow)]
pub struct MadeUnknownRow {
    pub namespace: String,
    #[sqlx(try_from = "String")]
    pub status_before: Status,
    pub held: bool,
    pub count: i64,
    /// The latest change among them: nothing later is in the database.
    pub newest_change: DateTime<Utc>,
}

/// IN_PROGRESS (a lease, live or expired, whose holder may have finished
/// after the restore point) and RETRY_SCHEDULED (whose next attempt may have
/// run) become UNKNOWN from now; a lease is superseded by a new token and its
/// running execution ends REVOKED. Holds stay. UNKNOWN already is; SUCCEEDED,
/// FAILED and DEAD never run again without an operator.
#[tracing::instrument(level = "debug", name = "store.operations.restore", skip_all)]
pub async fn make_unfinished_unknown(
    db: impl PgExecutor<'_>,
    actor: &Actor,
) -> sqlx::Result<Vec<MadeUnknownRow>> {
    let _timer = QueryTimer::start("operations_restore");
    let sql = concat!(
        "WITH before AS MATERIALIZED (
             SELECT namespace, operation_key, status, fencing_token, held_at IS NOT NULL AS held,
                    updated_at
             FROM operations
             WHERE status IN ('in_progress', 'retry_scheduled')
             FOR NO KEY UPDATE
         ),
         changed AS (
             UPDATE operations AS o SET
                 status = 'unknown',
                 unknown_since = clock_timestamp(), ",
        supersede_lease!(),
        ",
                 last_error_class = 'restored',
                 last_error_message = 'the database was restored from a backup: \
                     what this operation did after the restore point is unknown',
                 updated_at = clock_timestamp(), ",
        end_running_execution!("revoked", "o.status = 'in_progress'"),
        "
             FROM before
             WHERE o.namespace = before.namespace AND o.operation_key = before.operation_key
               AND o.status = before.status AND o.fencing_token = before.fencing_token
             RETURNING o.namespace, o.operation_key, o.fencing_token, o.updated_at,
                       before.status AS status_before, before.held,
                       before.fencing_token AS token_before, before.updated_at AS changed_before
         ),
         ",
        audit_changed!(
            "$1, $2, $3, '', $4, status_before, 'unknown', held, held, token_before, \
             fencing_token, updated_at"
        ),
        "
         SELECT namespace, status_before, held, count(*) AS count,
                max(changed_before) AS newest_change
         FROM changed
         GROUP BY namespace, status_before, held
         ORDER BY namespace, status_before, held"
    );
    sqlx::query_as(sql)
        .bind(AdminAction::Restore.as_str())
        .bind(actor.operator.as_str())
        .bind(actor.reason.as_str())
        .bind(actor.principal.as_str())
        .fetch_all(db)
        .await
}
