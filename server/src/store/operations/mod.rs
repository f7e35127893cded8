//! Statements on `operations`, the one place its SQL lives. Each state
//! transition is one guarded statement that also writes the `executions` and
//! `audit_entries` rows it implies; callers check that it returned the row.
//! Every time comes from the database clock, never from this process's.

mod admin;
mod outcomes;
mod queue;
mod restore;
mod retention;
mod reuse;
mod transitions;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use crate::domain::ids::{FencingToken, Namespace, OperationKey};
use crate::domain::operation::{Budget, Operation, Status};

pub use admin::{hold, release, requeue, resolve};
pub use outcomes::{Recording, record_outcomes};
pub use queue::{
    DueCandidate, due, due_preview, exhaustion_candidates, list, list_finished, live_retry_leases,
    plan_with_values, serialize_retry_cap,
};
pub use restore::{MadeUnknownRow, make_unfinished_unknown};
pub use retention::{namespaces_with_finished, oldest_finished_age, purge_finished};
pub use reuse::reuse;
pub use transitions::{
    BacklogRow, Registered, Registration, backlog, exhaust, register, renew, restart_first_lease,
    start_executions,
};

/// Every column of `operations` a domain record is read from, in one list so
/// each statement names them rather than `*`.
macro_rules! operation_columns {
    () => {
        operation_columns!("parameters_canonical", "result")
    };
    // With other expressions for the two columns that can be large (up to
    // 64 KiB and 1 MiB): lists that never show them leave them unread.
    ($parameters_canonical:literal, $result:literal) => {
        concat!(
            "namespace, operation_key, status, parameters_digest, ",
            $parameters_canonical,
            ", compensates, compensated_by, fencing_token, lease_owner, lease_expires_at, \
             lease_takeover, attempts, reconciling, max_attempts, budget_attempts_base, \
             initial_backoff_us, max_backoff_us, deadline_at, next_attempt_at, ",
            $result,
            ", result_ref, failure_code, failure_message, remote_ref, last_error_class, \
             last_error_message, held_at, hold_revoked_lease, created_at, updated_at, completed_at"
        )
    };
}
pub(crate) use operation_columns;

/// The SET items of an `UPDATE operations AS o` that end the current
/// execution with `$outcome` when `$cond` holds and it is still running: one
/// definition of how a lease that never reported ends, for the transitions
/// that supersede it and the operator's actions that revoke it.
macro_rules! end_running_execution {
    ($outcome:literal, $cond:literal) => {
        concat!(
            "execution_outcome = CASE WHEN (",
            $cond,
            ") AND o.execution_outcome = 'running' THEN '",
            $outcome,
            "' ELSE o.execution_outcome END,
             execution_finished_at = CASE WHEN (",
            $cond,
            ") AND o.execution_outcome = 'running' THEN clock_timestamp()
                                          ELSE o.execution_finished_at END"
        )
    };
}
pub(crate) use end_running_execution;

/// The SET items of an `UPDATE operations AS o` that end its lease and any
/// schedule: a lease (live or expired) is superseded by a new token, so its
/// holder's Complete, Renew and FencedWrite are refused from now on.
macro_rules! supersede_lease {
    () => {
        "fencing_token = CASE WHEN o.status = 'in_progress' THEN next_fencing_token()
                              ELSE o.fencing_token END,
         lease_owner = NULL,
         lease_expires_at = NULL,
         lease_takeover = false,
         reconciling = false,
         next_attempt_at = NULL"
    };
}
pub(crate) use supersede_lease;

/// The columns a statement that starts a new execution reads from the
/// locked row `o` as `replaced`: the execution it replaces, a new token
/// (drawn only for a row that moves) and the clock.
macro_rules! replaced_execution {
    () => {
        "o.namespace AS r_namespace, o.operation_key AS r_key,
         o.attempts AS r_attempt, o.execution_token AS r_token,
         o.execution_kind AS r_execution_kind, o.execution_id AS r_execution_id,
         o.execution_owner AS r_owner, o.execution_started_at AS r_started_at,
         o.execution_finished_at AS r_finished_at, o.execution_outcome AS r_outcome,
         o.execution_outcome_digest AS r_digest, o.execution_error_class AS r_class,
         o.execution_message AS r_message,
         next_fencing_token() AS r_new_token, clock_timestamp() AS r_now"
    };
}
pub(crate) use replaced_execution;

/// The CTE `archived`: each `replaced` execution goes to the history,
/// superseded if it never reported. A row written by hand may have none.
macro_rules! archive_replaced_execution {
    () => {
        "archived AS (
             INSERT INTO execution_history (
                 fencing_token, namespace, operation_key, attempt, kind, execution_id, owner,
                 started_at, finished_at, outcome, outcome_digest, error_class, message)
             SELECT r_token, r_namespace, r_key, r_attempt, r_execution_kind, r_execution_id,
                    r_owner, r_started_at,
                    CASE WHEN r_outcome = 'running' THEN r_now ELSE r_finished_at END,
                    CASE WHEN r_outcome = 'running' THEN 'superseded' ELSE r_outcome END,
                    r_digest, r_class, r_message
             FROM replaced
             WHERE r_token IS NOT NULL
         )"
    };
}
pub(crate) use archive_replaced_execution;

