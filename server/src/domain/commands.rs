//! Validated requests. The transport builds these at the edge; past it, no
//! code can hold an invalid key, digest, lease length or retry policy.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::admin::{Actor, Resolution};
use super::claim::ReusePolicy;
use super::complete::Report;
use super::ids::{FencingToken, Namespace, OperationKey};
use super::operation::Status;
use super::parameters::Fingerprint;
use super::policy::RetryPolicy;

#[derive(Clone, Debug)]
pub struct ClaimCommand {
    pub namespace: Namespace,
    pub operation_key: OperationKey,
    pub fingerprint: Fingerprint,
    pub lease: LeaseRequest,
    /// The caller's policy, or the server default; used on registration and
    /// when a reuse starts the operation again.
    pub retry_policy: RetryPolicy,
    pub compensates: Option<OperationKey>,
    /// What an existing key allows.
    pub reuse: ReusePolicy,
    /// The authenticated caller, for the audit row of a reuse.
    pub principal: String,
}

impl ClaimCommand {
    /// The operation's identity, (namespace, key), as a map key.
    pub fn identity(&self) -> (&str, &str) {
        (self.namespace.as_str(), self.operation_key.as_str())
    }
}

/// Who asks for a lease, and for how long.
#[derive(Clone, Debug)]
pub struct LeaseRequest {
    pub owner: String,
    pub execution_id: String,
    pub ttl: Duration,
}

/// A worker pulling due work in one namespace.
#[derive(Clone, Debug)]
pub struct ClaimDueCommand {
    pub namespace: Namespace,
    pub lease: LeaseRequest,
    pub limit: u32,
}

#[derive(Clone, Debug)]
pub struct CompleteCommand {
    pub namespace: Namespace,
    pub operation_key: OperationKey,
    pub fencing_token: FencingToken,
    pub report: Report,
}

impl CompleteCommand {
    /// The operation's identity, (namespace, key), as a map key.
    pub fn identity(&self) -> (&str, &str) {
        (self.namespace.as_str(), self.operation_key.as_str())
    }
}

#[derive(Clone, Debug)]
pub struct RenewCommand {
    pub namespace: Namespace,
    pub operation_key: OperationKey,
    pub owner: String,
    pub fencing_token: FencingToken,
    pub lease_ttl: Duration,
}

#[derive(Clone, Debug)]
pub struct FencedWriteCommand {
    pub namespace: Namespace,
    pub resource: String,
    pub operation_key: OperationKey,
    pub fencing_token: FencingToken,
    pub value: Vec<u8>,
}

#[derive(Clone, Debug)]
pub struct LookupQuery {
    pub namespace: Namespace,
    pub operation_key: OperationKey,
    pub include_executions: bool,
    pub include_audit: bool,
}

#[derive(Clone, Debug)]
pub struct ResourceQuery {
    pub namespace: Namespace,
    pub resource: String,
}

/// Names the operation an operator acts on, and who acts.
#[derive(Clone, Debug)]
pub struct AdminTarget {
    pub namespace: Namespace,
    pub operation_key: OperationKey,
    pub actor: Actor,
}

#[derive(Clone, Debug)]
pub enum AdminCommand {
    Resolve(Resolution),
    Requeue {
        revision: String,
        policy: RetryPolicy,
    },
    Hold,
    Release,
}

/// A page of the operator's queue.
#[derive(Clone, Debug)]
pub struct ListQuery {
    pub namespace: Namespace,
    /// Unfinished statuses only; never empty.
    pub statuses: Vec<Status>,
    pub expired_leases_only: bool,
    pub older_than: Option<Duration>,
    pub held_only: bool,
    pub narrowing: Narrowing,
    pub page_size: u32,
    pub after: Option<PageCursor>,
}

/// What the operator console narrows a list by, beyond the queue's filters.
#[derive(Clone, Debug, Default)]
pub struct Narrowing {
    /// Keys that start with this text.
    pub key_prefix: Option<String>,
    /// Operations whose current lease names this owner.
    pub owner: Option<String>,
    /// Operations registered at or before this time: what a bulk job's
    /// filter matched when it was submitted.
    pub created_before: Option<DateTime<Utc>>,
}

/// A page of finished operations (SUCCEEDED, FAILED), by key: there is no
/// index by registration time for them, and the key's order is as stable.
#[derive(Clone, Debug)]
pub struct FinishedQuery {
    pub namespace: Namespace,
    /// Finished statuses only; never empty.
    pub statuses: Vec<Status>,
    pub older_than: Option<Duration>,
    pub narrowing: Narrowing,
    pub page_size: u32,
    pub after: Option<OperationKey>,
}

/// Where a page of the queue ends: operations are listed by registration time,
/// then key, so rows inserted meanwhile land after every cursor already given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageCursor {
    pub created_at: DateTime<Utc>,
    pub operation_key: OperationKey,
}
