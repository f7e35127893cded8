//! Complete: one guarded statement records the report while the token is the
//! current lease; when it records nothing, the stored state decides the answer.
//! A report that needs nothing stored is recorded in a statement shared with
//! concurrent reports ([`super::gather::Reports`]); a retryable failure, whose
//! next state depends on the attempts and the budget, decides first.

use std::ops::ControlFlow;

use sqlx::PgConnection;

use super::Registry;
use crate::domain::commands::CompleteCommand;
use crate::domain::complete::{self, CompleteStep, Report, Transition};
use crate::domain::error::{RegistryError, Result};
use crate::domain::operation::Operation;
use crate::store::{executions, operations};
use crate::telemetry::metrics;

/// How many times a Complete decides and records before it gives up. Each
/// retry means the operation changed between the read and the guarded
/// statement, and each such change (a takeover, a hold, another report) leaves
/// a state the next read answers from; a second retry takes a hold placed and
/// released in that gap.
const RECORD_ATTEMPTS: usize = 3;

impl Registry {
    pub async fn complete(&self, command: &CompleteCommand) -> Result<Operation> {
        if let Some(transition) = command.report.settled_transition() {
            // For the current holder that shared statement is the whole Complete.
            if let Some(recorded) = self.reports.submit(command.clone()).await? {
                counted(command, transition, &recorded);
                return Ok(recorded);
            }
        }
        self.run(async |db| complete_on(db, command).await).await
    }

    /// Completes of one batch call, answered in their order exactly as
    /// [`Registry::complete`] answers each: the settled reports are queued
    /// together, so they share recording statements; the rest, and those the
    /// statement did not record, decide from the stored state on sessions of
    /// their own, one operation's reports in their order.
    pub async fn complete_all(&self, commands: &[CompleteCommand]) -> Vec<Result<Operation>> {
        let settled: Vec<usize> = (0..commands.len())
            .filter(|&index| commands[index].report.settled_transition().is_some())
            .collect();
        let recorded = self
            .reports
            .submit_all(
                settled
                    .iter()
                    .map(|&index| commands[index].clone())
                    .collect(),
            )
            .await;
        let mut answers: Vec<Option<Result<Operation>>> =
            (0..commands.len()).map(|_| None).collect();
        for (&index, recorded) in settled.iter().zip(recorded) {
            match recorded {
                Ok(Some(operation)) => {
                    let command = &commands[index];
                    if let Some(transition) = command.report.settled_transition() {
                        counted(command, transition, &operation);
                    }
                    answers[index] = Some(Ok(operation));
                }
                Ok(None) => {}
                Err(error) => answers[index] = Some(Err(error)),
            }
        }
        let undecided = (0..commands.len())
            .filter(|&index| answers[index].is_none())
            .map(|index| (index, ()))
            .collect();
        let decided = super::each_operation_in_order(
            undecided,
            |index| commands[index].identity(),
            |index, ()| {
                let command = &commands[index];
                self.run(async move |db| complete_on(db, command).await)
            },
        )
        .await;
        for (index, answer) in decided {
            answers[index] = Some(answer);
        }
        super::filled(answers)
    }
}

/// A Complete on the caller's own connection (the transactional door), as
/// [`Registry::complete`] takes it: the current holder's report is recorded
/// by the one guarded statement the server shares between reports; anything
/// else decides from the stored state.
pub(crate) async fn complete_in_transaction(
    connection: &mut PgConnection,
    command: &CompleteCommand,
) -> Result<Operation> {
    if let Some(transition) = command.report.settled_transition()
        && let Some(recorded) = record(connection, command, transition).await?
    {
        return Ok(recorded);
    }
    complete_on(connection, command).await
}

/// Decides from the stored state, then records what it decided.
async fn complete_on(
    connection: &mut PgConnection,
    command: &CompleteCommand,
) -> Result<Operation> {
    let mut transition = None;
    for _ in 0..RECORD_ATTEMPTS {
        if let Some(transition) = transition
            && let Some(recorded) = record(connection, command, transition).await?
        {
            return Ok(recorded);
        }
        match decide_from_stored(connection, command).await? {
            ControlFlow::Continue(next) => transition = Some(next),
            ControlFlow::Break(answer) => return Ok(answer),
        }
    }
    tracing::warn!(namespace = %command.namespace, key = %command.operation_key, "operation kept changing under a Complete");
    Err(RegistryError::OperationBusy)
}

async fn record(
    connection: &mut PgConnection,
    command: &CompleteCommand,
    transition: Transition,
) -> Result<Option<Operation>> {
    let recorded = operations::record_outcomes(&mut *connection, &[(command, transition)])
        .await?
        .pop()
        .flatten();
    if let Some(operation) = &recorded {
        counted(command, transition, operation);
    }
    Ok(recorded)
}

fn counted(command: &CompleteCommand, transition: Transition, recorded: &Operation) {
    metrics::completion(&command.namespace, report_label(&command.report));
    metrics::finished(&command.namespace, transition.status, recorded.attempts);
}

/// Decides from the stored operation and the execution the token started:
/// the transition to record, or the answer.
async fn decide_from_stored(
    connection: &mut PgConnection,
    command: &CompleteCommand,
) -> Result<ControlFlow<Operation, Transition>> {
    let (namespace, key, token) = (
        &command.namespace,
        &command.operation_key,
        command.fencing_token,
    );
    let observed = operations::find(&mut *connection, namespace, key)
        .await?
        .ok_or(RegistryError::OperationNotFound)?;
    let execution = executions::find(&mut *connection, namespace, key, token).await?;
    let step = complete::decide(
        &observed.operation,
        execution.as_ref(),
        token,
        &command.report,
        observed.db_now,
        rand::random(),
    );
    match step {
        CompleteStep::Record(transition) => Ok(ControlFlow::Continue(transition)),
        CompleteStep::Repeat => Ok(ControlFlow::Break(observed.operation)),
        CompleteStep::AlreadyCompleted => {
            Err(RegistryError::AlreadyCompleted { token: token.get() })
        }
        CompleteStep::Stale { .. } if super::planted::acknowledges_stale_completes() => {
            Ok(ControlFlow::Break(observed.operation))
        }
        CompleteStep::Stale { current } => {
            metrics::stale_token(namespace, "Complete");
            Err(RegistryError::StaleFencingToken {
                presented: token.get(),
                current: current.get(),
            })
        }
    }
}

fn report_label(report: &Report) -> &'static str {
    match report {
        Report::Success { .. } => "success",
        Report::Failure { .. } => "failure",
        Report::Retryable { .. } => "retryable",
        Report::Unknown { .. } => "unknown",
    }
}
