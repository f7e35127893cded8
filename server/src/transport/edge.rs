//! The edge before decoding: every request message is bounded by its method's
//! limit, read from the gRPC frame header before the message is buffered;
//! tonic's own refusals of bytes it cannot decode (bad UTF-8, truncated or
//! malformed messages, nesting past the decoder's limit, its size limit) are
//! turned into the contract's statuses with one `ErrorInfo`, instead of
//! INTERNAL; the caller's `grpc-timeout` stops the work when it passes,
//! answered DEADLINE_EXCEEDED (tonic's own timer would say CANCELLED); and
//! calls past the concurrency limit are shed at once (UNAVAILABLE, OVERLOADED).
//! A call that goes on to wait for its operation to move gives its place
//! among the calls in flight up ([`InFlight`]): the waiters have a bound of
//! their own, and a waiter does no work.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::{Layer, Service};

use crate::domain::error::RegistryError;
use crate::grpc::status::to_status;
use crate::telemetry::metrics;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The largest request message each method accepts, by gRPC path.
#[derive(Clone, Debug)]
pub struct MessageLimits {
    by_path: HashMap<String, usize>,
    default: usize,
}

impl MessageLimits {
    pub fn new(default: usize) -> Self {
        Self {
            by_path: HashMap::new(),
            default,
        }
    }

    /// `service` and `methods` as in the gRPC path `/{service}/{method}`.
    pub fn with(mut self, service: &str, methods: &[&str], limit: usize) -> Self {
        for method in methods {
            self.by_path.insert(format!("/{service}/{method}"), limit);
        }
        self
    }

    pub fn for_path(&self, path: &str) -> usize {
        self.by_path.get(path).copied().unwrap_or(self.default)
    }

    /// The largest of all limits: the decoder's own bound, a fallback.
    pub fn largest(&self) -> usize {
        self.by_path
            .values()
            .copied()
            .fold(self.default, usize::max)
    }
}

#[derive(Clone, Debug)]
pub struct EdgeLayer {
    limits: Arc<MessageLimits>,
    calls: Arc<Semaphore>,
}

impl EdgeLayer {
    /// `max_calls`: registry and admin calls in flight at once; more are shed.
    pub fn new(limits: MessageLimits, max_calls: usize) -> Self {
        Self {
            limits: Arc::new(limits),
            calls: Arc::new(Semaphore::new(max_calls)),
        }
    }
}

impl<S> Layer<S> for EdgeLayer {
    type Service = Edge<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Edge {
            inner,
            limits: Arc::clone(&self.limits),
            calls: Arc::clone(&self.calls),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Edge<S> {
    inner: S,
    limits: Arc<MessageLimits>,
    calls: Arc<Semaphore>,
}

/// A call's place among the calls in flight, in its request's extensions.
#[derive(Clone, Debug)]
pub struct InFlight(Arc<Mutex<Option<OwnedSemaphorePermit>>>);

impl InFlight {
    /// Gives the place up before the call ends (a call about to wait).
    pub fn leave(&self) {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
    }
}

/// When the edge stops a call for its caller's `grpc-timeout`, in its
/// request's extensions: a call that waits must answer before then.
#[derive(Clone, Copy, Debug)]
pub struct StopsAt(pub tokio::time::Instant);

/// Health and reflection stay answerable however busy the registry is.
fn is_shed_when_busy(path: &str) -> bool {
    path.starts_with("/opreg.v1.")
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for Edge<S>
where
    S: Service<http::Request<tonic::body::Body>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Body<Data = Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: Default + Send + 'static,
{
    type Response = http::Response<ResBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let permit = if is_shed_when_busy(request.uri().path()) {
            match Arc::clone(&self.calls).try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    metrics::call_shed();
                    let shed = to_status(&RegistryError::Overloaded).into_http();
                    return Box::pin(async move { Ok(shed) });
                }
            }
        } else {
            None
        };
        let limit = self.limits.for_path(request.uri().path());
        let deadline = request
            .headers()
            .get("grpc-timeout")
            .and_then(|value| grpc_timeout(value.as_bytes()));
        let mut request =
            request.map(|body| tonic::body::Body::new(BoundedMessages::new(body, limit)));
        let in_flight = InFlight(Arc::new(Mutex::new(permit)));
        request.extensions_mut().insert(in_flight.clone());
        if let Some(within) = deadline {
            let stops_at =
                tokio::time::Instant::now() + within.saturating_sub(deadline_margin(within));
            request.extensions_mut().insert(StopsAt(stops_at));
        }
        let response = self.inner.call(request);
        Box::pin(async move {
            let answered = match deadline {
                // Ahead of tonic's timer for the same header, which answers CANCELLED.
                Some(within) => {
                    tokio::time::timeout(within.saturating_sub(deadline_margin(within)), response)
                        .await
                }
                None => Ok(response.await),
            };
            let Ok(response) = answered else {
                tracing::debug!(
                    ?deadline,
                    "the caller's deadline passed; the call was stopped"
                );
                return Ok(to_status(&RegistryError::DeadlineExceeded).into_http());
            };
            let mut response = response?;
            in_flight.leave();
            refine_decoder_refusal(response.headers_mut());
            Ok(response)
        })
    }
}

