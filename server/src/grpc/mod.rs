//! The gRPC transport: thin handlers that convert at the edge, call the
//! registry, and map its one error type to statuses.

mod admin;
mod batch;
/// Public for the fuzz targets (`fuzz/`), which feed it arbitrary messages.
pub mod requests;
pub(crate) mod responses;
pub(crate) mod status;

use std::sync::Arc;
use std::time::Duration;

use opreg_proto::v1 as pb;
use opreg_proto::v1::operation_registry_server::{OperationRegistry, OperationRegistryServer};
use tonic::{Request, Response, Status};

use crate::access::{Caller, Needed};
use crate::domain::commands::ClaimCommand;
use crate::domain::error::RegistryError;
use crate::domain::operation::Operation;
use crate::registry::{ClaimAnswer, Registry};
use crate::telemetry::metrics;
use crate::transport::{InFlight, MessageLimits, RateLimits, StopsAt};

pub use admin::AdminService;
pub use requests::{ParameterLimits, RequestLimits};

/// `opreg.v1.OperationRegistry` over a [`Registry`].
#[derive(Clone, Debug)]
pub struct RegistryService {
    registry: Registry,
    limits: RequestLimits,
    gate: Gate,
}

impl RegistryService {
    pub fn new(registry: Registry, limits: RequestLimits, gate: Gate) -> Self {
        Self {
            registry,
            limits,
            gate,
        }
    }

    /// The tonic service; its decoder's limit is only a fallback behind the
    /// per-method limits of [`message_limits`].
    pub fn into_server(self) -> OperationRegistryServer<Self> {
        let decode_limit = message_limits(&self.limits).largest();
        OperationRegistryServer::new(self).max_decoding_message_size(decode_limit)
    }
}

/// Room a message needs besides its payload: keys, texts, framing.
const ENVELOPE_BYTES: usize = 64 << 10;

/// The largest request each method accepts. Methods that carry a result or a
/// fenced value get room for one over the result limit, so an oversized result
/// is refused as INVALID_ARGUMENT naming the field; Claim gets room for the
/// parameter limit in Struct encoding (up to about 8 bytes per canonical byte,
/// for arrays of numbers); the batch calls get a fixed bound, their items
/// still checked one by one; everything else is small.
pub fn message_limits(limits: &RequestLimits) -> MessageLimits {
    const REGISTRY: &str = "opreg.v1.OperationRegistry";
    let with_result = limits.max_result_bytes.saturating_mul(2) + ENVELOPE_BYTES;
    let claim = limits.parameters.max_bytes.saturating_mul(8) + ENVELOPE_BYTES;
    MessageLimits::new(4 * ENVELOPE_BYTES)
        .with(REGISTRY, &["Complete", "FencedWrite"], with_result)
        .with(
            "opreg.v1.OperationAdmin",
            &["ResolveOperation"],
            with_result,
        )
        .with(REGISTRY, &["Claim"], claim)
        .with(
            REGISTRY,
            &["BatchClaim", "BatchComplete"],
            batch::MAX_BYTES.max(claim).max(with_result),
        )
}

/// What every handler asks first, before it converts its request: the caller
/// that [`crate::transport::AuthenticateLayer`] found must hold the role it
/// marked the call with ([`crate::access::RPC_ROLES`]) in the request's
/// namespace, and the namespace must be within its rate limit.
#[derive(Clone, Debug)]
pub struct Gate {
    rates: Arc<RateLimits>,
}

impl Gate {
    pub fn new(rates: Arc<RateLimits>) -> Self {
        Self { rates }
    }

    fn admit<T: Namespaced>(&self, request: &Request<T>) -> Result<Caller, Status> {
        self.admit_in(request.extensions(), request.get_ref().namespace())
    }

    /// [`Gate::admit`] for a request taken apart.
    fn admit_in(&self, extensions: &tonic::Extensions, namespace: &str) -> Result<Caller, Status> {
        let caller = self.authorize(Marks::of(extensions), namespace)?;
        self.limit(namespace)?;
        Ok(caller)
    }

