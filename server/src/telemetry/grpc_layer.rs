//! A tower layer around every RPC: the standard gRPC server metrics
//! (started, handled by code, handling time) and a span that joins the
//! caller's W3C trace (`traceparent`). Recorded once here, not per handler.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use http_body::{Body, Frame};
use tower::{Layer, Service};
use tracing::Instrument;

use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{metrics, traces};

#[derive(Clone, Copy, Debug, Default)]
pub struct GrpcTelemetryLayer;

impl<S> Layer<S> for GrpcTelemetryLayer {
    type Service = GrpcTelemetry<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcTelemetry { inner }
    }
}

#[derive(Clone, Debug)]
pub struct GrpcTelemetry<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for GrpcTelemetry<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = http::Response<MeteredBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let call = Call::start(request.uri().path());
        let span = tracing::info_span!(
            "rpc",
            otel.name = %format_args!("{}/{}", call.service, call.method),
            otel.kind = "server",
            rpc.system = "grpc",
            rpc.service = %call.service,
            rpc.method = %call.method,
            trace_id = tracing::field::Empty,
            parent_span_id = tracing::field::Empty,
        );
        // Exported spans (when configured) continue the caller's trace.
        let _ = span.set_parent(traces::caller_context(request.headers()));
        if let Some(parent) = request
            .headers()
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            && let Some((trace_id, parent_span_id)) = parse_traceparent(parent)
        {
            span.record("trace_id", trace_id);
            span.record("parent_span_id", parent_span_id);
        }
        let response = self.inner.call(request).instrument(span);
        Box::pin(async move {
            let response = response.await?;
            let (parts, body) = response.into_parts();
            // A trailers-only response (every error from tonic) carries its
            // status in the headers; others carry it in the trailers.
            let call = match parts.headers.get("grpc-status") {
                Some(code) => {
                    call.finish(code.as_bytes());
                    None
                }
                None => Some(call),
            };
            Ok(http::Response::from_parts(
                parts,
                MeteredBody { inner: body, call },
            ))
        })
    }
}

pin_project_lite::pin_project! {
    /// A response body that records the call when its trailers pass.
    pub struct MeteredBody<B> {
        #[pin]
        inner: B,
        call: Option<Call>,
    }
}

impl<B: Body> Body for MeteredBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(code) = frame.trailers_ref().and_then(|t| t.get("grpc-status"))
            && let Some(call) = this.call.take()
        {
            call.finish(code.as_bytes());
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// One RPC in flight. Dropped unfinished (the client went away), it counts as CANCELLED.
pub struct Call {
    service: &'static str,
    method: &'static str,
    kind: &'static str,
    started: Instant,
    finished: bool,
}

impl Call {
    fn start(path: &str) -> Self {
        // Only served methods become labels: arbitrary paths must not grow series.
        let (service, method) = path
            .trim_start_matches('/')
            .split_once('/')
            .and_then(|(service, method)| served(service, method))
            .unwrap_or(("unknown", "unknown"));
        let kind = match method {
            "ServerReflectionInfo" => "bidi_stream",
            "Watch" => "server_stream",
            _ => "unary",
        };
        metrics::grpc_started(service, method, kind);
        Self {
            service,
            method,
            kind,
            started: Instant::now(),
            finished: false,
        }
    }

    fn finish(mut self, code: &[u8]) {
        self.record(code_name(code));
    }

    fn record(&mut self, code: &'static str) {
        self.finished = true;
        let seconds = self.started.elapsed().as_secs_f64();
        metrics::grpc_handled(self.service, self.method, self.kind, code, seconds);
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if !self.finished {
            self.record("Canceled");
        }
    }
}

/// The methods this server serves, by service.
const SERVED: &[(&str, &[&str])] = &[
    (
        "opreg.v1.OperationRegistry",
        &[
            "Claim",
            "Complete",
            "Lookup",
            "Renew",
            "FencedWrite",
            "GetResource",
            "ClaimDue",
            "BatchClaim",
            "BatchComplete",
        ],
    ),
    (
        "opreg.v1.OperationAdmin",
        &[
            "ListOperations",
            "ResolveOperation",
            "RequeueOperation",
            "HoldOperation",
            "ReleaseOperation",
        ],
    ),
    ("grpc.health.v1.Health", &["Check", "Watch"]),
    (
        "grpc.reflection.v1.ServerReflection",
        &["ServerReflectionInfo"],
    ),
    (
        "grpc.reflection.v1alpha.ServerReflection",
        &["ServerReflectionInfo"],
    ),
];

/// The served method's names as labels, if it is one this server serves.
fn served(service: &str, method: &str) -> Option<(&'static str, &'static str)> {
    let (service, methods) = SERVED.iter().find(|(served, _)| *served == service)?;
    let method = methods.iter().find(|served| **served == method)?;
    Some((service, method))
}

/// gRPC status codes as the usual gRPC dashboards name them.
fn code_name(code: &[u8]) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "Canceled",
        "Unknown",
        "InvalidArgument",
        "DeadlineExceeded",
        "NotFound",
        "AlreadyExists",
        "PermissionDenied",
        "ResourceExhausted",
        "FailedPrecondition",
        "Aborted",
        "OutOfRange",
        "Unimplemented",
        "Internal",
        "Unavailable",
        "DataLoss",
        "Unauthenticated",
    ];
    std::str::from_utf8(code)
        .ok()
        .and_then(|code| code.parse::<usize>().ok())
        .and_then(|code| NAMES.get(code).copied())
        .unwrap_or("Unknown")
}

