//! What operators see: logs, Prometheus metrics, the gRPC metrics layer, and
//! the periodic gauges read from the database.

pub mod gauges;
pub mod grpc_layer;
pub mod logging;
pub mod metrics;
pub mod metrics_http;
