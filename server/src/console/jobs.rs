//! Bulk actions: a job acts on a selection, or on everything a filter
//! matched when it was submitted, at a bounded rate, in the background, for
//! its submitter and only while the policy still lets them act. Each
//! operation is acted on only while it still matches the filter the operator
//! looked at. The job's id comes from the submitting page, so a resubmission
//! finds the same job; it can be aborted and resumed; each operation's action
//! and the job's count commit together
//! ([`crate::registry::Registry::job_step`]), and each audit row names the
//! job, so the job row is the summary and every trail leads to it. Any
//! replica may run any job; one runs it at a time, holding it by a lease
//! renewed at every step, so a replica that dies hands it on.

use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use maud::html;

use super::html::{Section, alert, column_heads, page, query, time};
use super::identity::{Acting, LOOPBACK_OPERATOR, Reading};
use super::operations::{Filter, cursor_of, fetch_page};
use super::{Console, ConsoleError, Fields};
use crate::access::Role;
use crate::domain::admin::{Actor, Resolution};
use crate::domain::bulk::{BulkAction, BulkJob, JobId, JobScope, JobSpec, JobState};
use crate::domain::commands::{AdminCommand, AdminTarget};
use crate::domain::ids::OperationKey;
use crate::domain::text::check_required_text;
use crate::registry::JobStep;

/// How long a replica's hold on a job lasts without a step.
const RUNNER_LEASE: Duration = Duration::from_secs(10);
/// How often an idle replica looks for a job to run.
const IDLE_POLL: Duration = Duration::from_secs(1);
/// Most operations one selection names, and one filter job may act on.
const MAX_SELECTION: usize = 1_000;
const MAX_FILTER_MATCHES: u32 = 10_000;
/// Rows read per page when counting a filter's matches.
const COUNT_PAGE: u32 = 1_000;
/// Longest reason; the audit row adds the job's id to it.
const REASON_MAX_BYTES: usize = 4_096;
/// Jobs the jobs page lists.
const RECENT_JOBS: u32 = 200;
/// Failed tries of one step before the job is stopped.
const STEP_ATTEMPTS: u32 = 3;
/// The failure code of a bulk "resolve as failed".
const BULK_FAILURE_CODE: &str = "resolved_by_operator";

fn job_href(id: &JobId) -> String {
    format!("/console/jobs/{}", id.as_str())
}

