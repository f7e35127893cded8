//! One typed method per RPC over the generated stub, on a channel that may
//! speak TLS and carry an API key.

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic_types::{ErrorInfo, StatusExt};

use crate::error::Error;
use crate::proto as pb;
use crate::proto::operation_admin_client::OperationAdminClient;
use crate::proto::operation_registry_client::OperationRegistryClient;

/// The `ErrorInfo` domain of opreg's errors.
pub use opreg_proto::errors::ERROR_DOMAIN;

/// How to reach a server that is secured: TLS trust, a client certificate
/// for mutual TLS, an API key. TLS applies to `https://` endpoints.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    ca_certificate: Option<Vec<u8>>,
    client_identity: Option<(Vec<u8>, Vec<u8>)>,
    tls_server_name: Option<String>,
    credentials: CallMetadata,
}

impl ConnectOptions {
    /// PEM CA certificates the server's certificate must chain to; without
    /// them an `https://` endpoint is checked against the system's roots.
    pub fn ca_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_certificate = Some(pem.into());
        self
    }

    /// A PEM client certificate and its key, for servers that require mutual TLS.
    pub fn client_identity(
        mut self,
        certificate: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Self {
        self.client_identity = Some((certificate.into(), key.into()));
        self
    }

    /// The name the server's certificate must carry, when it is not the endpoint's host.
    pub fn tls_server_name(mut self, name: impl Into<String>) -> Self {
        self.tls_server_name = Some(name.into());
        self
    }

    /// An API key, sent as `authorization: Bearer <key>` on every call.
    pub fn api_key(
        mut self,
        key: &str,
    ) -> Result<Self, tonic::metadata::errors::InvalidMetadataValue> {
        let mut value: MetadataValue<Ascii> = format!("Bearer {key}").parse()?;
        value.set_sensitive(true);
        self.credentials = CallMetadata(Some(value));
        Ok(self)
    }

    fn endpoint(&self, endpoint: String) -> Result<Endpoint, tonic::transport::Error> {
        let secure = endpoint.starts_with("https://");
        let endpoint = Endpoint::from_shared(endpoint)?.tcp_nodelay(true);
        if !secure {
            return Ok(endpoint);
        }
        let mut tls = ClientTlsConfig::new();
        tls = match &self.ca_certificate {
            Some(pem) => tls.ca_certificate(Certificate::from_pem(pem)),
            None => tls.with_native_roots(),
        };
        if let Some((certificate, key)) = &self.client_identity {
            tls = tls.identity(Identity::from_pem(certificate, key));
        }
        if let Some(name) = &self.tls_server_name {
            tls = tls.domain_name(name.clone());
        }
        endpoint.tls_config(tls)
    }
}

/// What every call carries: the API key, when there is one, and the caller's
/// trace context (W3C `traceparent`, `tracestate`) when it has one.
#[derive(Clone, Default)]
pub struct CallMetadata(Option<MetadataValue<Ascii>>);

impl std::fmt::Debug for CallMetadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = if self.0.is_some() { "api key" } else { "none" };
        f.debug_tuple("CallMetadata").field(&shown).finish()
    }
}

impl Interceptor for CallMetadata {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        crate::trace_context::inject(request.metadata_mut());
        Ok(request)
    }
}

/// The channel every call of a [`Client`] travels on.
pub type Transport = InterceptedService<Channel, CallMetadata>;

/// A cheap-to-clone opreg client.
#[derive(Clone, Debug)]
pub struct Client {
    inner: OperationRegistryClient<Transport>,
    transport: Transport,
}

impl Client {
    /// Connects to `endpoint`, e.g. `http://127.0.0.1:50051`.
    pub async fn connect(endpoint: impl Into<String>) -> Result<Self, tonic::transport::Error> {
        Self::connect_with(endpoint, &ConnectOptions::default()).await
    }

    /// Connects with TLS settings and credentials, e.g. to `https://opreg:50051`.
    pub async fn connect_with(
        endpoint: impl Into<String>,
        options: &ConnectOptions,
    ) -> Result<Self, tonic::transport::Error> {
        let channel = options.endpoint(endpoint.into())?.connect().await?;
        Ok(Self::with_credentials(channel, options.credentials.clone()))
    }

    /// A client over a channel that connects on first use, so a server that is
    /// not up yet shows as `Unavailable` instead of failing here.
    pub fn connect_lazy(endpoint: impl Into<String>) -> Result<Self, tonic::transport::Error> {
        Self::connect_lazy_with(endpoint, &ConnectOptions::default())
    }

    /// [`Client::connect_lazy`] with TLS and credentials.
    pub fn connect_lazy_with(
        endpoint: impl Into<String>,
        options: &ConnectOptions,
    ) -> Result<Self, tonic::transport::Error> {
        let channel = options.endpoint(endpoint.into())?.connect_lazy();
        Ok(Self::with_credentials(channel, options.credentials.clone()))
    }

    /// A client over a channel built elsewhere, without an API key.
    pub fn new(channel: Channel) -> Self {
        Self::with_credentials(channel, CallMetadata::default())
    }

    fn with_credentials(channel: Channel, credentials: CallMetadata) -> Self {
        let transport = InterceptedService::new(channel, credentials);
        Self {
            inner: OperationRegistryClient::new(transport.clone()),
            transport,
        }
    }

