//! The durable queue: due work for ClaimDue and the maintenance, and the
//! operator's view of the unfinished backlog.

use sqlx::PgExecutor;

use super::{Observed, ObservedRow, OperationRow, operation_columns, operations};
use crate::domain::commands::{FinishedQuery, ListQuery};
use crate::domain::ids::Namespace;
use crate::domain::operation::{Operation, Status};
use crate::domain::policy::micros_ceil;
use crate::store::QueryTimer;

/// The due, unheld operations of namespace `$1` that meet `$also`, in the
/// order ClaimDue takes them, at most `$2`: one definition for ClaimDue and
/// the console's preview.
macro_rules! due_in_order {
    ($also:literal) => {
        concat!(
            " FROM operations
         WHERE namespace = $1 AND held_at IS NULL
           AND status IN ('retry_scheduled', 'in_progress', 'unknown')
           AND operation_due_at(status, next_attempt_at, lease_expires_at, unknown_since)
               <= statement_timestamp() ",
            $also,
            "
         ORDER BY operation_due_at(status, next_attempt_at, lease_expires_at, unknown_since),
                  operation_key
         LIMIT $2"
        )
    };
}

/// The [`Narrowing`] of a list as SQL over `o`, given the parameters that
/// carry its key prefix, owner and registration bound (each NULL for none).
/// The prefix's lower bound lets the key's index start at the first match.
macro_rules! narrowed {
    ($prefix:literal, $owner:literal, $created_before:literal) => {
        concat!(
            " (",
            $prefix,
            "::text IS NULL
                OR (o.operation_key >= ",
            $prefix,
            " AND starts_with(o.operation_key, ",
            $prefix,
            ")))
             AND (",
            $owner,
            "::text IS NULL OR o.lease_owner = ",
            $owner,
            ")
             AND (",
            $created_before,
            "::timestamptz IS NULL OR o.created_at <= ",
            $created_before,
            ")"
        )
    };
}

/// A due operation, locked by this transaction until it ends.
pub type DueCandidate = Observed;

/// Up to `limit` due, unheld operations of a namespace, oldest due first,
/// locked FOR UPDATE. Rows another transaction holds are skipped, not waited
/// for: they stay due and a later call finds them again.
#[tracing::instrument(level = "debug", name = "store.queue.due", skip_all)]
pub async fn due(
    db: impl PgExecutor<'_>,
    namespace: &Namespace,
    limit: u32,
) -> sqlx::Result<Vec<DueCandidate>> {
    let _timer = QueryTimer::start("operations_due");
    // statement_timestamp() is stable, so the due bound is an index condition.
    let rows: Vec<ObservedRow> = sqlx::query_as(concat!(
        "SELECT ",
        operation_columns!(),
        ", clock_timestamp() AS db_now",
        due_in_order!(""),
        " FOR UPDATE SKIP LOCKED"
    ))
    .bind(namespace.as_str())
    .bind(i64::from(limit))
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(Observed::from).collect())
}

/// What ClaimDue would hand out next in a namespace (or, with
/// `expired_leases_only`, the leases that ran out and wait to be taken
/// over), without locking anything: the operator console's preview.
#[tracing::instrument(level = "debug", name = "store.queue.due_preview", skip_all)]
pub async fn due_preview(
    db: impl PgExecutor<'_>,
    namespace: &Namespace,
    expired_leases_only: bool,
    limit: u32,
) -> sqlx::Result<Vec<Operation>> {
    let _timer = QueryTimer::start("operations_due_preview");
    let statement = if expired_leases_only {
        concat!(
            "SELECT ",
            operation_columns!(),
            // A lease is present exactly while IN_PROGRESS (a check
            // constraint); said so, the planner keeps to the due index instead
            // of reading every IN_PROGRESS row of the queue index and sorting.
            due_in_order!("AND lease_expires_at IS NOT NULL")
        )
    } else {
        concat!("SELECT ", operation_columns!(), due_in_order!(""))
    };
    let rows: Vec<OperationRow> = sqlx::query_as(statement)
        .bind(namespace.as_str())
        .bind(i64::from(limit))
        .fetch_all(db)
        .await?;
    Ok(operations(rows))
}

/// Serialises ClaimDue calls of one namespace until the transaction ends, so
/// concurrent pullers count live leases and take new ones one at a time.
#[tracing::instrument(level = "debug", name = "store.queue.serialize_retry_cap", skip_all)]
pub async fn serialize_retry_cap(
    db: impl PgExecutor<'_>,
    namespace: &Namespace,
) -> sqlx::Result<()> {
    let _timer = QueryTimer::start("operations_serialize_retry_cap");
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('opreg.retry_cap:' || $1, 0))")
        .bind(namespace.as_str())
        .execute(db)
        .await?;
    Ok(())
}

/// Live leases of a namespace that are not first attempts: retries,
/// takeovers and reconciliations, whoever started them.
#[tracing::instrument(level = "debug", name = "store.queue.live_retry_leases", skip_all)]
pub async fn live_retry_leases(
    db: impl PgExecutor<'_>,
    namespace: &Namespace,
) -> sqlx::Result<u32> {
    let _timer = QueryTimer::start("operations_live_retry_leases");
    let (live,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM operations
         WHERE namespace = $1 AND status = 'in_progress' AND held_at IS NULL
           AND lease_expires_at > clock_timestamp()
           AND (attempts > 1 OR reconciling)",
    )
    .bind(namespace.as_str())
    .fetch_one(db)
    .await?;
    Ok(u32::try_from(live).unwrap_or(u32::MAX))
}

/// Up to `limit` unheld operations, in any namespace, whose budget or deadline
/// has run out while they wait: retries past the deadline, and expired leases
/// whose next attempt would exceed the budget. Locked FOR UPDATE SKIP LOCKED.
#[tracing::instrument(level = "debug", name = "store.queue.exhaustion_candidates", skip_all)]
pub async fn exhaustion_candidates(
    db: impl PgExecutor<'_>,
    limit: u32,
) -> sqlx::Result<Vec<Observed>> {
    let _timer = QueryTimer::start("operations_exhaustion_candidates");
    let rows: Vec<ObservedRow> = sqlx::query_as(concat!(
        "SELECT ",
        operation_columns!(),
        ", clock_timestamp() AS db_now FROM operations
         WHERE held_at IS NULL AND NOT reconciling
           -- The due index's own predicate, so it serves this scan; unknown
           -- outcomes spend no budget and never exhaust.
           AND status IN ('retry_scheduled', 'in_progress', 'unknown')
           AND operation_due_at(status, next_attempt_at, lease_expires_at, unknown_since)
               <= statement_timestamp()
           AND (deadline_at < statement_timestamp()
                OR (status = 'in_progress' AND attempts >= max_attempts))
           AND status <> 'unknown'
         LIMIT $1
         FOR UPDATE SKIP LOCKED"
    ))
    .bind(i64::from(limit))
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(Observed::from).collect())
}