pub async fn submit(
    State(console): State<Console>,
    Acting(viewer, fields): Acting,
) -> Result<Response, ConsoleError> {
    let filter_fields = fields.with_prefix("filter_");
    let filter = Filter::parse(&filter_fields)?
        .ok_or_else(|| ConsoleError::BadInput("The bulk form names no namespace.".into()))?;
    viewer.authorize(Role::Admin, &filter.namespace)?;
    let id = JobId::parse(fields.get("job_id").unwrap_or_default().to_owned())?;
    let action = BulkAction::try_from(fields.get("action").unwrap_or_default().to_owned())
        .map_err(|_| ConsoleError::BadInput("Choose an action.".into()))?;
    let reason = fields.get("reason").unwrap_or_default().to_owned();
    check_required_text("reason", &reason, REASON_MAX_BYTES)?;
    let mut spec = JobSpec {
        id,
        namespace: filter.namespace.clone(),
        action,
        reason,
        principal: viewer.principal().to_owned(),
        filter: filter.query_string(),
        scope: JobScope::EveryMatch,
        total: 0,
    };
    (spec.scope, spec.total) = match fields.get("scope") {
        Some("selection") => {
            let mut keys: Vec<OperationKey> = Vec::new();
            for key in fields.all("key") {
                let key = OperationKey::parse("key", key.to_owned())?;
                // A key selected twice is acted on once.
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
            if keys.is_empty() || keys.len() > MAX_SELECTION {
                return Err(ConsoleError::BadInput(format!(
                    "Select 1 to {MAX_SELECTION} operations, or act on every match."
                )));
            }
            let total = u32::try_from(keys.len()).unwrap_or(u32::MAX);
            (JobScope::Selection(keys), total)
        }
        Some("filter") => (
            JobScope::EveryMatch,
            count_matches(&console, &filter).await?,
        ),
        _ => {
            return Err(ConsoleError::BadInput(
                "Choose the selection or every match.".into(),
            ));
        }
    };
    let job = console.registry.submit_job(&spec).await?;
    // The same id with another request: a page restored by the browser.
    if !job.spec.same_request(&spec) {
        return Err(ConsoleError::Conflict(
            "This form already started another job: reload the operations page to start a new one."
                .into(),
        ));
    }
    let spec = &job.spec;
    tracing::info!(
        job = spec.id.as_str(),
        namespace = %spec.namespace,
        action = spec.action.as_str(),
        total = spec.total,
        principal = viewer.principal(),
        "console bulk job submitted"
    );
    Ok(Redirect::to(&job_href(&job.spec.id)).into_response())
}

/// The operations a filter matches now, refused past [`MAX_FILTER_MATCHES`].
async fn count_matches(console: &Console, filter: &Filter) -> Result<u32, ConsoleError> {
    let mut total = 0u32;
    let mut after = None;
    loop {
        let (operations, next) =
            fetch_page(console, filter, COUNT_PAGE, after.as_deref(), None).await?;
        total += u32::try_from(operations.len()).unwrap_or(u32::MAX);
        if total > MAX_FILTER_MATCHES {
            return Err(ConsoleError::BadInput(format!(
                "The filter matches more than {MAX_FILTER_MATCHES} operations: narrow it."
            )));
        }
        match next {
            Some(next) => after = Some(next),
            None => return Ok(total),
        }
    }
}

pub async fn list(
    State(console): State<Console>,
    Reading(viewer): Reading,
) -> Result<Response, ConsoleError> {
    let jobs: Vec<BulkJob> = console
        .registry
        .recent_jobs(RECENT_JOBS)
        .await?
        .into_iter()
        .filter(|job| viewer.may(Role::Reader, &job.spec.namespace))
        .collect();
    let now = Utc::now();
    let body = html! {
        h1 { "Jobs" }
        p.hint { "Bulk actions, newest first (the latest " (RECENT_JOBS) " of every namespace, those you may read). Start one from the operations page." }
        @if jobs.is_empty() { p { "No bulk job yet." } } @else {
            div.scroll { table #jobs {
                (column_heads(&["Job", "Namespace", "Action", "State", "Progress", "By", "Submitted"]))
                tbody { @for job in &jobs {
                    tr data-job=(job.spec.id.as_str()) {
                        th scope="row" { a href=(job_href(&job.spec.id)) { (job.spec.id.as_str()) } }
                        td { (job.spec.namespace.as_str()) }
                        td { (job.spec.action.as_str()) }
                        td { (job.state.as_str()) }
                        td { (job.done + job.skipped) " of " (job.spec.total) }
                        td { (submitter(&job.spec)) }
                        td { (time(job.created_at, now)) }
                    }
                } }
            } }
        }
    };
    Ok(viewer.finish(page(Some(&viewer), Section::Jobs, "Jobs", body).into_response()))
}

async fn find(console: &Console, id: String) -> Result<BulkJob, ConsoleError> {
    let id = JobId::parse(id).map_err(|_| ConsoleError::NotFound("job"))?;
    console
        .registry
        .job(&id)
        .await?
        .ok_or(ConsoleError::NotFound("job"))
}

pub async fn one(
    State(console): State<Console>,
    Reading(viewer): Reading,
    Path(id): Path<String>,
) -> Result<Response, ConsoleError> {
    let job = find(&console, id).await?;
    viewer.authorize(Role::Reader, &job.spec.namespace)?;
    let now = Utc::now();
    let admin = viewer.may(Role::Admin, &job.spec.namespace);
    let href = job_href(&job.spec.id);
    let processed = job.done + job.skipped;
    let body = html! {
        h1 { "Job " (job.spec.id.as_str()) }
        @if job.state == JobState::Running { div hidden data-refresh="1000" {} }
        dl.facts {
            dt { "State" } dd #job-status { (job.state.as_str()) }
            dt { "Progress" } dd {
                progress #job-progress value=(processed.min(job.spec.total)) max=(job.spec.total.max(1)) aria-label="Progress" { (processed) " of " (job.spec.total) }
                " " span #job-counts { (processed) " of " (job.spec.total) " processed: " (job.done) " acted on, " (job.skipped) " skipped" }
            }
            dt { "Action" } dd { (job.spec.action.as_str()) " in " (job.spec.namespace.as_str()) }
            dt { "Scope" } dd {
                @match &job.spec.scope {
                    JobScope::Selection(keys) => { (keys.len()) " operations selected on " },
                    JobScope::EveryMatch => { "every operation registered before it was submitted that matches " },
                }
                a href=(format!("/console/operations?{}", job.spec.filter)) { "this filter" }
                "; each is acted on only while it still matches it"
            }
            dt { "Reason" } dd { (job.spec.reason) }
            dt { "Submitted by" } dd { (submitter(&job.spec)) }
            @if let Some(who) = &job.switched_by { dt { "Last aborted or resumed by" } dd { (if who.is_empty() { LOOPBACK_OPERATOR } else { who }) } }
            dt { "Submitted" } dd { (time(job.created_at, now)) }
            dt { "Last step" } dd { (time(job.updated_at, now)) }
            @if let Some(finished) = job.finished_at { dt { "Finished" } dd { (time(finished, now)) } }
        }
        @if let Some(error) = &job.last_error { (alert(&format!("Stopped: {error}"))) }
        @if job.state == JobState::Finished && processed < job.spec.total {
            p { (job.spec.total - processed) " of the operations counted when it was submitted no longer matched the filter when its turn came." }
        }
        @if admin {
            @if job.state == JobState::Running {
                form #abort method="post" action=(format!("{href}/abort")) {
                    input type="hidden" name="csrf" value=(viewer.csrf());
                    button type="submit" { "Abort" }
                }
            }
            @if job.state == JobState::Aborted {
                form #resume method="post" action=(format!("{href}/resume")) {
                    input type="hidden" name="csrf" value=(viewer.csrf());
                    button type="submit" { "Resume" }
                }
            }
        }
        p { a href=(format!("/console/operations?{}", query(&[("namespace", &job.spec.namespace)]))) { "Back to the operations" } }
    };
    Ok(viewer.finish(page(Some(&viewer), Section::Jobs, "Job", body).into_response()))
}