    /// The caller must hold the needed role in `namespace`. Either mark is
    /// absent only if the layer is not in front of the service, or the RPC
    /// has no entry in the role table: refused.
    fn authorize(&self, marks: Marks<'_>, namespace: &str) -> Result<Caller, Status> {
        let (Some(caller), Some(Needed(needed))) = (marks.caller, marks.needed) else {
            return Err(to_status_counted(
                &RegistryError::Unauthenticated,
                "unauthenticated",
            ));
        };
        caller.authorize(needed, namespace).map_err(|refusal| {
            tracing::info!(%refusal, "call refused by the access policy");
            to_status_counted(&refusal, "permission_denied")
        })?;
        Ok(caller.clone())
    }

    /// Takes one call from `namespace`'s rate limit.
    fn limit(&self, namespace: &str) -> Result<(), Status> {
        self.rates
            .admit(namespace)
            .map_err(|limited| status::to_status(&limited))
    }
}

/// What the authentication layer marked a call with: its caller and the role
/// its RPC needs.
#[derive(Clone, Copy, Debug)]
struct Marks<'a> {
    caller: Option<&'a Caller>,
    needed: Option<Needed>,
}

impl<'a> Marks<'a> {
    fn of(extensions: &'a tonic::Extensions) -> Self {
        Self {
            caller: extensions.get::<Caller>(),
            needed: extensions.get::<Needed>().copied(),
        }
    }
}

/// A request that names the namespace it acts in.
trait Namespaced {
    fn namespace(&self) -> &str;
}

macro_rules! namespaced {
    ($($request:ty),* $(,)?) => {
        $(impl Namespaced for $request {
            fn namespace(&self) -> &str {
                &self.namespace
            }
        })*
    };
}

namespaced!(
    pb::LookupRequest,
    pb::RenewRequest,
    pb::FencedWriteRequest,
    pb::GetResourceRequest,
    pb::ClaimDueRequest,
    pb::ListOperationsRequest,
    pb::ResolveOperationRequest,
    pb::RequeueOperationRequest,
    pb::HoldOperationRequest,
    pb::ReleaseOperationRequest,
);

fn to_status_counted(refusal: &RegistryError, reason: &'static str) -> Status {
    metrics::auth_refused(reason);
    status::to_status(refusal)
}

fn reply<T, U>(
    result: Result<T, RegistryError>,
    into: impl FnOnce(T) -> U,
) -> Result<Response<U>, Status> {
    result
        .map(|value| Response::new(into(value)))
        .map_err(|error| status::to_status(&error))
}

