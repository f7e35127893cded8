//! Renew and FencedWrite: the current token is the authority; lease expiry
//! only permits a takeover, which issues a higher token.

use sqlx::{Connection, PgConnection};

use super::Registry;
use crate::domain::commands::{FencedWriteCommand, RenewCommand};
use crate::domain::error::{RegistryError, Result};
use crate::domain::ids::FencingToken;
use crate::domain::operation::{Lease, Operation, Status};
use crate::store::{operations, resources};
use crate::telemetry::metrics;

impl Registry {
    pub async fn renew(&self, command: &RenewCommand) -> Result<Lease> {
        let (namespace, key) = (&command.namespace, &command.operation_key);
        self.run(async |connection| {
            let renewed = operations::renew(
                &mut *connection,
                namespace,
                key,
                &command.owner,
                command.fencing_token,
                command.lease_ttl,
            )
            .await?;
            if let Some(lease) = renewed.as_ref().and_then(Operation::lease) {
                return Ok(lease);
            }
            let current = operations::find(&mut *connection, namespace, key)
                .await?
                .ok_or(RegistryError::OperationNotFound)?
                .operation;
            // The token is checked first: a superseded holder learns it must stop.
            check_current(&current, command.fencing_token, "Renew")?;
            Err(RegistryError::LeaseNotHeld)
        })
        .await
    }

    /// Writes under the operation's row lock, so a write racing a takeover
    /// either lands before it or is refused after it.
    pub async fn fenced_write(&self, command: &FencedWriteCommand) -> Result<(u64, u64)> {
        self.run(async |connection| {
            let mut tx = connection.begin().await?;
            let written = fenced_write_on(&mut tx, command).await?;
            tx.commit().await?;
            Ok(written)
        })
        .await
    }
}

/// A FencedWrite inside a transaction the caller holds (the server's own, or
/// the transactional door's): the operation's row stays locked until that
/// transaction ends. A refusal writes nothing.
pub(crate) async fn fenced_write_on(
    tx: &mut PgConnection,
    command: &FencedWriteCommand,
) -> Result<(u64, u64)> {
    let (namespace, key, token) = (
        &command.namespace,
        &command.operation_key,
        command.fencing_token,
    );
    let operation = operations::lock(&mut *tx, namespace, key)
        .await?
        .ok_or(RegistryError::OperationNotFound)?
        .operation;
    check_current(&operation, token, "FencedWrite")?;
    let written = resources::write_fenced(
        &mut *tx,
        namespace,
        &command.resource,
        key,
        token,
        &command.value,
    )
    .await?;
    match written {
        Some((fence, version)) => Ok((fence.get(), version)),
        None => {
            let fence = resources::find(&mut *tx, namespace, &command.resource)
                .await?
                .map_or(0, |resource| resource.fence.get());
            metrics::stale_token(namespace, "FencedWrite");
            Err(RegistryError::StaleFencingToken {
                presented: token.get(),
                current: fence,
            })
        }
    }
}

/// Accepts only the operation's current token while it is in progress and
/// no operator holds it.
fn check_current(operation: &Operation, token: FencingToken, rpc: &'static str) -> Result<()> {
    if operation.fencing_token == token
        && operation.status == Status::InProgress
        && !operation.is_held()
    {
        return Ok(());
    }
    metrics::stale_token(&operation.namespace, rpc);
    Err(RegistryError::StaleFencingToken {
        presented: token.get(),
        current: operation.fencing_token.get(),
    })
}
