//! What operators see: logs, Prometheus metrics, the gRPC metrics layer, and
//! spans exported over OTLP when configured. A leaf: it reads nothing of the
//! store; [`crate::monitor`] reads the store and reports here.

pub mod grpc_layer;
pub mod logging;
pub mod metrics;
pub mod metrics_http;
pub mod traces;