#[tonic::async_trait]
impl OperationRegistry for RegistryService {
    #[tracing::instrument(level = "debug", skip_all, fields(
        namespace = %request.get_ref().namespace,
        key = %request.get_ref().operation_key,
        outcome = tracing::field::Empty,
        token = tracing::field::Empty,
    ))]
    async fn claim(
        &self,
        request: Request<pb::ClaimRequest>,
    ) -> Result<Response<pb::ClaimResponse>, Status> {
        let (_, extensions, claim) = request.into_parts();
        self.claim_one(&extensions, claim).await.map(Response::new)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(namespace = %request.get_ref().namespace, key = %request.get_ref().operation_key, token = request.get_ref().fencing_token))]
    async fn complete(
        &self,
        request: Request<pb::CompleteRequest>,
    ) -> Result<Response<pb::CompleteResponse>, Status> {
        let (_, extensions, completion) = request.into_parts();
        self.complete_one(&extensions, completion)
            .await
            .map(Response::new)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(namespace = %request.get_ref().namespace, key = %request.get_ref().operation_key))]
    async fn lookup(
        &self,
        request: Request<pb::LookupRequest>,
    ) -> Result<Response<pb::LookupResponse>, Status> {
        self.gate.admit(&request)?;
        let parameters = if request.get_ref().include_parameters {
            responses::Parameters::Included
        } else {
            responses::Parameters::Omitted
        };
        let (_, extensions, lookup) = request.into_parts();
        let found = async {
            let (query, wait, changed_from) = requests::waiting_lookup(lookup)?;
            let wait = within_deadline(&extensions, wait);
            self.registry
                .lookup_waiting(&query, (wait, changed_from), leave_in_flight(&extensions))
                .await
        }
        .await;
        reply(found, |found| pb::LookupResponse {
            waited: found.waited.map(responses::duration),
            ..responses::lookup(found.answer, parameters)
        })
    }

    #[tracing::instrument(level = "debug", skip_all, fields(namespace = %request.get_ref().namespace, key = %request.get_ref().operation_key, token = request.get_ref().fencing_token))]
    async fn renew(
        &self,
        request: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::RenewResponse>, Status> {
        self.gate.admit(&request)?;
        let renewed = async {
            self.registry
                .renew(&requests::renew(request.into_inner(), &self.limits)?)
                .await
        }
        .await;
        reply(renewed, |lease| pb::RenewResponse {
            lease: Some(responses::lease(lease)),
        })
    }

    #[tracing::instrument(level = "debug", skip_all, fields(namespace = %request.get_ref().namespace, resource = %request.get_ref().resource, token = request.get_ref().fencing_token))]
    async fn fenced_write(
        &self,
        request: Request<pb::FencedWriteRequest>,
    ) -> Result<Response<pb::FencedWriteResponse>, Status> {
        self.gate.admit(&request)?;
        let written = async {
            self.registry
                .fenced_write(&requests::fenced_write(request.into_inner(), &self.limits)?)
                .await
        }
        .await;
        reply(written, |(fence, version)| pb::FencedWriteResponse {
            fence,
            version,
        })
    }

    #[tracing::instrument(level = "debug", skip_all, fields(namespace = %request.get_ref().namespace, resource = %request.get_ref().resource))]
    async fn get_resource(
        &self,
        request: Request<pb::GetResourceRequest>,
    ) -> Result<Response<pb::GetResourceResponse>, Status> {
        self.gate.admit(&request)?;
        let found = async {
            self.registry
                .get_resource(&requests::get_resource(request.into_inner())?)
                .await
        }
        .await;
        reply(found, responses::resource)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(namespace = %request.get_ref().namespace, owner = %request.get_ref().owner, handed = tracing::field::Empty))]
    async fn claim_due(
        &self,
        request: Request<pb::ClaimDueRequest>,
    ) -> Result<Response<pb::ClaimDueResponse>, Status> {
        self.gate.admit(&request)?;
        let handed = async {
            self.registry
                .claim_due(&requests::claim_due(request.into_inner(), &self.limits)?)
                .await
        }
        .await;
        if let Ok(handed) = &handed {
            tracing::Span::current().record("handed", handed.len());
        }
        reply(handed, responses::claim_due)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(claims = request.get_ref().claims.len()))]
    async fn batch_claim(
        &self,
        request: Request<pb::BatchClaimRequest>,
    ) -> Result<Response<pb::BatchClaimResponse>, Status> {
        use pb::batch_claim_result::Result as Item;
        let (_, extensions, batch) = request.into_parts();
        let mut gate = batch::BatchGate::new(&self.gate, &extensions);
        let admitted = batch::Admitted::each(("claims", batch.claims), |claim| {
            gate.admit(&claim.namespace)?;
            let namespace = claim.namespace.clone();
            let principal = gate.principal();
            requests::claim(claim, &self.limits)
                .map(|command| ClaimCommand {
                    principal,
                    ..command
                })
                .map_err(|invalid| claim_refused(&namespace, &invalid))
        })?;
        let answers = self.registry.claim_all(admitted.commands()).await;
        let results = admitted.answer(
            answers,
            |command, answer| claim_answered(command.namespace.as_str(), answer),
            |claimed| pb::BatchClaimResult {
                result: Some(Item::Claim(claimed)),
            },
            |status| pb::BatchClaimResult {
                result: Some(Item::Error(status)),
            },
        );
        Ok(Response::new(pb::BatchClaimResponse { results }))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(completions = request.get_ref().completions.len()))]
    async fn batch_complete(
        &self,
        request: Request<pb::BatchCompleteRequest>,
    ) -> Result<Response<pb::BatchCompleteResponse>, Status> {
        use pb::batch_complete_result::Result as Item;
        let (_, extensions, batch) = request.into_parts();
        let mut gate = batch::BatchGate::new(&self.gate, &extensions);
        let admitted = batch::Admitted::each(("completions", batch.completions), |completion| {
            gate.admit(&completion.namespace)?;
            requests::complete(completion, &self.limits)
                .map_err(|invalid| status::to_status(&invalid))
        })?;
        let answers = self.registry.complete_all(admitted.commands()).await;
        let results = admitted.answer(
            answers,
            |_, recorded| completed(recorded),
            |completed| pb::BatchCompleteResult {
                result: Some(Item::Completed(completed)),
            },
            |status| pb::BatchCompleteResult {
                result: Some(Item::Error(status)),
            },
        );
        Ok(Response::new(pb::BatchCompleteResponse { results }))
    }
}

