//! Spans exported over OTLP (gRPC) when `OTEL_EXPORTER_OTLP_ENDPOINT` is set;
//! off by default. The exporter reads the standard `OTEL_*` variables (its
//! endpoint, headers, timeout, the batch processor's delays); the service is
//! named `opreg-server` unless `OTEL_SERVICE_NAME` says otherwise.
//!
//! What is exported: one span per RPC (`grpc_layer`), a child of the caller's
//! span when the call carries a W3C `traceparent`, and under it the store
//! statements (`store.*`) the call ran.

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

const ENDPOINT_VARIABLE: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const SERVICE_NAME: &str = "opreg-server";

/// The exporting provider, if any; [`Traces::shutdown`] sends what is buffered.
#[derive(Debug, Default)]
pub struct Traces(Option<SdkTracerProvider>);

impl Traces {
    pub fn shutdown(self) {
        if let Some(provider) = self.0
            && let Err(error) = provider.shutdown()
        {
            tracing::warn!("spans not exported at shutdown: {error}");
        }
    }
}

/// The layer that turns `tracing` spans into exported OpenTelemetry spans,
/// when an endpoint is configured. Must be called inside the Tokio runtime
/// (the exporter's channel lives there).
pub fn layer<S>() -> (Option<Box<dyn Layer<S> + Send + Sync>>, Traces)
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
{
    if std::env::var_os(ENDPOINT_VARIABLE).is_none_or(|value| value.is_empty()) {
        return (None, Traces::default());
    }
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .build()
    {
        Ok(exporter) => exporter,
        Err(error) => {
            // Logging is not up yet: this is the one place that prints directly.
            eprintln!("opreg: spans will not be exported: {error}");
            return (None, Traces::default());
        }
    };
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(SERVICE_NAME);
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer(SERVICE_NAME);
    let layer = tracing_opentelemetry::layer().with_tracer(tracer).boxed();
    (Some(layer), Traces(Some(provider)))
}

/// The caller's trace context from a request's W3C `traceparent` and
/// `tracestate` headers (an empty context when they are absent or invalid).
pub fn caller_context(headers: &http::HeaderMap) -> opentelemetry::Context {
    TraceContextPropagator::new().extract(&Headers(headers))
}

struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}