/// The SET items that make the new execution (`$kind`, run id `$id`, owner
/// `$owner`, SQL expressions) current, running from `r_now` under `r_new_token`.
macro_rules! start_new_execution {
    ($kind:literal, $id:literal, $owner:literal) => {
        concat!(
            "execution_token = r_new_token,
             execution_kind = ",
            $kind,
            ",
             execution_id = ",
            $id,
            ",
             execution_owner = ",
            $owner,
            ",
             execution_started_at = r_now,
             execution_finished_at = NULL,
             execution_outcome = 'running',
             execution_outcome_digest = NULL,
             execution_error_class = NULL,
             execution_message = NULL"
        )
    };
}
pub(crate) use start_new_execution;

/// The CTE `audit`: one audit row per row of `changed`, from `$values` (the
/// SQL after namespace and key, in the column order below).
macro_rules! audit_changed {
    ($values:literal) => {
        concat!(
            "audit AS (
                 INSERT INTO audit_entries (
                     namespace, operation_key, action, operator, reason, revision, principal,
                     status_before, status_after, held_before, held_after,
                     token_before, token_after, at)
                 SELECT namespace, operation_key, ",
            $values,
            "
                 FROM changed
                 RETURNING ",
            crate::store::audit::audit_columns!(),
            "
             )"
        )
    };
}
pub(crate) use audit_changed;

/// An `operations` row as PostgreSQL returns it.
#[derive(Debug, sqlx::FromRow)]
pub struct OperationRow {
    namespace: String,
    operation_key: String,
    #[sqlx(try_from = "String")]
    status: Status,
    parameters_digest: Vec<u8>,
    parameters_canonical: Option<String>,
    compensates: Option<String>,
    compensated_by: Option<String>,
    fencing_token: i64,
    lease_owner: Option<String>,
    lease_expires_at: Option<DateTime<Utc>>,
    lease_takeover: bool,
    attempts: i32,
    reconciling: bool,
    max_attempts: i32,
    budget_attempts_base: i32,
    initial_backoff_us: i64,
    max_backoff_us: i64,
    deadline_at: DateTime<Utc>,
    next_attempt_at: Option<DateTime<Utc>>,
    result: Option<Vec<u8>>,
    result_ref: Option<String>,
    failure_code: Option<String>,
    failure_message: Option<String>,
    remote_ref: Option<String>,
    last_error_class: Option<String>,
    last_error_message: Option<String>,
    held_at: Option<DateTime<Utc>>,
    hold_revoked_lease: bool,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    completed_at: Option<DateTime<Utc>>,
}

/// Counts the schema keeps non-negative (check constraints, the sequence).
fn count(value: i32) -> u32 {
    u32::try_from(value).unwrap_or(0)
}

fn micros(value: i64) -> std::time::Duration {
    std::time::Duration::from_micros(u64::try_from(value).unwrap_or(0))
}

impl From<OperationRow> for Operation {
    fn from(row: OperationRow) -> Self {
        Operation {
            namespace: Namespace::from_stored(row.namespace),
            operation_key: OperationKey::from_stored(row.operation_key),
            status: row.status,
            parameters_digest: row.parameters_digest,
            parameters_canonical: row.parameters_canonical,
            compensates: row.compensates.map(OperationKey::from_stored),
            compensated_by: row.compensated_by.map(OperationKey::from_stored),
            fencing_token: FencingToken::from_stored(row.fencing_token),
            lease_owner: row.lease_owner,
            lease_expires_at: row.lease_expires_at,
            lease_takeover: row.lease_takeover,
            attempts: count(row.attempts),
            reconciling: row.reconciling,
            budget: Budget {
                max_attempts: count(row.max_attempts),
                base_attempts: count(row.budget_attempts_base),
                initial_backoff: micros(row.initial_backoff_us),
                max_backoff: micros(row.max_backoff_us),
                deadline_at: row.deadline_at,
            },
            next_attempt_at: row.next_attempt_at,
            result: row.result,
            result_ref: row.result_ref,
            failure_code: row.failure_code,
            failure_message: row.failure_message,
            remote_ref: row.remote_ref,
            last_error_class: row.last_error_class,
            last_error_message: row.last_error_message,
            held_at: row.held_at,
            hold_revoked_lease: row.hold_revoked_lease,
            created_at: row.created_at,
            updated_at: row.updated_at,
            completed_at: row.completed_at,
        }
    }
}

