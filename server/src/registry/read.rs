//! Lookup, GetResource and the operator's queue: plain reads.

use sqlx::PgConnection;

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
            .run(async |db| Ok(operations::list(db, query).await?))
            .await?;
        let page_size = usize::try_from(query.page_size).unwrap_or(usize::MAX);
        let next = if operations.len() > page_size {
            operations.truncate(page_size);
            operations.last().map(|last| PageCursor {
                created_at: last.created_at,
                operation_key: last.operation_key.clone(),
            })
        } else {
            None
        };
        Ok(QueuePage { operations, next })
    }
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
