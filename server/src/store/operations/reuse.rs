//! The restart of a finished key (ReusePolicy::AfterFailure): a FAILED or
//! DEAD operation starts a new execution under a new token and a fresh
//! budget, in one guarded statement that archives the execution it replaces
//! and writes the audit row that shows who started it again.

use sqlx::PgExecutor;

use super::admin::{ChangeRow, Changed, fetch};
use super::{
    Operation, archive_replaced_execution, audit_changed, operation_columns, replaced_execution,
    start_new_execution,
};
use crate::domain::admin::AdminAction;
use crate::domain::commands::ClaimCommand;
use crate::domain::policy::micros_ceil;
use crate::store::QueryTimer;

/// What the audit row says of a reuse.
const REASON: &str = "claimed again with reuse policy AFTER_FAILURE";

/// Starts `observed` (FAILED or DEAD, unheld, as read) again for `claim`'s
/// owner: attempts continue from the ones spent, the budget is the claim's
/// policy counted from now, the result or failure goes, and the replaced
/// execution moves to the history with its outcome. `None` when the
/// operation moved since it was read.
#[tracing::instrument(level = "debug", name = "store.operations.reuse", skip_all)]
pub async fn reuse(
    db: impl PgExecutor<'_>,
    observed: &Operation,
    claim: &ClaimCommand,
) -> sqlx::Result<Option<Changed>> {
    let _timer = QueryTimer::start("operations_reuse");
    let policy = &claim.retry_policy;
    let query = sqlx::query_as::<_, ChangeRow>(concat!(
        "WITH replaced AS MATERIALIZED (
             SELECT ",
        replaced_execution!(),
        "
             FROM (
                 SELECT * FROM operations
                 WHERE namespace = $1 AND operation_key = $2
                 LIMIT 1
                 FOR NO KEY UPDATE
             ) AS o
             WHERE o.fencing_token = $3 AND o.status = $4 AND o.held_at IS NULL
               AND o.status IN ('failed', 'dead')
         ),
         ",
        archive_replaced_execution!(),
        ",
         changed AS (
             UPDATE operations AS o SET
                 fencing_token = r_new_token,
                 status = 'in_progress',
                 lease_owner = $5,
                 lease_expires_at = r_now + $6::bigint * interval '1 microsecond',
                 lease_takeover = false,
                 attempts = o.attempts + 1,
                 reconciling = false,
                 next_attempt_at = NULL,
                 budget_attempts_base = o.attempts,
                 max_attempts = LEAST(o.attempts::bigint + $8, 2147483647)::integer,
                 initial_backoff_us = $9,
                 max_backoff_us = $10,
                 deadline_at = r_now + $11::bigint * interval '1 microsecond',
                 result = NULL,
                 result_ref = NULL,
                 failure_code = NULL,
                 failure_message = NULL,
                 remote_ref = NULL,
                 unknown_since = NULL,
                 completed_at = NULL,
                 updated_at = r_now, ",
        start_new_execution!("'reuse'", "$7", "$5"),
        "
             FROM replaced
             WHERE o.namespace = r_namespace AND o.operation_key = r_key
             RETURNING ",
        operation_columns!(),
        "
         ),
         ",
        audit_changed!(
            "$12, $5, $13, '', $14, $4, status, false, false, $3, fencing_token, updated_at"
        ),
        "
         SELECT ",
        operation_columns!(),
        ", audit.* FROM changed, audit"
    ))
    .bind(observed.namespace.as_str())
    .bind(observed.operation_key.as_str())
    .bind(observed.fencing_token.as_i64())
    .bind(observed.status.as_str())
    .bind(&claim.lease.owner)
    .bind(micros_ceil(claim.lease.ttl))
    .bind(&claim.lease.execution_id)
    .bind(i64::from(policy.max_attempts))
    .bind(micros_ceil(policy.initial_backoff))
    .bind(micros_ceil(policy.max_backoff))
    .bind(micros_ceil(policy.deadline))
    .bind(AdminAction::Reuse.as_str())
    .bind(REASON)
    .bind(&claim.principal);
    fetch(db, query).await
}
