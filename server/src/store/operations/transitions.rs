//! The caller-driven transitions: registration, executions started by Claim
//! and ClaimDue, exhaustion, recorded outcomes and renewals.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use super::{
    Guards, Observed, OperationRow, archive_replaced_execution, end_running_execution,
    operation_columns, operations, replaced_execution, start_new_execution,
};
use crate::domain::commands::{ClaimCommand, LeaseRequest};
use crate::domain::ids::{FencingToken, Namespace, OperationKey};
use crate::domain::operation::{ExecutionKind, Operation};
use crate::domain::policy::micros_ceil;
use crate::store::QueryTimer;

/// A registration attempt that created the row.
#[derive(Debug)]
pub struct Registered {
    pub operation: Operation,
    /// For a compensation: whether the original was linked to it.
    pub linked_original: bool,
    /// The database clock once the row was in: later than `created_at` by
    /// any wait on a racing registration of the same key.
    pub returned_at: DateTime<Utc>,
}

/// What one claim of a [`register`] statement found.
#[derive(Debug)]
pub enum Registration {
    /// The key was new: the row, its first lease and first execution are in.
    Inserted(Registered),
    /// The key existed when the statement began.
    Existing(Observed),
}

#[derive(Debug, sqlx::FromRow)]
struct RegistrationRow {
    #[sqlx(flatten)]
    operation: OperationRow,
    inserted: bool,
    linked_original: bool,
    observed_at: DateTime<Utc>,
}

/// The claims of one statement as parallel arrays, in key order: concurrent
/// statements then wait on each other's new rows in one order, never in a
/// cycle.
#[derive(Default)]
struct Wanted<'a> {
    namespaces: Vec<&'a str>,
    keys: Vec<&'a str>,
    digests: Vec<&'a [u8]>,
    canonicals: Vec<Option<&'a str>>,
    compensates: Vec<Option<&'a str>>,
    owners: Vec<&'a str>,
    lease_us: Vec<i64>,
    max_attempts: Vec<i32>,
    initial_backoff_us: Vec<i64>,
    max_backoff_us: Vec<i64>,
    deadline_us: Vec<i64>,
    execution_ids: Vec<&'a str>,
}