/// Aborts a running job or resumes an aborted one (`verb`: abort, resume).
pub async fn switch(
    State(console): State<Console>,
    Path((id, verb)): Path<(String, String)>,
    Acting(viewer, _): Acting,
) -> Result<Response, ConsoleError> {
    let (from, to) = match verb.as_str() {
        "abort" => (JobState::Running, JobState::Aborted),
        "resume" => (JobState::Aborted, JobState::Running),
        _ => return Err(ConsoleError::NotFound("job action")),
    };
    let job = find(&console, id).await?;
    viewer.authorize(Role::Admin, &job.spec.namespace)?;
    // A job already in the wanted state (a second click) is left as it is.
    if console
        .registry
        .switch_job(&job.spec.id, (from, to), viewer.principal())
        .await?
        .is_some()
    {
        tracing::info!(
            job = job.spec.id.as_str(),
            state = to.as_str(),
            principal = viewer.principal(),
            "console bulk job switched"
        );
    }
    Ok(Redirect::to(&job_href(&job.spec.id)).into_response())
}

/// Runs the jobs of every replica's operators, one at a time on this
/// replica, until aborted.
pub async fn run_jobs_forever(console: Console) {
    let runner = crate::maintenance::holder_id();
    loop {
        match console.registry.take_job(&runner, RUNNER_LEASE).await {
            Ok(Some(job)) => {
                tracing::info!(job = job.spec.id.as_str(), "running console bulk job");
                if let Err(error) = run(&console, &runner, job).await {
                    tracing::warn!(
                        ?error,
                        "console bulk job interrupted; it resumes when its hold lapses"
                    );
                    tokio::time::sleep(IDLE_POLL).await;
                }
            }
            Ok(None) => tokio::time::sleep(IDLE_POLL).await,
            Err(error) => {
                tracing::debug!(%error, "cannot look for console bulk jobs");
                tokio::time::sleep(IDLE_POLL).await;
            }
        }
    }
}

/// Steps through a job at the configured rate until it is finished, aborted
/// or taken over. A job that cannot go on (its submitter lost the right to
/// act, its filter no longer reads, a step keeps failing) is stopped with the
/// reason on its page, so it never spins without progress.
async fn run(console: &Console, runner: &str, mut job: BulkJob) -> Result<(), ConsoleError> {
    let rate = console.settings.bulk_rate.max(1);
    let pause = Duration::from_secs(1) / rate;
    let mut failures = 0;
    loop {
        let steps = match may_act(console, &job) {
            Ok(()) => next_steps(console, &job, rate).await,
            Err(refusal) => Err(refusal),
        };
        let steps = match steps {
            Ok(steps) => steps,
            Err(error) => return stop(console, runner, &job, error).await,
        };
        if steps.is_empty() {
            let finished = console
                .registry
                .job_step(&job.spec.id, runner, RUNNER_LEASE, None)
                .await?;
            if let Some(job) = finished {
                tracing::info!(
                    job = job.spec.id.as_str(),
                    done = job.done,
                    skipped = job.skipped,
                    "console bulk job finished"
                );
            }
            return Ok(());
        }
        for step in &steps {
            let started = Instant::now();
            match console
                .registry
                .job_step(&job.spec.id, runner, RUNNER_LEASE, Some(step))
                .await
            {
                Ok(Some(updated)) => {
                    job = updated;
                    failures = 0;
                }
                Ok(None) => return Ok(()),
                Err(error) => {
                    failures += 1;
                    if failures >= STEP_ATTEMPTS {
                        return stop(console, runner, &job, ConsoleError::Registry(error)).await;
                    }
                    tracing::warn!(job = job.spec.id.as_str(), %error, "console bulk job step failed; trying again");
                    tokio::time::sleep(IDLE_POLL).await;
                    break;
                }
            }
            tokio::time::sleep(pause.saturating_sub(started.elapsed())).await;
        }
    }
}

