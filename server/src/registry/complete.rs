//! Complete: under the operation's row lock, answer from the execution's record
//! or record the report as one guarded transition.

use super::Registry;
use crate::domain::commands::CompleteCommand;
use crate::domain::complete::{self, CompleteStep};
use crate::domain::error::{RegistryError, Result};
use crate::domain::operation::Operation;
use crate::store::{executions, operations};

impl Registry {
    pub async fn complete(&self, command: &CompleteCommand) -> Result<Operation> {
        let (namespace, key, token) = (
            &command.namespace,
            &command.operation_key,
            command.fencing_token,
        );
        let mut tx = self.pool.begin().await?;
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
            CompleteStep::AlreadyCompleted => Err(RegistryError::AlreadyCompleted {
                token: token.unsigned_abs(),
            }),
            CompleteStep::Stale { current } => Err(RegistryError::StaleFencingToken {
                presented: token.unsigned_abs(),
                current: current.unsigned_abs(),
            }),
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
                        Ok(recorded.operation)
                    }
                    _ => {
                        // The row lock makes this unreachable; refuse rather than half-write.
                        tracing::error!(namespace = %namespace, key = %key, token, "outcome not recorded under lock");
                        Err(RegistryError::Internal)
                    }
                }
            }
        }
    }
}