/// The trace id and parent span id of a W3C `traceparent` header, if valid.
fn parse_traceparent(header: &str) -> Option<(&str, &str)> {
    let mut parts = header.trim().split('-');
    let (version, trace_id, parent_id, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let valid = hex(version, 2)
        && version != "ff"
        && hex(trace_id, 32)
        && trace_id.bytes().any(|b| b != b'0')
        && hex(parent_id, 16)
        && parent_id.bytes().any(|b| b != b'0')
        && hex(flags, 2);
    valid.then_some((trace_id, parent_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_is_parsed_only_when_valid() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            parse_traceparent(header),
            Some(("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"))
        );
        assert_eq!(
            parse_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
            None
        );
        assert_eq!(
            parse_traceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"),
            None
        );
        assert_eq!(parse_traceparent("garbage"), None);
    }

    #[test]
    fn only_served_methods_become_labels() {
        let is_served = |service, method| served(service, method).is_some();
        assert!(is_served("opreg.v1.OperationRegistry", "Claim"));
        assert!(is_served("grpc.health.v1.Health", "Check"));
        assert!(is_served("opreg.v1.OperationRegistry", "ClaimDue"));
        assert!(is_served("opreg.v1.OperationRegistry", "BatchClaim"));
        assert!(is_served("opreg.v1.OperationRegistry", "BatchComplete"));
        assert!(is_served("opreg.v1.OperationAdmin", "HoldOperation"));
        assert!(!is_served("opreg.v1.OperationRegistry", "Nope"));
        assert!(!is_served("x", "y"));
    }

    #[test]
    fn every_method_of_the_contract_is_served() {
        use prost::Message;
        let contract =
            prost_types::FileDescriptorSet::decode(opreg_proto::FILE_DESCRIPTOR_SET).unwrap();
        let mut methods = 0;
        for file in contract
            .file
            .iter()
            .filter(|file| file.package() == "opreg.v1")
        {
            for service in &file.service {
                let service_name = format!("opreg.v1.{}", service.name());
                for method in &service.method {
                    assert!(
                        served(&service_name, method.name()).is_some(),
                        "{service_name}/{} has no label",
                        method.name()
                    );
                    methods += 1;
                }
            }
        }
        assert!(methods >= 14, "read {methods} methods from the contract");
    }

    #[test]
    fn codes_use_the_dashboard_names() {
        assert_eq!(code_name(b"0"), "OK");
        assert_eq!(code_name(b"6"), "AlreadyExists");
        assert_eq!(code_name(b"14"), "Unavailable");
        assert_eq!(code_name(b"99"), "Unknown");
    }
}
