//! What operators see: logs, Prometheus metrics, the gRPC metrics layer, the
//! periodic gauges read from the database, the health probe, and spans
//! exported over OTLP when configured.

pub mod gauges;
pub mod grpc_layer;
pub mod health;
pub mod logging;
pub mod metrics;
pub mod metrics_http;
pub mod traces;
