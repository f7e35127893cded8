//! The recorded history: every call a client made, when it was invoked and
//! when its answer (or error) arrived, on one monotonic clock.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// What a Complete reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Call {
    Claim {
        key: String,
        conflicting: bool,
        /// The original this claim registers a compensation of.
        compensates: Option<String>,
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
    /// An operator's action through OperationAdmin.
    Admin {
        key: String,
        action: AdminAction,
    },
}

/// The operator actions the workload takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdminAction {
    /// Settles an unknown outcome as a success with [`resolved_result`].
    Resolve,
    Requeue,
    Hold,
    Release,
}

/// The result an operator records when resolving `key`.
pub fn resolved_result(key: &str) -> Vec<u8> {
    format!("resolved:{key}").into_bytes()
}

/// A lease handed out: by Claim (ACQUIRED or RECONCILE) or by ClaimDue; or a
/// token an operator's action issued to supersede a live lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Granted {
    pub key: String,
    pub token: u64,
    pub reconcile: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Answer {
    /// A Claim or ClaimDue that handed out these leases (possibly none), or
    /// an operator's action that superseded a lease with a new token.
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
    Failed {
        #[serde(with = "code")]
        code: tonic::Code,
        reason: String,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
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

/// A gRPC code as its number, for the histories client processes hand back.
mod code {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(code: &tonic::Code, to: S) -> Result<S::Ok, S::Error> {
        to.serialize_i32(*code as i32)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(from: D) -> Result<tonic::Code, D::Error> {
        i32::deserialize(from).map(tonic::Code::from_i32)
    }
}

/// CLOCK_MONOTONIC, which `Instant` reads too and which every process on the
/// machine shares: how a client process's times join the history.
#[allow(unsafe_code)]
fn monotonic() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given and nothing else.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    assert_eq!(status, 0, "CLOCK_MONOTONIC is readable");
    Duration::new(
        now.tv_sec
            .try_into()
            .expect("a monotonic clock is not negative"),
        now.tv_nsec.try_into().expect("nanoseconds below a second"),
    )
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

    /// A recorder in another process whose times count from the same
    /// origin as the one whose [`Recorder::monotonic_origin`] is given.
    pub fn joining(monotonic_origin: Duration) -> Self {
        let since = monotonic().saturating_sub(monotonic_origin);
        Self {
            origin: Instant::now().checked_sub(since).unwrap(),
            events: Arc::default(),
        }
    }

    /// This recorder's origin on CLOCK_MONOTONIC.
    pub fn monotonic_origin(&self) -> Duration {
        monotonic().saturating_sub(self.origin.elapsed())
    }

    pub fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Adds the events another process recorded against this origin.
    pub fn extend(&self, events: Vec<Event>) {
        self.events.lock().unwrap().extend(events);
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
