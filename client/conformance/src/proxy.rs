//! The proxy itself: `OperationRegistry` served on a loopback port, each call
//! counted against the rules, forwarded (or not), and logged.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opreg_proto::errors::ERROR_DOMAIN;
use opreg_proto::v1::{self as pb, ErrorReason};
use pb::operation_registry_client::OperationRegistryClient;
use pb::operation_registry_server::{OperationRegistry, OperationRegistryServer};
use tokio_util::task::TaskTracker;
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::log::CallLog;
use crate::rules::{Action, Faults, Rule};

/// The owner that takes operations over for the `takeover` action.
const INTRUDER: &str = "conformance-intruder";
/// How long a takeover may wait for the helper's lease to lapse.
const TAKEOVER_PATIENCE: Duration = Duration::from_secs(15);
/// Forwarded to the server so that it sees the caller's trace and identity.
const FORWARDED_HEADERS: &[&str] = &["traceparent", "tracestate", "x-api-key", "authorization"];

/// A running proxy; [`FaultProxy::finish`] waits for the calls in flight.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    relay: Arc<Relay>,
    server: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Serves on a free loopback port, forwarding to `upstream`.
    pub async fn start(upstream: &str, rules: Vec<Rule>, log: &Path) -> std::io::Result<Self> {
        let channel = Channel::from_shared(upstream.to_owned())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?
            .connect_lazy();
        let relay = Arc::new(Relay {
            upstream: OperationRegistryClient::new(channel),
            faults: Faults::new(rules),
            log: CallLog::create(log)?,
            claims: Mutex::default(),
            in_flight: TaskTracker::new(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let service = OperationRegistryServer::new(Service(relay.clone()));
        let server = tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            // Ends only when the proxy is dropped with its task.
            let _ = Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await;
        });
        Ok(Self {
            addr,
            relay,
            server,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving once every call in flight is answered and logged; the log's lines.
    pub async fn finish(self) -> Vec<String> {
        self.relay.in_flight.close();
        self.relay.in_flight.wait().await;
        self.server.abort();
        self.relay.log.lines()
    }
}

#[derive(Debug)]
struct Relay {
    upstream: OperationRegistryClient<Channel>,
    faults: Faults,
    log: CallLog,
    /// The last Claim seen per (namespace, key): a takeover claims with its fingerprint.
    claims: Mutex<HashMap<(String, String), pb::ClaimRequest>>,
    in_flight: TaskTracker,
}

/// How a call's successful answer is logged.
trait Described {
    fn described(&self) -> String {
        "OK".into()
    }
}

impl Described for pb::ClaimResponse {
    fn described(&self) -> String {
        unprefixed(self.outcome().as_str_name(), "CLAIM_OUTCOME_")
    }
}

impl Described for pb::CompleteResponse {
    fn described(&self) -> String {
        let status = self
            .operation
            .as_ref()
            .map_or(pb::OperationStatus::Unspecified, |o| o.status());
        unprefixed(status.as_str_name(), "OPERATION_STATUS_")
    }
}

impl Described for pb::LookupResponse {}
impl Described for pb::RenewResponse {}
impl Described for pb::FencedWriteResponse {}
impl Described for pb::GetResourceResponse {}
/// `ACQUIRED+RECONCILE`: the claim outcome of each operation handed out, or
/// `EMPTY` when none was.
impl Described for pb::ClaimDueResponse {
    fn described(&self) -> String {
        if self.operations.is_empty() {
            return "EMPTY".into();
        }
        let outcomes: Vec<String> = self
            .operations
            .iter()
            .map(|due| unprefixed(due.outcome().as_str_name(), "CLAIM_OUTCOME_"))
            .collect();
        outcomes.join("+")
    }
}
impl Described for pb::BatchClaimResponse {}
impl Described for pb::BatchCompleteResponse {}

/// A request the `without_waiting` rule can strip of its server wait.
trait Waits {
    fn stop_waiting(&mut self) {}
}

impl Waits for pb::ClaimRequest {
    fn stop_waiting(&mut self) {
        self.wait = None;
    }
}

impl Waits for pb::LookupRequest {
    fn stop_waiting(&mut self) {
        self.wait = None;
    }
}

impl Waits for pb::CompleteRequest {}
impl Waits for pb::RenewRequest {}
impl Waits for pb::FencedWriteRequest {}
impl Waits for pb::GetResourceRequest {}
impl Waits for pb::ClaimDueRequest {}
impl Waits for pb::BatchClaimRequest {}
impl Waits for pb::BatchCompleteRequest {}

impl Relay {
    /// Counts, applies the matching rule, forwards, logs. The call runs in a
    /// task of its own, so that it is answered and logged even when the caller
    /// gave up on it.
    async fn call<Req, Resp, F, Fut>(
        self: &Arc<Self>,
        method: &'static str,
        request: Request<Req>,
        target: Option<(String, String)>,
        forward: F,
    ) -> Result<Response<Resp>, Status>
    where
        Req: Waits + Send + 'static,
        Resp: Described + Send + 'static,
        F: FnOnce(OperationRegistryClient<Channel>, Request<Req>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Response<Resp>, Status>> + Send,
    {
        let (incoming, _, message) = request.into_parts();
        let mut request = Request::new(message);
        for header in FORWARDED_HEADERS {
            if let Some(value) = incoming.get(*header) {
                if *header == "traceparent" {
                    let value = value.to_str().unwrap_or("(not ascii)");
                    self.log.write(format!("# {method} traceparent={value}"));
                }
                request.metadata_mut().insert(*header, value.clone());
            }
        }
        let rule = self.faults.next(method);
        let relay = self.clone();
        let task = self.in_flight.spawn(async move {
            let upstream = relay.upstream.clone();
            let answer = match rule.as_ref().map(|rule| (&rule.action, rule)) {
                None => forward(upstream, request).await,
                Some((Action::Unavailable, _)) => {
                    relay.log.write(format!("{method}:UNAVAILABLE!"));
                    return Err(injected_unavailable());
                }
                Some((Action::Refuse, rule)) => {
                    let (status, reason) = refusal(rule);
                    relay.log.write(format!("{method}:{reason}!"));
                    return Err(status);
                }
                Some((Action::LoseAnswer, _)) => {
                    let answer = forward(upstream, request).await;
                    let seen = answer
                        .as_ref()
                        .map_or_else(reason_of, |r| r.get_ref().described());
                    relay.log.write(format!("{method}:LOST"));
                    relay.log.write(format!("# {method} answer lost: {seen}"));
                    return Err(injected_unavailable());
                }
                Some((Action::Takeover, _)) => {
                    relay.take_over(target).await;
                    forward(upstream, request).await
                }
                Some((Action::WithoutWaiting, _)) => {
                    request.get_mut().stop_waiting();
                    forward(upstream, request).await
                }
            };
            let seen = answer
                .as_ref()
                .map_or_else(reason_of, |r| r.get_ref().described());
            relay.log.write(format!("{method}:{seen}"));
            answer
        });
        task.await
            .unwrap_or_else(|_| Err(Status::internal("the fault proxy's call task failed")))
    }

    fn remember_claim(&self, request: &pb::ClaimRequest) {
        let identity = (request.namespace.clone(), request.operation_key.clone());
        self.claims
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(identity, request.clone());
    }

    /// Claims the operation as another owner, with the fingerprint the helper
    /// claimed with, until its lease lapses and the takeover is ACQUIRED.
    async fn take_over(&self, target: Option<(String, String)>) {
        let claimed = target.and_then(|identity| {
            self.claims
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&identity)
                .cloned()
        });
        let Some(mut request) = claimed else {
            self.log.write("Takeover:NO_CLAIM_SEEN".into());
            return;
        };
        request.owner = INTRUDER.into();
        request.execution_id = String::new();
        request.lease_ttl = Some(prost_types::Duration {
            seconds: 30,
            nanos: 0,
        });
        let give_up = tokio::time::Instant::now() + TAKEOVER_PATIENCE;
        loop {
            let answer = self.upstream.clone().claim(request.clone()).await;
            let acquired = answer
                .as_ref()
                .is_ok_and(|r| r.get_ref().outcome() == pb::ClaimOutcome::Acquired);
            if acquired || tokio::time::Instant::now() > give_up {
                let seen = answer
                    .as_ref()
                    .map_or_else(reason_of, |r| r.get_ref().described());
                self.log.write(format!("Takeover:{seen}"));
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn injected_unavailable() -> Status {
    Status::unavailable("injected by opreg-fault-proxy")
}

/// The status a server sends for `rule.reason`, with its one ErrorInfo.
fn refusal(rule: &Rule) -> (Status, String) {
    let name = rule.reason.clone().unwrap_or_default();
    let reason = ErrorReason::from_str_name(&format!("ERROR_REASON_{name}"))
        .unwrap_or(ErrorReason::Unspecified);
    let mut details = ErrorDetails::new();
    details.set_error_info(name.clone(), ERROR_DOMAIN, HashMap::<String, String>::new());
    let status =
        Status::with_error_details(reason.code(), "injected by opreg-fault-proxy", details);
    (status, name)
}

/// An error as logged: its ErrorInfo reason, else its gRPC code's name.
fn reason_of(status: &Status) -> String {
    if let Some(info) = status.get_details_error_info() {
        return info.reason;
    }
    let mut name = String::new();
    for (i, c) in format!("{:?}", status.code()).chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

fn unprefixed(name: &str, prefix: &str) -> String {
    name.strip_prefix(prefix).unwrap_or(name).to_owned()
}

fn identity(namespace: &str, key: &str) -> Option<(String, String)> {
    Some((namespace.to_owned(), key.to_owned()))
}

struct Service(Arc<Relay>);

#[tonic::async_trait]
impl OperationRegistry for Service {
    async fn claim(
        &self,
        r: Request<pb::ClaimRequest>,
    ) -> Result<Response<pb::ClaimResponse>, Status> {
        self.0.remember_claim(r.get_ref());
        let target = identity(&r.get_ref().namespace, &r.get_ref().operation_key);
        self.0
            .call(
                "Claim",
                r,
                target,
                |mut c, r| async move { c.claim(r).await },
            )
            .await
    }

    async fn complete(
        &self,
        r: Request<pb::CompleteRequest>,
    ) -> Result<Response<pb::CompleteResponse>, Status> {
        let target = identity(&r.get_ref().namespace, &r.get_ref().operation_key);
        self.0
            .call("Complete", r, target, |mut c, r| async move {
                c.complete(r).await
            })
            .await
    }

    async fn lookup(
        &self,
        r: Request<pb::LookupRequest>,
    ) -> Result<Response<pb::LookupResponse>, Status> {
        let target = identity(&r.get_ref().namespace, &r.get_ref().operation_key);
        self.0
            .call(
                "Lookup",
                r,
                target,
                |mut c, r| async move { c.lookup(r).await },
            )
            .await
    }

    async fn renew(
        &self,
        r: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::RenewResponse>, Status> {
        let target = identity(&r.get_ref().namespace, &r.get_ref().operation_key);
        self.0
            .call(
                "Renew",
                r,
                target,
                |mut c, r| async move { c.renew(r).await },
            )
            .await
    }

    async fn fenced_write(
        &self,
        r: Request<pb::FencedWriteRequest>,
    ) -> Result<Response<pb::FencedWriteResponse>, Status> {
        let target = identity(&r.get_ref().namespace, &r.get_ref().operation_key);
        self.0
            .call("FencedWrite", r, target, |mut c, r| async move {
                c.fenced_write(r).await
            })
            .await
    }

    async fn get_resource(
        &self,
        r: Request<pb::GetResourceRequest>,
    ) -> Result<Response<pb::GetResourceResponse>, Status> {
        self.0
            .call("GetResource", r, None, |mut c, r| async move {
                c.get_resource(r).await
            })
            .await
    }

    async fn claim_due(
        &self,
        r: Request<pb::ClaimDueRequest>,
    ) -> Result<Response<pb::ClaimDueResponse>, Status> {
        self.0
            .call("ClaimDue", r, None, |mut c, r| async move {
                c.claim_due(r).await
            })
            .await
    }

    async fn batch_claim(
        &self,
        r: Request<pb::BatchClaimRequest>,
    ) -> Result<Response<pb::BatchClaimResponse>, Status> {
        self.0
            .call("BatchClaim", r, None, |mut c, r| async move {
                c.batch_claim(r).await
            })
            .await
    }

    async fn batch_complete(
        &self,
        r: Request<pb::BatchCompleteRequest>,
    ) -> Result<Response<pb::BatchCompleteResponse>, Status> {
        self.0
            .call("BatchComplete", r, None, |mut c, r| async move {
                c.batch_complete(r).await
            })
            .await
    }
}
