//! Bulk actions of the operator console: one operator action applied to many
//! operations by a background job that can be aborted and resumed. The job
//! acts on each operation through the same rules as a single action
//! ([`super::admin`]); what is decided here is only what a job is.

use chrono::{DateTime, Utc};

use super::error::FieldViolation;
use super::ids::{Namespace, OperationKey};
use super::operation::stored_as_text;

/// The action a job applies. Resolving in bulk records a failure only: a
/// success needs a result of its own per operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BulkAction {
    Hold,
    Release,
    Requeue,
    ResolveFailure,
}

stored_as_text!(BulkAction {
    Hold => "hold",
    Release => "release",
    Requeue => "requeue",
    ResolveFailure => "resolve_failure",
});

/// Where a job stands. Only a running job acts; an aborted one keeps its
/// position and continues from it when resumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    Running,
    Aborted,
    Finished,
}

stored_as_text!(JobState {
    Running => "running",
    Aborted => "aborted",
    Finished => "finished",
});

/// A job's id, chosen by the page that submitted it so that submitting it
/// again (after a timeout, a double click) finds the same job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobId(String);

impl JobId {
    pub const MAX_BYTES: usize = 64;

    pub fn parse(value: String) -> Result<Self, FieldViolation> {
        let valid = !value.is_empty()
            && value.len() <= Self::MAX_BYTES
            && value
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_');
        if valid {
            Ok(Self(value))
        } else {
            Err(FieldViolation::new(
                "job_id",
                "1 to 64 letters, digits, '-' or '_'",
            ))
        }
    }

    pub fn from_stored(value: String) -> Self {
        Self(value)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What a job acts on, among what its filter matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobScope {
    /// These keys, in this order.
    Selection(Vec<OperationKey>),
    /// Every operation the filter matches that was registered before the
    /// job was submitted.
    EveryMatch,
}

/// What a job is to do, as submitted.
#[derive(Clone, Debug)]
pub struct JobSpec {
    pub id: JobId,
    pub namespace: Namespace,
    pub action: BulkAction,
    pub reason: String,
    pub principal: String,
    /// The operations page's filter (its query string). Each operation is
    /// acted on only while it still matches it.
    pub filter: String,
    pub scope: JobScope,
    pub total: u32,
}

/// A job and its progress.
#[derive(Clone, Debug)]
pub struct BulkJob {
    pub spec: JobSpec,
    pub state: JobState,
    /// Operations acted on.
    pub done: u32,
    /// Operations whose status no longer allowed the action, or that no
    /// longer matched the filter, when their turn came.
    pub skipped: u32,
    /// Where the next step starts: an index into the selection, or the
    /// filter's page cursor; `None` before the first step.
    pub position: Option<String>,
    /// Why it stopped by itself, if it did.
    pub last_error: Option<String>,
    /// Who last aborted or resumed it.
    pub switched_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl JobSpec {
    /// Whether `other` asks for the same job: a form submitted again.
    pub fn same_request(&self, other: &JobSpec) -> bool {
        (
            &self.namespace,
            self.action,
            &self.reason,
            &self.principal,
            &self.filter,
            &self.scope,
        ) == (
            &other.namespace,
            other.action,
            &other.reason,
            &other.principal,
            &other.filter,
            &other.scope,
        )
    }
}

impl BulkJob {
    /// The audit reason of each action the job takes: the operator's words
    /// and the job, so the trail of any one operation leads to the job.
    pub fn audit_reason(&self) -> String {
        format!("{} (bulk job {})", self.spec.reason, self.spec.id.as_str())
    }
}