/// Whether the job's submitter may still act in its namespace, by the
/// policy in force now: a job acts for its submitter, never beyond them.
fn may_act(console: &Console, job: &BulkJob) -> Result<(), ConsoleError> {
    if !console.access.is_restricted() {
        return Ok(());
    }
    let spec = &job.spec;
    let caller = console
        .access
        .principal_named(&spec.principal)
        .ok_or_else(|| {
            ConsoleError::Forbidden(format!(
                "{} is not a principal of the policy in force",
                submitter(spec)
            ))
        })?;
    caller
        .authorize(Role::Admin, &spec.namespace)
        .map_err(ConsoleError::Registry)
}

async fn stop(
    console: &Console,
    runner: &str,
    job: &BulkJob,
    error: ConsoleError,
) -> Result<(), ConsoleError> {
    let why = error.message();
    tracing::warn!(job = job.spec.id.as_str(), %why, "console bulk job stopped");
    console
        .registry
        .stop_job(&job.spec.id, runner, &why)
        .await?;
    Ok(())
}

/// Who submitted a job, as the pages name them.
fn submitter(spec: &JobSpec) -> &str {
    if spec.principal.is_empty() {
        LOOPBACK_OPERATOR
    } else {
        &spec.principal
    }
}

/// The job's next `limit` operations from its position, each with the
/// position after it.
async fn next_steps(
    console: &Console,
    job: &BulkJob,
    limit: u32,
) -> Result<Vec<JobStep>, ConsoleError> {
    let filter = Filter::parse(&Fields::parse(job.spec.filter.as_bytes()))?
        .ok_or_else(|| ConsoleError::BadInput("the job's filter names no namespace".into()))?;
    let actor = Actor {
        operator: submitter(&job.spec).to_owned(),
        reason: job.audit_reason(),
        principal: job.spec.principal.clone(),
    };
    let step = |operation_key: OperationKey, position: String| JobStep {
        target: AdminTarget {
            namespace: job.spec.namespace.clone(),
            operation_key,
            actor: actor.clone(),
        },
        command: command(console, job),
        seen: filter.seen(),
        position,
    };
    match &job.spec.scope {
        JobScope::Selection(keys) => {
            let start: usize = match job.position.as_deref() {
                None => 0,
                Some(at) => at.parse().map_err(|_| {
                    ConsoleError::BadInput(format!("the job's position {at:?} is not an index"))
                })?,
            };
            Ok(keys
                .iter()
                .enumerate()
                .skip(start)
                .take(usize::try_from(limit).unwrap_or(usize::MAX))
                .map(|(index, key)| step(key.clone(), (index + 1).to_string()))
                .collect())
        }
        JobScope::EveryMatch => {
            let (operations, _) = fetch_page(
                console,
                &filter,
                limit,
                job.position.as_deref(),
                Some(job.created_at),
            )
            .await?;
            Ok(operations
                .iter()
                .map(|operation| {
                    step(
                        operation.operation_key.clone(),
                        cursor_of(&filter, operation),
                    )
                })
                .collect())
        }
    }
}

fn command(console: &Console, job: &BulkJob) -> AdminCommand {
    match job.spec.action {
        BulkAction::Hold => AdminCommand::Hold,
        BulkAction::Release => AdminCommand::Release,
        BulkAction::Requeue => AdminCommand::Requeue {
            revision: String::new(),
            policy: console.limits.default_retry_policy,
        },
        BulkAction::ResolveFailure => AdminCommand::Resolve(Resolution::Failure {
            code: BULK_FAILURE_CODE.to_owned(),
            message: job.spec.reason.clone(),
        }),
    }
}
