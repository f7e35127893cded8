//! Validated requests. The transport builds these at the edge; past it, no
//! code can hold an invalid key, digest, lease length or retry policy.

use std::time::Duration;

use super::complete::Report;
use super::parameters::Fingerprint;
use super::policy::RetryPolicy;

#[derive(Clone, Debug)]
pub struct ClaimCommand {
    pub namespace: String,
    pub operation_key: String,
    pub fingerprint: Fingerprint,
    pub owner: String,
    pub execution_id: String,
    pub lease_ttl: Duration,
    /// The caller's policy, or the server default; used only on registration.
    pub retry_policy: RetryPolicy,
    pub compensates: Option<String>,
}

#[derive(Clone, Debug)]
pub struct CompleteCommand {
    pub namespace: String,
    pub operation_key: String,
    pub fencing_token: i64,
    pub report: Report,
}

#[derive(Clone, Debug)]
pub struct RenewCommand {
    pub namespace: String,
    pub operation_key: String,
    pub owner: String,
    pub fencing_token: i64,
    pub lease_ttl: Duration,
}

#[derive(Clone, Debug)]
pub struct FencedWriteCommand {
    pub namespace: String,
    pub resource: String,
    pub operation_key: String,
    pub fencing_token: i64,
    pub value: Vec<u8>,
}

#[derive(Clone, Debug)]
pub struct LookupQuery {
    pub namespace: String,
    pub operation_key: String,
    pub include_executions: bool,
}

#[derive(Clone, Debug)]
pub struct ResourceQuery {
    pub namespace: String,
    pub resource: String,
}
