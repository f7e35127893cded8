//! The operator's actions: under the operation's row lock, the domain decides
//! whether the status allows the action, then one guarded statement applies
//! it and writes its audit row.

use sqlx::{Connection, PgConnection};

use super::Registry;
use crate::domain::admin::{self, AdminAction, AuditEntry, Seen};
use crate::domain::commands::{AdminCommand, AdminTarget};
use crate::domain::error::{RegistryError, Result};
use crate::domain::operation::Operation;
use crate::store::operations;
use crate::telemetry::metrics;

/// An operator action as recorded: the operation after it, and its audit row.
#[derive(Debug)]
pub struct AdminChange {
    pub operation: Operation,
    pub audit: AuditEntry,
}

impl Registry {
    pub async fn act(&self, target: &AdminTarget, command: &AdminCommand) -> Result<AdminChange> {
        self.act_as_seen(target, command, &Seen::default()).await
    }

    /// An action that applies only while the operation still looks as the
    /// operator saw it; otherwise INVALID_TRANSITION, as its status would refuse.
    pub async fn act_as_seen(
        &self,
        target: &AdminTarget,
        command: &AdminCommand,
        seen: &Seen,
    ) -> Result<AdminChange> {
        self.run(async |db| act_on(db, target, command, seen).await)
            .await
    }
}

/// An operator action on `connection`: a transaction of its own, or a
/// savepoint when `connection` is already in one (a bulk job's step).
pub(super) async fn act_on(
    connection: &mut PgConnection,
    target: &AdminTarget,
    command: &AdminCommand,
    seen: &Seen,
) -> Result<AdminChange> {
    let (namespace, key, actor) = (&target.namespace, &target.operation_key, &target.actor);
    let mut tx = connection.begin().await?;
    let observed = operations::lock(&mut *tx, namespace, key)
        .await?
        .ok_or(RegistryError::OperationNotFound)?;
    let operation = &observed.operation;
    seen.check(operation)?;
    let (action, change) = match command {
        AdminCommand::Resolve(resolution) => {
            admin::resolve(operation)?;
            let change = operations::resolve(&mut *tx, operation, actor, resolution).await?;
            (AdminAction::Resolve, change)
        }
        AdminCommand::Requeue { revision, policy } => {
            admin::requeue(operation)?;
            let change = operations::requeue(&mut *tx, operation, actor, revision, policy).await?;
            (AdminAction::Requeue, change)
        }
        AdminCommand::Hold => {
            let hold = admin::hold(operation, observed.db_now)?;
            let change =
                operations::hold(&mut *tx, operation, actor, hold.revoke_live_lease).await?;
            (AdminAction::Hold, change)
        }
        AdminCommand::Release => {
            let status = admin::release(operation)?;
            let change = operations::release(&mut *tx, operation, actor, status).await?;
            (AdminAction::Release, change)
        }
    };
    let Some((after, audit)) = change else {
        // The row lock makes this unreachable; refuse rather than half-write.
        tracing::error!(namespace = %namespace, key = %key, %action, "admin action not applied under lock");
        return Err(RegistryError::Internal);
    };
    tx.commit().await?;
    let change = AdminChange {
        operation: after,
        audit,
    };
    metrics::admin_action(namespace, action);
    tracing::info!(
        namespace = %namespace, key = %key, %action, operator = %actor.operator,
        status_before = change.audit.status_before.as_str(),
        status_after = change.audit.status_after.as_str(),
        "operator action recorded"
    );
    Ok(change)
}
