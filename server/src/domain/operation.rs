//! The records the registry keeps: operations and their executions.

use chrono::{DateTime, Utc};

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

/// One registered operation, as stored.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct Operation {
    pub namespace: String,
    pub operation_key: String,
    #[sqlx(try_from = "String")]
    pub status: Status,
    pub parameters_digest: Vec<u8>,
    pub parameters_canonical: Option<String>,
    pub compensates: Option<String>,
    pub compensated_by: Option<String>,
    pub fencing_token: i64,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub lease_takeover: bool,
    pub attempts: i32,
    pub reconciling: bool,
    pub max_attempts: i32,
    pub initial_backoff_us: i64,
    pub max_backoff_us: i64,
    pub deadline_at: DateTime<Utc>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub result: Option<Vec<u8>>,
    pub result_ref: Option<String>,
    pub failure_code: Option<String>,
    pub failure_message: Option<String>,
    pub remote_ref: Option<String>,
    pub last_error_class: Option<String>,
    pub last_error_message: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
}

impl Operation {
    /// The lease, while the operation holds one (it outlives expiry until a
    /// takeover or a Complete).
    pub fn lease(&self) -> Option<Lease> {
        Some(Lease {
            owner: self.lease_owner.clone()?,
            fencing_token: self.fencing_token,
            expires_at: self.lease_expires_at?,
            attempt: self.attempts,
            takeover: self.lease_takeover,
        })
    }

    pub fn retry_policy(&self) -> RetryPolicy {
        let micros = |us: i64| std::time::Duration::from_micros(us.max(0).unsigned_abs());
        RetryPolicy {
            max_attempts: self.max_attempts.max(1).unsigned_abs(),
            initial_backoff: micros(self.initial_backoff_us),
            max_backoff: micros(self.max_backoff_us),
            deadline: (self.deadline_at - self.created_at)
                .to_std()
                .unwrap_or_default(),
        }
    }

    pub fn attempts(&self) -> u32 {
        self.attempts.max(0).unsigned_abs()
    }
}

/// A lease on an operation: the right to execute it, fenced by `fencing_token`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub owner: String,
    pub fencing_token: i64,
    pub expires_at: DateTime<Utc>,
    pub attempt: i32,
    pub takeover: bool,
}

/// Why an execution started. Stored as lowercase text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExecutionKind {
    First,
    Retry,
    Takeover,
    Reconcile,
}

stored_as_text!(ExecutionKind {
    First => "first",
    Retry => "retry",
    Takeover => "takeover",
    Reconcile => "reconcile",
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
}

stored_as_text!(ExecutionOutcome {
    Running => "running",
    Succeeded => "succeeded",
    Failed => "failed",
    Retryable => "retryable",
    Unknown => "unknown",
    Superseded => "superseded",
});

/// One lease issued for an operation, and what its holder reported.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct Execution {
    pub fencing_token: i64,
    pub attempt: i32,
    #[sqlx(try_from = "String")]
    pub kind: ExecutionKind,
    pub execution_id: String,
    pub owner: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    #[sqlx(try_from = "String")]
    pub outcome: ExecutionOutcome,
    pub outcome_digest: Option<Vec<u8>>,
    pub error_class: Option<String>,
    pub message: Option<String>,
}

/// A resource protected by fencing.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct Resource {
    pub value: Vec<u8>,
    pub fence: i64,
    pub version: i64,
    pub operation_key: String,
    pub updated_at: DateTime<Utc>,
}
