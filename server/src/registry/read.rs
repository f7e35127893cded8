//! Lookup and GetResource: plain reads.

use super::Registry;
use crate::domain::commands::{LookupQuery, ResourceQuery};
use crate::domain::error::{RegistryError, Result};
use crate::domain::operation::{Execution, Operation, Resource};
use crate::store::{executions, operations, resources};

impl Registry {
    pub async fn lookup(&self, query: &LookupQuery) -> Result<(Operation, Vec<Execution>)> {
        let mut connection = self.connection().await?;
        let operation = operations::find(&mut *connection, &query.namespace, &query.operation_key)
            .await?
            .ok_or(RegistryError::OperationNotFound)?
            .operation;
        let history = if query.include_executions {
            executions::list(&mut *connection, &query.namespace, &query.operation_key).await?
        } else {
            Vec::new()
        };
        Ok((operation, history))
    }

    pub async fn get_resource(&self, query: &ResourceQuery) -> Result<Resource> {
        let mut connection = self.connection().await?;
        resources::find(&mut *connection, &query.namespace, &query.resource)
            .await?
            .ok_or(RegistryError::ResourceNotFound)
    }
}
