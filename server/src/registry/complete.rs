//! Complete: one guarded statement records the report while the token is the
//! current lease; when it records nothing, the stored state decides the answer.

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
        self.run(async |db| complete_on(db, command).await).await
    }
}

async fn complete_on(
    connection: &mut PgConnection,
    command: &CompleteCommand,
) -> Result<Operation> {
    // A report whose transition needs nothing stored is recorded at once: for
    // the current holder that one statement is the whole Complete.
    let mut transition = command.report.settled_transition();
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
    let recorded = operations::record_outcome(
        &mut *connection,
        &command.namespace,
        &command.operation_key,
        command.fencing_token,
        &command.report,
        transition,
    )
    .await?;
    if let Some(operation) = &recorded {
        metrics::completion(&command.namespace, report_label(&command.report));
        metrics::finished(&command.namespace, transition.status, operation.attempts);
    }
    Ok(recorded)
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
