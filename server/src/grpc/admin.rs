//! `opreg.v1.OperationAdmin`: the operator's queue and actions, a service of
//! its own so access to it can be granted apart from the registry's.

use opreg_proto::v1 as pb;
use opreg_proto::v1::operation_admin_server::{OperationAdmin, OperationAdminServer};
use tonic::{Request, Response, Status};

use super::{Gate, RequestLimits, reply, requests, responses};
use crate::registry::Registry;

#[derive(Clone, Debug)]
pub struct AdminService {
    registry: Registry,
    limits: RequestLimits,
    gate: Gate,
}

impl AdminService {
    pub fn new(registry: Registry, limits: RequestLimits, gate: Gate) -> Self {
        Self {
            registry,
            limits,
            gate,
        }
    }

    pub fn into_server(self) -> OperationAdminServer<Self> {
        let decode_limit = super::message_limits(&self.limits).largest();
        OperationAdminServer::new(self).max_decoding_message_size(decode_limit)
    }
}

#[tonic::async_trait]
impl OperationAdmin for AdminService {
    #[tracing::instrument(level = "debug", skip_all, fields(namespace = %request.get_ref().namespace))]
    async fn list_operations(
        &self,
        request: Request<pb::ListOperationsRequest>,
    ) -> Result<Response<pb::ListOperationsResponse>, Status> {
        self.gate.admit(&request)?;
        let page = async {
            self.registry
                .list(&requests::list_operations(request.into_inner())?)
                .await
        }
        .await;
        reply(page, responses::queue_page)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(namespace = %request.get_ref().namespace, key = %request.get_ref().operation_key, operator = %request.get_ref().operator))]
    async fn resolve_operation(
        &self,
        request: Request<pb::ResolveOperationRequest>,
    ) -> Result<Response<pb::ResolveOperationResponse>, Status> {
        let caller = self.gate.admit(&request)?;
        let change = async {
            let (mut target, command) = requests::resolve(request.into_inner(), &self.limits)?;
            target.actor.principal = caller.name().to_owned();
            self.registry.act(&target, &command).await
        }
        .await;
        reply(change, responses::resolved)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(namespace = %request.get_ref().namespace, key = %request.get_ref().operation_key, operator = %request.get_ref().operator))]
    async fn requeue_operation(
        &self,
        request: Request<pb::RequeueOperationRequest>,
    ) -> Result<Response<pb::RequeueOperationResponse>, Status> {
        let caller = self.gate.admit(&request)?;
        let change = async {
            let (mut target, command) = requests::requeue(request.into_inner(), &self.limits)?;
            target.actor.principal = caller.name().to_owned();
            self.registry.act(&target, &command).await
        }
        .await;
        reply(change, responses::requeued)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(namespace = %request.get_ref().namespace, key = %request.get_ref().operation_key, operator = %request.get_ref().operator))]
    async fn hold_operation(
        &self,
        request: Request<pb::HoldOperationRequest>,
    ) -> Result<Response<pb::HoldOperationResponse>, Status> {
        let caller = self.gate.admit(&request)?;
        let change = async {
            let (mut target, command) = requests::hold(request.into_inner())?;
            target.actor.principal = caller.name().to_owned();
            self.registry.act(&target, &command).await
        }
        .await;
        reply(change, responses::held)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(namespace = %request.get_ref().namespace, key = %request.get_ref().operation_key, operator = %request.get_ref().operator))]
    async fn release_operation(
        &self,
        request: Request<pb::ReleaseOperationRequest>,
    ) -> Result<Response<pb::ReleaseOperationResponse>, Status> {
        let caller = self.gate.admit(&request)?;
        let change = async {
            let (mut target, command) = requests::release(request.into_inner())?;
            target.actor.principal = caller.name().to_owned();
            self.registry.act(&target, &command).await
        }
        .await;
        reply(change, responses::released)
    }
}
