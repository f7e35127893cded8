//! What work returns and what a run ends with: the vocabulary that the
//! decisions ([`crate::decide`]) and the helpers ([`crate::run_once`],
//! [`crate::worker`]) share.

use std::time::Duration;

use crate::error::Error;
use crate::proto as pb;
use pb::complete_request::Outcome;

/// What successful work returns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Success {
    pub result: Vec<u8>,
    pub result_ref: String,
}

impl Success {
    pub fn new(result: impl Into<Vec<u8>>) -> Self {
        Self {
            result: result.into(),
            result_ref: String::new(),
        }
    }

    pub fn with_ref(mut self, result_ref: impl Into<String>) -> Self {
        self.result_ref = result_ref.into();
        self
    }
}

impl From<Success> for Outcome {
    fn from(success: Success) -> Self {
        Outcome::Success(pb::Success {
            result: success.result,
            result_ref: success.result_ref,
        })
    }
}

/// How work fails; each maps to one kind of Complete.
#[derive(Debug)]
pub enum WorkError {
    /// A terminal business failure (e.g. insufficient balance): recorded and replayed.
    Business { code: String, message: String },
    /// Worth another attempt, optionally not before `retry_after`.
    Transient {
        message: String,
        retry_after: Option<Duration>,
    },
    /// Worth another attempt, classified for operators (`last_error_class`).
    Retryable {
        error_class: String,
        message: String,
        retry_after: Option<Duration>,
    },
    /// The request left but its answer did not come back: it may have taken
    /// effect. Recorded as unknown, to be reconciled before anything else.
    SentButUnconfirmed { remote_ref: String, message: String },
    /// Anything else: recorded as retryable, then returned as [`RunError::Work`].
    Other(Box<dyn std::error::Error + Send + Sync>),
}

/// What `reconcile` found out about an attempt whose outcome was unknown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It took effect, with this result.
    Succeeded(Success),
    /// It was refused for a business reason.
    Failed { code: String, message: String },
    /// It never took effect: execute now.
    NotApplied,
}

/// A recorded success.
#[derive(Clone, Debug)]
pub struct Completed {
    pub result: Vec<u8>,
    pub result_ref: String,
    /// Recorded by an earlier execution, not by this call.
    pub replayed: bool,
    pub operation: pb::Operation,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("business failure {code}: {message}")]
    Business {
        code: String,
        message: String,
        replayed: bool,
    },
    #[error("the operation is dead: its retry budget is exhausted; manual action is needed")]
    Dead,
    /// An operator froze the operation while it is investigated: wait, or ask them.
    #[error(
        "the operation is held by an operator; claim again after {retry_after:?} or ask the operator"
    )]
    Held { retry_after: Duration },
    #[error("the lease was lost to another execution; the work was stopped")]
    LeaseLost,
    #[error("the outcome is unknown (remote reference {remote_ref:?}); it must be reconciled")]
    OutcomeUnknown { remote_ref: String },
    #[error(
        "the last outcome is unknown (remote reference {remote_ref:?}) and no reconcile was given"
    )]
    ReconcileRequired { remote_ref: String },
    #[error("the overall deadline passed")]
    DeadlineExceeded,
    /// The work finished but its report could not be recorded, nor found
    /// recorded: the lease will lapse and the operation may run again.
    #[error("the work finished but its outcome could not be recorded ({reason})")]
    Unrecorded { reason: String },
    #[error("the work failed: {0}")]
    Work(Box<dyn std::error::Error + Send + Sync>),
    #[error(transparent)]
    Rpc(#[from] Error),
}
