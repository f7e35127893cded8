//! One typed method per RPC over the generated stub.

use tonic::transport::{Channel, Endpoint};
use tonic_types::{ErrorInfo, StatusExt};

use crate::error::Error;
use crate::proto as pb;
use crate::proto::operation_admin_client::OperationAdminClient;
use crate::proto::operation_registry_client::OperationRegistryClient;

/// The `ErrorInfo` domain of opreg's errors.
pub const ERROR_DOMAIN: &str = "opreg";

/// A cheap-to-clone opreg client.
#[derive(Clone, Debug)]
pub struct Client {
    inner: OperationRegistryClient<Channel>,
    channel: Channel,
}

impl Client {
    /// Connects to `endpoint`, e.g. `http://127.0.0.1:50051`.
    pub async fn connect(endpoint: impl Into<String>) -> Result<Self, tonic::transport::Error> {
        let channel = Endpoint::from_shared(endpoint.into())?
            .tcp_nodelay(true)
            .connect()
            .await?;
        Ok(Self::new(channel))
    }

    /// A client over a channel that connects on first use, so a server that is
    /// not up yet shows as `Unavailable` instead of failing here.
    pub fn connect_lazy(endpoint: impl Into<String>) -> Result<Self, tonic::transport::Error> {
        Ok(Self::new(
            Endpoint::from_shared(endpoint.into())?.connect_lazy(),
        ))
    }

    pub fn new(channel: Channel) -> Self {
        Self {
            inner: OperationRegistryClient::new(channel.clone()),
            channel,
        }
    }

    /// The generated stub, for what the typed methods do not cover.
    pub fn into_inner(self) -> OperationRegistryClient<Channel> {
        self.inner
    }

    pub async fn claim(&self, request: pb::ClaimRequest) -> Result<pb::ClaimResponse, Error> {
        Ok(self.inner.clone().claim(request).await?.into_inner())
    }

    pub async fn complete(
        &self,
        request: pb::CompleteRequest,
    ) -> Result<pb::CompleteResponse, Error> {
        Ok(self.inner.clone().complete(request).await?.into_inner())
    }

    pub async fn lookup(&self, request: pb::LookupRequest) -> Result<pb::LookupResponse, Error> {
        Ok(self.inner.clone().lookup(request).await?.into_inner())
    }

    pub async fn renew(&self, request: pb::RenewRequest) -> Result<pb::RenewResponse, Error> {
        Ok(self.inner.clone().renew(request).await?.into_inner())
    }

    pub async fn fenced_write(
        &self,
        request: pb::FencedWriteRequest,
    ) -> Result<pb::FencedWriteResponse, Error> {
        Ok(self.inner.clone().fenced_write(request).await?.into_inner())
    }

    pub async fn get_resource(
        &self,
        request: pb::GetResourceRequest,
    ) -> Result<pb::GetResourceResponse, Error> {
        Ok(self.inner.clone().get_resource(request).await?.into_inner())
    }

    pub async fn claim_due(
        &self,
        request: pb::ClaimDueRequest,
    ) -> Result<pb::ClaimDueResponse, Error> {
        Ok(self.inner.clone().claim_due(request).await?.into_inner())
    }

    /// The operator's service on the same connection.
    pub fn admin(&self) -> AdminClient {
        AdminClient {
            inner: OperationAdminClient::new(self.channel.clone()),
        }
    }
}

/// The operator's calls (`opreg.v1.OperationAdmin`): the manual queue and the
/// actions on operations the registry cannot settle by itself.
#[derive(Clone, Debug)]
pub struct AdminClient {
    inner: OperationAdminClient<Channel>,
}

impl AdminClient {
    pub async fn list_operations(
        &self,
        request: pb::ListOperationsRequest,
    ) -> Result<pb::ListOperationsResponse, Error> {
        Ok(self
            .inner
            .clone()
            .list_operations(request)
            .await?
            .into_inner())
    }

    pub async fn resolve(
        &self,
        request: pb::ResolveOperationRequest,
    ) -> Result<pb::ResolveOperationResponse, Error> {
        Ok(self
            .inner
            .clone()
            .resolve_operation(request)
            .await?
            .into_inner())
    }

    pub async fn requeue(
        &self,
        request: pb::RequeueOperationRequest,
    ) -> Result<pb::RequeueOperationResponse, Error> {
        Ok(self
            .inner
            .clone()
            .requeue_operation(request)
            .await?
            .into_inner())
    }

    pub async fn hold(
        &self,
        request: pb::HoldOperationRequest,
    ) -> Result<pb::HoldOperationResponse, Error> {
        Ok(self
            .inner
            .clone()
            .hold_operation(request)
            .await?
            .into_inner())
    }

    pub async fn release(
        &self,
        request: pb::ReleaseOperationRequest,
    ) -> Result<pb::ReleaseOperationResponse, Error> {
        Ok(self
            .inner
            .clone()
            .release_operation(request)
            .await?
            .into_inner())
    }
}

/// The opreg `ErrorInfo` of a failed call, if it carries one.
pub fn error_info(status: &tonic::Status) -> Option<ErrorInfo> {
    status
        .get_details_error_info()
        .filter(|info| info.domain == ERROR_DOMAIN)
}

/// The `ErrorInfo.reason` of a failed call, e.g. `PARAMETER_CONFLICT`.
pub fn error_reason(status: &tonic::Status) -> Option<String> {
    error_info(status).map(|info| info.reason)
}