/// Makes the rest of the transaction plan each statement with its values.
/// The lists' optional filters (`$n IS NULL OR ...`) defeat a generic plan:
/// it cannot tell which are off, misjudges how many rows match, and sorts
/// the whole namespace instead of reading the index in order and stopping
/// at a page. Lists are rare; planning them each time costs a millisecond.
#[tracing::instrument(level = "debug", name = "store.queue.plan_with_values", skip_all)]
pub async fn plan_with_values(db: impl PgExecutor<'_>) -> sqlx::Result<()> {
    sqlx::query("SET LOCAL plan_cache_mode = force_custom_plan")
        .execute(db)
        .await?;
    Ok(())
}

/// One page of the operator's queue: for each wanted status, the index gives
/// rows in (created_at, operation_key) order after the cursor; the pages are
/// merged in that order. `page_size + 1` rows tell whether another page exists.
/// Run it after [`plan_with_values`].
#[tracing::instrument(level = "debug", name = "store.queue.list", skip_all)]
pub async fn list(db: impl PgExecutor<'_>, query: &ListQuery) -> sqlx::Result<Vec<Operation>> {
    let _timer = QueryTimer::start("operations_list");
    let (after_created, after_key) = match &query.after {
        Some(cursor) => (Some(cursor.created_at), Some(cursor.operation_key.as_str())),
        None => (None, None),
    };
    let narrowing = &query.narrowing;
    // No list shows parameters: they stay unread.
    let rows: Vec<OperationRow> = sqlx::query_as(concat!(
        "SELECT ",
        operation_columns!("NULL::text AS parameters_canonical", "result"),
        " FROM unnest($2::text[]) AS wanted(w_status)
         CROSS JOIN LATERAL (
             SELECT ",
        operation_columns!(),
        " FROM operations AS o
             WHERE o.namespace = $1 AND o.status = wanted.w_status
               -- The queue index's predicate: without it the planner cannot
               -- use that partial index for a status given as a parameter.
               AND o.status IN ('in_progress', 'retry_scheduled', 'unknown', 'dead')
               AND (o.created_at, o.operation_key)
                   > (COALESCE($3, '-infinity'::timestamptz), COALESCE($4, ''))
               AND (NOT $5 OR o.lease_expires_at <= clock_timestamp())
               AND ($6::bigint IS NULL
                    OR o.updated_at <= clock_timestamp() - $6 * interval '1 microsecond')
               AND (NOT $7 OR o.held_at IS NOT NULL)
               AND",
        narrowed!("$9", "$10", "$11"),
        " ORDER BY o.created_at, o.operation_key
             LIMIT $8
         ) AS page
         ORDER BY created_at, operation_key
         LIMIT $8"
    ))
    .bind(query.namespace.as_str())
    .bind(status_texts(&query.statuses))
    .bind(after_created)
    .bind(after_key)
    .bind(query.expired_leases_only)
    .bind(query.older_than.map(micros_ceil))
    .bind(query.held_only)
    .bind(i64::from(query.page_size) + 1)
    .bind(narrowing.key_prefix.as_deref())
    .bind(narrowing.owner.as_deref())
    .bind(narrowing.created_before)
    .fetch_all(db)
    .await?;
    Ok(operations(rows))
}