pin_project_lite::pin_project! {
    /// A request body that fails, as soon as a gRPC frame header announces a
    /// message over `limit`, with RESOURCE_EXHAUSTED / MESSAGE_TOO_LARGE; the
    /// message itself is never buffered.
    struct BoundedMessages<B> {
        #[pin]
        inner: B,
        limit: usize,
        header: [u8; 5],
        header_read: usize,
        message_left: usize,
    }
}

impl<B> BoundedMessages<B> {
    fn new(inner: B, limit: usize) -> Self {
        Self {
            inner,
            limit,
            header: [0; 5],
            header_read: 0,
            message_left: 0,
        }
    }
}

impl<B> Body for BoundedMessages<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        let frame = match this.inner.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(error.into()))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => return Poll::Pending,
        };
        if let Some(data) = frame.data_ref() {
            let mut rest = data.clone();
            while rest.has_remaining() {
                if *this.message_left > 0 {
                    let skipped = rest.remaining().min(*this.message_left);
                    rest.advance(skipped);
                    *this.message_left -= skipped;
                    continue;
                }
                this.header[*this.header_read] = rest.get_u8();
                *this.header_read += 1;
                if *this.header_read == this.header.len() {
                    *this.header_read = 0;
                    let length = u32::from_be_bytes([
                        this.header[1],
                        this.header[2],
                        this.header[3],
                        this.header[4],
                    ]) as usize;
                    if length > *this.limit {
                        metrics::malformed_request("too_large");
                        tracing::debug!(length, limit = *this.limit, "request message too large");
                        let refusal =
                            to_status(&RegistryError::MessageTooLarge { limit: *this.limit });
                        return Poll::Ready(Some(Err(Box::new(refusal))));
                    }
                    *this.message_left = length;
                }
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// How much earlier than the caller's deadline the work is stopped, so this
/// answer (DEADLINE_EXCEEDED) is sent before tonic's own timer fires and, as
/// far as it can, reaches the caller before the caller's own timer does: a
/// tenth of the time allowed, between 5 and 100 ms.
fn deadline_margin(within: std::time::Duration) -> std::time::Duration {
    use std::time::Duration;
    (within / 10).clamp(Duration::from_millis(5), Duration::from_millis(100))
}

/// A `grpc-timeout` header: at most eight digits and a unit (H, M, S, m, u, n).
fn grpc_timeout(value: &[u8]) -> Option<std::time::Duration> {
    use std::time::Duration;
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let amount: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(amount * 3_600),
        b'M' => Duration::from_secs(amount * 60),
        b'S' => Duration::from_secs(amount),
        b'm' => Duration::from_millis(amount),
        b'u' => Duration::from_micros(amount),
        b'n' => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// Rewrites a trailers-only refusal that tonic's decoder produced (it answers
/// INTERNAL or OUT_OF_RANGE, without details) as the contract's status.
fn refine_decoder_refusal(headers: &mut http::HeaderMap) {
    let Some(code) = headers
        .get("grpc-status")
        .map(|code| code.as_bytes().to_vec())
    else {
        return;
    };
    let message = headers
        .get("grpc-message")
        .map(|message| percent_decoded(message.as_bytes()))
        .unwrap_or_default();
    let Some(error) = decoder_refusal(&code, &message) else {
        return;
    };
    tracing::debug!(%message, "undecodable request");
    for name in ["grpc-status", "grpc-message", "grpc-status-details-bin"] {
        headers.remove(name);
    }
    if to_status(&error).add_header(headers).is_err() {
        tracing::warn!("could not encode a refusal of an undecodable request");
    }
}

/// What a tonic decoder status means in the contract, if it is one.
fn decoder_refusal(code: &[u8], message: &str) -> Option<RegistryError> {
    const PROTOBUF: &str = "failed to decode Protobuf message: ";
    const TOO_LARGE: &str = "Error, decoded message length too large: found ";
    match code {
        b"13" if message.starts_with(PROTOBUF) => {
            metrics::malformed_request("malformed");
            let detail = &message[PROTOBUF.len()..];
            // The stack repeats `Message.field: ` per level; the cause follows.
            let mut cause = detail;
            while let Some((segment, rest)) = cause.split_once(": ")
                && segment.contains('.')
                && !segment.contains(' ')
            {
                cause = rest;
            }
            Some(RegistryError::Malformed {
                field: offending_field(detail),
                description: cause.to_owned(),
            })
        }
        b"13" if message.starts_with("Unexpected EOF decoding stream") => {
            metrics::malformed_request("truncated");
            Some(RegistryError::Malformed {
                field: None,
                description: "the request message is truncated".into(),
            })
        }
        b"11" if message.starts_with(TOO_LARGE) => {
            metrics::malformed_request("too_large");
            let limit = message
                .rsplit("the limit is: ")
                .next()
                .and_then(|rest| rest.trim_end_matches(" bytes").parse().ok())
                .unwrap_or_default();
            Some(RegistryError::MessageTooLarge { limit })
        }
        _ => None,
    }
}

/// The request field a prost decode error names: its stack is written
/// `Message.field: ` per level, innermost first, so the request's own field
/// is the one of the last `…Request.` entry.
fn offending_field(detail: &str) -> Option<String> {
    let field = detail
        .split(": ")
        .filter_map(|segment| segment.split_once('.'))
        .filter(|(message, field)| {
            message.ends_with("Request") && !field.is_empty() && !field.contains(' ')
        })
        .map(|(_, field)| field)
        .last()?;
    // prost names a oneof by the oneof; the contract names its fields.
    Some(match field {
        "fingerprint" if detail.contains("Struct.") => "parameters".to_owned(),
        "fingerprint" => "parameters_digest".to_owned(),
        other => other.to_owned(),
    })
}

/// `grpc-message` is percent-encoded (RFC 3986 style) on the wire.
fn percent_decoded(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(high), Some(low)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(u8::try_from(high * 16 + low).expect("two hex digits fit in a byte"));
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_field_is_read_from_the_decode_stack() {
        assert_eq!(
            offending_field(
                "ClaimRequest.operation_key: invalid string value: data is not UTF-8 encoded"
            ),
            Some("operation_key".into())
        );
        assert_eq!(
            offending_field(
                "Value.kind: Struct.fields: ClaimRequest.parameters: recursion limit reached"
            ),
            Some("parameters".into())
        );
        assert_eq!(offending_field("buffer underflow"), None);
    }

    #[test]
    fn only_decoder_refusals_are_rewritten() {
        assert!(matches!(
            decoder_refusal(b"13", "failed to decode Protobuf message: ClaimRequest.owner: invalid wire type"),
            Some(RegistryError::Malformed { field: Some(field), .. }) if field == "owner"
        ));
        assert!(matches!(
            decoder_refusal(
                b"11",
                "Error, decoded message length too large: found 9 bytes, the limit is: 4 bytes"
            ),
            Some(RegistryError::MessageTooLarge { limit: 4 })
        ));
        assert!(decoder_refusal(b"13", "internal error").is_none());
        assert!(decoder_refusal(b"3", "failed to decode Protobuf message: x").is_none());
    }

    #[test]
    fn grpc_timeouts_parse_every_unit_and_refuse_the_rest() {
        use std::time::Duration;
        assert_eq!(grpc_timeout(b"3S"), Some(Duration::from_secs(3)));
        assert_eq!(grpc_timeout(b"250m"), Some(Duration::from_millis(250)));
        assert_eq!(grpc_timeout(b"1H"), Some(Duration::from_secs(3_600)));
        assert_eq!(grpc_timeout(b"7n"), Some(Duration::from_nanos(7)));
        assert_eq!(grpc_timeout(b"123456789S"), None);
        assert_eq!(grpc_timeout(b"S"), None);
        assert_eq!(grpc_timeout(b"5x"), None);
    }

    #[test]
    fn grpc_messages_are_percent_decoded() {
        assert_eq!(percent_decoded(b"a%20b%25c"), "a b%c");
        assert_eq!(percent_decoded(b"trailing%2"), "trailing%2");
    }

    #[test]
    fn limits_fall_back_to_the_default() {
        let limits = MessageLimits::new(10).with("opreg.v1.OperationRegistry", &["Complete"], 99);
        assert_eq!(limits.for_path("/opreg.v1.OperationRegistry/Complete"), 99);
        assert_eq!(limits.for_path("/opreg.v1.OperationRegistry/Claim"), 10);
        assert_eq!(limits.largest(), 99);
    }
}