impl<'a> Wanted<'a> {
    fn of(claims: &[&'a ClaimCommand]) -> Self {
        let mut ordered = claims.to_vec();
        ordered.sort_by(|a, b| a.identity().cmp(&b.identity()));
        let mut wanted = Wanted::default();
        for claim in ordered {
            wanted.namespaces.push(claim.namespace.as_str());
            wanted.keys.push(claim.operation_key.as_str());
            wanted.digests.push(&claim.fingerprint.digest);
            wanted
                .canonicals
                .push(claim.fingerprint.canonical.as_deref());
            wanted
                .compensates
                .push(claim.compensates.as_ref().map(OperationKey::as_str));
            wanted.owners.push(&claim.lease.owner);
            wanted.lease_us.push(micros_ceil(claim.lease.ttl));
            wanted
                .max_attempts
                .push(i32::try_from(claim.retry_policy.max_attempts).unwrap_or(i32::MAX));
            wanted
                .initial_backoff_us
                .push(micros_ceil(claim.retry_policy.initial_backoff));
            wanted
                .max_backoff_us
                .push(micros_ceil(claim.retry_policy.max_backoff));
            wanted
                .deadline_us
                .push(micros_ceil(claim.retry_policy.deadline));
            wanted.execution_ids.push(&claim.lease.execution_id);
        }
        wanted
    }
}

/// Registers, in one statement, each claimed operation whose key is new, with
/// its first lease and first execution, and reads those that exist. `claims`
/// name distinct keys; the answer is in their order, `None` for a key that a
/// racing registration inserted but had not committed when this statement
/// began (a later statement sees it).
///
/// A compensation (at most one per statement) also links its original, if
/// that original succeeded and is not compensated yet; `linked_original`
/// tells. That guard on the original's row is what allows one compensation
/// per original: a racing one waits on the row, finds it linked, and its
/// caller rolls its new row back.
#[tracing::instrument(level = "debug", name = "store.operations.register", skip_all)]
pub async fn register(
    db: impl PgExecutor<'_>,
    claims: &[&ClaimCommand],
) -> sqlx::Result<Vec<Option<Registration>>> {
    if claims.is_empty() {
        return Ok(Vec::new());
    }
    let _timer = QueryTimer::start("operations_register");
    let wanted = Wanted::of(claims);
    // Compensations are registered one to a statement (`registry/claim.rs`).
    let mut compensations = claims.iter().filter_map(|claim| {
        let original = claim.compensates.as_ref()?;
        Some((claim.namespace.as_str(), original.as_str()))
    });
    let link = compensations.next();
    debug_assert!(
        compensations.next().is_none(),
        "one compensation per statement"
    );
    let rows: Vec<RegistrationRow> = sqlx::query_as(concat!(
        "WITH wanted AS (
             SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[], $5::text[],
                                  $6::text[], $7::bigint[], $8::int[], $9::bigint[], $10::bigint[],
                                  $11::bigint[], $12::text[])
                 WITH ORDINALITY
                 AS w(w_namespace, w_key, w_digest, w_canonical, w_compensates, w_owner, w_lease_us,
                      w_max_attempts, w_initial_backoff_us, w_max_backoff_us, w_deadline_us,
                      w_execution_id, w_order)
         ),
         -- One primary-key probe per key (a LATERAL with LIMIT is never
         -- flattened into a join), whatever the plan thinks of the table's
         -- size: a hash join with a scan of `operations` would grow with it.
         existing AS MATERIALIZED (
             SELECT found.*, clock_timestamp() AS db_now
             FROM wanted CROSS JOIN LATERAL (
                 SELECT ",
        operation_columns!(),
        " FROM operations
                 WHERE namespace = w_namespace AND operation_key = w_key
                 LIMIT 1
             ) AS found
         ),
         -- An existing key draws no token: nextval is evaluated only for a
         -- row that passes. Only a racing insert not yet committed gets past
         -- this to the conflict. The first lease's token is also its first
         -- execution's.
         fresh AS MATERIALIZED (
             SELECT wanted.*, next_fencing_token() AS w_token
             FROM wanted
             WHERE NOT EXISTS (
                 SELECT 1 FROM existing
                 WHERE existing.namespace = w_namespace AND existing.operation_key = w_key)
             ORDER BY w_order
         ),
         inserted AS (
             INSERT INTO operations (
                 namespace, operation_key, status, parameters_digest, parameters_canonical,
                 compensates, fencing_token, lease_owner, lease_expires_at, attempts,
                 max_attempts, initial_backoff_us, max_backoff_us, deadline_at,
                 created_at, updated_at, execution_token, execution_kind, execution_id,
                 execution_owner, execution_started_at, execution_outcome)
             SELECT w_namespace, w_key, 'in_progress', w_digest, w_canonical,
                    w_compensates, w_token, w_owner,
                    clock.now + w_lease_us * interval '1 microsecond', 1,
                    w_max_attempts, w_initial_backoff_us, w_max_backoff_us,
                    clock.now + w_deadline_us * interval '1 microsecond',
                    clock.now, clock.now, w_token, 'first', w_execution_id, w_owner, clock.now,
                    'running'
             FROM fresh CROSS JOIN (SELECT clock_timestamp() AS now) AS clock
             ORDER BY w_order
             ON CONFLICT (namespace, operation_key) DO NOTHING
             RETURNING ",
        operation_columns!(),
        "
         ),
         -- The original by its primary key, as scalars: a join on the new
         -- rows would be planned (generically) as a scan of every finished row.
         linked AS (
             UPDATE operations AS original
             SET compensated_by = inserted.operation_key, updated_at = inserted.created_at
             FROM inserted
             WHERE original.namespace = $13 AND original.operation_key = $14
               AND inserted.namespace = $13 AND inserted.compensates = $14
               AND original.status = 'succeeded'
               AND original.compensated_by IS NULL
             RETURNING original.namespace, original.compensated_by
         )
         SELECT ",
        operation_columns!(),
        ", true AS inserted,
                EXISTS (SELECT 1 FROM linked
                        WHERE linked.namespace = inserted.namespace
                          AND linked.compensated_by = inserted.operation_key) AS linked_original,
                clock_timestamp() AS observed_at
         FROM inserted
         UNION ALL
         SELECT ",
        operation_columns!(),
        ", false, false, db_now FROM existing"
    ))
    .bind(&wanted.namespaces)
    .bind(&wanted.keys)
    .bind(&wanted.digests)
    .bind(&wanted.canonicals)
    .bind(&wanted.compensates)
    .bind(&wanted.owners)
    .bind(&wanted.lease_us)
    .bind(&wanted.max_attempts)
    .bind(&wanted.initial_backoff_us)
    .bind(&wanted.max_backoff_us)
    .bind(&wanted.deadline_us)
    .bind(&wanted.execution_ids)
    .bind(link.map(|(namespace, _)| namespace))
    .bind(link.map(|(_, original)| original))
    .fetch_all(db)
    .await?;
    let positions: HashMap<(&str, &str), usize> = claims
        .iter()
        .enumerate()
        .map(|(position, claim)| (claim.identity(), position))
        .collect();
    let mut found: Vec<Option<Registration>> = claims.iter().map(|_| None).collect();
    for row in rows {
        let operation = Operation::from(row.operation);
        let key = (
            operation.namespace.as_str(),
            operation.operation_key.as_str(),
        );
        let Some(&position) = positions.get(&key) else {
            continue;
        };
        found[position] = Some(if row.inserted {
            Registration::Inserted(Registered {
                operation,
                linked_original: row.linked_original,
                returned_at: row.observed_at,
            })
        } else {
            Registration::Existing(Observed {
                operation,
                db_now: row.observed_at,
            })
        });
    }
    Ok(found)
}

