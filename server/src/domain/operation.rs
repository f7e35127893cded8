//! The records the registry keeps: operations and their executions.

use chrono::{DateTime, Utc};

use super::ids::{FencingToken, Namespace, OperationKey};
use super::policy::RetryPolicy;

/// Gives a fieldless enum its stored text: `as_str`, `ALL` and `TryFrom<String>`.
macro_rules! stored_as_text {
    ($name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = String;

            fn try_from(value: String) -> Result<Self, Self::Error> {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|known| known.as_str() == value)
                    .ok_or_else(|| format!(concat!("unknown ", stringify!($name), " {:?}"), value))
            }
        }
    };
}
pub(crate) use stored_as_text;

/// Where an operation stands. Stored as lowercase text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    InProgress,
    Succeeded,
    Failed,
    RetryScheduled,
    Unknown,
    Dead,
}

stored_as_text!(Status {
    InProgress => "in_progress",
    Succeeded => "succeeded",
    Failed => "failed",
    RetryScheduled => "retry_scheduled",
    Unknown => "unknown",
    Dead => "dead",
});

/// One registered operation.
#[derive(Clone, Debug, PartialEq)]
pub struct Operation {
    pub namespace: Namespace,
    pub operation_key: OperationKey,
    pub status: Status,
    pub parameters_digest: Vec<u8>,
    /// RFC 8785 text of the parameters, when they were given as a Struct.
    pub parameters_canonical: Option<String>,
    pub compensates: Option<OperationKey>,
    pub compensated_by: Option<OperationKey>,
    /// The last token issued; it outlives the lease so late callers learn it.
    pub fencing_token: FencingToken,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub lease_takeover: bool,
    /// Executions that counted against a budget, over the operation's life.
    pub attempts: u32,
    pub reconciling: bool,
    pub budget: Budget,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub result: Option<Vec<u8>>,
    pub result_ref: Option<String>,
    pub failure_code: Option<String>,
    pub failure_message: Option<String>,
    pub remote_ref: Option<String>,
    pub last_error_class: Option<String>,
    pub last_error_message: Option<String>,
    /// Set while an operator holds the operation.
    pub held_at: Option<DateTime<Utc>>,
    /// The hold revoked a live lease: on release the outcome is unknown.
    pub hold_revoked_lease: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
}

/// The retry budget in force: registration's, or a requeue's fresh one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// No attempt starts once `Operation::attempts` reaches this (absolute, so
    /// a requeue extends it past the attempts already spent).
    pub max_attempts: u32,
    /// Attempts already spent when this budget began.
    pub base_attempts: u32,
    pub initial_backoff: std::time::Duration,
    pub max_backoff: std::time::Duration,
    /// No attempt starts after it.
    pub deadline_at: DateTime<Utc>,
}

impl Operation {
    /// The lease, while the operation holds one (it outlives expiry until a
    /// takeover or a Complete). A held operation has none to offer.
    pub fn lease(&self) -> Option<Lease> {
        if self.is_held() {
            return None;
        }
        Some(Lease {
            owner: self.lease_owner.clone()?,
            fencing_token: self.fencing_token,
            expires_at: self.lease_expires_at?,
            attempt: self.attempts,
            takeover: self.lease_takeover,
        })
    }

    pub fn is_held(&self) -> bool {
        self.held_at.is_some()
    }

    /// True while a lease exists and has not expired at `now`.
    pub fn lease_live_at(&self, now: DateTime<Utc>) -> bool {
        self.status == Status::InProgress && self.lease_expires_at.is_some_and(|at| at > now)
    }

    /// Attempts spent under the current budget; backoff grows with these.
    pub fn budget_attempts(&self) -> u32 {
        self.attempts.saturating_sub(self.budget.base_attempts)
    }

    /// The backoff bounds of the current budget, for full jitter.
    pub fn backoff_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self
                .budget
                .max_attempts
                .saturating_sub(self.budget.base_attempts)
                .max(1),
            initial_backoff: self.budget.initial_backoff,
            max_backoff: self.budget.max_backoff,
            deadline: (self.budget.deadline_at - self.created_at)
                .to_std()
                .unwrap_or_default(),
        }
    }
}

/// A lease on an operation: the right to execute it, fenced by `fencing_token`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub owner: String,
    pub fencing_token: FencingToken,
    pub expires_at: DateTime<Utc>,
    pub attempt: u32,
    pub takeover: bool,
}

/// Why an execution started. Stored as lowercase text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExecutionKind {
    First,
    Retry,
    Takeover,
    Reconcile,
    /// A FAILED or DEAD operation started again by a Claim whose reuse policy
    /// allows it (`ReusePolicy::AfterFailure`).
    Reuse,
}

stored_as_text!(ExecutionKind {
    First => "first",
    Retry => "retry",
    Takeover => "takeover",
    Reconcile => "reconcile",
    Reuse => "reuse",
});

/// How an execution ended. Stored as lowercase text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExecutionOutcome {
    Running,
    Succeeded,
    Failed,
    Retryable,
    Unknown,
    /// The lease expired and another execution took over without a report.
    Superseded,
    /// An operator revoked the lease (a hold or a resolution) before a report.
    Revoked,
}

stored_as_text!(ExecutionOutcome {
    Running => "running",
    Succeeded => "succeeded",
    Failed => "failed",
    Retryable => "retryable",
    Unknown => "unknown",
    Superseded => "superseded",
    Revoked => "revoked",
});

/// One lease issued for an operation, and what its holder reported.
#[derive(Clone, Debug, PartialEq)]
pub struct Execution {
    pub fencing_token: FencingToken,
    pub attempt: u32,
    pub kind: ExecutionKind,
    pub execution_id: String,
    pub owner: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub outcome: ExecutionOutcome,
    /// Digest of the report its holder made; present once it reported.
    pub outcome_digest: Option<Vec<u8>>,
    pub error_class: Option<String>,
    pub message: Option<String>,
}

/// A resource protected by fencing.
#[derive(Clone, Debug, PartialEq)]
pub struct Resource {
    pub value: Vec<u8>,
    pub fence: FencingToken,
    pub version: u64,
    pub operation_key: OperationKey,
    pub updated_at: DateTime<Utc>,
}