/// An operation read together with the database clock.
#[derive(Clone, Debug)]
pub struct Observed {
    pub operation: Operation,
    pub db_now: DateTime<Utc>,
}

#[derive(Debug, sqlx::FromRow)]
struct ObservedRow {
    #[sqlx(flatten)]
    operation: OperationRow,
    db_now: DateTime<Utc>,
}

impl From<ObservedRow> for Observed {
    fn from(row: ObservedRow) -> Self {
        Observed {
            operation: row.operation.into(),
            db_now: row.db_now,
        }
    }
}

/// Reads an operation and the database clock. A separate statement from any
/// insert, so in READ COMMITTED it sees what a racing registration committed.
#[tracing::instrument(level = "debug", name = "store.operations.find", skip_all)]
pub async fn find(
    db: impl PgExecutor<'_>,
    namespace: &Namespace,
    operation_key: &OperationKey,
) -> sqlx::Result<Option<Observed>> {
    let _timer = crate::store::QueryTimer::start("operations_find");
    observe(
        db,
        concat!(
            "SELECT ",
            operation_columns!(),
            ", clock_timestamp() AS db_now FROM operations
             WHERE namespace = $1 AND operation_key = $2"
        ),
        namespace,
        operation_key,
    )
    .await
}

/// Marks an unfinished operation watched: from the commit on, every change
/// of its row notifies every replica (migrations/20261206000001), so waiting
/// calls are woken. A row already marked, or finished (which notifies
/// anyway), is left alone; the mark is never cleared.
#[tracing::instrument(level = "debug", name = "store.operations.watch", skip_all)]
pub async fn watch(
    db: impl PgExecutor<'_>,
    namespace: &Namespace,
    operation_key: &OperationKey,
) -> sqlx::Result<()> {
    let _timer = crate::store::QueryTimer::start("operations_watch");
    sqlx::query(
        "UPDATE operations SET watched = true
         WHERE namespace = $1 AND operation_key = $2
           AND NOT watched AND status NOT IN ('succeeded', 'failed')",
    )
    .bind(namespace.as_str())
    .bind(operation_key.as_str())
    .execute(db)
    .await?;
    Ok(())
}

/// Like [`find`], and locks the row until the transaction ends, ordering this
/// transaction against takeovers, completions and operator actions.
#[tracing::instrument(level = "debug", name = "store.operations.lock", skip_all)]
pub async fn lock(
    db: impl PgExecutor<'_>,
    namespace: &Namespace,
    operation_key: &OperationKey,
) -> sqlx::Result<Option<Observed>> {
    let _timer = crate::store::QueryTimer::start("operations_lock");
    // The clock is read in the outer query, after the lock is granted; in a
    // plain SELECT … FOR UPDATE it would be read before any lock wait.
    observe(
        db,
        concat!(
            "WITH locked AS (
                 SELECT ",
            operation_columns!(),
            " FROM operations
                 WHERE namespace = $1 AND operation_key = $2
                 FOR UPDATE
             )
             SELECT ",
            operation_columns!(),
            ", clock_timestamp() AS db_now FROM locked"
        ),
        namespace,
        operation_key,
    )
    .await
}

async fn observe(
    db: impl PgExecutor<'_>,
    sql: &'static str,
    namespace: &Namespace,
    operation_key: &OperationKey,
) -> sqlx::Result<Option<Observed>> {
    let row: Option<ObservedRow> = sqlx::query_as(sql)
        .bind(namespace.as_str())
        .bind(operation_key.as_str())
        .fetch_optional(db)
        .await?;
    Ok(row.map(Observed::from))
}

/// Rows returned by a transition, as domain records.
fn operations(rows: Vec<OperationRow>) -> Vec<Operation> {
    rows.into_iter().map(Operation::from).collect()
}

/// The `(namespace, key, token, status)` arrays a batch transition matches
/// rows by: each row moves only if it is still as it was observed.
struct Guards {
    namespaces: Vec<String>,
    keys: Vec<String>,
    tokens: Vec<i64>,
    statuses: Vec<&'static str>,
}

impl Guards {
    fn of<'a>(observed: impl IntoIterator<Item = &'a Operation>) -> Self {
        let mut guards = Guards {
            namespaces: Vec::new(),
            keys: Vec::new(),
            tokens: Vec::new(),
            statuses: Vec::new(),
        };
        for operation in observed {
            guards
                .namespaces
                .push(operation.namespace.as_str().to_owned());
            guards
                .keys
                .push(operation.operation_key.as_str().to_owned());
            guards.tokens.push(operation.fencing_token.as_i64());
            guards.statuses.push(operation.status.as_str());
        }
        guards
    }
}
