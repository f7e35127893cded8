//! Typed Rust client for opreg.
//!
//! - [`Client`]: one typed method per RPC, errors decoded from their
//!   `google.rpc.ErrorInfo` into [`Error`].
//! - [`RunOnce`]: the protocol done right — claim, renew while working, stop
//!   when the lease is lost, complete, retry transport failures inside one
//!   deadline.
//! - [`Worker`]: pulls due work (ClaimDue) and runs each operation under its
//!   lease by the same rules, with bounded concurrency and a graceful stop.
//! - [`AdminClient`]: the operator's queue and actions.
//! - [`parameters`] and [`parameters_digest`]: the contract's parameter rule.

// A public crate: everything it exports is documented, and nothing is
// `pub` that callers cannot reach.
#![warn(missing_docs, unreachable_pub)]

mod client;
mod decide;
mod error;
mod outcomes;
mod run_once;
mod trace_context;
mod worker;

pub use client::{
    AdminClient, CallMetadata, Client, ConnectOptions, ERROR_DOMAIN, Transport, error_info,
    error_reason,
};
pub use error::Error;
pub use opreg_proto::v1 as proto;
pub use opreg_proto::v1::operation_admin_client::OperationAdminClient;
pub use opreg_proto::v1::operation_registry_client::OperationRegistryClient;
pub use outcomes::{Completed, RunError, Success, Verdict, WorkError};
pub use run_once::{LeaseHandle, RunOnce};
pub use worker::{Worker, WorkerReport, operation_kind};

/// Connects to an opreg server, e.g. `http://127.0.0.1:50051`, returning the
/// generated stub.
pub async fn connect(
    endpoint: impl Into<String>,
) -> Result<OperationRegistryClient<tonic::transport::Channel>, tonic::transport::Error> {
    OperationRegistryClient::connect(endpoint.into()).await
}

/// Builds `ClaimRequest.parameters` from JSON. Integers beyond 2^53 lose
/// precision, as they would in any JSON number.
pub fn parameters(json: serde_json::Value) -> prost_types::Struct {
    opreg_proto::parameters::json_to_struct(json)
}

/// The SHA-256 of the RFC 8785 canonical form of `json`: what the server
/// computes for the same parameters sent as a Struct.
pub fn parameters_digest(
    json: &serde_json::Value,
) -> Result<Vec<u8>, opreg_proto::parameters::NonFiniteNumber> {
    opreg_proto::parameters::Fingerprint::from_json(json).map(|fingerprint| fingerprint.digest)
}
