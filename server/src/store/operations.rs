//! Statements on `operations`. Each state transition is one guarded statement
//! that also writes the matching `executions` row; callers check that it
//! returned the row. Every time comes from `clock_timestamp()`, evaluated after
//! any lock wait, never from this process's clock.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use crate::domain::commands::ClaimCommand;
use crate::domain::complete::{Report, Transition};
use crate::domain::operation::{ExecutionKind, Operation, Status};
use crate::domain::policy::micros_ceil;

/// An operation read together with the database clock.
#[derive(Debug, sqlx::FromRow)]
pub struct Observed {
    #[sqlx(flatten)]
    pub operation: Operation,
    pub db_now: DateTime<Utc>,
}

/// A registration attempt that created the row.
#[derive(Debug, sqlx::FromRow)]
pub struct Registered {
    #[sqlx(flatten)]
    pub operation: Operation,
    /// For a compensation: whether the original was linked to it.
    pub linked_original: bool,
    /// The database clock once the row was in: later than `created_at` by
    /// any wait on a racing registration of the same key.
    pub returned_at: DateTime<Utc>,
}

/// Registers a new operation with its first lease and first execution, or does
/// nothing when the key exists (the primary key is the only conflict target,
/// so a second compensation of one original raises instead of vanishing).
/// A compensation also links its original, if that original succeeded and is
/// not compensated yet; `linked_original` tells.
pub async fn insert_new(
    db: impl PgExecutor<'_>,
    claim: &ClaimCommand,
) -> sqlx::Result<Option<Registered>> {
    let _timer = super::QueryTimer::start("operations_insert_new");
    sqlx::query_as(
        "WITH inserted AS (
             INSERT INTO operations (
                 namespace, operation_key, status, parameters_digest, parameters_canonical,
                 compensates, fencing_token, lease_owner, lease_expires_at, attempts,
                 max_attempts, initial_backoff_us, max_backoff_us, deadline_at,
                 created_at, updated_at)
             SELECT $1, $2, 'in_progress', $3, $4,
                    $5, nextval('fencing_tokens'), $6, clock.now + $7::bigint * interval '1 microsecond', 1,
                    $8, $9, $10, clock.now + $11::bigint * interval '1 microsecond',
                    clock.now, clock.now
             FROM (SELECT clock_timestamp() AS now) AS clock
             ON CONFLICT (namespace, operation_key) DO NOTHING
             RETURNING *
         ),
         first_execution AS (
             INSERT INTO executions (
                 fencing_token, namespace, operation_key, attempt, kind, execution_id, owner, started_at)
             SELECT fencing_token, namespace, operation_key, attempts, 'first', $12, lease_owner, created_at
             FROM inserted
         ),
         linked AS (
             UPDATE operations AS original
             SET compensated_by = inserted.operation_key, updated_at = inserted.created_at
             FROM inserted
             WHERE original.namespace = inserted.namespace
               AND original.operation_key = inserted.compensates
               AND original.status = 'succeeded'
               AND original.compensated_by IS NULL
             RETURNING original.operation_key
         )
         SELECT inserted.*, EXISTS (SELECT 1 FROM linked) AS linked_original,
                clock_timestamp() AS returned_at
         FROM inserted",
    )
    .bind(&claim.namespace)
    .bind(&claim.operation_key)
    .bind(&claim.fingerprint.digest)
    .bind(&claim.fingerprint.canonical)
    .bind(&claim.compensates)
    .bind(&claim.owner)
    .bind(micros_ceil(claim.lease_ttl))
    .bind(i32::try_from(claim.retry_policy.max_attempts).unwrap_or(i32::MAX))
    .bind(micros_ceil(claim.retry_policy.initial_backoff))
    .bind(micros_ceil(claim.retry_policy.max_backoff))
    .bind(micros_ceil(claim.retry_policy.deadline))
    .bind(&claim.execution_id)
    .fetch_optional(db)
    .await
}

