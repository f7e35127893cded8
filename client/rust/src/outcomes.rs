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
    /// The result, as recorded and replayed (at most the server's result limit).
    pub result: Vec<u8>,
    /// Where a larger result lives, when it is kept elsewhere.
    pub result_ref: String,
}

impl Success {
    /// A success with this result and no reference.
    pub fn new(result: impl Into<Vec<u8>>) -> Self {
        Self {
            result: result.into(),
            result_ref: String::new(),
        }
    }

    /// The same success, with a reference to where the result lives.
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
    Business {
        /// The failure's code, for callers to branch on.
        code: String,
        /// What happened, for people.
        message: String,
    },
    /// Worth another attempt, optionally not before `retry_after`.
    Transient {
        /// What happened, for operators.
        message: String,
        /// The earliest the next attempt should start.
        retry_after: Option<Duration>,
    },
    /// Worth another attempt, classified for operators (`last_error_class`).
    Retryable {
        /// The kind of failure, as operators see it.
        error_class: String,
        /// What happened, for operators.
        message: String,
        /// The earliest the next attempt should start.
        retry_after: Option<Duration>,
    },
    /// The request left but its answer did not come back: it may have taken
    /// effect. Recorded as unknown, to be reconciled before anything else.
    SentButUnconfirmed {
        /// What the remote system knows the request by, for the reconcile.
        remote_ref: String,
        /// What happened, for operators.
        message: String,
    },
    /// Anything else: recorded as retryable, then returned as [`RunError::Work`].
    Other(Box<dyn std::error::Error + Send + Sync>),
}

/// What `reconcile` found out about an attempt whose outcome was unknown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It took effect, with this result.
    Succeeded(Success),
    /// It was refused for a business reason.
    Failed {
        /// The failure's code.
        code: String,
        /// What happened, for people.
        message: String,
    },
    /// It never took effect: execute now.
    NotApplied,
}

/// A recorded success.
#[derive(Clone, Debug)]
pub struct Completed {
    /// The recorded result.
    pub result: Vec<u8>,
    /// The recorded result reference.
    pub result_ref: String,
    /// Recorded by an earlier execution, not by this call.
    pub replayed: bool,
    /// The operation as recorded.
    pub operation: pb::Operation,
}

/// How a run ends without a recorded success (PROTOCOL.md, "Errors and their
/// conformance kinds").
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The operation's answer is a recorded business failure.
    #[error("business failure {code}: {message}")]
    Business {
        /// The failure's code.
        code: String,
        /// What happened, for people.
        message: String,
        /// Recorded by an earlier execution, not by this call.
        replayed: bool,
    },
    /// The retry budget is spent: an operator must act.
    #[error("the operation is dead: its retry budget is exhausted; manual action is needed")]
    Dead,
    /// An operator froze the operation while it is investigated: wait, or ask them.
    #[error(
        "the operation is held by an operator; claim again after {retry_after:?} or ask the operator"
    )]
    Held {
        /// When the server suggests claiming again.
        retry_after: Duration,
    },
    /// Another execution holds the operation (or an operator revoked the
    /// lease): the work was stopped and nothing was reported.
    #[error("the lease was lost to another execution; the work was stopped")]
    LeaseLost,
    /// The work's request may have taken effect, and no reconcile was given.
    #[error("the outcome is unknown (remote reference {remote_ref:?}); it must be reconciled")]
    OutcomeUnknown {
        /// What the remote system knows the request by.
        remote_ref: String,
    },
    /// The last attempt's outcome is unknown and there is no reconcile to ask:
    /// the lease was handed back.
    #[error(
        "the last outcome is unknown (remote reference {remote_ref:?}) and no reconcile was given"
    )]
    ReconcileRequired {
        /// What the remote system knows the last attempt by.
        remote_ref: String,
    },
    /// Claiming, waiting and retrying ran past the overall deadline.
    #[error("the overall deadline passed")]
    DeadlineExceeded,
    /// The work finished but its report could not be recorded, nor found
    /// recorded: the lease will lapse and the operation may run again.
    #[error("the work finished but its outcome could not be recorded ({reason})")]
    Unrecorded {
        /// Why Complete did not settle it.
        reason: String,
    },
    /// The work failed unexpectedly; the failure was recorded as retryable.
    #[error("the work failed: {0}")]
    Work(Box<dyn std::error::Error + Send + Sync>),
    /// A call was refused: the request is wrong (conflict, invalid, denied).
    #[error(transparent)]
    Rpc(#[from] Error),
}

impl RunError {
    /// The language-neutral name of this kind of end, as every client's
    /// conformance runner reports it (PROTOCOL.md, "Errors and their
    /// conformance kinds"); `rpc` for a refused call.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Business { .. } => "business_failure",
            Self::Dead => "dead",
            Self::Held { .. } => "held",
            Self::LeaseLost => "lease_lost",
            Self::OutcomeUnknown { .. } => "outcome_unknown",
            Self::ReconcileRequired { .. } => "reconcile_required",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::Unrecorded { .. } => "outcome_not_recorded",
            Self::Work(_) => "work_error",
            Self::Rpc(_) => "rpc",
        }
    }
}
