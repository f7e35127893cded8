//! The recorded history: every call a client made, when it was invoked and
//! when its answer (or error) arrived, on one monotonic clock.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a Complete reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    Success(Vec<u8>),
    Failure(String),
    Retryable,
    Unknown,
}

impl Report {
    /// The status and stored result a settled report leaves, if it settles.
    pub fn settles_as(&self) -> Option<(&'static str, Vec<u8>, Option<String>)> {
        match self {
            Report::Success(result) => Some(("succeeded", result.clone(), None)),
            Report::Failure(code) => Some(("failed", Vec::new(), Some(code.clone()))),
            Report::Retryable | Report::Unknown => None,
        }
    }
}

#[derive(Clone, Debug)]
pub enum Call {
    Claim {
        key: String,
        conflicting: bool,
    },
    ClaimDue,
    Complete {
        key: String,
        token: u64,
        report: Report,
    },
    Renew {
        key: String,
        token: u64,
    },
    FencedWrite {
        resource: String,
        key: String,
        token: u64,
        value: Vec<u8>,
    },
}

/// A lease handed out: by Claim (ACQUIRED or RECONCILE) or by ClaimDue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Granted {
    pub key: String,
    pub token: u64,
    pub reconcile: bool,
}

#[derive(Clone, Debug)]
pub enum Answer {
    /// A Claim or ClaimDue that handed out these leases (possibly none).
    Leases(Vec<Granted>),
    /// A Claim answered REPLAYED with the stored outcome.
    Replayed {
        key: String,
        status: String,
        result: Vec<u8>,
        failure_code: Option<String>,
    },
    /// A Claim answered otherwise (IN_PROGRESS, RETRY_LATER, DEAD, ...).
    Other,
    /// Complete, Renew or FencedWrite accepted.
    Accepted,
    /// The call failed: its gRPC code and ErrorInfo reason.
    Failed { code: tonic::Code, reason: String },
}

#[derive(Clone, Debug)]
pub struct Event {
    pub client: usize,
    pub call: Call,
    pub invoked: Duration,
    pub completed: Duration,
    pub answer: Answer,
}

impl Event {
    /// The answer says the call may or may not have taken effect.
    pub fn indefinite(&self) -> bool {
        matches!(&self.answer, Answer::Failed { code, .. }
            if matches!(code, tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Unknown | tonic::Code::Cancelled | tonic::Code::Internal))
    }
}

/// Shared by every client of one run.
#[derive(Clone)]
pub struct Recorder {
    origin: Instant,
    events: Arc<Mutex<Vec<Event>>>,
}

impl Recorder {
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
            events: Arc::default(),
        }
    }

    pub fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    pub fn record(&self, client: usize, call: Call, invoked: Duration, answer: Answer) {
        let completed = self.now();
        self.events.lock().unwrap().push(Event {
            client,
            call,
            invoked,
            completed,
            answer,
        });
    }

    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }
}
