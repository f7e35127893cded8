//! The operator's transitions. Each is one statement that changes the locked
//! row only if it is still as observed, ends the execution whose token it
//! supersedes, and writes exactly one audit row.

use sqlx::PgExecutor;
use sqlx::postgres::PgArguments;
use sqlx::query::QueryAs;

use super::{
    Operation, OperationRow, audit_changed, end_running_execution, operation_columns,
    supersede_lease,
};
use crate::domain::admin::{Actor, AdminAction, AuditEntry, Resolution};
use crate::domain::operation::Status;
use crate::domain::policy::{RetryPolicy, micros_ceil};
use crate::store::QueryTimer;
use crate::store::audit::AuditRow;

/// An operator action as recorded: the operation after it, and its audit row.
pub type Changed = (Operation, AuditEntry);

#[derive(Debug, sqlx::FromRow)]
pub(super) struct ChangeRow {
    #[sqlx(flatten)]
    operation: OperationRow,
    #[sqlx(flatten)]
    audit: AuditRow,
}

/// Wraps an `UPDATE operations AS o SET … WHERE <guard>` (its text, without
/// RETURNING) into the statement every action shares. An action that
/// supersedes the token also revokes the execution it started, if that never
/// reported (`end_running_execution!`). Parameters $1–$10 are
/// the guard and the audit: namespace, key, observed token, observed status,
/// observed held, action, operator, reason, revision, principal; each action's
/// own parameters start at $11.
macro_rules! admin_statement {
    ($($set:tt)+) => {
        concat!(
            "WITH changed AS (
                 UPDATE operations AS o SET ",
            $($set)+,
            ", updated_at = clock_timestamp()
                 WHERE o.namespace = $1 AND o.operation_key = $2
                   AND o.fencing_token = $3 AND o.status = $4 AND (o.held_at IS NOT NULL) = $5
                 RETURNING ",
            operation_columns!(),
            "
             ),
             ",
            audit_changed!(
                "$6, $7, $8, $9, $10, $4, status, $5, held_at IS NOT NULL, $3, fencing_token, updated_at"
            ),
            "
             SELECT ",
            operation_columns!(),
            ", audit.* FROM changed, audit"
        )
    };
}

fn guarded<'q>(
    sql: &'static str,
    observed: &'q Operation,
    action: AdminAction,
    actor: &'q Actor,
    revision: &'q str,
) -> QueryAs<'q, sqlx::Postgres, ChangeRow, PgArguments> {
    sqlx::query_as(sql)
        .bind(observed.namespace.as_str())
        .bind(observed.operation_key.as_str())
        .bind(observed.fencing_token.as_i64())
        .bind(observed.status.as_str())
        .bind(observed.is_held())
        .bind(action.as_str())
        .bind(actor.operator.as_str())
        .bind(actor.reason.as_str())
        .bind(revision)
        .bind(actor.principal.as_str())
}

pub(super) async fn fetch(
    db: impl PgExecutor<'_>,
    query: QueryAs<'_, sqlx::Postgres, ChangeRow, PgArguments>,
) -> sqlx::Result<Option<Changed>> {
    let row = query.fetch_optional(db).await?;
    Ok(row.map(|row| (row.operation.into(), row.audit.into())))
}

/// Freezes the operation. With `revoke_live_lease` the lease's token is
/// superseded (its holder's Complete, Renew and FencedWrite are refused) and
/// the lease ends now; the release will make the outcome unknown.
#[tracing::instrument(level = "debug", name = "store.admin.hold", skip_all)]
pub async fn hold(
    db: impl PgExecutor<'_>,
    observed: &Operation,
    actor: &Actor,
    revoke_live_lease: bool,
) -> sqlx::Result<Option<Changed>> {
    let _timer = QueryTimer::start("operations_hold");
    let sql = admin_statement!(concat!(
        "held_at = clock_timestamp(),
         hold_revoked_lease = $11,
         fencing_token = CASE WHEN $11 THEN next_fencing_token() ELSE o.fencing_token END,
         lease_expires_at = CASE WHEN $11 THEN clock_timestamp() ELSE o.lease_expires_at END, ",
        end_running_execution!("revoked", "$11")
    ));
    let query = guarded(sql, observed, AdminAction::Hold, actor, "").bind(revoke_live_lease);
    fetch(db, query).await
}