/// Claim and Complete, for the unary calls.
impl RegistryService {
    async fn claim_one(
        &self,
        extensions: &tonic::Extensions,
        request: pb::ClaimRequest,
    ) -> Result<pb::ClaimResponse, Status> {
        let caller = self.gate.admit_in(extensions, &request.namespace)?;
        let started = std::time::Instant::now();
        let namespace = request.namespace.clone();
        let mut waited = None;
        let answer = async {
            let (mut claim, wait) = requests::waiting_claim(request, &self.limits)?;
            let wait = within_deadline(extensions, wait);
            claim.principal = caller.name().to_owned();
            let held = self
                .registry
                .claim_waiting(&claim, wait, leave_in_flight(extensions))
                .await?;
            waited = held.waited;
            Ok(held.answer)
        }
        .await;
        let held = waited.unwrap_or_default();
        metrics::claim_answered_in(started.elapsed().saturating_sub(held).as_secs_f64());
        let mut response = claim_answered(&namespace, answer)?;
        response.waited = waited.map(responses::duration);
        Ok(response)
    }

    async fn complete_one(
        &self,
        extensions: &tonic::Extensions,
        request: pb::CompleteRequest,
    ) -> Result<pb::CompleteResponse, Status> {
        self.gate.admit_in(extensions, &request.namespace)?;
        let recorded = async {
            self.registry
                .complete(&requests::complete(request, &self.limits)?)
                .await
        }
        .await;
        completed(recorded)
    }
}

/// The longest a call may wait, answering before the edge stops it for its
/// caller's deadline: `asked`, less a fifth of the time left (at most a
/// second), which the read that answers gets.
fn within_deadline(extensions: &tonic::Extensions, asked: Duration) -> Duration {
    let Some(StopsAt(stops_at)) = extensions.get::<StopsAt>().copied() else {
        return asked;
    };
    let left = stops_at.saturating_duration_since(tokio::time::Instant::now());
    asked.min(left - (left / 5).min(Duration::from_secs(1)))
}

/// What a call that starts waiting runs: it gives up its place among the
/// calls in flight.
fn leave_in_flight(extensions: &tonic::Extensions) -> impl FnOnce() + use<> {
    let in_flight = extensions.get::<InFlight>().cloned();
    move || {
        if let Some(in_flight) = in_flight {
            in_flight.leave();
        }
    }
}

/// A Claim's answer, counted by outcome, as its response or status.
/// `namespace` is the request's, which a refused request may have invalid.
fn claim_answered(
    namespace: &str,
    answer: Result<ClaimAnswer, RegistryError>,
) -> Result<pb::ClaimResponse, Status> {
    let answer = answer.map_err(|refusal| claim_refused(namespace, &refusal))?;
    let outcome = metrics::claim_outcome_label(answer.outcome);
    let span = tracing::Span::current();
    span.record("token", answer.operation.fencing_token.get());
    span.record("outcome", outcome);
    metrics::claim_answered(namespace, outcome);
    Ok(responses::claim(answer))
}

/// A refused Claim's status, counted when the request itself was refused.
fn claim_refused(namespace: &str, refusal: &RegistryError) -> Status {
    let outcome = match refusal {
        RegistryError::ParameterConflict { .. } => {
            metrics::parameter_conflict(namespace);
            Some("conflict")
        }
        RegistryError::InvalidArgument(_) => Some("invalid"),
        _ => None,
    };
    tracing::Span::current().record("outcome", outcome.unwrap_or("error"));
    if let Some(outcome) = outcome {
        metrics::claim_answered(namespace, outcome);
    }
    status::to_status(refusal)
}

/// A Complete's recorded operation as its response, or its status.
fn completed(recorded: Result<Operation, RegistryError>) -> Result<pb::CompleteResponse, Status> {
    recorded
        .map(|operation| pb::CompleteResponse {
            operation: Some(responses::operation(
                operation,
                responses::Parameters::Omitted,
            )),
        })
        .map_err(|error| status::to_status(&error))
}