    /// The channel with this client's credentials, for other generated stubs
    /// (e.g. `OperationAdminClient::new(client.transport())`).
    pub fn transport(&self) -> Transport {
        self.transport.clone()
    }

    /// The generated stub, for what the typed methods do not cover.
    pub fn into_inner(self) -> OperationRegistryClient<Transport> {
        self.inner
    }

    /// Registers the operation or answers what it already is (Claim).
    pub async fn claim(&self, request: pb::ClaimRequest) -> Result<pb::ClaimResponse, Error> {
        Ok(self.inner.clone().claim(request).await?.into_inner())
    }

    /// Records the outcome of the execution holding the token (Complete).
    pub async fn complete(
        &self,
        request: pb::CompleteRequest,
    ) -> Result<pb::CompleteResponse, Error> {
        Ok(self.inner.clone().complete(request).await?.into_inner())
    }

    /// Up to 1,000 Claims in one call; each answered as [`Client::claim`]
    /// would answer it, in request order.
    pub async fn batch_claim(
        &self,
        claims: Vec<pb::ClaimRequest>,
    ) -> Result<Vec<Result<pb::ClaimResponse, Error>>, Error> {
        use pb::batch_claim_result::Result as Item;
        let response = self
            .inner
            .clone()
            .batch_claim(pb::BatchClaimRequest { claims })
            .await?;
        Ok(items(response.into_inner().results, |item| {
            item.result.map(|result| match result {
                Item::Claim(claimed) => Ok(claimed),
                Item::Error(status) => Err(status),
            })
        }))
    }

    /// Up to 1,000 Completes in one call; each answered as
    /// [`Client::complete`] would answer it, in request order.
    pub async fn batch_complete(
        &self,
        completions: Vec<pb::CompleteRequest>,
    ) -> Result<Vec<Result<pb::CompleteResponse, Error>>, Error> {
        use pb::batch_complete_result::Result as Item;
        let response = self
            .inner
            .clone()
            .batch_complete(pb::BatchCompleteRequest { completions })
            .await?;
        Ok(items(response.into_inner().results, |item| {
            item.result.map(|result| match result {
                Item::Completed(completed) => Ok(completed),
                Item::Error(status) => Err(status),
            })
        }))
    }

    /// The operation and, when asked, its executions (Lookup).
    pub async fn lookup(&self, request: pb::LookupRequest) -> Result<pb::LookupResponse, Error> {
        Ok(self.inner.clone().lookup(request).await?.into_inner())
    }

    /// Extends the lease of the current holder (Renew).
    pub async fn renew(&self, request: pb::RenewRequest) -> Result<pb::RenewResponse, Error> {
        Ok(self.inner.clone().renew(request).await?.into_inner())
    }

    /// Writes a resource if the token is not superseded there (FencedWrite).
    pub async fn fenced_write(
        &self,
        request: pb::FencedWriteRequest,
    ) -> Result<pb::FencedWriteResponse, Error> {
        Ok(self.inner.clone().fenced_write(request).await?.into_inner())
    }

    /// A fenced resource's value and fence (GetResource).
    pub async fn get_resource(
        &self,
        request: pb::GetResourceRequest,
    ) -> Result<pb::GetResourceResponse, Error> {
        Ok(self.inner.clone().get_resource(request).await?.into_inner())
    }

    /// Leases the due retries and unknown outcomes of a namespace (ClaimDue).
    pub async fn claim_due(
        &self,
        request: pb::ClaimDueRequest,
    ) -> Result<pb::ClaimDueResponse, Error> {
        Ok(self.inner.clone().claim_due(request).await?.into_inner())
    }

    /// The operator's service on the same connection.
    pub fn admin(&self) -> AdminClient {
        AdminClient {
            inner: OperationAdminClient::new(self.transport.clone()),
        }
    }
}

/// The operator's calls (`opreg.v1.OperationAdmin`): the manual queue and the
/// actions on operations the registry cannot settle by itself.
#[derive(Clone, Debug)]
pub struct AdminClient {
    inner: OperationAdminClient<Transport>,
}

impl AdminClient {
    /// A page of the operator's queue (ListOperations).
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

    /// Settles an operation by an operator's finding (ResolveOperation).
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

    /// Gives an operation a new retry budget (RequeueOperation).
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

    /// Freezes an operation while it is investigated (HoldOperation).
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

    /// Lifts an operator's hold (ReleaseOperation).
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

/// A batch's items as their unary calls would answer them. An item's
/// `google.rpc.Status` becomes the error its unary call would raise (tonic
/// reads a status's details as exactly this encoding); an item without a
/// result (a server this client does not know) is an error too.
fn items<I, T>(
    results: Vec<I>,
    outcome: impl Fn(I) -> Option<Result<T, tonic_types::pb::Status>>,
) -> Vec<Result<T, Error>> {
    use prost::Message;
    results
        .into_iter()
        .map(|item| match outcome(item) {
            Some(Ok(value)) => Ok(value),
            Some(Err(status)) => Err(Error::from(tonic::Status::with_details(
                tonic::Code::from(status.code),
                status.message.clone(),
                status.encode_to_vec().into(),
            ))),
            None => Err(Error::from(tonic::Status::internal(
                "the server sent a batch item without a result",
            ))),
        })
        .collect()
}