/// Ends a hold, into `status`: UNKNOWN after a revoked lease (that execution
/// may have taken effect), else the status the operation kept while held.
#[tracing::instrument(level = "debug", name = "store.admin.release", skip_all)]
pub async fn release(
    db: impl PgExecutor<'_>,
    observed: &Operation,
    actor: &Actor,
    status: Status,
) -> sqlx::Result<Option<Changed>> {
    let _timer = QueryTimer::start("operations_release");
    let sql = admin_statement!(
        "held_at = NULL,
         hold_revoked_lease = false,
         status = $11,
         lease_owner = CASE WHEN $11 = 'in_progress' THEN o.lease_owner END,
         lease_expires_at = CASE WHEN $11 = 'in_progress' THEN o.lease_expires_at END,
         lease_takeover = CASE WHEN $11 = 'in_progress' THEN o.lease_takeover ELSE false END,
         reconciling = CASE WHEN $11 = 'in_progress' THEN o.reconciling ELSE false END,
         unknown_since = CASE WHEN $11 = 'unknown' THEN COALESCE(o.unknown_since, clock_timestamp())
                              ELSE o.unknown_since END,
         last_error_class = CASE WHEN o.hold_revoked_lease THEN 'lease_revoked' ELSE o.last_error_class END,
         last_error_message = CASE WHEN o.hold_revoked_lease
                                   THEN 'an operator hold revoked a live lease; its outcome is unknown'
                                   ELSE o.last_error_message END"
    );
    let query = guarded(sql, observed, AdminAction::Release, actor, "").bind(status.as_str());
    fetch(db, query).await
}

/// Records the outcome an operator established. A lease, live or not, is
/// superseded; a hold ends; later Claims replay the resolution.
#[tracing::instrument(level = "debug", name = "store.admin.resolve", skip_all)]
pub async fn resolve(
    db: impl PgExecutor<'_>,
    observed: &Operation,
    actor: &Actor,
    resolution: &Resolution,
) -> sqlx::Result<Option<Changed>> {
    let _timer = QueryTimer::start("operations_resolve");
    let (result, result_ref, failure_code, failure_message) = match resolution {
        Resolution::Success { result, result_ref } => (
            Some(result.as_slice()),
            Some(result_ref.as_str()),
            None,
            None,
        ),
        Resolution::Failure { code, message } => {
            (None, None, Some(code.as_str()), Some(message.as_str()))
        }
    };
    let sql = admin_statement!(concat!(
        "status = $11,
         result = $12,
         result_ref = $13,
         failure_code = $14,
         failure_message = $15, ",
        supersede_lease!(),
        ",
         held_at = NULL,
         hold_revoked_lease = false,
         unknown_since = NULL,
         completed_at = clock_timestamp(), ",
        end_running_execution!("revoked", "o.status = 'in_progress'")
    ));
    let query = guarded(sql, observed, AdminAction::Resolve, actor, "")
        .bind(resolution.status().as_str())
        .bind(result)
        .bind(result_ref)
        .bind(failure_code)
        .bind(failure_message);
    fetch(db, query).await
}

/// DEAD → RETRY_SCHEDULED, due now, under a fresh budget counted from the
/// attempts already spent. Key and parameters stay as they were.
#[tracing::instrument(level = "debug", name = "store.admin.requeue", skip_all)]
pub async fn requeue(
    db: impl PgExecutor<'_>,
    observed: &Operation,
    actor: &Actor,
    revision: &str,
    policy: &RetryPolicy,
) -> sqlx::Result<Option<Changed>> {
    let _timer = QueryTimer::start("operations_requeue");
    let sql = admin_statement!(
        "status = 'retry_scheduled',
         next_attempt_at = clock_timestamp(),
         budget_attempts_base = o.attempts,
         max_attempts = LEAST(o.attempts::bigint + $11, 2147483647)::integer,
         initial_backoff_us = $12,
         max_backoff_us = $13,
         deadline_at = clock_timestamp() + $14::bigint * interval '1 microsecond',
         completed_at = NULL"
    );
    let query = guarded(sql, observed, AdminAction::Requeue, actor, revision)
        .bind(i64::from(policy.max_attempts))
        .bind(micros_ceil(policy.initial_backoff))
        .bind(micros_ceil(policy.max_backoff))
        .bind(micros_ceil(policy.deadline));
    fetch(db, query).await
}