/// Restarts the clock of a first lease whose registration waited on a racing
/// one (the insert's values are computed before that wait): the lease, the
/// creation time and the deadline count from now.
pub async fn restart_first_lease(
    db: impl PgExecutor<'_>,
    registered: &Operation,
    lease_ttl: std::time::Duration,
) -> sqlx::Result<Option<Operation>> {
    let _timer = super::QueryTimer::start("operations_restart_first_lease");
    sqlx::query_as(
        "WITH restarted AS (
             UPDATE operations SET
                 deadline_at = deadline_at + (clock_timestamp() - created_at),
                 lease_expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond',
                 created_at = clock_timestamp(),
                 updated_at = clock_timestamp()
             WHERE namespace = $1 AND operation_key = $2
               AND fencing_token = $3 AND status = 'in_progress'
             RETURNING *
         ),
         execution AS (
             UPDATE executions AS e SET started_at = restarted.created_at
             FROM restarted
             WHERE e.fencing_token = restarted.fencing_token
         )
         SELECT * FROM restarted",
    )
    .bind(&registered.namespace)
    .bind(&registered.operation_key)
    .bind(registered.fencing_token)
    .bind(micros_ceil(lease_ttl))
    .fetch_optional(db)
    .await
}

/// Reads an operation and the database clock. A separate statement from any
/// insert, so in READ COMMITTED it sees what a racing registration committed.
pub async fn find(
    db: impl PgExecutor<'_>,
    namespace: &str,
    operation_key: &str,
) -> sqlx::Result<Option<Observed>> {
    let _timer = super::QueryTimer::start("operations_find");
    observe(
        db,
        "SELECT *, clock_timestamp() AS db_now FROM operations
         WHERE namespace = $1 AND operation_key = $2",
        namespace,
        operation_key,
    )
    .await
}

/// Like [`find`], and locks the row until the transaction ends, ordering this
/// transaction against takeovers and completions.
pub async fn lock(
    db: impl PgExecutor<'_>,
    namespace: &str,
    operation_key: &str,
) -> sqlx::Result<Option<Observed>> {
    let _timer = super::QueryTimer::start("operations_lock");
    // The clock is read in the outer query, after the lock is granted; in a
    // plain SELECT … FOR UPDATE it would be read before any lock wait.
    observe(
        db,
        "WITH locked AS (
             SELECT * FROM operations
             WHERE namespace = $1 AND operation_key = $2
             FOR UPDATE
         )
         SELECT *, clock_timestamp() AS db_now FROM locked",
        namespace,
        operation_key,
    )
    .await
}

async fn observe(
    db: impl PgExecutor<'_>,
    sql: &'static str,
    namespace: &str,
    operation_key: &str,
) -> sqlx::Result<Option<Observed>> {
    sqlx::query_as(sql)
        .bind(namespace)
        .bind(operation_key)
        .fetch_optional(db)
        .await
}

/// The guard of a transition out of an observed state: the row still holds the
/// observed token and status, and its lease has expired or its retry is due
/// by the database clock at the time the row is locked.
macro_rules! still_as_observed {
    () => {
        "o.namespace = $1 AND o.operation_key = $2
         AND o.fencing_token = $3 AND o.status = $4
         AND (o.status <> 'in_progress' OR o.lease_expires_at <= clock_timestamp())
         AND (o.status <> 'retry_scheduled' OR o.next_attempt_at <= clock_timestamp())"
    };
}

/// Starts a retry, takeover or reconcile execution: a new token from the
/// sequence, a new lease, and a history row. The execution of the replaced
/// token, if it never reported, is marked superseded.
pub async fn start_execution(
    db: impl PgExecutor<'_>,
    observed: &Operation,
    kind: ExecutionKind,
    claim: &ClaimCommand,
) -> sqlx::Result<Option<Operation>> {
    let _timer = super::QueryTimer::start("operations_start_execution");
    sqlx::query_as(concat!(
        "WITH started AS (
             UPDATE operations AS o SET
                 fencing_token = nextval('fencing_tokens'),
                 status = 'in_progress',
                 lease_owner = $5,
                 lease_expires_at = clock_timestamp() + $6::bigint * interval '1 microsecond',
                 lease_takeover = ($7 = 'takeover'),
                 attempts = o.attempts + CASE WHEN $7 = 'reconcile' THEN 0 ELSE 1 END,
                 reconciling = ($7 = 'reconcile'),
                 next_attempt_at = NULL,
                 updated_at = clock_timestamp()
             WHERE ",
        still_as_observed!(),
        "
             RETURNING o.*
         ),
         superseded AS (
             UPDATE executions AS e SET outcome = 'superseded', finished_at = started.updated_at
             FROM started
             WHERE e.fencing_token = $3 AND e.outcome = 'running'
         ),
         execution AS (
             INSERT INTO executions (
                 fencing_token, namespace, operation_key, attempt, kind, execution_id, owner, started_at)
             SELECT fencing_token, namespace, operation_key, attempts, $7, $8, lease_owner, updated_at
             FROM started
         )
         SELECT * FROM started"
    ))
    .bind(&observed.namespace)
    .bind(&observed.operation_key)
    .bind(observed.fencing_token)
    .bind(observed.status.as_str())
    .bind(&claim.owner)
    .bind(micros_ceil(claim.lease_ttl))
    .bind(kind.as_str())
    .bind(&claim.execution_id)
    .fetch_optional(db)
    .await
}