/// Restarts the clock of a first lease whose registration waited on a racing
/// one (the insert's values are computed before that wait): the lease, the
/// creation time and the deadline count from now.
#[tracing::instrument(
    level = "debug",
    name = "store.operations.restart_first_lease",
    skip_all
)]
pub async fn restart_first_lease(
    db: impl PgExecutor<'_>,
    registered: &Operation,
    lease_ttl: std::time::Duration,
) -> sqlx::Result<Option<Operation>> {
    let _timer = QueryTimer::start("operations_restart_first_lease");
    let row: Option<OperationRow> = sqlx::query_as(concat!(
        // One clock for the lease, the row and its first execution, read
        // once the row is locked (after any wait for it).
        "WITH clock AS MATERIALIZED (
             SELECT clock_timestamp() AS now
             FROM (SELECT 1 FROM operations
                   WHERE namespace = $1 AND operation_key = $2
                     AND fencing_token = $3 AND status = 'in_progress'
                   FOR NO KEY UPDATE) AS locked
         )
         UPDATE operations SET
             deadline_at = deadline_at + (clock.now - created_at),
             lease_expires_at = clock.now + $4::bigint * interval '1 microsecond',
             created_at = clock.now,
             updated_at = clock.now,
             execution_started_at = clock.now
         FROM clock
         WHERE namespace = $1 AND operation_key = $2
           AND fencing_token = $3 AND status = 'in_progress'
         RETURNING ",
        operation_columns!()
    ))
    .bind(registered.namespace.as_str())
    .bind(registered.operation_key.as_str())
    .bind(registered.fencing_token.as_i64())
    .bind(micros_ceil(lease_ttl))
    .fetch_optional(db)
    .await?;
    Ok(row.map(Operation::from))
}

/// The guard of a batch transition: each row of `wanted` (namespace, key,
/// token, status as observed) moves only if it is still so, unheld, with its
/// lease expired or its retry due by the database clock at the time the row
/// is locked.
macro_rules! still_as_observed {
    () => {
        "o.namespace = w.w_namespace AND o.operation_key = w.w_key
         AND o.fencing_token = w.w_token AND o.status = w.w_status
         AND o.held_at IS NULL
         AND (o.status <> 'in_progress' OR o.lease_expires_at <= clock_timestamp())
         AND (o.status <> 'retry_scheduled' OR o.next_attempt_at <= clock_timestamp())"
    };
}

