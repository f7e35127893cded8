//! Statements on `console_jobs`: the operator console's bulk actions. A job
//! is run by one replica at a time, which holds it by a lease renewed at each
//! step; each step locks the job row in the transaction that acts on one
//! operation and counts it, so an abort waits for the step in flight and the
//! counts never disagree with what was done.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use crate::domain::bulk::{BulkAction, BulkJob, JobId, JobScope, JobSpec, JobState};
use crate::domain::ids::{Namespace, OperationKey};

macro_rules! job_columns {
    () => {
        "id, namespace, action, reason, principal, keys, filter, state, total, done, skipped, \
         position, last_error, switched_by, created_at, updated_at, finished_at"
    };
}

#[derive(Debug, sqlx::FromRow)]
struct JobRow {
    id: String,
    namespace: String,
    #[sqlx(try_from = "String")]
    action: BulkAction,
    reason: String,
    principal: String,
    keys: Option<Vec<String>>,
    filter: String,
    #[sqlx(try_from = "String")]
    state: JobState,
    total: i32,
    done: i32,
    skipped: i32,
    position: Option<String>,
    last_error: Option<String>,
    switched_by: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    finished_at: Option<DateTime<Utc>>,
}

impl From<JobRow> for BulkJob {
    fn from(row: JobRow) -> Self {
        let scope = match row.keys {
            Some(keys) => {
                JobScope::Selection(keys.into_iter().map(OperationKey::from_stored).collect())
            }
            None => JobScope::EveryMatch,
        };
        let count = |value: i32| u32::try_from(value).unwrap_or(0);
        BulkJob {
            spec: JobSpec {
                id: JobId::from_stored(row.id),
                namespace: Namespace::from_stored(row.namespace),
                action: row.action,
                reason: row.reason,
                principal: row.principal,
                filter: row.filter,
                scope,
                total: count(row.total),
            },
            state: row.state,
            done: count(row.done),
            skipped: count(row.skipped),
            position: row.position,
            last_error: row.last_error,
            switched_by: row.switched_by,
            created_at: row.created_at,
            updated_at: row.updated_at,
            finished_at: row.finished_at,
        }
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Records a new job, or finds the one already submitted under its id.
#[tracing::instrument(level = "debug", name = "store.console_jobs.submit", skip_all)]
pub async fn submit(db: impl PgExecutor<'_>, job: &JobSpec) -> sqlx::Result<BulkJob> {
    let _timer = super::QueryTimer::start("console_jobs_submit");
    let keys = match &job.scope {
        JobScope::Selection(keys) => Some(keys.iter().map(|key| key.as_str()).collect::<Vec<_>>()),
        JobScope::EveryMatch => None,
    };
    // The no-op update makes RETURNING give the existing row on a resubmission.
    let row: JobRow = sqlx::query_as(concat!(
        "INSERT INTO console_jobs
             (id, namespace, action, reason, principal, keys, filter, state, total,
              created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'running', $8, clock_timestamp(), clock_timestamp())
         ON CONFLICT (id) DO UPDATE SET id = console_jobs.id
         RETURNING ",
        job_columns!()
    ))
    .bind(job.id.as_str())
    .bind(job.namespace.as_str())
    .bind(job.action.as_str())
    .bind(&job.reason)
    .bind(&job.principal)
    .bind(keys)
    .bind(&job.filter)
    .bind(i32::try_from(job.total).unwrap_or(i32::MAX))
    .fetch_one(db)
    .await?;
    Ok(row.into())
}

#[tracing::instrument(level = "debug", name = "store.console_jobs.find", skip_all)]
pub async fn find(db: impl PgExecutor<'_>, id: &JobId) -> sqlx::Result<Option<BulkJob>> {
    let _timer = super::QueryTimer::start("console_jobs_find");
    let row: Option<JobRow> = sqlx::query_as(concat!(
        "SELECT ",
        job_columns!(),
        " FROM console_jobs WHERE id = $1"
    ))
    .bind(id.as_str())
    .fetch_optional(db)
    .await?;
    Ok(row.map(BulkJob::from))
}

/// The latest jobs, newest first.
#[tracing::instrument(level = "debug", name = "store.console_jobs.recent", skip_all)]
pub async fn recent(db: impl PgExecutor<'_>, limit: u32) -> sqlx::Result<Vec<BulkJob>> {
    let _timer = super::QueryTimer::start("console_jobs_recent");
    let rows: Vec<JobRow> = sqlx::query_as(concat!(
        "SELECT ",
        job_columns!(),
        " FROM console_jobs ORDER BY created_at DESC, id LIMIT $1"
    ))
    .bind(i64::from(limit))
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(BulkJob::from).collect())
}

/// Moves a job from `from` to `to`: abort (running → aborted) or resume
/// (aborted → running, free for any replica to take at once), by `who`.
/// `None` when the job was not in `from`.
#[tracing::instrument(level = "debug", name = "store.console_jobs.switch", skip_all)]
pub async fn switch(
    db: impl PgExecutor<'_>,
    id: &JobId,
    (from, to): (JobState, JobState),
    who: &str,
) -> sqlx::Result<Option<BulkJob>> {
    let _timer = super::QueryTimer::start("console_jobs_switch");
    let row: Option<JobRow> = sqlx::query_as(concat!(
        "UPDATE console_jobs
         SET state = $3, runner_until = NULL, switched_by = $4, last_error = NULL,
             updated_at = clock_timestamp()
         WHERE id = $1 AND state = $2
         RETURNING ",
        job_columns!()
    ))
    .bind(id.as_str())
    .bind(from.as_str())
    .bind(to.as_str())
    .bind(who)
    .fetch_optional(db)
    .await?;
    Ok(row.map(BulkJob::from))
}

/// Stops a job `runner` holds that cannot go on, saying why (aborted: an
/// operator may resume it once the cause is gone).
#[tracing::instrument(level = "debug", name = "store.console_jobs.stop", skip_all)]
pub async fn stop(
    db: impl PgExecutor<'_>,
    id: &JobId,
    runner: &str,
    why: &str,
) -> sqlx::Result<()> {
    let _timer = super::QueryTimer::start("console_jobs_stop");
    sqlx::query(
        "UPDATE console_jobs
         SET state = 'aborted', runner_until = NULL, last_error = $3,
             updated_at = clock_timestamp()
         WHERE id = $1 AND runner = $2 AND state = 'running'",
    )
    .bind(id.as_str())
    .bind(runner)
    .bind(why)
    .execute(db)
    .await?;
    Ok(())
}

/// Takes the oldest running job no replica holds, for `lease`.
#[tracing::instrument(level = "debug", name = "store.console_jobs.take", skip_all)]
pub async fn take(
    db: impl PgExecutor<'_>,
    runner: &str,
    lease: Duration,
) -> sqlx::Result<Option<BulkJob>> {
    let _timer = super::QueryTimer::start("console_jobs_take");
    let row: Option<JobRow> = sqlx::query_as(concat!(
        "UPDATE console_jobs
         SET runner = $1, runner_until = clock_timestamp() + $2 * interval '1 millisecond'
         WHERE id = (
             SELECT id FROM console_jobs
             WHERE state = 'running'
               AND (runner_until IS NULL OR runner_until < clock_timestamp())
             ORDER BY created_at
             LIMIT 1
             FOR UPDATE SKIP LOCKED)
         RETURNING ",
        job_columns!()
    ))
    .bind(runner)
    .bind(millis(lease))
    .fetch_optional(db)
    .await?;
    Ok(row.map(BulkJob::from))
}

/// Locks the job for one step, if `runner` still holds it and it still runs.
#[tracing::instrument(level = "debug", name = "store.console_jobs.lock_step", skip_all)]
pub async fn lock_step(
    db: impl PgExecutor<'_>,
    id: &JobId,
    runner: &str,
) -> sqlx::Result<Option<BulkJob>> {
    let _timer = super::QueryTimer::start("console_jobs_lock_step");
    let row: Option<JobRow> = sqlx::query_as(concat!(
        "SELECT ",
        job_columns!(),
        " FROM console_jobs
         WHERE id = $1 AND runner = $2 AND state = 'running'
           AND runner_until >= clock_timestamp()
         FOR UPDATE"
    ))
    .bind(id.as_str())
    .bind(runner)
    .fetch_optional(db)
    .await?;
    Ok(row.map(BulkJob::from))
}

/// How one step ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Acted,
    Skipped,
    /// Nothing was left to act on: the job is finished.
    Exhausted,
}