/// Marks an operation DEAD because its next attempt would exceed the budget
/// or the deadline.
pub async fn exhaust(
    db: impl PgExecutor<'_>,
    observed: &Operation,
) -> sqlx::Result<Option<Operation>> {
    let _timer = super::QueryTimer::start("operations_exhaust");
    sqlx::query_as(concat!(
        "WITH exhausted AS (
             UPDATE operations AS o SET
                 status = 'dead',
                 lease_owner = NULL,
                 lease_expires_at = NULL,
                 lease_takeover = false,
                 reconciling = false,
                 next_attempt_at = NULL,
                 updated_at = clock_timestamp(),
                 completed_at = clock_timestamp()
             WHERE ",
        still_as_observed!(),
        "
             RETURNING o.*
         ),
         superseded AS (
             UPDATE executions AS e SET outcome = 'superseded', finished_at = exhausted.updated_at
             FROM exhausted
             WHERE e.fencing_token = $3 AND e.outcome = 'running'
         )
         SELECT * FROM exhausted"
    ))
    .bind(&observed.namespace)
    .bind(&observed.operation_key)
    .bind(observed.fencing_token)
    .bind(observed.status.as_str())
    .fetch_optional(db)
    .await
}

/// A recorded outcome, with whether its execution row was finished too.
#[derive(Debug, sqlx::FromRow)]
pub struct Recorded {
    #[sqlx(flatten)]
    pub operation: Operation,
    pub execution_finished: bool,
}

/// Records the report of the current lease holder and ends its lease.
pub async fn record_outcome(
    db: impl PgExecutor<'_>,
    namespace: &str,
    operation_key: &str,
    fencing_token: i64,
    report: &Report,
    transition: Transition,
) -> sqlx::Result<Option<Recorded>> {
    let _timer = super::QueryTimer::start("operations_record_outcome");
    let columns = OutcomeColumns::of(report);
    sqlx::query_as(
        "WITH recorded AS (
             UPDATE operations SET
                 status = $4,
                 result = $5,
                 result_ref = $6,
                 failure_code = $7,
                 failure_message = $8,
                 remote_ref = COALESCE($9, remote_ref),
                 last_error_class = COALESCE($10, last_error_class),
                 last_error_message = COALESCE($11, last_error_message),
                 next_attempt_at = clock_timestamp() + $12::bigint * interval '1 microsecond',
                 lease_owner = NULL,
                 lease_expires_at = NULL,
                 lease_takeover = false,
                 reconciling = false,
                 updated_at = clock_timestamp(),
                 completed_at = CASE WHEN $4 IN ('succeeded', 'failed', 'dead') THEN clock_timestamp() END,
                 unknown_since = CASE WHEN $4 = 'unknown' THEN COALESCE(unknown_since, clock_timestamp()) END
             WHERE namespace = $1 AND operation_key = $2
               AND fencing_token = $3 AND status = 'in_progress'
             RETURNING *
         ),
         finished AS (
             UPDATE executions AS e SET
                 outcome = $13, outcome_digest = $14, error_class = $15, message = $16,
                 finished_at = recorded.updated_at
             FROM recorded
             WHERE e.fencing_token = recorded.fencing_token AND e.outcome_digest IS NULL
             RETURNING e.fencing_token
         )
         SELECT recorded.*, EXISTS (SELECT 1 FROM finished) AS execution_finished FROM recorded",
    )
    .bind(namespace)
    .bind(operation_key)
    .bind(fencing_token)
    .bind(transition.status.as_str())
    .bind(columns.result)
    .bind(columns.result_ref)
    .bind(columns.failure_code)
    .bind(columns.failure_message)
    .bind(columns.remote_ref)
    .bind(columns.error_class)
    .bind(columns.error_message)
    .bind(transition.retry_in.map(micros_ceil))
    .bind(report.execution_outcome().as_str())
    .bind(report.digest())
    .bind(columns.execution_class)
    .bind(columns.execution_message)
    .fetch_optional(db)
    .await
}

