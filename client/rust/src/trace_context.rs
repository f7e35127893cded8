//! The caller's trace, carried to the server as W3C `traceparent` and
//! `tracestate`: the OpenTelemetry context of the current `tracing` span (a
//! `tracing-opentelemetry` layer gives spans one), else OpenTelemetry's own
//! current context. Nothing is sent when neither holds a valid span.

use opentelemetry::trace::{SpanContext, TraceContextExt};
use tonic::metadata::{MetadataMap, MetadataValue};
use tracing_opentelemetry::OpenTelemetrySpanExt;

pub(crate) fn inject(metadata: &mut MetadataMap) {
    let from_tracing = tracing::Span::current().context();
    let span = from_tracing.span();
    let context = if span.span_context().is_valid() {
        span.span_context().clone()
    } else {
        opentelemetry::Context::current()
            .span()
            .span_context()
            .clone()
    };
    if !context.is_valid() {
        return;
    }
    if let Ok(value) = MetadataValue::try_from(traceparent(&context)) {
        metadata.insert("traceparent", value);
    }
    let state = context.trace_state().header();
    if !state.is_empty()
        && let Ok(value) = MetadataValue::try_from(state)
    {
        metadata.insert("tracestate", value);
    }
}

/// `version-trace_id-span_id-flags`, as the W3C Trace Context defines it.
fn traceparent(context: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};

    #[test]
    fn a_valid_context_is_written_as_the_w3c_header() {
        let context = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        assert_eq!(
            traceparent(&context),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
    }

    #[test]
    fn without_a_span_nothing_is_sent() {
        let mut metadata = MetadataMap::new();
        inject(&mut metadata);
        assert!(metadata.get("traceparent").is_none());
    }
}
