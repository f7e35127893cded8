//! What the operator console reads and keeps beyond the gRPC API: lists of
//! finished operations, the due preview, an operation with everything known
//! about it, sign-in sessions and bulk jobs.

use std::time::Duration;

use sqlx::{Connection, PgConnection};

use super::Registry;
use super::admin::act_on;
use crate::domain::admin::Seen;
use crate::domain::bulk::{BulkJob, JobId, JobSpec, JobState};
use crate::domain::commands::{AdminCommand, AdminTarget, FinishedQuery, LookupQuery};
use crate::domain::error::{RegistryError, Result};
use crate::domain::ids::{Namespace, OperationKey};
use crate::domain::operation::{Operation, Resource};
use crate::store::console_jobs::{self, Step};
use crate::store::console_sessions::SessionRow;
use crate::store::{console_sessions, operations, resources};

use super::read::{LookupAnswer, lookup_on, more_pages, planned};

/// Most resources shown as written by one operation.
const RESOURCES_SHOWN: u32 = 50;

/// An operation with its history, what it wrote, and its compensation link.
#[derive(Debug)]
pub struct OperationView {
    pub answer: LookupAnswer,
    pub resources: Vec<(String, Resource)>,
}

/// One page of finished operations and the key the next one starts after.
#[derive(Debug)]
pub struct FinishedPage {
    pub operations: Vec<Operation>,
    pub next: Option<OperationKey>,
}

/// What one step of a bulk job acts on.
#[derive(Debug)]
pub struct JobStep {
    pub target: AdminTarget,
    pub command: AdminCommand,
    /// What the job's filter matched: the action applies only while the
    /// operation still matches it.
    pub seen: Seen,
    /// The job's position once this step is counted.
    pub position: String,
}

impl Registry {
    pub async fn list_finished(&self, query: &FinishedQuery) -> Result<FinishedPage> {
        let mut operations = self
            .run(async |db| {
                planned(db, async |tx| operations::list_finished(tx, query).await).await
            })
            .await?;
        let next = more_pages(&mut operations, query.page_size)
            .then(|| operations.last())
            .flatten()
            .map(|last| last.operation_key.clone());
        Ok(FinishedPage { operations, next })
    }

    pub async fn due_preview(
        &self,
        namespace: &Namespace,
        expired_leases_only: bool,
        limit: u32,
    ) -> Result<Vec<Operation>> {
        self.run(async |db| {
            Ok(operations::due_preview(db, namespace, expired_leases_only, limit).await?)
        })
        .await
    }

    pub async fn operation_view(
        &self,
        namespace: &Namespace,
        operation_key: &OperationKey,
    ) -> Result<OperationView> {
        let query = LookupQuery {
            namespace: namespace.clone(),
            operation_key: operation_key.clone(),
            include_executions: true,
            include_audit: true,
        };
        self.run(async |db| {
            let answer = lookup_on(&mut *db, &query).await?;
            let resources =
                resources::last_written_by(&mut *db, namespace, operation_key, RESOURCES_SHOWN)
                    .await?;
            Ok(OperationView { answer, resources })
        })
        .await
    }

    pub async fn open_console_session(
        &self,
        secret_sha256: &[u8],
        session: &SessionRow,
        ttl: Duration,
    ) -> Result<()> {
        self.run(async |db| Ok(console_sessions::open(db, secret_sha256, session, ttl).await?))
            .await
    }

    /// Who a live session belongs to.
    pub async fn console_session(&self, secret_sha256: &[u8]) -> Result<Option<SessionRow>> {
        self.run(async |db| Ok(console_sessions::find(db, secret_sha256).await?))
            .await
    }

    pub async fn close_console_session(&self, secret_sha256: &[u8]) -> Result<()> {
        self.run(async |db| Ok(console_sessions::close(db, secret_sha256).await?))
            .await
    }

    /// Records a bulk job, or finds the one submitted under its id before.
    pub async fn submit_job(&self, job: &JobSpec) -> Result<BulkJob> {
        self.run(async |db| Ok(console_jobs::submit(db, job).await?))
            .await
    }

    pub async fn job(&self, id: &JobId) -> Result<Option<BulkJob>> {
        self.run(async |db| Ok(console_jobs::find(db, id).await?))
            .await
    }

    pub async fn recent_jobs(&self, limit: u32) -> Result<Vec<BulkJob>> {
        self.run(async |db| Ok(console_jobs::recent(db, limit).await?))
            .await
    }

    /// Aborts (running → aborted) or resumes (aborted → running) a job;
    /// `None` when it was not in `from`.
    pub async fn switch_job(
        &self,
        id: &JobId,
        states: (JobState, JobState),
        who: &str,
    ) -> Result<Option<BulkJob>> {
        self.run(async |db| Ok(console_jobs::switch(db, id, states, who).await?))
            .await
    }

    /// Stops a job `runner` holds that cannot go on, saying why.
    pub async fn stop_job(&self, id: &JobId, runner: &str, why: &str) -> Result<()> {
        self.run(async |db| Ok(console_jobs::stop(db, id, runner, why).await?))
            .await
    }

    /// Takes a running job no replica holds, for `lease`.
    pub async fn take_job(&self, runner: &str, lease: Duration) -> Result<Option<BulkJob>> {
        self.run(async |db| Ok(console_jobs::take(db, runner, lease).await?))
            .await
    }

    /// One step of a job `runner` holds: the action on one operation and the
    /// job's count of it commit together, or the job finishes when `step` is
    /// `None`. An operation whose status no longer allows the action (or that
    /// is gone) is counted as skipped. `None` when the job was aborted or
    /// taken over meanwhile: nothing was done.
    pub async fn job_step(
        &self,
        id: &JobId,
        runner: &str,
        lease: Duration,
        step: Option<&JobStep>,
    ) -> Result<Option<BulkJob>> {
        self.run(async |db| job_step_on(db, id, runner, lease, step).await)
            .await
    }
}

async fn job_step_on(
    connection: &mut PgConnection,
    id: &JobId,
    runner: &str,
    lease: Duration,
    step: Option<&JobStep>,
) -> Result<Option<BulkJob>> {
    let mut tx = connection.begin().await?;
    if console_jobs::lock_step(&mut *tx, id, runner)
        .await?
        .is_none()
    {
        return Ok(None);
    }
    let (counted, position) = match step {
        None => (Step::Exhausted, None),
        // The action runs in a savepoint: a refusal undoes only its own part.
        Some(step) => match act_on(&mut tx, &step.target, &step.command, &step.seen).await {
            Ok(_) => (Step::Acted, Some(step.position.as_str())),
            Err(RegistryError::InvalidTransition { .. } | RegistryError::OperationNotFound) => {
                (Step::Skipped, Some(step.position.as_str()))
            }
            Err(error) => return Err(error),
        },
    };
    let Some(job) = console_jobs::advance(&mut *tx, id, runner, counted, position, lease).await?
    else {
        // lock_step's row lock makes this unreachable; refuse rather than half-write.
        tracing::error!(job = id.as_str(), "bulk job step not counted under lock");
        return Err(RegistryError::Internal);
    };
    tx.commit().await?;
    Ok(Some(job))
}
