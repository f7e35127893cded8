//! Lookup, GetResource and the operator's queue: plain reads.

use sqlx::{Connection, PgConnection};

use super::Registry;
use crate::domain::admin::AuditEntry;
use crate::domain::commands::{ListQuery, LookupQuery, PageCursor, ResourceQuery};
use crate::domain::error::{RegistryError, Result};
use crate::domain::operation::{Execution, Operation, Resource};
use crate::store::{audit, executions, operations, resources};

/// An operation with what was asked of its history.
#[derive(Debug)]
pub struct LookupAnswer {
    pub operation: Operation,
    pub executions: Vec<Execution>,
    pub audit: Vec<AuditEntry>,
}

/// One page of the operator's queue and where the next one starts.
#[derive(Debug)]
pub struct QueuePage {
    pub operations: Vec<Operation>,
    pub next: Option<PageCursor>,
}

impl Registry {
    pub async fn lookup(&self, query: &LookupQuery) -> Result<LookupAnswer> {
        self.run(async |db| lookup_on(db, query).await).await
    }

    pub async fn get_resource(&self, query: &ResourceQuery) -> Result<Resource> {
        self.run(async |db| {
            resources::find(db, &query.namespace, &query.resource)
                .await?
                .ok_or(RegistryError::ResourceNotFound)
        })
        .await
    }

    pub async fn list(&self, query: &ListQuery) -> Result<QueuePage> {
        let mut operations = self
            .run(async |db| planned(db, async |tx| operations::list(tx, query).await).await)
            .await?;
        let next = more_pages(&mut operations, query.page_size)
            .then(|| operations.last())
            .flatten()
            .map(|last| PageCursor {
                created_at: last.created_at,
                operation_key: last.operation_key.clone(),
            });
        Ok(QueuePage { operations, next })
    }
}

/// A list statement in a transaction of its own that plans it with its
/// values ([`operations::plan_with_values`]).
pub(super) async fn planned<T>(
    db: &mut PgConnection,
    list: impl AsyncFnOnce(&mut PgConnection) -> sqlx::Result<T>,
) -> Result<T> {
    let mut tx = db.begin().await?;
    operations::plan_with_values(&mut *tx).await?;
    let listed = list(&mut tx).await?;
    tx.commit().await?;
    Ok(listed)
}

/// Drops the row read past a page (lists read `page_size + 1`): whether
/// another page follows.
pub(super) fn more_pages<T>(rows: &mut Vec<T>, page_size: u32) -> bool {
    let page_size = usize::try_from(page_size).unwrap_or(usize::MAX);
    let more = rows.len() > page_size;
    rows.truncate(page_size);
    more
}

/// A Lookup on `db`: the server's own session, or the caller's transaction
/// (the transactional door), which then sees its own uncommitted changes.
pub(crate) async fn lookup_on(db: &mut PgConnection, query: &LookupQuery) -> Result<LookupAnswer> {
    let (namespace, key) = (&query.namespace, &query.operation_key);
    let operation = operations::find(&mut *db, namespace, key)
        .await?
        .ok_or(RegistryError::OperationNotFound)?
        .operation;
    let executions = if query.include_executions {
        executions::list(&mut *db, namespace, key).await?
    } else {
        Vec::new()
    };
    let audit = if query.include_audit {
        audit::list(&mut *db, namespace, key).await?
    } else {
        Vec::new()
    };
    Ok(LookupAnswer {
        operation,
        executions,
        audit,
    })
}