/// Starts retry, takeover or reconcile executions (`kinds[i]` for the i-th
/// observed operation) under one lease request: a new token from the sequence
/// for each, a new lease, and a history row. The execution of each replaced
/// token, if it never reported, is marked superseded. Operations that moved
/// since they were observed are left out of the result.
#[tracing::instrument(level = "debug", name = "store.operations.start_executions", skip_all)]
pub async fn start_executions(
    db: impl PgExecutor<'_>,
    observed: &[&Operation],
    kinds: &[ExecutionKind],
    lease: &LeaseRequest,
) -> sqlx::Result<Vec<Operation>> {
    if observed.is_empty() {
        return Ok(Vec::new());
    }
    let _timer = QueryTimer::start("operations_start_executions");
    let guards = Guards::of(observed.iter().copied());
    let kinds: Vec<&str> = kinds.iter().map(|kind| kind.as_str()).collect();
    let rows: Vec<OperationRow> = sqlx::query_as(concat!(
        "WITH wanted AS (
             SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[])
                 AS w(w_namespace, w_key, w_token, w_status, w_kind)
         ),
         -- Each row locked by its primary key and still as observed, with the
         -- execution it holds now, which the new one replaces, and the new
         -- token (drawn only for a row that moves).
         replaced AS MATERIALIZED (
             SELECT w.w_kind AS r_kind, ",
        replaced_execution!(),
        "
             FROM wanted AS w CROSS JOIN LATERAL (
                 SELECT * FROM operations
                 WHERE namespace = w.w_namespace AND operation_key = w.w_key
                 LIMIT 1
                 FOR NO KEY UPDATE
             ) AS o
             WHERE ",
        still_as_observed!(),
        "
         ),
         ",
        archive_replaced_execution!(),
        "
         UPDATE operations AS o SET
             fencing_token = r_new_token,
             status = 'in_progress',
             lease_owner = $6,
             lease_expires_at = r_now + $7::bigint * interval '1 microsecond',
             lease_takeover = (r_kind = 'takeover'),
             attempts = o.attempts + CASE WHEN r_kind = 'reconcile' THEN 0 ELSE 1 END,
             reconciling = (r_kind = 'reconcile'),
             next_attempt_at = NULL,
             updated_at = r_now, ",
        start_new_execution!("r_kind", "$8", "$6"),
        "
         FROM replaced
         WHERE o.namespace = r_namespace AND o.operation_key = r_key
         RETURNING ",
        operation_columns!()
    ))
    .bind(&guards.namespaces)
    .bind(&guards.keys)
    .bind(&guards.tokens)
    .bind(&guards.statuses)
    .bind(&kinds)
    .bind(&lease.owner)
    .bind(micros_ceil(lease.ttl))
    .bind(&lease.execution_id)
    .fetch_all(db)
    .await?;
    Ok(operations(rows))
}

/// Marks operations DEAD because their next attempt would exceed the budget
/// or the deadline. Operations that moved since they were observed are left
/// out of the result.
#[tracing::instrument(level = "debug", name = "store.operations.exhaust", skip_all)]
pub async fn exhaust(
    db: impl PgExecutor<'_>,
    observed: &[&Operation],
) -> sqlx::Result<Vec<Operation>> {
    // An empty batch is the common case (every idle ClaimDue poll): no round trip.
    if observed.is_empty() {
        return Ok(Vec::new());
    }
    let _timer = QueryTimer::start("operations_exhaust");
    let guards = Guards::of(observed.iter().copied());
    let rows: Vec<OperationRow> = sqlx::query_as(concat!(
        "WITH wanted AS (
             SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[])
                 AS w(w_namespace, w_key, w_token, w_status)
         )
         UPDATE operations AS o SET
             status = 'dead',
             lease_owner = NULL,
             lease_expires_at = NULL,
             lease_takeover = false,
             reconciling = false,
             next_attempt_at = NULL,
             updated_at = clock_timestamp(),
             completed_at = clock_timestamp(), ",
        end_running_execution!("superseded", "true"),
        "
         FROM wanted AS w
         WHERE ",
        still_as_observed!(),
        "
         RETURNING ",
        operation_columns!()
    ))
    .bind(&guards.namespaces)
    .bind(&guards.keys)
    .bind(&guards.tokens)
    .bind(&guards.statuses)
    .fetch_all(db)
    .await?;
    Ok(operations(rows))
}

/// Extends the lease of its current holder, unless an operator holds the operation.
#[tracing::instrument(level = "debug", name = "store.operations.renew", skip_all)]
pub async fn renew(
    db: impl PgExecutor<'_>,
    namespace: &Namespace,
    operation_key: &OperationKey,
    owner: &str,
    fencing_token: FencingToken,
    lease_ttl: std::time::Duration,
) -> sqlx::Result<Option<Operation>> {
    let _timer = QueryTimer::start("operations_renew");
    let row: Option<OperationRow> = sqlx::query_as(concat!(
        "UPDATE operations SET
             lease_expires_at = clock_timestamp() + $5::bigint * interval '1 microsecond',
             updated_at = clock_timestamp()
         WHERE namespace = $1 AND operation_key = $2
           AND fencing_token = $3 AND status = 'in_progress' AND lease_owner = $4
           AND held_at IS NULL
         RETURNING ",
        operation_columns!()
    ))
    .bind(namespace.as_str())
    .bind(operation_key.as_str())
    .bind(fencing_token.as_i64())
    .bind(owner)
    .bind(micros_ceil(lease_ttl))
    .fetch_optional(db)
    .await?;
    Ok(row.map(Operation::from))
}

