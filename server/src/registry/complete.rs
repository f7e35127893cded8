//! Complete: under the operation's row lock, answer from the execution's record
//! or record the report as one guarded transition.

use sqlx::{Connection, PgConnection};

use super::Registry;
use crate::domain::commands::CompleteCommand;
use crate::domain::complete::{self, CompleteStep, Report};
use crate::domain::error::{RegistryError, Result};
use crate::domain::operation::Operation;
use crate::store::{executions, operations};
use crate::telemetry::metrics;

impl Registry {
    pub async fn complete(&self, command: &CompleteCommand) -> Result<Operation> {
        self.run(async |db| complete_on(db, command).await).await
    }
}

async fn complete_on(
    connection: &mut PgConnection,
    command: &CompleteCommand,
) -> Result<Operation> {
    let (namespace, key, token) = (
        &command.namespace,
        &command.operation_key,
        command.fencing_token,
    );
    let mut tx = connection.begin().await?;
    let observed = operations::lock(&mut *tx, namespace, key)
        .await?
        .ok_or(RegistryError::OperationNotFound)?;
    let execution = executions::find(&mut *tx, namespace, key, token).await?;
    let step = complete::decide(
        &observed.operation,
        execution.as_ref(),
        token,
        &command.report,
        observed.db_now,
        rand::random(),
    );
    match step {
        CompleteStep::Repeat => Ok(observed.operation),
        CompleteStep::AlreadyCompleted => {
            Err(RegistryError::AlreadyCompleted { token: token.get() })
        }
        CompleteStep::Stale { .. } if super::planted::acknowledges_stale_completes() => {
            Ok(observed.operation)
        }
        CompleteStep::Stale { current } => {
            metrics::stale_token(namespace, "Complete");
            Err(RegistryError::StaleFencingToken {
                presented: token.get(),
                current: current.get(),
            })
        }
        CompleteStep::Record(transition) => {
            let recorded = operations::record_outcome(
                &mut *tx,
                namespace,
                key,
                token,
                &command.report,
                transition,
            )
            .await?;
            match recorded {
                Some(recorded) if recorded.execution_finished => {
                    tx.commit().await?;
                    metrics::completion(namespace, report_label(&command.report));
                    metrics::finished(namespace, transition.status, recorded.operation.attempts);
                    Ok(recorded.operation)
                }
                _ => {
                    // The row lock makes this unreachable; refuse rather than half-write.
                    tracing::error!(namespace = %namespace, key = %key, %token, "outcome not recorded under lock");
                    Err(RegistryError::Internal)
                }
            }
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