/// One page of finished operations, by key after the cursor, from the
/// primary key. `page_size + 1` rows tell whether another page exists.
/// Run it after [`plan_with_values`].
#[tracing::instrument(level = "debug", name = "store.queue.list_finished", skip_all)]
pub async fn list_finished(
    db: impl PgExecutor<'_>,
    query: &FinishedQuery,
) -> sqlx::Result<Vec<Operation>> {
    let _timer = QueryTimer::start("operations_list_finished");
    let narrowing = &query.narrowing;
    // The console's list shows neither parameters nor results: they stay unread.
    let rows: Vec<OperationRow> = sqlx::query_as(concat!(
        "SELECT ",
        operation_columns!(
            "NULL::text AS parameters_canonical",
            "NULL::bytea AS result"
        ),
        " FROM operations AS o
         WHERE o.namespace = $1 AND o.status = ANY($2::text[])
           AND o.operation_key > COALESCE($3, '')
           AND ($4::bigint IS NULL
                OR o.updated_at <= clock_timestamp() - $4 * interval '1 microsecond')
           AND",
        narrowed!("$6", "$7", "$8"),
        " ORDER BY o.operation_key
         LIMIT $5"
    ))
    .bind(query.namespace.as_str())
    .bind(status_texts(&query.statuses))
    .bind(query.after.as_ref().map(|key| key.as_str()))
    .bind(query.older_than.map(micros_ceil))
    .bind(i64::from(query.page_size) + 1)
    .bind(narrowing.key_prefix.as_deref())
    .bind(narrowing.owner.as_deref())
    .bind(narrowing.created_before)
    .fetch_all(db)
    .await?;
    Ok(operations(rows))
}

fn status_texts(statuses: &[Status]) -> Vec<&'static str> {
    statuses.iter().map(|status| status.as_str()).collect()
}
