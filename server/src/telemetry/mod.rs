//! What operators see: logs, Prometheus metrics, the gRPC metrics layer, the
//! periodic gauges read from the database, and the health probe.

pub mod gauges;
pub mod grpc_layer;
pub mod health;
pub mod logging;
pub mod metrics;
pub mod metrics_http;