/// Counts one step under the lock [`lock_step`] took, moves the position on
/// and renews the runner's lease; an exhausted job is finished. `None` when
/// the guard no longer holds (the caller then rolls back).
#[tracing::instrument(level = "debug", name = "store.console_jobs.advance", skip_all)]
pub async fn advance(
    db: impl PgExecutor<'_>,
    id: &JobId,
    runner: &str,
    step: Step,
    position: Option<&str>,
    lease: Duration,
) -> sqlx::Result<Option<BulkJob>> {
    let _timer = super::QueryTimer::start("console_jobs_advance");
    let row: Option<JobRow> = sqlx::query_as(concat!(
        "UPDATE console_jobs
         SET done = done + CASE WHEN $3 = 'acted' THEN 1 ELSE 0 END,
             skipped = skipped + CASE WHEN $3 = 'skipped' THEN 1 ELSE 0 END,
             position = COALESCE($4, position),
             state = CASE WHEN $3 = 'exhausted' THEN 'finished' ELSE state END,
             finished_at = CASE WHEN $3 = 'exhausted' THEN clock_timestamp() END,
             runner_until = clock_timestamp() + $5 * interval '1 millisecond',
             updated_at = clock_timestamp()
         WHERE id = $1 AND runner = $2 AND state = 'running'
         RETURNING ",
        job_columns!()
    ))
    .bind(id.as_str())
    .bind(runner)
    .bind(match step {
        Step::Acted => "acted",
        Step::Skipped => "skipped",
        Step::Exhausted => "exhausted",
    })
    .bind(position)
    .bind(millis(lease))
    .fetch_optional(db)
    .await?;
    Ok(row.map(BulkJob::from))
}