/// How a report lands in the columns of `operations` and `executions`.
struct OutcomeColumns<'a> {
    result: Option<&'a [u8]>,
    result_ref: Option<&'a str>,
    failure_code: Option<&'a str>,
    failure_message: Option<&'a str>,
    remote_ref: Option<&'a str>,
    error_class: Option<&'a str>,
    error_message: Option<&'a str>,
    execution_class: Option<&'a str>,
    execution_message: Option<&'a str>,
}

impl<'a> OutcomeColumns<'a> {
    fn of(report: &'a Report) -> Self {
        let none = Self {
            result: None,
            result_ref: None,
            failure_code: None,
            failure_message: None,
            remote_ref: None,
            error_class: None,
            error_message: None,
            execution_class: None,
            execution_message: None,
        };
        match report {
            Report::Success { result, result_ref } => Self {
                result: Some(result),
                result_ref: Some(result_ref),
                ..none
            },
            Report::Failure { code, message } => Self {
                failure_code: Some(code),
                failure_message: Some(message),
                execution_class: Some(code),
                execution_message: Some(message),
                ..none
            },
            Report::Retryable {
                error_class,
                message,
                ..
            } => Self {
                error_class: Some(error_class),
                error_message: Some(message),
                execution_class: Some(error_class),
                execution_message: Some(message),
                ..none
            },
            Report::Unknown {
                remote_ref,
                message,
            } => Self {
                remote_ref: Some(remote_ref),
                error_class: Some("unknown_outcome"),
                error_message: Some(message),
                execution_message: Some(message),
                ..none
            },
        }
    }
}

/// Extends the lease of its current holder.
pub async fn renew(
    db: impl PgExecutor<'_>,
    namespace: &str,
    operation_key: &str,
    owner: &str,
    fencing_token: i64,
    lease_ttl: std::time::Duration,
) -> sqlx::Result<Option<Operation>> {
    let _timer = super::QueryTimer::start("operations_renew");
    sqlx::query_as(
        "UPDATE operations SET
             lease_expires_at = clock_timestamp() + $5::bigint * interval '1 microsecond',
             updated_at = clock_timestamp()
         WHERE namespace = $1 AND operation_key = $2
           AND fencing_token = $3 AND status = 'in_progress' AND lease_owner = $4
         RETURNING *",
    )
    .bind(namespace)
    .bind(operation_key)
    .bind(fencing_token)
    .bind(owner)
    .bind(micros_ceil(lease_ttl))
    .fetch_optional(db)
    .await
}

/// One row of the backlog: operations of a namespace in one unfinished status.
#[derive(Debug, sqlx::FromRow)]
pub struct BacklogRow {
    pub namespace: String,
    #[sqlx(try_from = "String")]
    pub status: Status,
    pub operations: i64,
    /// Operations whose unknown outcome is unresolved (UNKNOWN, or reconciling).
    pub unknown: i64,
    pub oldest_unknown_age_seconds: Option<f64>,
}

/// The backlog by namespace and status, from the partial backlog index.
pub async fn backlog(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<BacklogRow>> {
    let _timer = super::QueryTimer::start("operations_backlog");
    sqlx::query_as(
        "SELECT namespace, status, count(*) AS operations,
                count(unknown_since) AS unknown,
                EXTRACT(EPOCH FROM clock_timestamp() - min(unknown_since))::float8
                    AS oldest_unknown_age_seconds
         FROM operations
         WHERE status IN ('in_progress', 'retry_scheduled', 'unknown', 'dead')
         GROUP BY namespace, status",
    )
    .fetch_all(db)
    .await
}