/// One row of the backlog: unfinished operations of a namespace in one state.
#[derive(Debug, sqlx::FromRow)]
pub struct BacklogRow {
    pub namespace: String,
    /// A status, or `expired_lease` (IN_PROGRESS past its lease) or `held`.
    pub state: String,
    pub operations: i64,
    /// Operations whose unknown outcome is unresolved (UNKNOWN, or reconciling).
    pub unknown: i64,
    pub oldest_unknown_age_seconds: Option<f64>,
    /// How long the oldest due, unheld retry or expired lease has waited.
    pub oldest_due_age_seconds: Option<f64>,
    /// Compensating operations among them.
    pub compensations: i64,
}

/// DEAD operations are counted exactly up to this many per namespace; past it
/// the gauge stays at the cap. DEAD only grows until someone acts, and the
/// alert on its growth fires long before; counting a million rows every
/// refresh would not tell anyone more.
pub const DEAD_COUNT_CAP: i64 = 10_000;

/// The backlog by namespace and state, each part from its own index: unheld
/// work from the due index, held operations from theirs, and DEAD per
/// namespace (found by a loose index scan) up to [`DEAD_COUNT_CAP`], so the
/// query stays bounded however many finished or dead rows accumulate.
#[tracing::instrument(level = "debug", name = "store.operations.backlog", skip_all)]
pub async fn backlog(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<BacklogRow>> {
    let _timer = QueryTimer::start("operations_backlog");
    sqlx::query_as(
        "WITH RECURSIVE clock AS (SELECT clock_timestamp() AS now),
         active AS (
             -- The due index's predicate: unheld work, however much is finished.
             SELECT namespace,
                    CASE WHEN status = 'in_progress' AND lease_expires_at <= clock.now
                             THEN 'expired_lease'
                         ELSE status END AS state,
                    count(*) AS operations,
                    count(unknown_since) AS unknown,
                    min(unknown_since) AS oldest_unknown,
                    min(CASE WHEN status = 'retry_scheduled' AND next_attempt_at <= clock.now
                                 THEN next_attempt_at
                             WHEN status = 'in_progress' AND lease_expires_at <= clock.now
                                 THEN lease_expires_at
                        END) AS oldest_due,
                    count(compensates) AS compensations
             FROM operations, clock
             WHERE held_at IS NULL AND status IN ('retry_scheduled', 'in_progress', 'unknown')
             GROUP BY 1, 2
         ),
         held AS (
             SELECT namespace, 'held' AS state, count(*) AS operations,
                    count(unknown_since) AS unknown, min(unknown_since) AS oldest_unknown,
                    NULL::timestamptz AS oldest_due, count(compensates) AS compensations
             FROM operations
             WHERE held_at IS NOT NULL
             GROUP BY 1
         ),
         dead_spaces AS (
             (SELECT namespace FROM operations WHERE status = 'dead'
              ORDER BY namespace LIMIT 1)
             UNION ALL
             SELECT (SELECT o.namespace FROM operations AS o
                     WHERE o.status = 'dead' AND o.namespace > spaces.namespace
                     ORDER BY o.namespace LIMIT 1)
             FROM dead_spaces AS spaces WHERE spaces.namespace IS NOT NULL
         ),
         dead AS (
             SELECT spaces.namespace, 'dead' AS state, capped.operations, 0::bigint AS unknown,
                    NULL::timestamptz AS oldest_unknown, NULL::timestamptz AS oldest_due,
                    capped.compensations
             FROM dead_spaces AS spaces
             CROSS JOIN LATERAL (
                 SELECT count(*) AS operations, count(compensates) AS compensations
                 FROM (SELECT o.compensates FROM operations AS o
                       WHERE o.namespace = spaces.namespace AND o.status = 'dead'
                         AND o.held_at IS NULL
                       LIMIT $1) AS bounded
             ) AS capped
             WHERE spaces.namespace IS NOT NULL
         )
         SELECT namespace, state, operations, unknown,
                EXTRACT(EPOCH FROM clock.now - oldest_unknown)::float8 AS oldest_unknown_age_seconds,
                EXTRACT(EPOCH FROM clock.now - oldest_due)::float8 AS oldest_due_age_seconds,
                compensations
         FROM (SELECT * FROM active
               UNION ALL SELECT * FROM held
               UNION ALL SELECT * FROM dead) AS backlog, clock",
    )
    .bind(DEAD_COUNT_CAP)
    .fetch_all(db)
    .await
}
